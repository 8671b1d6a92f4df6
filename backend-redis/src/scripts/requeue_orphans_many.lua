-- requeue_orphans_many: KEYS[1] dead set, KEYS[2] owned counter, KEYS[3] pending zset,
-- KEYS[4] dead-letter zset, KEYS[4+i] owned zset of token i (1-based);
-- ARGV[1] item key prefix, ARGV[1+i] token i.
-- Returns one {{requeued ids}, {dead-lettered ids}} per token, as requeue_orphans.lua.
local out = {}
for i = 1, #ARGV - 1 do
  local token, owned = ARGV[1 + i], KEYS[4 + i]
  local requeued, dead = {}, {}
  if #redis.call('ZRANGEBYSCORE', KEYS[1], token, token) > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], token, token)
    local ids = redis.call('ZRANGE', owned, 0, -1)
    redis.call('DEL', owned)
    for _, id in ipairs(ids) do
      if hand_back(ARGV[1] .. id, id, true, KEYS[3], KEYS[4]) == 1 then
        requeued[#requeued + 1] = id
      else
        dead[#dead + 1] = id
      end
    end
    if #ids > 0 then
      redis.call('DECRBY', KEYS[2], #ids)
    end
  end
  out[i] = {requeued, dead}
end
return out
