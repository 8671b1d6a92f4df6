-- reap: KEYS[1] lease, KEYS[2] expiry zset, KEYS[3] dead set
-- ARGV[1] name, ARGV[2] token, ARGV[3] key text, ARGV[4] death retention
-- Returns 1 iff the lease with that token was there and expired by the server clock
-- (a riding member: its session expired or gone).
local now = now_us()
local rec = redis.call('HMGET', KEYS[1], 't', 'e', 'h', 'ttl', 'ep', 's', 'st')
if rec[1] == ARGV[2] and now >= expiry_of(prefix_of(KEYS[1]), rec[2], rec[4], rec[5], rec[6], rec[7],
  now) then
  retire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], rec[3], now, '0', ARGV[4])
  return 1
end
return 0
