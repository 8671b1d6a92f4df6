-- retry_dead_letters: KEYS[1] dead-letter zset, KEYS[2] pending zset
-- ARGV[1] limit, ARGV[2] item key prefix
-- Moves up to limit dead-lettered items, lowest id first, back to pending with no
-- attempts counted (each keeps its last error `e`), claimable from the server's now
-- (`w`), and signals it when there was any (`signal_pending`). Returns their ids.
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
local since
if #ids > 0 then
  since = s(now_us())
end
for _, id in ipairs(ids) do
  redis.call('HSET', ARGV[2] .. id, 's', 'p', 'a', 0, 'w', since)
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], id, id)
end
if #ids > 0 then
  signal_pending(prefix_of(ARGV[2]), 'd')
end
return ids
