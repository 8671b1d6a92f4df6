-- Shared by the scripts that dead-letter (finish, sweep_many) and the one that
-- discards a dead letter (cancel): prepended at compile time after
-- prelude_declare_dead.lua (and prelude_queues.lua): `lua!(dead_letters "<name>")`,
-- `lua!(queues dead_letters "<name>")`. The other scripts go without: every `local
-- function` of a script's prefix is a closure made anew on each call.
--
-- Dead-letter retention (`Capabilities::dead_letter_retention`): every dead letter is
-- in the dead-letter zset `dl` by id and in `dlt` by when it was dead-lettered (µs of
-- the server clock: `hand_back` adds it with its `tf`); every script that takes an
-- item out of `dl` takes it out of `dlt` too. A script that dead-lettered removes, in
-- the same step, up to DEAD_LETTER_TRIM of the oldest dead letters whose retention
-- has passed by its own `TIME`, each as cancel removes a dead letter. A dead letter
-- from before `dlt` was kept is not in it: kept until an operator acts.

-- `liveness_core::DEAD_LETTER_TRIM`: the most expired dead letters one script
-- removes (a unit test keeps the two equal).
local DEAD_LETTER_TRIM = 100

-- Removes dead letter `id` (its hash `item_key`, `q` as its hash has it: absent or
-- 'default' for the default queue) under the namespace prefix `ns`, as an operator's
-- cancel does: out of the dead-letter zset `dl_key` and its times `dlt_key`, one dead
-- letter less in its queue's count (`qdl`, for a queue other than the default), its
-- hash deleted (its last error `e` with it).
local function forget_dead_letter(ns, dl_key, dlt_key, item_key, id, q)
  redis.call('ZREM', dl_key, id)
  redis.call('ZREM', dlt_key, id)
  if q and q ~= 'default' then
    redis.call('HINCRBY', ns .. 'qdl', q, -1)
  end
  redis.call('DEL', item_key)
end

-- Removes the dead letters of the namespace `ns` (dead-letter zset `dl_key`, its
-- times `dlt_key`) dead-lettered `retention_ms` or longer before `now` (µs of the
-- server clock), the oldest first and at most DEAD_LETTER_TRIM, each with
-- forget_dead_letter. An entry whose item is no dead letter any more (a handle of an
-- earlier version retried or cancelled it, which left the entry) is only dropped from
-- `dlt`: nothing else of it is touched.
local function trim_dead_letters(ns, dl_key, dlt_key, now, retention_ms)
  local before = now - tonumber(retention_ms) * 1000
  local ids = redis.call('ZRANGEBYSCORE', dlt_key, '-inf', s(before), 'LIMIT', 0,
    DEAD_LETTER_TRIM)
  for _, id in ipairs(ids) do
    local item_key = ns .. 'i:' .. id
    local rec = redis.call('HMGET', item_key, 's', 'q')
    if rec[1] == 'd' then
      forget_dead_letter(ns, dl_key, dlt_key, item_key, id, rec[2])
    else
      redis.call('ZREM', dlt_key, id)
    end
  end
end
