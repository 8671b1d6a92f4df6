-- enqueue: KEYS[1] item id counter, KEYS[2] pending zset, KEYS[3] enqueue keys hash
-- ARGV[1] item key prefix ("liveness:{ns}:i:"), ARGV[2] payload, ARGV[3] max attempts,
-- ARGV[4] idempotency key ('' for none)
-- The item key is derived from the new id in-script (same hash tag, same slot).
-- Returns the new id, or the id an earlier enqueue with the same key returned.
if ARGV[4] ~= '' then
  local earlier = redis.call('HGET', KEYS[3], ARGV[4])
  if earlier then
    return tonumber(earlier)
  end
end
local id = s(redis.call('INCR', KEYS[1]))
redis.call('HSET', ARGV[1] .. id, 'p', ARGV[2], 'a', '0', 'm', ARGV[3], 's', 'p')
redis.call('ZADD', KEYS[2], id, id)
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[4], id)
end
return id
