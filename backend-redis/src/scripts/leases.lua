-- leases: KEYS[1] lease index of the space (key m:<space>, ZSET of names, score 0)
-- ARGV[1] the range start ('-' for the first page, else '(' .. the last name seen),
-- ARGV[2] limit, ARGV[3] the space's lease key prefix (lease keys derived in-script)
-- Returns {name, holder, token, ttl, remaining_us, session lease key|'', ...} in name
-- (byte) order, with remaining_us -1 when expired (a riding member's: its session's):
-- ZRANGEBYLEX, O(log n + page).
local now = now_us()
local names = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], '+', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, name in ipairs(names) do
  local rec = redis.call('HMGET', ARGV[3] .. name, 'h', 't', 'ttl', 'e', 'ep', 's', 'st')
  if rec[2] then
    local left = expiry_of(prefix_of(ARGV[3]), rec[4], rec[3], rec[5], rec[6], rec[7], now) - now
    if left <= 0 then
      left = -1
    end
    out[#out + 1] = name
    out[#out + 1] = rec[1]
    out[#out + 1] = rec[2]
    out[#out + 1] = rec[3]
    out[#out + 1] = left
    out[#out + 1] = rec[6] or ''
  end
end
return out
