-- enqueue_many: KEYS[1] item id counter, KEYS[2] pending zset
-- ARGV[1] item key prefix ("liveness:{ns}:i:"), ARGV[2] max attempts, ARGV[3..] the
-- payloads (at most max_batch of them: the core checks the batch).
-- Adds one pending item per payload, as enqueue.lua does, in one step: the ids are
-- consecutive, in payload order. Item keys are derived in-script (same hash tag, same
-- slot). Returns the first id.
local n = #ARGV - 2
local first = redis.call('INCRBY', KEYS[1], n) - n + 1
local scored = {}
for i = 1, n do
  local id = s(first + i - 1)
  redis.call('HSET', ARGV[1] .. id, 'p', ARGV[i + 2], 'a', '0', 'm', ARGV[2], 's', 'p')
  scored[2 * i - 1] = id
  scored[2 * i] = id
end
redis.call('ZADD', KEYS[2], unpack(scored))
return first
