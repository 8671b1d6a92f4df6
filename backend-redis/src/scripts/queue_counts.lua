-- queue_counts: KEYS[1] the default queue's pending zset, KEYS[2] owned counter,
-- KEYS[3] dead-letter zset, KEYS[4] the default queue's held zset (by id), KEYS[5] the
-- set of the queues other than the default, KEYS[6] their owned counts (hash), KEYS[7]
-- their dead-letter counts (hash)
-- Returns {name, pending, owned, dead_lettered, ...} in one atomic read, the default
-- queue first, then every queue of the set (in the set's order; the caller sorts and
-- leaves out queues with no item). A queue's pending items are the sizes of its
-- pending and held (by id) zsets (a queue other than the default: derived in-script
-- from its name); its owned and dead-lettered items are its counts in KEYS[6] and
-- KEYS[7]. The default queue's are the totals (the owned counter, the dead-letter
-- zset's size) less the other queues' counts: exact also for the items earlier
-- versions wrote, which no per-queue count knows of. Cost: a few reads per queue,
-- never per item.
local ns = prefix_of(KEYS[1])
local names = redis.call('SMEMBERS', KEYS[5])
local out = {'default',
  redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[4]),
  tonumber(redis.call('GET', KEYS[2]) or '0'),
  redis.call('ZCARD', KEYS[3])}
for _, q in ipairs(names) do
  local due, _, held_ids = queue_keys(ns, named(q))
  local owned = tonumber(redis.call('HGET', KEYS[6], q) or '0')
  local dead = tonumber(redis.call('HGET', KEYS[7], q) or '0')
  out[#out + 1] = q
  out[#out + 1] = redis.call('ZCARD', due) + redis.call('ZCARD', held_ids)
  out[#out + 1] = owned
  out[#out + 1] = dead
  out[3] = out[3] - owned
  out[4] = out[4] - dead
end
return out
