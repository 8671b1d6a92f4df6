-- expired: KEYS[1] expiry zset of the space
-- ARGV[1] lease key prefix of the space ("liveness:{ns}:l:<space>/"), ARGV[2] limit
-- The lease keys are derived in-script from the hash-tagged prefix (same slot).
-- Cost: O(log n + k) for k expired leases.
-- Returns {name, holder, token, name, holder, token, ...}, earliest expiry first.
local now = now_us()
local names = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', s(now), 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
local prefix = prefix_of(ARGV[1])
for _, name in ipairs(names) do
  local rec = redis.call('HMGET', ARGV[1] .. name, 'h', 't', 'e', 'ttl', 'ep')
  if rec[2] then
    local e = judged(prefix, rec[3], rec[4], rec[5], now)
    if now < e then
      -- Written under another server's clock: expires later than its score said.
      redis.call('ZADD', KEYS[1], s(e), name)
    else
      out[#out + 1] = name
      out[#out + 1] = rec[1]
      out[#out + 1] = rec[2]
    end
  end
end
return out
