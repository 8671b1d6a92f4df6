-- fail: KEYS[1] item, KEYS[2] owned zset of the token, KEYS[3] owned counter,
--       KEYS[4] pending zset, KEYS[5] dead-letter zset
-- ARGV[1] id, ARGV[2] token, ARGV[3] retry ('1' or '0')
-- Returns 0 (fenced), 1 (back to pending) or 2 (dead-lettered).
if redis.call('HGET', KEYS[1], 's') ~= ARGV[2] then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DECR', KEYS[3])
return hand_back(KEYS[1], ARGV[1], ARGV[3] == '1', KEYS[4], KEYS[5])
