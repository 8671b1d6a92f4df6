-- item: KEYS[1] item
-- Returns nil, or {payload, attempts, max, state} with state 'p', 'd' or the owner token.
local rec = redis.call('HMGET', KEYS[1], 'p', 'a', 'm', 's')
if not rec[4] then
  return false
end
return rec
