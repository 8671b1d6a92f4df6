-- next_expiry: KEYS[1] expiry zset of the space
-- Returns nil when empty, else the microseconds until the earliest expiry (0 when
-- already expired), against the server clock read in this same script.
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first == 0 then
  return false
end
local left = tonumber(first[2]) - now_us()
if left < 0 then
  left = 0
end
return left
