-- retry_dead_letter: KEYS[1] item, KEYS[2] dead-letter zset, KEYS[3] the dead letters
-- by when dead-lettered
-- ARGV[1] id
-- Returns 0 when there is no such item, 1 when it is not dead-lettered (nothing
-- changes), 2 when it went back to pending (out of both dead-letter zsets) in its own
-- queue (the pending zset derived in-script from its `q`; a queue other than the
-- default counts one dead letter less) with no attempts counted (signalled: `signal_pending`), its last error `e` kept,
-- claimable from the server's now (`w`).
local rec = redis.call('HMGET', KEYS[1], 's', 'q')
if not rec[1] then
  return 0
end
if rec[1] ~= 'd' then
  return 1
end
local ns = prefix_of(KEYS[1])
local q = named(rec[2])
local pending = queue_keys(ns, q)
redis.call('HSET', KEYS[1], 's', 'p', 'a', 0, 'w', s(now_us()))
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZADD', pending, ARGV[1], ARGV[1])
if q then
  redis.call('HINCRBY', ns .. 'qdl', q, -1)
end
signal_pending(ns, 'd')
return 2
