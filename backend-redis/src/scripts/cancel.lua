-- cancel: KEYS[1] item, KEYS[2] dead-letter zset
-- ARGV[1] id
-- Removes the item (its hash, last error `e` included) unless a token owns it: a
-- pending one from its own queue's zsets (derived in-script from its `q`, see
-- `queue_keys`; and from `qheld` for a queue other than the default), a dead-lettered
-- one from the dead-letter zset and its queue's count. Returns its state before: 'p'
-- (pending, due or held back) or 'd' (dead-lettered) when it was removed, the owner's
-- token when it is owned (left alone), nil when there is no such item.
local rec = redis.call('HMGET', KEYS[1], 's', 'q')
local state = rec[1]
if not state then
  return false
end
local ns = prefix_of(KEYS[1])
local q = named(rec[2])
if state == 'p' then
  local pending, held, held_ids = queue_keys(ns, q)
  redis.call('ZREM', pending, ARGV[1])
  redis.call('ZREM', held, ARGV[1])
  redis.call('ZREM', held_ids, ARGV[1])
  if q then
    redis.call('ZREM', ns .. 'qheld', ARGV[1])
  end
elseif state == 'd' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  if q then
    redis.call('HINCRBY', ns .. 'qdl', q, -1)
  end
else
  return state
end
redis.call('DEL', KEYS[1])
return state
