-- items: KEYS[1] the state's zset of ids (pending or dead-letter), or the item id
-- counter for owned items; for pending, KEYS[2] the held zset (by id); ARGV[1] state
-- ('p', 'o' or 'd'), ARGV[2] after (exclusive id), ARGV[3] limit, ARGV[4] item key
-- prefix
-- Returns {id, payload, attempts, max, state, last error, ...}, lowest id first; state
-- 'p', 'd' or the owner token, the last error nil when the item has none. Pending and
-- dead-lettered pages are ZRANGEBYSCORE ranges (O(log n + page)); the pending page
-- merges the due and the held-back items' ranges. Owned items have no index of their
-- own, so their page walks the ids above `after` (O(ids walked)).
local out = {}
local limit = tonumber(ARGV[3])
local function add(id, rec)
  out[#out + 1] = id
  out[#out + 1] = rec[1]
  out[#out + 1] = rec[2]
  out[#out + 1] = rec[3]
  out[#out + 1] = rec[4]
  out[#out + 1] = rec[5]
end
local function range(key)
  return redis.call('ZRANGEBYSCORE', key, '(' .. ARGV[2], '+inf', 'LIMIT', 0, limit)
end
if ARGV[1] ~= 'o' then
  local ids = range(KEYS[1])
  if ARGV[1] == 'p' then
    -- The two ranges are disjoint and each sorted: merged, the first `limit`.
    local due, held, merged = ids, range(KEYS[2]), {}
    local i, j = 1, 1
    while #merged < limit and (due[i] or held[j]) do
      if not held[j] or (due[i] and tonumber(due[i]) < tonumber(held[j])) then
        merged[#merged + 1] = due[i]
        i = i + 1
      else
        merged[#merged + 1] = held[j]
        j = j + 1
      end
    end
    ids = merged
  end
  for _, id in ipairs(ids) do
    add(id, redis.call('HMGET', ARGV[4] .. id, 'p', 'a', 'm', 's', 'e'))
  end
  return out
end
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
local id = tonumber(ARGV[2]) + 1
local n = 0
while id <= last and n < limit do
  local rec = redis.call('HMGET', ARGV[4] .. s(id), 'p', 'a', 'm', 's', 'e')
  if rec[4] and rec[4] ~= 'p' and rec[4] ~= 'd' then
    add(s(id), rec)
    n = n + 1
  end
  id = id + 1
end
return out
