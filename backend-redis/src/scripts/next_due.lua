-- next_due: KEYS[1] the default queue's held zset (by due µs), KEYS[2] the held items
-- of every other queue (zset by due µs)
-- Returns nil when no held-back item of any queue is due later than the server's now
-- (read in this script), else the microseconds until the earliest such due time: two
-- range reads, whatever the number of queues. Items already due but still in a held
-- zset are not looked at: the next claim of their queue moves them.
local now = now_us()
local earliest
for i = 1, 2 do
  local first = redis.call('ZRANGEBYSCORE', KEYS[i], '(' .. s(now), '+inf', 'WITHSCORES',
    'LIMIT', 0, 1)
  if #first > 0 then
    local at = tonumber(first[2])
    if not earliest or at < earliest then
      earliest = at
    end
  end
end
if not earliest then
  return false
end
return earliest - now
