-- items: KEYS[1] the state's zset of ids (the default queue's pending zset, or the
-- dead-letter zset), or the item id counter for owned items; for pending, KEYS[2] the
-- default queue's held zset (by id) and KEYS[3] the set of the queues other than the
-- default; ARGV[1] state ('p', 'o' or 'd'), ARGV[2] after (exclusive id), ARGV[3]
-- limit, ARGV[4] item key prefix
-- Returns {id, payload, attempts, max, state, last error, queue, enqueued, attempted,
-- finished, ...}, lowest id first; state 'p', 'd' or the owner token, the last error
-- nil when the item has none, the queue nil for the default queue (no `q`), the times
-- as item.lua answers them. Dead-lettered pages are a
-- ZRANGEBYSCORE range (O(log n + page)); the pending page merges the due and the
-- held-back items' ranges of every queue (two per queue, the other queues' zsets
-- derived in-script from their names: O(queues × (log n + page))). Owned items have
-- no index of their own, so their page walks the ids above `after` (O(ids walked)).
local out = {}
local limit = tonumber(ARGV[3])
local function add(id, rec)
  out[#out + 1] = id
  out[#out + 1] = rec[1]
  out[#out + 1] = rec[2]
  out[#out + 1] = rec[3]
  out[#out + 1] = rec[4]
  out[#out + 1] = rec[5]
  for i = 6, 9 do
    out[#out + 1] = rec[i]
  end
end
local function fields(id)
  return redis.call('HMGET', ARGV[4] .. id, 'p', 'a', 'm', 's', 'e', 'q', 'te', 'ta', 'tf')
end
local function range(key)
  return redis.call('ZRANGEBYSCORE', key, '(' .. ARGV[2], '+inf', 'LIMIT', 0, limit)
end
if ARGV[1] == 'd' then
  for _, id in ipairs(range(KEYS[1])) do
    add(id, fields(id))
  end
  return out
end
if ARGV[1] == 'p' then
  -- The ranges are disjoint and each sorted: together, sorted, the first `limit`.
  local ns = prefix_of(KEYS[1])
  local ids = {}
  local function gather(key)
    for _, id in ipairs(range(key)) do
      ids[#ids + 1] = tonumber(id)
    end
  end
  gather(KEYS[1])
  gather(KEYS[2])
  for _, q in ipairs(redis.call('SMEMBERS', KEYS[3])) do
    local due, _, held_ids = queue_keys(ns, named(q))
    gather(due)
    gather(held_ids)
  end
  table.sort(ids)
  for i = 1, math.min(limit, #ids) do
    local id = s(ids[i])
    add(id, fields(id))
  end
  return out
end
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
local id = tonumber(ARGV[2]) + 1
local n = 0
while id <= last and n < limit do
  local rec = fields(s(id))
  if rec[4] and rec[4] ~= 'p' and rec[4] ~= 'd' then
    add(s(id), rec)
    n = n + 1
  end
  id = id + 1
end
return out
