-- join_session: KEYS[1] session lease, KEYS[2] member lease, KEYS[3] member's expiry
-- zset, KEYS[4] token counter, KEYS[5] dead set
-- ARGV[1] session token, ARGV[2] member name, ARGV[3] holder, ARGV[4] key text
-- "space/name", ARGV[5] death retention
-- Returns {-1|-2|-3} when the session is released / superseded / expired (as renew
-- judges it), else the prelude's join_one: {0, holder, token} when a live lease holds
-- the key, {1, token, µs the session has left} when the member joined.
local now = now_us()
local code, ttl, until_us = session_until(KEYS[1], ARGV[1], now)
if code < 0 then
  return {code}
end
return join_one(KEYS[1], ARGV[1], ttl, until_us, KEYS[2], KEYS[3], KEYS[4], KEYS[5],
  ARGV[2], ARGV[3], ARGV[4], ARGV[5], now)
