-- sweep_many: KEYS[1] dead set, KEYS[2] owned counter, KEYS[3] dead-letter zset,
-- KEYS[4] the dead letters by when dead-lettered, KEYS[4+i] owned zset of token i
-- (1-based);
-- ARGV[1] item key prefix, ARGV[2] the most riding members of a dead session the sweep
-- of one token declares dead (max_batch), ARGV[3] the dead-letter retention in ms,
-- ARGV[3+i] token i.
-- Each token is swept by the prelude's sweep_token, with a budget of its own (at most
-- ARGV[2] riding members of a dead session declared dead); a single token is a batch
-- of one. Each item goes back to its own queue (its pending zset derived in-script
-- from its `q`); the counts of queues other than the default move once per queue for
-- the whole script (`tally_write`).
-- The script starts a token only while it has declared fewer than ARGV[2] members dead
-- in all (so fewer than twice that per script) and answers the tokens it swept, a
-- prefix of them, at least the first: the caller sends the rest again. A script that
-- requeued at least one item signals it once (`signal_pending`); one that
-- dead-lettered at least one removes the expired dead letters once, at most
-- DEAD_LETTER_TRIM (`trim_dead_letters`).
-- Returns one reply per token swept, as sweep_token answers it: {{requeued ids},
-- {dead-lettered ids}, {key text, holder, token, ...} of the members declared dead}.
local out = {}
local batch = tonumber(ARGV[2])
local declared = 0
local requeued = 0
local dead = 0
local tally = {qowned = {}, qdl = {}}
for i = 1, #ARGV - 3 do
  if declared >= batch then
    break
  end
  local budget = {n = batch}
  out[i] = sweep_token(KEYS[1], KEYS[4 + i], KEYS[2], KEYS[3], KEYS[4], ARGV[3 + i], ARGV[1],
    budget, tally)
  declared = declared + batch - budget.n
  requeued = requeued + #out[i][1]
  dead = dead + #out[i][2]
end
local ns = prefix_of(ARGV[1])
tally_write(ns, tally)
if requeued > 0 then
  signal_pending(ns, 's')
end
if dead > 0 then
  trim_dead_letters(ns, KEYS[3], KEYS[4], now_us(), ARGV[3])
end
return out
