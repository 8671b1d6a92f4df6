-- The liveness schema, version 7: items held back until a time (a scheduled enqueue,
-- a retry's backoff).
--
-- A held-back item is pending (state 0) with `due_at` set: the store-clock
-- milliseconds (the host's boot clock, as `expires_boot_ms`) from which it may be
-- claimed, and `delay_ms`, the wait it was given, which the reboot rule re-counts
-- from the new boot's clock (a reboot restarts the boot clock near zero). A claim
-- first clears `due_at` of the items due by then, so that it takes only items with
-- `due_at` NULL and never walks past held-back ones.
ALTER TABLE liveness_items ADD COLUMN due_at INTEGER;
ALTER TABLE liveness_items ADD COLUMN delay_ms INTEGER;

-- Held-back items by due time: the claim's promotion and `next_due`.
CREATE INDEX liveness_items_due ON liveness_items (ns, due_at) WHERE due_at IS NOT NULL;

-- Pending items that may be claimed, in id order: what a claim walks.
CREATE INDEX liveness_items_ready ON liveness_items (ns, id) WHERE state = 0 AND due_at IS NULL;
