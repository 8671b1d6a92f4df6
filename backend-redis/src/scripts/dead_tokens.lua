-- dead_tokens: KEYS[1] dead set; ARGV[1] limit
-- Returns the entries "token:space/name", lowest token first.
return redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
