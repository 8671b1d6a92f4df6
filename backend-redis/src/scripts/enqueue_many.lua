-- enqueue_many: KEYS[1] item id counter, KEYS[2] the queue's pending zset, KEYS[3] its
-- held zset (by due µs), KEYS[4] its held zset (by id), KEYS[5] the held items of
-- every queue other than the default (zset by due µs), KEYS[6] the set of the queues
-- other than the default
-- ARGV[1] item key prefix ("liveness:{ns}:i:"), ARGV[2] max attempts, ARGV[3] delay µs
-- ('0' for none), ARGV[4] the queue's name, ARGV[5..] the payloads (at most max_batch
-- of them: the core checks the batch).
-- Adds one pending item per payload, as enqueue.lua does, in one step: the ids are
-- consecutive, in payload order; with a delay all are held back until the server's
-- now + the delay (each one's `w`, when it becomes claimable: now, or that due time;
-- its `te`, when it was enqueued: now, the same reading).
-- Item keys are derived in-script (same hash tag, same slot). An item of a queue
-- other than the default keeps its name in `q`, and the name goes into the set of
-- queues (once for the batch). One message on the pending signal for the whole batch
-- (what `signal_pending` of prelude_declare_dead.lua sends, written out: this script
-- has the renewal prelude only, so it names the default queue in full too). Returns
-- the first id.
local n = #ARGV - 4
local q = ARGV[4]
if q == 'default' then
  q = nil
end
local first = redis.call('INCRBY', KEYS[1], n) - n + 1
local by_id, by_due = {}, {}
local now = now_us()
local since = s(now + tonumber(ARGV[3]))
local at = s(now)
local due = '0'
if ARGV[3] ~= '0' then
  due = since
end
for i = 1, n do
  local id = s(first + i - 1)
  if q then
    redis.call('HSET', ARGV[1] .. id, 'p', ARGV[i + 4], 'a', '0', 'm', ARGV[2], 's', 'p',
      'w', since, 'te', at, 'q', q)
  else
    redis.call('HSET', ARGV[1] .. id, 'p', ARGV[i + 4], 'a', '0', 'm', ARGV[2], 's', 'p',
      'w', since, 'te', at)
  end
  by_id[2 * i - 1] = id
  by_id[2 * i] = id
  by_due[2 * i - 1] = due
  by_due[2 * i] = id
end
if due == '0' then
  redis.call('ZADD', KEYS[2], unpack(by_id))
else
  redis.call('ZADD', KEYS[3], unpack(by_due))
  redis.call('ZADD', KEYS[4], unpack(by_id))
  if q then
    redis.call('ZADD', KEYS[5], unpack(by_due))
  end
end
if q then
  redis.call('SADD', KEYS[6], q)
end
redis.pcall('SPUBLISH', prefix_of(ARGV[1]) .. 'pending-signal', 'e')
return first
