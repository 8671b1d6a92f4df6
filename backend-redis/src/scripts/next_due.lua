-- next_due: KEYS[1] held zset (by due µs)
-- Returns nil when no held-back item is due later than the server's now (read in this
-- script), else the microseconds until the earliest such due time. Items already due
-- but still in the held zset are not looked at: the next claim moves them.
local now = now_us()
local first = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. s(now), '+inf', 'WITHSCORES',
  'LIMIT', 0, 1)
if #first == 0 then
  return false
end
return tonumber(first[2]) - now
