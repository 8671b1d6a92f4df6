-- expired: KEYS[1] expiry zset of the space
-- ARGV[1] lease key prefix of the space ("liveness:{ns}:l:<space>/"), ARGV[2] limit
-- The lease keys are derived in-script from the hash-tagged prefix (same slot).
-- Cost: O(log n + k) for k expired leases.
-- Returns {name, holder, token, name, holder, token, ...}, earliest expiry first.
local now = now_us()
local names = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', s(now), 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, name in ipairs(names) do
  local rec = redis.call('HMGET', ARGV[1] .. name, 'h', 't')
  if rec[2] then
    out[#out + 1] = name
    out[#out + 1] = rec[1]
    out[#out + 1] = rec[2]
  end
end
return out
