-- The liveness schema, version 15: a dead letter is kept for the store's dead-letter
-- retention (`dead_letter_retention_s`, `Capabilities::dead_letter_retention`), not
-- until an operator acts. Runs with search_path set to the namespace's schema.
--
-- The dead letters already there get the migration's time (now(): this transaction's
-- start, after every one of them was dead-lettered), so they are kept one retention
-- from the upgrade, not for good. A constant default is stored once in the catalog:
-- the table is not rewritten and no row is written (so every row already there reads
-- that time; the column means something only while the item is dead-lettered). The
-- default is then dropped: new rows have none.
--
-- `dead_at` is when the item was dead-lettered, by the server's clock_timestamp()
-- (the clock of `due_at`, `finished_at` and every expiry), written by the statements
-- that dead-letter (a failure's, the sweep of its dead owner's items) and cleared by
-- those that hand an item back to pending (a failure's retry, the sweep, a dead
-- letter's retry). Each statement that dead-letters deletes at most 100 dead letters
-- dead-lettered a retention or more before its instant, the oldest first, on the
-- index below. An item an older build still running dead-letters keeps the time its
-- row had: none (NULL: kept until an operator acts) unless the row was there before
-- the upgrade (kept one retention from it).
ALTER TABLE items ADD COLUMN dead_at timestamptz DEFAULT now();
ALTER TABLE items ALTER COLUMN dead_at DROP DEFAULT;

-- Dead letters by the time they were dead-lettered: the delete of expired ones,
-- oldest first, reads only those (the server's now less the retention an index
-- condition). One pass over the table, which holds writes to it meanwhile, as the
-- indexes of versions 9 and 13.
CREATE INDEX items_dead_at ON items (dead_at) WHERE state = 2;
