-- reap_many: KEYS[1] dead set; for entry i (1-based), KEYS[2i] lease, KEYS[2i+1]
-- expiry zset; ARGV[1] death retention; ARGV[3i-1] name, ARGV[3i] token,
-- ARGV[3i+1] key text.
-- Each entry: iff the lease with that token is there and expired by the server clock
-- (a riding member: its session expired or gone), declares it dead (dead set, death
-- record, cause reaped) and answers 1, else 0; a single reap is a batch of one. Returns one
-- 1/0 per entry. One server instant for all.
local now = now_us()
local out = {}
for i = 1, (#ARGV - 1) / 3 do
  local lease, expiry = KEYS[2 * i], KEYS[2 * i + 1]
  local name, token, text = ARGV[3 * i - 1], ARGV[3 * i], ARGV[3 * i + 1]
  local rec = redis.call('HMGET', lease, 't', 'e', 'h', 'ttl', 'ep', 's', 'st')
  if rec[1] == token and now >= expiry_of(prefix_of(lease), rec[2], rec[4], rec[5], rec[6], rec[7],
      now) then
    declare_dead(lease, expiry, KEYS[1], name, token, text, rec[3], now, '0', ARGV[1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
