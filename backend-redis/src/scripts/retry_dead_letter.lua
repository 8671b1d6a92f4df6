-- retry_dead_letter: KEYS[1] item, KEYS[2] dead-letter zset, KEYS[3] pending zset
-- ARGV[1] id
-- Returns 0 when there is no such item, 1 when it is not dead-lettered (nothing
-- changes), 2 when it went back to pending with no attempts counted (signalled:
-- `signal_pending`), its last error `e` kept, claimable from the server's now (`w`).
local state = redis.call('HGET', KEYS[1], 's')
if not state then
  return 0
end
if state ~= 'd' then
  return 1
end
redis.call('HSET', KEYS[1], 's', 'p', 'a', 0, 'w', s(now_us()))
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[1], ARGV[1])
signal_pending(prefix_of(KEYS[1]), 'd')
return 2
