-- renew: KEYS[1] lease, KEYS[2] expiry zset, KEYS[3] token counter
-- ARGV[1] name, ARGV[2] token, ARGV[3] ttl (ms); ttl '0' only checks, changing nothing.
-- Returns 1 renewed, 0 current and live (check only), -1 released, -2 superseded,
-- -3 expired, -4 the store lost its state (no record, and the token is above every
-- token the namespace's counter has handed out: the counter went back).
local now = now_us()
local prefix = prefix_of(KEYS[1])
local rec = redis.call('HMGET', KEYS[1], 't', 'e', 'ttl', 'ep')
if not rec[1] then
  local issued = tonumber(redis.call('GET', KEYS[3]) or '0')
  if tonumber(ARGV[2]) > issued then
    return -4
  end
  return -1
end
if rec[1] ~= ARGV[2] then
  return -2
end
if now >= judged(prefix, rec[2], rec[3], rec[4], now) then
  return -3
end
if ARGV[3] == '0' then
  return 0
end
local exp = s(now + tonumber(ARGV[3]) * 1000)
redis.call('HSET', KEYS[1], 'e', exp, 'ttl', ARGV[3], 'ep', stamp(prefix))
redis.call('ZADD', KEYS[2], exp, ARGV[1])
return 1
