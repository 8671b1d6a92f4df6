-- join_session: KEYS[1] session lease, KEYS[2] member lease, KEYS[3] member's expiry
-- zset, KEYS[4] token counter, KEYS[5] dead set
-- ARGV[1] session token, ARGV[2] member name, ARGV[3] holder, ARGV[4] key text
-- "space/name", ARGV[5] death retention
-- Returns {-1|-2|-3} when the session is released / superseded / expired (as renew
-- judges it), {0, holder, token} when a live lease holds the key, else {1, token,
-- µs the session has left}. The member's record has the session's key `s` and token
-- `st` and no expiry of its own (nor a place in the expiry index); its key text goes
-- into the session's member set `sm:<session token>`.
local now = now_us()
local prefix = prefix_of(KEYS[1])
local session = redis.call('HMGET', KEYS[1], 't', 'e', 'ttl', 'ep')
if not session[1] then
  return {-1}
end
if session[1] ~= ARGV[1] or not session[2] then
  return {-2}
end
local until_us = judged(prefix, session[2], session[3], session[4], now)
if now >= until_us then
  return {-3}
end
local rec = redis.call('HMGET', KEYS[2], 'h', 't', 'e', 'ttl', 'ep', 's', 'st')
if rec[2] then
  if now < expiry_of(prefix, rec[3], rec[4], rec[5], rec[6], rec[7], now) then
    return {0, rec[1], rec[2]}
  end
  retire(KEYS[2], KEYS[3], KEYS[5], ARGV[2], rec[2], ARGV[4], rec[1], now, '2', ARGV[5])
end
redis.call('ZADD', members_key(ns_prefix(KEYS[5]), ARGV[4]), 0, ARGV[2])
local token = issue_token(KEYS[4], prefix, now)
redis.call('HSET', KEYS[2], 'h', ARGV[3], 't', token, 'ttl', session[3], 's', KEYS[1],
  'st', ARGV[1])
redis.call('SADD', prefix .. 'sm:' .. ARGV[1], ARGV[4])
return {1, token, until_us - now}
