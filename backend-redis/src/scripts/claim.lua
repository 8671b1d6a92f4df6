-- claim: KEYS[1] lease, KEYS[2] owned zset of the token, KEYS[3] owned counter,
--        KEYS[4] owned counts of the queues other than the default (hash), KEYS[5]
--        those queues' held items (zset by due µs); then per queue i (1-based, in
--        the order the claim names them) KEYS[3i+3] its pending zset, KEYS[3i+4] its
--        held zset (by due µs), KEYS[3i+5] its held zset (by id)
-- ARGV[1] token, ARGV[2] n, ARGV[3] item key prefix (item keys derived in-script),
-- ARGV[4] request id, ARGV[4+i] the name of queue i
-- Returns {-1|-2|-3} when the lease is released / superseded / expired (a riding
-- member: when its session is), else
-- {1, id, payload, attempts, max, waited, queue, id, payload, ...}: the queues in the
-- order named, each lowest id first. `waited` is how long the item waited to be
-- claimed, in µs of the server clock: now less its `w` (when it last became
-- claimable: written by every script that makes it pending, its due time when held
-- back), at least 0; nil for an item without `w` (written before it was kept). Each
-- item claimed gets that same now as its `ta` (when it was last claimed), in the
-- HSET that writes its owner.
-- `queue` is the item's `q`: nil for the default queue.
-- A repeat of a request (items the token owns carry its id in `r`) answers those
-- items (waited nil), lowest id first, whatever queues it names, and claims nothing
-- new. Otherwise the claim is admitted only when its id is greater than the token's
-- high-water mark (`c` in the lease hash, which it then raises): a late or repeated
-- copy, or an older id, answers {1} and claims nothing.
-- An admitted claim takes the queues in order (strict priority) while it may claim
-- more: from each it first moves up to as many held-back items as it may still claim
-- that are due by the server's clock, earliest due first, to the queue's pending
-- zset (so it never does more than twice its own work; the rest move with the next
-- claims of that queue: their `w` is already their due time), then takes the lowest
-- ids. A claim of one queue costs what a claim cost before queues: the queue's own
-- keys, and for a queue other than the default one HINCRBY of its owned count.

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
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  local item = redis.call('HMGET', ARGV[3] .. id, 'r', 'p', 'a', 'm', 'q')
  if item[1] == ARGV[4] then
    out[#out + 1] = id
    out[#out + 1] = item[2]
    out[#out + 1] = tonumber(item[3])
    out[#out + 1] = item[4]
    out[#out + 1] = false
    out[#out + 1] = item[5]
  end
end
if #out > 1 then
  return out
end
if rec[3] and not greater(ARGV[4], rec[3]) then
  return out
end
redis.call('HSET', KEYS[1], 'c', ARGV[4])
local at = s(now)
local left = tonumber(ARGV[2])
local claimed = 0
for i = 1, #ARGV - 4 do
  if left <= 0 then
    break
  end
  local q = ARGV[4 + i]
  if q == 'default' then
    q = false
  end
  local pending, held, held_ids = KEYS[3 * i + 3], KEYS[3 * i + 4], KEYS[3 * i + 5]
  local due = redis.call('ZRANGEBYSCORE', held, '-inf', s(now), 'LIMIT', 0, left)
  if #due > 0 then
    local scored = {}
    for j, id in ipairs(due) do
      scored[2 * j - 1] = id
      scored[2 * j] = id
    end
    redis.call('ZREM', held, unpack(due))
    redis.call('ZREM', held_ids, unpack(due))
    if q then
      redis.call('ZREM', KEYS[5], unpack(due))
    end
    redis.call('ZADD', pending, unpack(scored))
  end
  local ids = redis.call('ZRANGE', pending, 0, left - 1)
  for _, id in ipairs(ids) do
    local item_key = ARGV[3] .. id
    redis.call('ZREM', pending, id)
    redis.call('ZADD', KEYS[2], id, id)
    local attempts = redis.call('HINCRBY', item_key, 'a', 1)
    redis.call('HSET', item_key, 's', ARGV[1], 'r', ARGV[4], 'ta', at)
    local item = redis.call('HMGET', item_key, 'p', 'm', 'w')
    out[#out + 1] = id
    out[#out + 1] = item[1]
    out[#out + 1] = attempts
    out[#out + 1] = item[2]
    out[#out + 1] = item[3] and math.max(0, now - tonumber(item[3]))
    out[#out + 1] = q or false
  end
  if q and #ids > 0 then
    redis.call('HINCRBY', KEYS[4], q, #ids)
  end
  claimed = claimed + #ids
  left = left - #ids
end
if claimed > 0 then
  redis.call('INCRBY', KEYS[3], claimed)
end
return out
