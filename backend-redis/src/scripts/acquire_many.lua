-- acquire_many: KEYS[1] token counter, KEYS[2] dead set; for entry i (1-based),
-- KEYS[2i+1] lease, KEYS[2i+2] expiry zset; ARGV[1] death retention; ARGV[4i-2]
-- name, ARGV[4i-1] holder, ARGV[4i] ttl (ms), ARGV[4i+1] key text "space/name".
-- Applies each entry in order with the prelude's acquire_one (a later entry on the
-- same key sees what an earlier one took); a single acquire is a batch of one.
-- Returns one reply per entry: {1, token}, or {0, holder, token} when a live lease
-- holds the key. One server instant for all.
local now = now_us()
local out = {}
for i = 1, (#ARGV - 1) / 4 do
  out[i] = acquire_one(KEYS[2 * i + 1], KEYS[2 * i + 2], KEYS[1], KEYS[2], ARGV[4 * i - 2],
    ARGV[4 * i - 1], ARGV[4 * i], ARGV[4 * i + 1], ARGV[1], now)
end
return out
