-- deaths: KEYS[1] the death seq counter (<prefix>dseq; records are <prefix>d:<seq>)
-- ARGV[1] before (exclusive; '' for the newest), ARGV[2] limit
-- Returns {seq, key text, holder, token, at_us, cause, requeued|'', dead_lettered|'',
-- members|'', ...}
-- newest first. Records are contiguous by seq (the oldest ones are dropped first), so
-- the walk stops at the first missing one: O(page).
local prefix = string.sub(KEYS[1], 1, #KEYS[1] - 4)
local seq = tonumber(redis.call('GET', KEYS[1]) or '0')
if ARGV[1] ~= '' and tonumber(ARGV[1]) - 1 < seq then
  seq = tonumber(ARGV[1]) - 1
end
local out = {}
local limit = tonumber(ARGV[2])
local n = 0
while seq >= 1 and n < limit do
  local rec = redis.call('HMGET', prefix .. 'd:' .. s(seq), 'k', 'h', 't', 'at', 'c', 'r', 'dl', 'm')
  if not rec[1] then
    break
  end
  out[#out + 1] = s(seq)
  for i = 1, 5 do
    out[#out + 1] = rec[i]
  end
  out[#out + 1] = rec[6] or ''
  out[#out + 1] = rec[7] or ''
  out[#out + 1] = rec[8] or ''
  n = n + 1
  seq = seq - 1
end
return out
