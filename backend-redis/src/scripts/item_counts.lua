-- item_counts: KEYS[1] pending zset, KEYS[2] owned counter, KEYS[3] dead-letter zset,
-- KEYS[4] held zset (by id)
-- Returns {pending (held-back items included), owned, dead_lettered} in one atomic read.
return {
  redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[4]),
  tonumber(redis.call('GET', KEYS[2]) or '0'),
  redis.call('ZCARD', KEYS[3]),
}
