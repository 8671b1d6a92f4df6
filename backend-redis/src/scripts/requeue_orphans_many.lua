-- requeue_orphans_many: KEYS[1] dead set, KEYS[2] owned counter, KEYS[3] pending zset,
-- KEYS[4] dead-letter zset, KEYS[4+i] owned zset of token i (1-based);
-- ARGV[1] item key prefix, ARGV[2] the most riding members of a dead session one token
-- retires (max_batch), ARGV[2+i] token i.
-- Each token is swept by the prelude's requeue_token, with a budget of its own (at
-- most ARGV[2] riding members of a dead session retired); a single token is a batch
-- of one.
-- The script starts a token only while it has retired fewer than ARGV[2] members in
-- all (so fewer than twice that per script) and answers the tokens it swept, a prefix
-- of them, at least the first: the caller sends the rest again.
-- Returns one reply per token swept, as requeue_token answers it: {{requeued ids},
-- {dead-lettered ids}, {key text, holder, token, ...} of the retired members}.
local out = {}
local batch = tonumber(ARGV[2])
local retired = 0
for i = 1, #ARGV - 2 do
  if retired >= batch then
    break
  end
  local budget = {n = batch}
  out[i] = requeue_token(KEYS[1], KEYS[4 + i], KEYS[2], KEYS[3], KEYS[4], ARGV[2 + i], ARGV[1],
    budget)
  retired = retired + batch - budget.n
end
return out
