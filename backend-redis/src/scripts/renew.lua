-- renew: KEYS[1] lease, KEYS[2] expiry zset, KEYS[3] token counter (read when the
-- record is missing); ARGV[1] name, ARGV[2] token, ARGV[3] ttl (ms). Returns
-- renew_one's code (prelude).
local batch = batch_of(KEYS[1])
local code = renew_one(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], now_us(), batch)
moved(batch)
return code
