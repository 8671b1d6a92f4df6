-- cancel: KEYS[1] item, KEYS[2] pending zset, KEYS[3] held zset (by due time),
-- KEYS[4] held zset (by id), KEYS[5] dead-letter zset
-- ARGV[1] id
-- Removes the item (its hash, last error `e` included) unless a token owns it. Returns its state before: 'p' (pending,
-- due or held back) or 'd' (dead-lettered) when it was removed, the owner's token
-- when it is owned (left alone), nil when there is no such item.
local state = redis.call('HGET', KEYS[1], 's')
if not state then
  return false
end
if state == 'p' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
elseif state == 'd' then
  redis.call('ZREM', KEYS[5], ARGV[1])
else
  return state
end
redis.call('DEL', KEYS[1])
return state
