-- acquire: KEYS[1] lease, KEYS[2] expiry zset, KEYS[3] token counter, KEYS[4] dead set
-- ARGV[1] name, ARGV[2] holder, ARGV[3] ttl (ms), ARGV[4] key text "space/name",
-- ARGV[5] death retention
-- Returns {1, token} or {0, holder, token} when a live lease holds the key.
return acquire_one(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4],
  ARGV[5], now_us())
