-- item: KEYS[1] item
-- Returns nil, or {payload, attempts, max, state, last error} with state 'p', 'd' or
-- the owner token, and the last error nil when the item has none.
local rec = redis.call('HMGET', KEYS[1], 'p', 'a', 'm', 's', 'e')
if not rec[4] then
  return false
end
return rec
