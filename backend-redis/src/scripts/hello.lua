-- hello: KEYS[1] the namespace's server record (<prefix>srv)
-- Records the server this handle connected to, unless one is recorded (see `epoch`
-- in the prelude): a namespace's first server opens epoch 1, with nothing to re-judge.
-- Returns the current epoch.
local ep = epoch(prefix_of(KEYS[1]), now_us())
return ep
