-- Shared by every script (prepended at compile time; every other script but
-- renew_many gets prelude_declare_dead.lua after it). Every `local function` here is made
-- anew on each call of a script (a closure each), so this file holds only what a
-- renewal runs: the clock, the expiry epochs, the judged expiry and renew_one.
-- Times are microseconds of the Redis server's own clock (TIME), read inside the
-- script: the client never sends a timestamp. Numbers that go into keys or values are
-- whole and below 2^53 (Lua numbers are doubles), and are written with '%d', which
-- Redis's Lua 5.1 formats through a C long: exact decimal integers, and much cheaper
-- than '%.0f'.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function s(n)
  return string.format('%d', n)
end

-- The namespace's key prefix `liveness:{ns}:`, from any key (or key prefix) of it.
local function prefix_of(key)
  return string.match(key, '^(.-}:)')
end

-- Which server judges expiries. Expiries are absolute microseconds of the
-- clock of the server that wrote them; after a failover (or a restart) another
-- server, with another clock, judges them. <prefix>srv records the server last seen
-- (its run_id), the epoch `ep` it opened and when (`since`, by its own clock); every
-- lease records the epoch it was last written in (`ep`). The first time a server that
-- is not the recorded one judges an expiry, a new epoch starts at its now. A lease
-- written in an older epoch is then judged expired no earlier than one full ttl after
-- that instant, by this server's clock: a failover can make a lease expire later,
-- never earlier, whatever the offset between the servers' clocks. Costs one INFO per
-- script run (remembered in `epochs`), only when a lease looks expired or a token is
-- handed out.
local epochs = {}
local function epoch(prefix, now)
  local known = epochs[prefix]
  if known then
    return known[1], known[2]
  end
  local key = prefix .. 'srv'
  local rec = redis.call('HMGET', key, 'id', 'since', 'ep')
  local id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  local ep, since = tonumber(rec[3]), tonumber(rec[2])
  if rec[1] ~= id then
    ep = tonumber(rec[3] or '0') + 1
    -- The namespace's first server: no older clock to distrust.
    since = 0
    if rec[1] then
      since = now
    end
    redis.call('HSET', key, 'id', id, 'since', s(since), 'ep', ep)
  end
  epochs[prefix] = {ep, since}
  return ep, since
end

-- The epoch a write stamps on a lease: the recorded one (no INFO), 0 before any.
local function stamp(prefix)
  return redis.call('HGET', prefix .. 'srv', 'ep') or '0'
end

-- The expiry of a lease record (its `e`, `ttl` in ms and `ep`) as this server judges
-- it at `now` (see `epoch`).
local function judged(prefix, e, ttl, ep, now)
  e = tonumber(e)
  if now < e then
    return e
  end
  local current, since = epoch(prefix, now)
  if tonumber(ep or '0') < current then
    local floor = since + tonumber(ttl) * 1000
    if floor > e then
      return floor
    end
  end
  return e
end

-- The judged expiry of a lease record from its fields `e`, `ttl`, `ep` and, for a
-- member riding a session (`LeaseStore::join_session_many`: no `e` of its own), `s` (the
-- session's lease key) and `st` (the session's token): the session's judged expiry
-- while its lease holds that very token, else 0 (gone or superseded: expired).
local function expiry_of(prefix, e, ttl, ep, skey, stoken, now)
  if e then
    return judged(prefix, e, ttl, ep, now)
  end
  if not skey then
    return 0
  end
  local rec = redis.call('HMGET', skey, 't', 'e', 'ttl', 'ep')
  if rec[1] ~= stoken or not rec[2] then
    return 0
  end
  return judged(prefix, rec[2], rec[3], rec[4], now)
end

-- What the renewals of one call share: the namespace prefix (every lease of one call
-- is in one namespace: a store handle serves one), per-call reads and texts that
-- renew_one fills in once (the epoch stamp `ep`, the token counter `issued`, and per
-- ttl its expiry `x[ttl] = {us, text, half ttl in µs}`), and the index moves `moves[expiry key] = {score, name, ...}` that
-- `moved` makes as one ZADD per index at the end of the call.
local function batch_of(lease_key)
  return {prefix = prefix_of(lease_key), x = {}, moves = {}}
end

-- Applies a batch's index moves: one ZADD per expiry index.
local function moved(batch)
  for expiry, m in pairs(batch.moves) do
    redis.call('ZADD', expiry, unpack(m))
  end
end

-- One renewal (each lease of renew_many.lua): `lease` its record, `expiry` its space's
-- index, `ttl` in ms, `batch` from batch_of (the caller applies its index moves with
-- `moved` before it returns). Returns 1 renewed, -1 released, -2 superseded,
-- -3 expired (for a riding member: its session is), n >= 2 a riding member whose
-- session is live with n - 1 µs left (nothing written), -4 the store lost its state (no record, and the token is above every
-- token the namespace's counter has handed out: the counter went back).
--
-- The expiry index is coarse: a lease's score `ix` (also kept in its hash)
-- is never later than its expiry `e`, and a renewal moves it only when it would
-- otherwise lag `e` by half the ttl or more. At the default cadence (renew every
-- ttl/3) every other renewal skips the index: two commands, not three, and no
-- skiplist update. A live lease therefore never reaches the front of the index before
-- its renewal is more than ttl/2 late; one that does (a dead one, a late one) is
-- re-scored to its real expiry by `expired`/`next_expiry` (`reindex`), which list it
-- only once that has passed.
local function renew_one(lease, expiry, name, token, ttl, now, batch)
  local prefix = batch.prefix
  local rec = redis.call('HMGET', lease, 't', 'e', 'ttl', 'ep', 'ix')
  if not rec[1] then
    if batch.issued == nil then
      batch.issued = tonumber(redis.call('GET', prefix .. 'tokens') or '0')
    end
    if tonumber(token) > batch.issued then
      return -4
    end
    return -1
  end
  if rec[1] ~= token then
    return -2
  end
  if not rec[2] then
    -- A riding member: live exactly while its session is, nothing to write.
    local ride = redis.call('HMGET', lease, 's', 'st')
    local left = expiry_of(prefix, nil, nil, nil, ride[1], ride[2], now) - now
    if left <= 0 then
      return -3
    end
    return 1 + left
  end
  local e = tonumber(rec[2])
  if now >= e and now >= judged(prefix, e, rec[3], rec[4], now) then
    return -3
  end
  local x = batch.x[ttl]
  if x == nil then
    local us = now + tonumber(ttl) * 1000
    x = {us, s(us), tonumber(ttl) * 500}
    batch.x[ttl] = x
  end
  if batch.ep == nil then
    batch.ep = stamp(prefix)
  end
  if rec[3] == ttl and rec[4] == batch.ep and x[1] >= e
      and x[1] - tonumber(rec[5] or '0') < x[3] then
    redis.call('HSET', lease, 'e', x[2])
    return 1
  end
  local m = batch.moves[expiry]
  if m == nil then
    m = {}
    batch.moves[expiry] = m
  end
  -- The k-th move of the batch is scored k µs before the expiry: distinct scores, so
  -- the index's skiplist orders them without comparing names (still never later than
  -- the expiry).
  local ix = s(x[1] - #m / 2)
  redis.call('HSET', lease, 'e', x[2], 'ttl', ttl, 'ep', batch.ep, 'ix', ix)
  m[#m + 1] = ix
  m[#m + 1] = name
  return 1
end
