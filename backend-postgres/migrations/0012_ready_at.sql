-- The liveness schema, version 12: how long a claimed item waited to be claimed
-- (`Item::waited`). Runs with search_path set to the namespace's schema.
--
-- `ready_at` is when a pending item became claimable, by the server's
-- clock_timestamp() (the clock `due_at` uses): the move that made it pending (an
-- enqueue, a retry's hand-back, the sweep of its dead owner's items, a dead letter's
-- retry), or its due time when held back, whichever is later. Every move to pending
-- writes it; a claim answers its instant less it. It is in no index and no claim
-- reads it to choose: which items a claim takes, and in what order, is `due_at`'s, as
-- before (`due_at` cannot carry it: NULL there is what puts an item on `items_ready`,
-- and a claim clears it).
--
-- The items already there get the migration's time (now(): this transaction's
-- start), held-back ones their due time. A constant default is stored once in the
-- catalog: the table is not rewritten. New rows then default to clock_timestamp()
-- (every statement here sets it itself; the default serves a row an older build
-- still running writes).
ALTER TABLE items ADD COLUMN ready_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE items ALTER COLUMN ready_at SET DEFAULT clock_timestamp();
UPDATE items SET ready_at = due_at WHERE state = 0 AND due_at IS NOT NULL;
