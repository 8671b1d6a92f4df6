-- Shared by the scripts that meet items of any queue outside the hot path (the
-- operator's scripts and sweep_many; prepended at compile time after prelude.lua and
-- prelude_declare_dead.lua: `lua!(queues "<name>")`). The claim, enqueue and finish
-- scripts and the prelude's hand_back derive a queue's keys inline instead: every
-- `local function` of a script's prefix is a closure made anew on each call.

-- The name of a queue other than the default, from an item's `q` (false when absent:
-- the default queue, as every item of an earlier version) or a member of the set of
-- queues; nil for the default queue.
local function named(q)
  if q and q ~= 'default' then
    return q
  end
  return nil
end

-- The keys of queue `q` (a name, or nil for the default queue) under the namespace
-- prefix `ns`: its pending zset, its held zset by due µs and by id. The default
-- queue's are the keys earlier versions kept every item in; another queue's carry
-- its name (`Keys::queue_pending` and the next two).
local function queue_keys(ns, q)
  if q then
    return ns .. 'qp:' .. q, ns .. 'qh:' .. q, ns .. 'qhi:' .. q
  end
  return ns .. 'pending', ns .. 'held', ns .. 'heldi'
end

-- Adds `delta` to the count `field` ('qowned' or 'qdl': the hash of that name under
-- the prefix) of queue `q` in `tally`; nothing for the default queue (nil), whose
-- counts are the totals less the other queues'. `tally_write` writes it.
local function tally_add(tally, field, q, delta)
  if not q then
    return
  end
  local per = tally[field]
  if not per then
    per = {}
    tally[field] = per
  end
  per[q] = (per[q] or 0) + delta
end

-- Writes what `tally_add` (or the prelude's sweep_token) gathered in `tally[field][q]`:
-- one HINCRBY per queue and count that moved.
local function tally_write(ns, tally)
  for field, per in pairs(tally) do
    for q, delta in pairs(per) do
      if delta ~= 0 then
        redis.call('HINCRBY', ns .. field, q, delta)
      end
    end
  end
end
