-- item: KEYS[1] item
-- Returns nil, or {payload, attempts, max, state, last error, queue, enqueued,
-- attempted, finished} with state 'p', 'd' or the owner token, the last error nil
-- when the item has none, the queue nil for the default queue (no `q`), and the
-- times (`te`, `ta`, `tf`: µs of the server clock, as store_time reads it) nil when
-- not yet stamped or written by an earlier version.
local rec = redis.call('HMGET', KEYS[1], 'p', 'a', 'm', 's', 'e', 'q', 'te', 'ta', 'tf')
if not rec[4] then
  return false
end
return rec
