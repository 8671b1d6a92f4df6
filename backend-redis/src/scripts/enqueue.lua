-- enqueue: KEYS[1] item id counter, KEYS[2] pending zset, KEYS[3] the enqueue keys hash
-- of earlier versions (read only), KEYS[4] held zset (by due µs), KEYS[5] held zset (by
-- id), KEYS[6] the idempotency key's own string (only with a key)
-- ARGV[1] item key prefix ("liveness:{ns}:i:"), ARGV[2] payload, ARGV[3] max attempts,
-- ARGV[4] idempotency key ('' for none), ARGV[5] delay µs ('0' for none), ARGV[6] key
-- retention ms
-- The item key is derived from the new id in-script (same hash tag, same slot). With
-- a delay the item is held back until the server's now + the delay (`hold`). Its `w`
-- is when it becomes claimable: now, or its due time when held back.
-- A key is kept as its own string, the new id, with `PX` the retention: the server's
-- clock counts it down and the server deletes it, so a repeat after the retention adds
-- a new item. A key that earlier versions wrote into the hash (kept for good) still
-- answers its id; nothing is written there any more.
-- A new item is signalled (`signal_pending`), held back or not: an idle worker then
-- claims, or reads `next_due` again.
-- Returns the new id, or the id an earlier enqueue with the same key returned.
if ARGV[4] ~= '' then
  local earlier = redis.call('GET', KEYS[6]) or redis.call('HGET', KEYS[3], ARGV[4])
  if earlier then
    return tonumber(earlier)
  end
end
local id = s(redis.call('INCR', KEYS[1]))
local since = now_us() + tonumber(ARGV[5])
redis.call('HSET', ARGV[1] .. id, 'p', ARGV[2], 'a', '0', 'm', ARGV[3], 's', 'p',
  'w', s(since))
if ARGV[5] ~= '0' then
  hold({at = KEYS[4], ids = KEYS[5], due = since}, id)
else
  redis.call('ZADD', KEYS[2], id, id)
end
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[6], id, 'NX', 'PX', ARGV[6])
end
signal_pending(prefix_of(ARGV[1]), 'e')
return id
