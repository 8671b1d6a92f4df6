-- Shared by every script (prepended at compile time).
-- Times are microseconds of the Redis server's own clock (TIME), read inside the
-- script: the client never sends a timestamp. Numbers that go into keys or values are
-- written with '%.0f' so they stay exact decimal integers (Lua numbers are doubles,
-- exact up to 2^53).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function s(n)
  return string.format('%.0f', n)
end

-- Removes a lease record and puts (key, token) in the dead set.
local function retire(lease_key, expiry_key, dead_key, name, token, key_text)
  redis.call('DEL', lease_key)
  redis.call('ZREM', expiry_key, name)
  redis.call('ZADD', dead_key, token, token .. ':' .. key_text)
end

-- Moves an owned item back to pending, or to the dead-letter set when it is out of
-- attempts or retry is false. Returns 1 (pending) or 2 (dead-lettered).
local function hand_back(item_key, id, retry, pending_key, dl_key)
  local rec = redis.call('HMGET', item_key, 'a', 'm')
  if retry and tonumber(rec[1]) < tonumber(rec[2]) then
    redis.call('HSET', item_key, 's', 'p')
    redis.call('ZADD', pending_key, id, id)
    return 1
  end
  redis.call('HSET', item_key, 's', 'd')
  redis.call('ZADD', dl_key, id, id)
  return 2
end

