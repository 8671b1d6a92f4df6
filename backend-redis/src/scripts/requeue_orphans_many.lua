-- requeue_orphans_many: KEYS[1] dead set, KEYS[2] owned counter, KEYS[3] pending zset,
-- KEYS[4] dead-letter zset, KEYS[4+i] owned zset of token i (1-based);
-- ARGV[1] item key prefix, ARGV[1+i] token i.
-- Returns one {{requeued ids}, {dead-lettered ids}} per token, as requeue_orphans.lua.
local out = {}
for i = 1, #ARGV - 1 do
  out[i] = requeue_token(KEYS[1], KEYS[4 + i], KEYS[2], KEYS[3], KEYS[4], ARGV[1 + i], ARGV[1])
end
return out
