-- requeue_orphans: KEYS[1] dead set, KEYS[2] owned zset of the token,
--                  KEYS[3] owned counter, KEYS[4] pending zset, KEYS[5] dead-letter zset
-- ARGV[1] token, ARGV[2] item key prefix (item keys derived in-script), ARGV[3] the
-- most riding members of a dead session to retire (max_batch)
-- Acts only when the token is in the dead set. Returns {{requeued ids},
-- {dead-lettered ids}, {key text, holder, token, ...} of the retired members}.
return requeue_token(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[2],
  {n = tonumber(ARGV[3])})
