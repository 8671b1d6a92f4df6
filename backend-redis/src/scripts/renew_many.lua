-- renew_many: for lease i (1-based), KEYS[2i-1] lease, KEYS[2i] expiry zset;
-- ARGV[3i-2] name, ARGV[3i-1] token, ARGV[3i] ttl (ms; '0' only checks). Every lease
-- is in one namespace (the calling store handle's).
-- Returns one renew_one code (prelude) per lease, as renew.lua does for one. One
-- server instant for all; the epoch stamp, the token counter and each ttl's expiry
-- text are read or made once for the batch, and each index moved by one ZADD.
local now = now_us()
local batch = batch_of(KEYS[1])
local out = {}
for i = 1, #ARGV / 3 do
  out[i] = renew_one(KEYS[2 * i - 1], KEYS[2 * i], ARGV[3 * i - 2], ARGV[3 * i - 1],
    ARGV[3 * i], now, batch)
end
moved(batch)
return out
