-- renew_many: for lease i (1-based), KEYS[2i-1] lease, KEYS[2i] expiry zset;
-- ARGV[3i-2] name, ARGV[3i-1] token, ARGV[3i] ttl (ms; '0' only checks).
-- Returns one code per lease, as renew.lua: 1 renewed, 0 current and live (check
-- only), -1 released, -2 superseded, -3 expired. One server instant for all.
local now = now_us()
local out = {}
for i = 1, #ARGV / 3 do
  local lease, expiry = KEYS[2 * i - 1], KEYS[2 * i]
  local name, token, ttl = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  local prefix = prefix_of(lease)
  local rec = redis.call('HMGET', lease, 't', 'e', 'ttl', 'ep')
  local code
  if not rec[1] then
    code = -1
  elseif rec[1] ~= token then
    code = -2
  elseif now >= judged(prefix, rec[2], rec[3], rec[4], now) then
    code = -3
  elseif ttl == '0' then
    code = 0
  else
    local exp = s(now + tonumber(ttl) * 1000)
    redis.call('HSET', lease, 'e', exp, 'ttl', ttl, 'ep', stamp(prefix))
    redis.call('ZADD', expiry, exp, name)
    code = 1
  end
  out[i] = code
end
return out
