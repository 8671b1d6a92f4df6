-- requeue_orphans_many: KEYS[1] dead set, KEYS[2] owned counter, KEYS[3] pending zset,
-- KEYS[4] dead-letter zset, KEYS[4+i] owned zset of token i (1-based);
-- ARGV[1] item key prefix, ARGV[2] the most riding members of dead sessions to retire
-- in the whole call (max_batch), ARGV[2+i] token i.
-- Returns one reply per token, as requeue_orphans.lua.
local out = {}
local budget = {n = tonumber(ARGV[2])}
for i = 1, #ARGV - 2 do
  out[i] = requeue_token(KEYS[1], KEYS[4 + i], KEYS[2], KEYS[3], KEYS[4], ARGV[2 + i], ARGV[1],
    budget)
end
return out
