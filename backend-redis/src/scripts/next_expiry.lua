-- next_expiry: KEYS[1] expiry zset of the space, ARGV[1] lease key prefix of the space
-- Returns nil when empty, else the microseconds until the front of the index (0 when
-- a lease there is expired), against the server clock read in this same script. The
-- index is coarse (prelude, `renew_one`): a front score is never later than its
-- lease's expiry, so the answer is never later than the earliest expiry. Live leases
-- met at the front with a past score are moved to their real expiry first (`reindex`),
-- at most 64 per call; past that it answers 0, and the checker's next round goes on.
local now = now_us()
for _ = 1, 64 do
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if #first == 0 then
    return false
  end
  local left = tonumber(first[2]) - now
  if left > 0 then
    return left
  end
  if reindex(KEYS[1], ARGV[1], first[1], now) ~= 'moved' then
    return 0
  end
end
return 0
