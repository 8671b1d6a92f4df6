-- Shared by every script but renew_many (prepended at compile time after prelude.lua,
-- whose functions it uses): handing out tokens, the index re-scoring of the checker's
-- reads, taking a key, declaring leases dead, deaths, handing items back (at once, or
-- held back until due), sweeping. renew_many.lua runs without it: each call of a
-- script makes every `local function` of its prefix anew, and a renewal calls none of
-- these.

-- Fencing tokens never go back, not even across a failover to a replica that lacked
-- the last writes (asynchronous replication, no `wait=N`) or a restart: epoch `ep`
-- (see `epoch`: a new one starts the first time another server, or the same server
-- restarted, serves the namespace) hands out tokens above (ep - 1) * 2^40, so every
-- token of a new epoch sorts above every token of the ones before, whatever the new
-- server lacked. Costs one INFO per script that hands out tokens. Lua numbers are
-- doubles: 8,191 epochs of 2^40 tokens stay below 2^53; past that the script fails
-- rather than hand out a token that would not sort above the others.
local TOKEN_SPAN = 1099511627776
local function issue_token(tokens_key, prefix, now)
  local ep = epoch(prefix, now)
  local floor = (ep - 1) * TOKEN_SPAN
  if floor + TOKEN_SPAN > 9007199254740992 then
    error('no fencing token left: epoch ' .. ep)
  end
  local token = redis.call('INCR', tokens_key)
  if token <= floor then
    token = floor + 1
    redis.call('SET', tokens_key, s(token))
  end
  return s(token)
end

-- The lease `name` of the space whose expiry index is `expiry` and lease key prefix
-- `lease_prefix`, met at the front of the index at `now`. Returns 'expired', its
-- record {h, t, e, ttl, ep} and its judged expiry when it is expired; 'moved' when it
-- was live (renewed since it was indexed, or written under another server's clock):
-- it now sits at its real expiry in the index; 'none' for a name without a record.
local function reindex(expiry, lease_prefix, name, now)
  local rec = redis.call('HMGET', lease_prefix .. name, 'h', 't', 'e', 'ttl', 'ep')
  -- A riding member (no `e`) is never indexed; a stale name of one is left alone.
  if not rec[2] or not rec[3] then
    return 'none'
  end
  local e = judged(prefix_of(lease_prefix), rec[3], rec[4], rec[5], now)
  if now >= e then
    return 'expired', rec, e
  end
  local text = s(e)
  redis.call('ZADD', expiry, text, name)
  redis.call('HSET', lease_prefix .. name, 'ix', text)
  return 'moved'
end

-- The namespace's key prefix `liveness:{ns}:`, from its dead-set key (`<prefix>dead`).
-- The death history and the lease index are derived from it in-script (same hash
-- slot as every key of the namespace; see keys.rs).
local function ns_prefix(dead_key)
  return string.sub(dead_key, 1, #dead_key - 4)
end

-- The lease index of the space of `key_text` ("space/name"), key `m:<space>`: ZSET of
-- names, score 0, read in name order with ZRANGEBYLEX.
local function leases_key(prefix, key_text)
  return prefix .. 'm:' .. string.match(key_text, '^([^/]*)/')
end

-- Records the death of `token` (held by `holder` on `key_text`) at `now`, cause `cause`
-- ('0' reaped, '1' released, '2' superseded): hash <prefix>d:<seq> with k, h, t, at, c
-- (and r, dl once swept), <prefix>dt maps the token to its seq until the sweep. Keeps
-- the newest `retention` records: drops exactly the one that fell out (O(1)).
local function record_death(prefix, key_text, holder, token, now, cause, retention)
  local seq = redis.call('INCR', prefix .. 'dseq')
  redis.call('HSET', prefix .. 'd:' .. seq, 'k', key_text, 'h', holder, 't', token,
    'at', s(now), 'c', cause)
  redis.call('HSET', prefix .. 'dt', token, seq)
  local old = seq - tonumber(retention)
  if old >= 1 then
    local gone = redis.call('HGET', prefix .. 'd:' .. old, 't')
    if gone and redis.call('HGET', prefix .. 'dt', gone) == tostring(old) then
      redis.call('HDEL', prefix .. 'dt', gone)
    end
    redis.call('DEL', prefix .. 'd:' .. old)
  end
end

-- Declares a lease dead: removes its record, puts (key, token) in the dead set and
-- records the death. A riding member leaves its session's member set
-- `sm:<session token>`.
local function declare_dead(lease_key, expiry_key, dead_key, name, token, key_text, holder,
                            now, cause, retention)
  local prefix = ns_prefix(dead_key)
  local st = redis.call('HGET', lease_key, 'st')
  if st then
    redis.call('SREM', prefix .. 'sm:' .. st, key_text)
  end
  redis.call('DEL', lease_key)
  redis.call('ZREM', expiry_key, name)
  redis.call('ZADD', dead_key, token, token .. ':' .. key_text)
  redis.call('ZREM', leases_key(prefix, key_text), name)
  record_death(prefix, key_text, holder, token, now, cause, retention)
end

-- Holds pending item `id` back until `later.due` (µs of the server clock): in the
-- held zset `later.at` by due time and in `later.ids` by id (the pending page's
-- order), and for a queue other than the default in `later.all` too (`qheld`, every
-- such queue's held items by due time, which `next_due` reads). A claim of its queue
-- moves it to the queue's pending zset once due.
local function hold(later, id)
  local due = s(later.due)
  redis.call('ZADD', later.at, due, id)
  redis.call('ZADD', later.ids, id, id)
  if later.all then
    redis.call('ZADD', later.all, due, id)
  end
end

-- Tells every handle listening to the namespace's pending signal (`pending()`, in any
-- process) that items may have become pending: one sharded publish on the channel
-- `<prefix>pending-signal` (`Keys::pending_signal`), whose hash tag puts it in the
-- namespace's slot, so on a Redis Cluster the message stays on the namespace's shard.
-- `why` is for a human listening with `SSUBSCRIBE`: `e` enqueued, `r` retried, `s`
-- requeued by a sweep, `d` dead letters retried. Once per script, not per item, after
-- its writes, and through `pcall`: a refused publish (an ACL user without the
-- channel) leaves the script's answer as it is, and workers poll instead.
local function signal_pending(prefix, why)
  redis.pcall('SPUBLISH', prefix .. 'pending-signal', why)
end

-- Moves an owned item back to pending in its own queue (its `q`: absent for the
-- default queue, whose keys are `pending`, `held` and `heldi`; another queue's carry
-- its name, `qp:`, `qh:`, `qhi:`, see keys.rs), held back until `due` (µs of the
-- server clock, see `hold`; due at once when nil), or to the dead-letter set `dl_key`
-- when it is out of attempts or retry is false (and to `dlt_key`, the dead letters by
-- when they were dead-lettered: `now`, the retention counts from it; the caller then
-- trims the expired ones, `trim_dead_letters`). Returns 1 (pending) or 2
-- (dead-lettered), and the item's queue when it is not the default (else false):
-- the caller moves that queue's counts (`qowned`, `qdl`). The item's last error `e`
-- stays as it was (a sweep's requeue keeps it; finish.lua writes a failure's text). A
-- pending item's `w` is when it becomes claimable (what a claim measures its wait
-- from): its due time when held back, else `now` (µs of the server clock; read here
-- when nil). Pending or dead-lettered, its `tf` (when its attempt ended without
-- completing) is `now`, in the same HSET. The keys are derived here, not by a shared
-- function: every `local function` of the prelude costs every script call a closure.
local function hand_back(item_key, id, retry, dl_key, dlt_key, due, now)
  local rec = redis.call('HMGET', item_key, 'a', 'm', 'q')
  local q = rec[3]
  local at = s(now or now_us())
  if q == 'default' then
    q = false
  end
  if retry and tonumber(rec[1]) < tonumber(rec[2]) then
    local ns = prefix_of(item_key)
    if due then
      redis.call('HSET', item_key, 's', 'p', 'w', s(due), 'tf', at)
      if q then
        hold({at = ns .. 'qh:' .. q, ids = ns .. 'qhi:' .. q, all = ns .. 'qheld', due = due}, id)
      else
        hold({at = ns .. 'held', ids = ns .. 'heldi', due = due}, id)
      end
    else
      redis.call('HSET', item_key, 's', 'p', 'w', at, 'tf', at)
      if q then
        redis.call('ZADD', ns .. 'qp:' .. q, id, id)
      else
        redis.call('ZADD', ns .. 'pending', id, id)
      end
    end
    return 1, q
  end
  redis.call('HSET', item_key, 's', 'd', 'tf', at)
  redis.call('ZADD', dl_key, id, id)
  redis.call('ZADD', dlt_key, at, id)
  return 2, q
end

-- Sweeps the members riding the dead session `token` (its set `sm:<token>` under the
-- namespace prefix `ns`): declares up to `budget.n` of them dead, lowering
-- `budget.n`: each record is deleted and leaves its space's lease index, and its token
-- goes into the dead set linked (`dt`) to the session's death record, with no record
-- of its own. Returns {key text, holder, token, ...} of the members it declared dead
-- and whether members remain.
local function sweep_members(ns, dead_key, token, budget)
  local set = ns .. 'sm:' .. token
  local out = {}
  if budget.n <= 0 then
    return out, redis.call('EXISTS', set) == 1
  end
  local popped = redis.call('SPOP', set, budget.n)
  if #popped == 0 then
    return out, false
  end
  budget.n = budget.n - #popped
  local seq = redis.call('HGET', ns .. 'dt', token)
  local declared = 0
  for _, key_text in ipairs(popped) do
    local lease_key = ns .. 'l:' .. key_text
    local rec = redis.call('HMGET', lease_key, 'h', 't', 'st')
    if rec[3] == token then
      redis.call('DEL', lease_key)
      redis.call('ZREM', leases_key(ns, key_text), string.match(key_text, '/(.*)$'))
      redis.call('ZADD', dead_key, rec[2], rec[2] .. ':' .. key_text)
      if seq then
        redis.call('HSET', ns .. 'dt', rec[2], seq)
      end
      out[#out + 1] = key_text
      out[#out + 1] = rec[1]
      out[#out + 1] = rec[2]
      declared = declared + 1
    end
  end
  -- The session's one death record counts the members that died with it.
  if seq and declared > 0 and redis.call('EXISTS', ns .. 'd:' .. seq) == 1 then
    redis.call('HINCRBY', ns .. 'd:' .. seq, 'm', declared)
  end
  return out, redis.call('EXISTS', set) == 1
end

-- Sweeps dead `token` (in the dead set `dead_key`, owning `owned_key`): each of its
-- items back to pending in its own queue or, out of attempts, to the dead-letter set
-- `dl_key` and its times `dlt_key` (the caller trims the expired dead letters; the
-- counts of queues other than the default gathered in `tally.qowned[queue]` and
-- `tally.qdl[queue]`, which the caller writes); forgets the token. Acts only when the token is in the dead set. A dead session's token first
-- declares its riding members dead, at most `budget.n` per call (`sweep_members`), and
-- stays in the dead set, its items untouched, while members remain. Returns
-- {{requeued ids}, {dead-lettered ids}, {key text, holder, token, ...} of the members
-- it declared dead}.
local function sweep_token(dead_key, owned_key, count_key, dl_key, dlt_key, token, prefix,
                           budget, tally)
  local requeued, dead = {}, {}
  if #redis.call('ZRANGEBYSCORE', dead_key, token, token) == 0 then
    return {requeued, dead, {}}
  end
  local ns = ns_prefix(dead_key)
  local members, remain = sweep_members(ns, dead_key, token, budget)
  if remain then
    return {requeued, dead, members}
  end
  redis.call('ZREMRANGEBYSCORE', dead_key, token, token)
  local ids = redis.call('ZRANGE', owned_key, 0, -1)
  redis.call('DEL', owned_key)
  local now
  if #ids > 0 then
    now = now_us()
  end
  for _, id in ipairs(ids) do
    local state, q = hand_back(prefix .. id, id, true, dl_key, dlt_key, nil, now)
    if state == 1 then
      requeued[#requeued + 1] = id
    else
      dead[#dead + 1] = id
    end
    if q then
      tally.qowned[q] = (tally.qowned[q] or 0) - 1
      if state == 2 then
        tally.qdl[q] = (tally.qdl[q] or 0) + 1
      end
    end
  end
  if #ids > 0 then
    redis.call('DECRBY', count_key, #ids)
  end
  -- The token's death record learns what its sweep moved, in this same step: added
  -- to its counts, as a dead session's record sums its members' sweeps.
  local seq = redis.call('HGET', ns .. 'dt', token)
  if seq then
    local record = ns .. 'd:' .. seq
    if redis.call('EXISTS', record) == 1 then
      redis.call('HINCRBY', record, 'r', #requeued)
      redis.call('HINCRBY', record, 'dl', #dead)
    end
    redis.call('HDEL', ns .. 'dt', token)
  end
  return {requeued, dead, members}
end

-- Clears `lease_key` (space expiry zset `expiry_key`, dead set `dead_key`; `name` and
-- `key_text` "space/name" name the key) for a new lease at `now`, drawing its token from
-- the namespace's counter `tokens_key`: the step acquire_one and join_one share.
-- A live lease on the key wins: returns nil and {0, holder, token}. An expired one is
-- declared dead first (dead set, death record, cause '2'). Else returns the new token.
local function take_key(lease_key, expiry_key, tokens_key, dead_key, name, key_text,
                        retention, now)
  local prefix = prefix_of(lease_key)
  local rec = redis.call('HMGET', lease_key, 'h', 't', 'e', 'ttl', 'ep', 's', 'st')
  if rec[2] then
    if now < expiry_of(prefix, rec[3], rec[4], rec[5], rec[6], rec[7], now) then
      return nil, {0, rec[1], rec[2]}
    end
    declare_dead(lease_key, expiry_key, dead_key, name, rec[2], key_text, rec[1], now,
      '2', retention)
  end
  redis.call('ZADD', leases_key(ns_prefix(dead_key), key_text), 0, name)
  return issue_token(tokens_key, prefix, now)
end

-- Takes the lease on `lease_key` (its space's expiry zset `expiry_key`, the
-- namespace's token counter `tokens_key` and dead set `dead_key`; `name` and
-- `key_text` "space/name" name the key) for `holder` with `ttl` ms at `now`: the one
-- step of each entry of acquire_many.lua. A live lease on the key wins; an expired one
-- is declared dead first (dead set, death record, cause '2'). Returns {1, token} or
-- {0, holder, token} when a live lease holds the key.
local function acquire_one(lease_key, expiry_key, tokens_key, dead_key, name, holder, ttl,
                           key_text, retention, now)
  local token, held = take_key(lease_key, expiry_key, tokens_key, dead_key, name, key_text,
    retention, now)
  if not token then
    return held
  end
  local exp = s(now + tonumber(ttl) * 1000)
  redis.call('HSET', lease_key, 'h', holder, 't', token, 'ttl', ttl, 'e', exp,
    'ep', stamp(prefix_of(lease_key)), 'ix', exp)
  redis.call('ZADD', expiry_key, exp, name)
  return {1, token}
end

-- The session lease `session_key` under `session_token`, as a join judges it (as
-- renew does): -1 released, -2 superseded, -3 expired; else 1, its ttl (ms) and the
-- server instant (µs) it expires at.
local function session_until(session_key, session_token, now)
  local session = redis.call('HMGET', session_key, 't', 'e', 'ttl', 'ep')
  if not session[1] then
    return -1
  end
  if session[1] ~= session_token or not session[2] then
    return -2
  end
  local until_us = judged(prefix_of(session_key), session[2], session[3], session[4], now)
  if now >= until_us then
    return -3
  end
  return 1, session[3], until_us
end

-- Joins `name` (key text `key_text`) into the session `session_key` under
-- `session_token`, which session_until found live until `until_us` with ttl
-- `session_ttl`. Returns {0, holder, token} when a live lease holds the key, else
-- {1, token, µs the session has left}. The member's record has the session's key `s`
-- and token `st` and no expiry of its own (nor a place in the expiry index); its key
-- text goes into the session's member set `sm:<session token>`.
local function join_one(session_key, session_token, session_ttl, until_us, lease_key,
                        expiry_key, tokens_key, dead_key, name, holder, key_text,
                        retention, now)
  local token, held = take_key(lease_key, expiry_key, tokens_key, dead_key, name, key_text,
    retention, now)
  if not token then
    return held
  end
  redis.call('HSET', lease_key, 'h', holder, 't', token, 'ttl', session_ttl, 's',
    session_key, 'st', session_token)
  redis.call('SADD', prefix_of(session_key) .. 'sm:' .. session_token, key_text)
  return {1, token, until_us - now}
end
