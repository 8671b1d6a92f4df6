-- item_counts: KEYS[1] the default queue's pending zset, KEYS[2] owned counter,
-- KEYS[3] dead-letter zset, KEYS[4] the default queue's held zset (by id), KEYS[5] the
-- set of the queues other than the default
-- Returns {pending (held-back items included), owned, dead_lettered} in one atomic read:
-- two ZCARDs per queue for the pending items (a queue other than the default: its
-- zsets derived in-script from its name), the owned counter, the dead-letter zset's
-- size. Its cost grows with the number of queues, never with the number of items.
local ns = prefix_of(KEYS[1])
local pending = redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[4])
for _, q in ipairs(redis.call('SMEMBERS', KEYS[5])) do
  local due, _, held_ids = queue_keys(ns, named(q))
  pending = pending + redis.call('ZCARD', due) + redis.call('ZCARD', held_ids)
end
return {
  pending,
  tonumber(redis.call('GET', KEYS[2]) or '0'),
  redis.call('ZCARD', KEYS[3]),
}
