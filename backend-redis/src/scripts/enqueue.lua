-- enqueue: KEYS[1] item id counter, KEYS[2] pending zset
-- ARGV[1] item key prefix ("liveness:{ns}:i:"), ARGV[2] payload, ARGV[3] max attempts
-- The item key is derived from the new id in-script (same hash tag, same slot).
-- Returns the new id.
local id = s(redis.call('INCR', KEYS[1]))
redis.call('HSET', ARGV[1] .. id, 'p', ARGV[2], 'a', '0', 'm', ARGV[3], 's', 'p')
redis.call('ZADD', KEYS[2], id, id)
return id
