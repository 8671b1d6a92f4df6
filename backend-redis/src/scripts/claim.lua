-- claim: KEYS[1] lease, KEYS[2] pending zset, KEYS[3] owned zset of the token,
--        KEYS[4] owned counter, KEYS[5] held zset (by due µs), KEYS[6] held zset (by id)
-- ARGV[1] token, ARGV[2] n, ARGV[3] item key prefix (item keys derived in-script),
-- ARGV[4] request id
-- Returns {-1|-2|-3} when the lease is released / superseded / expired (a riding
-- member: when its session is), else
-- {1, id, payload, attempts, max, waited, id, payload, attempts, max, waited, ...},
-- lowest id first. `waited` is how long the item waited to be claimed, in µs of the
-- server clock: now less its `w` (when it last became claimable: written by every
-- script that makes it pending, its due time when held back), at least 0; nil for an
-- item without `w` (written before it was kept).
-- A repeat of a request (items the token owns carry its id in `r`) answers those
-- items (waited nil) and claims nothing new. Otherwise the claim is admitted only when its id is
-- greater than the token's high-water mark (`c` in the lease hash, which it then
-- raises): a late or repeated copy, or an older id, answers {1} and claims nothing.
-- An admitted claim first moves up to n held-back items that are due by the server's
-- clock, earliest due first, to the pending zset (so it never does more than twice
-- its own work; the rest move with the next claims: their `w` is already their due
-- time), then takes the n lowest ids.

-- True when request id a is greater than b (32 lowercase hex digits each), compared
-- byte by byte: `<` on Lua strings follows the server's collation locale.
local function greater(a, b)
  if #a ~= #b then
    return #a > #b
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x > y
    end
  end
  return false
end

local now = now_us()
local rec = redis.call('HMGET', KEYS[1], 't', 'e', 'c', 'ttl', 'ep', 's', 'st')
if not rec[1] then
  return {-1}
end
if rec[1] ~= ARGV[1] then
  return {-2}
end
if now >= expiry_of(prefix_of(KEYS[1]), rec[2], rec[4], rec[5], rec[6], rec[7], now) then
  return {-3}
end
local out = {1}
for _, id in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  local item = redis.call('HMGET', ARGV[3] .. id, 'r', 'p', 'a', 'm')
  if item[1] == ARGV[4] then
    out[#out + 1] = id
    out[#out + 1] = item[2]
    out[#out + 1] = tonumber(item[3])
    out[#out + 1] = item[4]
    out[#out + 1] = false
  end
end
if #out > 1 then
  return out
end
if rec[3] and not greater(ARGV[4], rec[3]) then
  return out
end
redis.call('HSET', KEYS[1], 'c', ARGV[4])
local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', s(now), 'LIMIT', 0, ARGV[2])
if #due > 0 then
  local scored = {}
  for i, id in ipairs(due) do
    scored[2 * i - 1] = id
    scored[2 * i] = id
  end
  redis.call('ZREM', KEYS[5], unpack(due))
  redis.call('ZREM', KEYS[6], unpack(due))
  redis.call('ZADD', KEYS[2], unpack(scored))
end
local ids = redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[2]) - 1)
for _, id in ipairs(ids) do
  local item_key = ARGV[3] .. id
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZADD', KEYS[3], id, id)
  local attempts = redis.call('HINCRBY', item_key, 'a', 1)
  redis.call('HSET', item_key, 's', ARGV[1], 'r', ARGV[4])
  local item = redis.call('HMGET', item_key, 'p', 'm', 'w')
  out[#out + 1] = id
  out[#out + 1] = item[1]
  out[#out + 1] = attempts
  out[#out + 1] = item[2]
  out[#out + 1] = item[3] and math.max(0, now - tonumber(item[3]))
end
if #ids > 0 then
  redis.call('INCRBY', KEYS[4], #ids)
end
return out
