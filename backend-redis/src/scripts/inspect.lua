-- inspect: KEYS[1] lease
-- Returns nil, or {holder, token, ttl, remaining_us} with remaining_us -1 when expired.
local now = now_us()
local rec = redis.call('HMGET', KEYS[1], 'h', 't', 'ttl', 'e', 'ep')
if not rec[2] then
  return false
end
local left = judged(prefix_of(KEYS[1]), rec[4], rec[3], rec[5], now) - now
if left <= 0 then
  left = -1
end
return {rec[1], rec[2], rec[3], left}
