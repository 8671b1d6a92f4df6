-- The liveness schema, version 13: a dead letter is kept for the store's dead-letter
-- retention (`dead_letter_retention_s`, `Capabilities::dead_letter_retention`), not
-- until an operator acts.
--
-- `dead_at` is the store-clock millisecond (the host's boot clock, as `due_at` and
-- `recorded_boot_ms`) from which a dead letter's retention counts: written by every
-- statement that dead-letters an item (a failure's hand-back out of attempts or for
-- good, the sweep of a dead owner's items), NULL for every item not dead-lettered
-- (a dead letter's retry clears it; a discard deletes the row). A dead letter whose
-- `dead_at` lies more than the retention before the store's now is expired: each
-- later call that dead-letters removes up to 100 of them, oldest `dead_at` first,
-- in its own transaction, deleting their rows as an operator's `cancel` would (the
-- counts are counted from the rows, so they follow). It is not `finished_at`, which a
-- reboot forgets (`ItemRecord::times` must not lie): this one is counted again.
--
-- SQL cannot read the boot clock, so the store fills the column in where it needs
-- its reading, in the same opening transaction: the dead letters of a file migrated
-- from an older version get the store's now (kept one retention after the upgrade,
-- not for good, and never removed earlier than that), and a file opened under
-- another boot gives every dead letter the new boot's now (the boot clock restarted;
-- a dead letter is never removed earlier than asked, at most the time before the
-- reboot late). A dead letter with no time (NULL: dead-lettered by an older build
-- still running on the file) is never removed.
ALTER TABLE liveness_items ADD COLUMN dead_at INTEGER;

-- Dead letters by the time their retention counts from (ties by id): the trim reads
-- the expired ones only, oldest first, and stops at the first one still kept.
CREATE INDEX liveness_items_dead_at ON liveness_items (ns, dead_at, id) WHERE state = 2;
