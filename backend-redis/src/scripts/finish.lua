-- finish: KEYS[1] item, KEYS[2] owned zset of the token, KEYS[3] owned counter,
--         KEYS[4] dead-letter zset, KEYS[5] the dead letters by when dead-lettered
-- ARGV[1] id, ARGV[2] token, ARGV[3] outcome ('c' completed, 'r' retry, 'd' dead
-- letter), ARGV[4] a retry's wait in µs ('0': due at once; else held back until the
-- server's now + the wait, see `hold`), ARGV[5] the failure's error text ('' for
-- none: the item's `e` stays as it was), ARGV[6] the dead-letter retention in ms
-- Returns 0 (fenced: the token does not own the item; nothing changes), 1 (back to
-- pending), 2 (dead-lettered) or 3 (completed: the item is deleted, its `e` with it).
-- An item handed back goes to its own queue's keys (`hand_back`, derived in-script
-- from its `q`); an item of a queue other than the default moves that queue's counts
-- (`qowned`, `qdl`: one HINCRBY each that moves). An item handed back (pending or
-- dead-lettered) gets the server's now as its `tf` (its attempt ended without
-- completing), in the HSET that hands it back (the now a retry's wait counts from),
-- and with a text keeps it in `e`, in this same step. Back to pending (held back or
-- not) is signalled (`signal_pending`). A dead-lettered one then removes the expired
-- dead letters, at most DEAD_LETTER_TRIM (`trim_dead_letters`): a completion and a
-- retry run what they ran before.
local rec = redis.call('HMGET', KEYS[1], 's', 'q')
if rec[1] ~= ARGV[2] then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DECR', KEYS[3])
if ARGV[3] == 'c' then
  redis.call('DEL', KEYS[1])
  if rec[2] and rec[2] ~= 'default' then
    redis.call('HINCRBY', prefix_of(KEYS[1]) .. 'qowned', rec[2], -1)
  end
  return 3
end
local now = now_us()
local due
if ARGV[4] ~= '0' then
  due = now + tonumber(ARGV[4])
end
local state, q = hand_back(KEYS[1], ARGV[1], ARGV[3] == 'r', KEYS[4], KEYS[5], due, now)
if q then
  redis.call('HINCRBY', prefix_of(KEYS[1]) .. 'qowned', q, -1)
  if state == 2 then
    redis.call('HINCRBY', prefix_of(KEYS[1]) .. 'qdl', q, 1)
  end
end
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'e', ARGV[5])
end
if state == 1 then
  signal_pending(prefix_of(KEYS[1]), 'r')
else
  trim_dead_letters(prefix_of(KEYS[1]), KEYS[4], KEYS[5], now, ARGV[6])
end
return state
