-- requeue_orphans: KEYS[1] dead set, KEYS[2] owned zset of the token,
--                  KEYS[3] owned counter, KEYS[4] pending zset, KEYS[5] dead-letter zset
-- ARGV[1] token, ARGV[2] item key prefix (item keys derived in-script)
-- Acts only when the token is in the dead set. Returns {{requeued ids}, {dead-lettered ids}}.
if #redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], ARGV[1]) == 0 then
  return {{}, {}}
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], ARGV[1], ARGV[1])
local ids = redis.call('ZRANGE', KEYS[2], 0, -1)
redis.call('DEL', KEYS[2])
local requeued, dead = {}, {}
for _, id in ipairs(ids) do
  if hand_back(ARGV[2] .. id, id, true, KEYS[4], KEYS[5]) == 1 then
    requeued[#requeued + 1] = id
  else
    dead[#dead + 1] = id
  end
end
if #ids > 0 then
  redis.call('DECRBY', KEYS[3], #ids)
end
return {requeued, dead}
