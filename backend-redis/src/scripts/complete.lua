-- complete: KEYS[1] item, KEYS[2] owned zset of the token, KEYS[3] owned counter
-- ARGV[1] id, ARGV[2] token
-- Returns 1 when the token owned the item (now deleted), 0 (fenced) otherwise.
if redis.call('HGET', KEYS[1], 's') ~= ARGV[2] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DECR', KEYS[3])
return 1
