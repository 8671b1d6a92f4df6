-- item: KEYS[1] item
-- Returns nil, or {payload, attempts, max, state, last error, queue} with state 'p',
-- 'd' or the owner token, the last error nil when the item has none, and the queue
-- nil for the default queue (no `q`).
local rec = redis.call('HMGET', KEYS[1], 'p', 'a', 'm', 's', 'e', 'q')
if not rec[4] then
  return false
end
return rec
