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


-- Requeues the items of dead `token` (in the dead set `dead_key`, owning `owned_key`):
-- each back to pending or, out of attempts, to the dead-letter set; forgets the token.
-- Acts only when the token is in the dead set. Returns {{requeued ids}, {dead-lettered ids}}.
local function requeue_token(dead_key, owned_key, count_key, pending_key, dl_key, token, prefix)
  local requeued, dead = {}, {}
  if #redis.call('ZRANGEBYSCORE', dead_key, token, token) == 0 then
    return {requeued, dead}
  end
  redis.call('ZREMRANGEBYSCORE', dead_key, token, token)
  local ids = redis.call('ZRANGE', owned_key, 0, -1)
  redis.call('DEL', owned_key)
  for _, id in ipairs(ids) do
    if hand_back(prefix .. id, id, true, pending_key, dl_key) == 1 then
      requeued[#requeued + 1] = id
    else
      dead[#dead + 1] = id
    end
  end
  if #ids > 0 then
    redis.call('DECRBY', count_key, #ids)
  end
  return {requeued, dead}
end
