-- join_session_many: KEYS[1] session lease, KEYS[2] token counter, KEYS[3] dead set;
-- for entry i (1-based), KEYS[2i+2] member lease, KEYS[2i+3] its expiry zset
-- ARGV[1] session token, ARGV[2] death retention; for entry i, ARGV[3i] name,
-- ARGV[3i+1] holder, ARGV[3i+2] key text "space/name".
-- The session is judged once (session_until: as a renewal judges it); then each entry
-- joins in order with the prelude's join_one (a later entry on the same key sees what
-- an earlier one took); a single join is a batch of one. Returns {-1|-2|-3} when the
-- session is released / superseded / expired (nothing is taken), else {1, replies}:
-- one reply per entry, as join_one answers ({0, holder, token} when a live lease holds
-- the key, {1, token, µs the session has left} when the member joined). One server
-- instant for all.
local now = now_us()
local code, ttl, until_us = session_until(KEYS[1], ARGV[1], now)
if code < 0 then
  return {code}
end
local out = {}
for i = 1, (#ARGV - 2) / 3 do
  out[i] = join_one(KEYS[1], ARGV[1], ttl, until_us, KEYS[2 * i + 2], KEYS[2 * i + 3],
    KEYS[2], KEYS[3], ARGV[3 * i], ARGV[3 * i + 1], ARGV[3 * i + 2], ARGV[2], now)
end
return {1, out}
