-- retry_dead_letters: KEYS[1] dead-letter zset, KEYS[2] the dead letters by when
-- dead-lettered
-- ARGV[1] limit, ARGV[2] item key prefix
-- Moves up to limit dead-lettered items, lowest id first (out of both dead-letter
-- zsets), back to pending in their own queues (each one's pending zset derived
-- in-script from its `q`; the counts of queues other than the default move once per
-- queue) with no attempts counted (each keeps its last error `e`), claimable from the
-- server's now (`w`), and signals it when there was any (`signal_pending`). Returns
-- their ids.
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #ids == 0 then
  return ids
end
local ns = prefix_of(ARGV[2])
local since = s(now_us())
local tally = {}
for _, id in ipairs(ids) do
  local item_key = ARGV[2] .. id
  local q = named(redis.call('HGET', item_key, 'q'))
  redis.call('HSET', item_key, 's', 'p', 'a', 0, 'w', since)
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZADD', (queue_keys(ns, q)), id, id)
  tally_add(tally, 'qdl', q, -1)
end
tally_write(ns, tally)
signal_pending(ns, 'd')
return ids
