-- expired: KEYS[1] expiry zset of the space
-- ARGV[1] lease key prefix of the space ("liveness:{ns}:l:<space>/"), ARGV[2] limit
-- The lease keys are derived in-script from the hash-tagged prefix (same slot).
-- The index is coarse (prelude, `renew_one`): a name at its front may belong to a live
-- lease renewed since it was indexed; `reindex` moves it to its real expiry, at most
-- 4 x limit of them per call. Cost: O(log n + k) for k expired or moved leases.
-- Returns {name, holder, token, name, holder, token, ...}, earliest expiry first.
local now = now_us()
local limit = tonumber(ARGV[2])
local found = {}
-- Names that stay at the front: listed here, or without a record.
local skip = 0
local moves = 4 * limit
while #found < limit and moves > 0 do
  local names = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', s(now), 'LIMIT', skip,
    limit - #found)
  if #names == 0 then
    break
  end
  for _, name in ipairs(names) do
    local what, rec, e = reindex(KEYS[1], ARGV[1], name, now)
    if what == 'moved' then
      moves = moves - 1
    else
      skip = skip + 1
      if what == 'expired' then
        found[#found + 1] = {e, name, rec[1], rec[2]}
      end
    end
  end
end
table.sort(found, function(a, b)
  return a[1] < b[1]
end)
local out = {}
for _, f in ipairs(found) do
  out[#out + 1] = f[2]
  out[#out + 1] = f[3]
  out[#out + 1] = f[4]
end
return out
