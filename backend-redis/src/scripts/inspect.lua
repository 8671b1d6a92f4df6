-- inspect: KEYS[1] lease
-- Returns nil, or {holder, token, ttl, remaining_us, session lease key|''} with
-- remaining_us -1 when expired (a riding member's: its session's).
local now = now_us()
local rec = redis.call('HMGET', KEYS[1], 'h', 't', 'ttl', 'e', 'ep', 's', 'st')
if not rec[2] then
  return false
end
local left = expiry_of(prefix_of(KEYS[1]), rec[4], rec[3], rec[5], rec[6], rec[7], now) - now
if left <= 0 then
  left = -1
end
return {rec[1], rec[2], rec[3], left, rec[6] or ''}
