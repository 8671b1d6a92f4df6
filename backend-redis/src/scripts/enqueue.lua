-- enqueue: KEYS[1] item id counter, KEYS[2] the enqueue keys hash of earlier versions
-- (read only), KEYS[3] the queue's pending zset, KEYS[4] its held zset (by due µs),
-- KEYS[5] its held zset (by id), KEYS[6] the held items of every queue other than
-- the default (zset by due µs), KEYS[7] the set of the queues other than the default,
-- KEYS[8] the idempotency key's own string (only with a key)
-- ARGV[1] item key prefix ("liveness:{ns}:i:"), ARGV[2] payload, ARGV[3] max attempts,
-- ARGV[4] idempotency key ('' for none), ARGV[5] delay µs ('0' for none), ARGV[6] key
-- retention ms, ARGV[7] the queue's name
-- The item key is derived from the new id in-script (same hash tag, same slot). With
-- a delay the item is held back until the server's now + the delay (`hold`). Its `w`
-- is when it becomes claimable: now, or its due time when held back; its `te` is
-- when it was enqueued: now, the same reading (see item.lua). An item of a
-- queue other than the default keeps its queue's name in `q`, and the name goes into
-- the set of queues (KEYS[7]); an item of the default queue is written as earlier
-- versions wrote it.
-- A key is kept as its own string, the new id, with `PX` the retention: the server's
-- clock counts it down and the server deletes it, so a repeat after the retention adds
-- a new item. A key that earlier versions wrote into the hash (kept for good) still
-- answers its id; nothing is written there any more. A repeat answers the first id
-- whatever queue it names.
-- A new item is signalled (`signal_pending`), held back or not: an idle worker then
-- claims, or reads `next_due` again.
-- Returns the new id, or the id an earlier enqueue with the same key returned.
if ARGV[4] ~= '' then
  local earlier = redis.call('GET', KEYS[8]) or redis.call('HGET', KEYS[2], ARGV[4])
  if earlier then
    return tonumber(earlier)
  end
end
local q = ARGV[7]
if q == 'default' then
  q = false
end
local id = s(redis.call('INCR', KEYS[1]))
local now = now_us()
local since = now + tonumber(ARGV[5])
if q then
  redis.call('HSET', ARGV[1] .. id, 'p', ARGV[2], 'a', '0', 'm', ARGV[3], 's', 'p',
    'w', s(since), 'te', s(now), 'q', q)
  redis.call('SADD', KEYS[7], q)
else
  redis.call('HSET', ARGV[1] .. id, 'p', ARGV[2], 'a', '0', 'm', ARGV[3], 's', 'p',
    'w', s(since), 'te', s(now))
end
if ARGV[5] ~= '0' then
  local all
  if q then
    all = KEYS[6]
  end
  hold({at = KEYS[4], ids = KEYS[5], all = all, due = since}, id)
else
  redis.call('ZADD', KEYS[3], id, id)
end
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[8], id, 'NX', 'PX', ARGV[6])
end
signal_pending(prefix_of(ARGV[1]), 'e')
return id
