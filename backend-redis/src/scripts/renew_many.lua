-- renew_many: for lease i (1-based), KEYS[2i-1] lease, KEYS[2i] expiry zset;
-- ARGV[3i-2] name, ARGV[3i-1] token, ARGV[3i] ttl (ms; '0' only checks).
-- Returns one code per lease, as renew.lua: 1 renewed, 0 current and live (check
-- only), -1 released, -2 superseded, -3 expired, -4 the store lost its state. One
-- server instant for all. Per namespace, the epoch stamp and the token counter are
-- read once for the batch; a renewal that changes neither ttl nor epoch writes only
-- the expiry: three commands per lease (read, write, index).
local now = now_us()
local out = {}
local stamps, issued = {}, {}
for i = 1, #ARGV / 3 do
  local lease, expiry = KEYS[2 * i - 1], KEYS[2 * i]
  local name, token, ttl = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  local prefix = prefix_of(lease)
  local rec = redis.call('HMGET', lease, 't', 'e', 'ttl', 'ep')
  local code
  if not rec[1] then
    if issued[prefix] == nil then
      issued[prefix] = tonumber(redis.call('GET', prefix .. 'tokens') or '0')
    end
    if tonumber(token) > issued[prefix] then
      code = -4
    else
      code = -1
    end
  elseif rec[1] ~= token then
    code = -2
  elseif now >= judged(prefix, rec[2], rec[3], rec[4], now) then
    code = -3
  elseif ttl == '0' then
    code = 0
  else
    local exp = s(now + tonumber(ttl) * 1000)
    local ep = stamps[prefix]
    if ep == nil then
      ep = stamp(prefix)
      stamps[prefix] = ep
    end
    if rec[3] == ttl and rec[4] == ep then
      redis.call('HSET', lease, 'e', exp)
    else
      redis.call('HSET', lease, 'e', exp, 'ttl', ttl, 'ep', ep)
    end
    redis.call('ZADD', expiry, exp, name)
    code = 1
  end
  out[i] = code
end
return out
