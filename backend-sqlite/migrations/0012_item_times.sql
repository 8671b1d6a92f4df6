-- The liveness schema, version 12: when each item was enqueued, last claimed and last
-- finished an attempt without completing (`ItemRecord::times`,
-- `Capabilities::item_times`).
--
-- Store-clock milliseconds (the host's boot clock, as `due_at`, `ready_at` and
-- `OperatorStore::store_time`), written by the statements that move the item:
-- `enqueued_at` by the enqueue; `attempted_at` by each claim; `finished_at` by each
-- hand-back of an owned item that does not complete it (a failure's retry or dead
-- letter, the sweep of its dead owner's items). A dead letter's retry leaves all
-- three; a completed item's row goes with them. In no index: nothing chooses by them.
--
-- The items already there have none (NULL): when they came is not known. Nor has an
-- item an older build still running on the file enqueues or claims. SQL cannot read
-- the boot clock, and a reboot restarts it, so a file opened under another boot
-- forgets every item's times (NULL) in the opening transaction: they were counted on
-- a clock that no longer runs, and would not compare with the new boot's.
ALTER TABLE liveness_items ADD COLUMN enqueued_at INTEGER;
ALTER TABLE liveness_items ADD COLUMN attempted_at INTEGER;
ALTER TABLE liveness_items ADD COLUMN finished_at INTEGER;
