-- release: KEYS[1] lease, KEYS[2] expiry zset, KEYS[3] dead set
-- ARGV[1] name, ARGV[2] token, ARGV[3] key text, ARGV[4] death retention
-- Returns 1 when the token was current (live or expired) and the lease is gone, else 0.
local rec = redis.call('HMGET', KEYS[1], 't', 'h')
if rec[1] == ARGV[2] then
  declare_dead(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], rec[2], now_us(), '1', ARGV[4])
  return 1
end
return 0
