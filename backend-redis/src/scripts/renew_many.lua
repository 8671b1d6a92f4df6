-- renew_many: leases in runs of one space each. For run r (1-based): KEYS[r] the
-- space's expiry zset; in ARGV, in order, per run: the space's lease key prefix
-- ("liveness:{ns}:l:<space>/"), the run's lease count n, then n times: name, token,
-- ttl (ms). Each lease key is derived in-script (prefix and name: the same hash
-- slot). Every lease is in one namespace (the calling store handle's).
-- Returns one renew_one code (prelude) per lease, in order; a single renewal is a batch
-- of one.
-- One server instant for all; the epoch stamp, the token counter and each ttl's
-- expiry text are read or made once for the batch, and each index moved by one ZADD.
local now = now_us()
local batch = batch_of(ARGV[1])
local out = {}
local a = 1
for r = 1, #KEYS do
  local prefix, expiry = ARGV[a], KEYS[r]
  local n = tonumber(ARGV[a + 1])
  a = a + 2
  for _ = 1, n do
    out[#out + 1] = renew_one(prefix .. ARGV[a], expiry, ARGV[a], ARGV[a + 1], ARGV[a + 2],
      now, batch)
    a = a + 3
  end
end
moved(batch)
return out
