-- cancel: KEYS[1] item, KEYS[2] dead-letter zset, KEYS[3] the dead letters by when
-- dead-lettered
-- ARGV[1] id
-- Removes the item (its hash, last error `e` included) unless a token owns it: a
-- pending one from its own queue's zsets (derived in-script from its `q`, see
-- `queue_keys`; and from `qheld` for a queue other than the default), a dead-lettered
-- one from both dead-letter zsets and its queue's count (`forget_dead_letter`, as the
-- dead-letter retention removes one). Returns its state before: 'p' (pending, due or
-- held back) or 'd' (dead-lettered) when it was removed, the owner's token when it is
-- owned (left alone), nil when there is no such item.
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
  forget_dead_letter(ns, KEYS[2], KEYS[3], KEYS[1], ARGV[1], q)
  return state
else
  return state
end
redis.call('DEL', KEYS[1])
return state
