-- dead_letters: KEYS[1] dead-letter zset; ARGV[1] limit, ARGV[2] item key prefix
-- Returns {id, payload, attempts, max, ...}, lowest id first.
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
local out = {}
for _, id in ipairs(ids) do
  local rec = redis.call('HMGET', ARGV[2] .. id, 'p', 'a', 'm')
  out[#out + 1] = id
  out[#out + 1] = rec[1]
  out[#out + 1] = rec[2]
  out[#out + 1] = rec[3]
end
return out
