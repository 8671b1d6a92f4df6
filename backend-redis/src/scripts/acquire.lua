-- acquire: KEYS[1] lease, KEYS[2] expiry zset, KEYS[3] token counter, KEYS[4] dead set
-- ARGV[1] name, ARGV[2] holder, ARGV[3] ttl (ms), ARGV[4] key text "space/name",
-- ARGV[5] death retention
-- Returns {1, token} or {0, holder, token} when a live lease holds the key.
local now = now_us()
local prefix = prefix_of(KEYS[1])
local rec = redis.call('HMGET', KEYS[1], 'h', 't', 'e', 'ttl', 'ep')
if rec[2] then
  if now < judged(prefix, rec[3], rec[4], rec[5], now) then
    return {0, rec[1], rec[2]}
  end
  retire(KEYS[1], KEYS[2], KEYS[4], ARGV[1], rec[2], ARGV[4], rec[1], now, '2', ARGV[5])
end
redis.call('ZADD', members_key(ns_prefix(KEYS[4]), ARGV[4]), 0, ARGV[1])
local token = s(redis.call('INCR', KEYS[3]))
local exp = s(now + tonumber(ARGV[3]) * 1000)
redis.call('HSET', KEYS[1], 'h', ARGV[2], 't', token, 'ttl', ARGV[3], 'e', exp,
  'ep', stamp(prefix))
redis.call('ZADD', KEYS[2], exp, ARGV[1])
return {1, token}
