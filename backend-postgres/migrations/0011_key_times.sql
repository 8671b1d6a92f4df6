-- The liveness schema, version 11: an enqueue's idempotency key is kept for the
-- store's key retention (`key_retention_s`), not for the namespace's lifetime. Runs
-- with search_path set to the namespace's schema.
--
-- `recorded_at` is when the key was recorded, by the server's clock_timestamp() (the
-- clock `due_at` and every expiry use). A key recorded more than the retention before
-- the server's now is expired: a keyed enqueue ignores it and records the key again,
-- and keyed enqueues delete expired keys a small batch at a time, oldest first (the
-- index below).
--
-- The keys already there get the migration's time (now(): this transaction's start,
-- after every one of them was recorded), so they are kept one retention from the
-- upgrade. A constant default is stored once in the catalog: the table is not
-- rewritten. New rows then default to clock_timestamp() (the keyed enqueue sets it
-- itself; the default serves a row an older build still running writes).
ALTER TABLE enqueue_keys ADD COLUMN recorded_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE enqueue_keys ALTER COLUMN recorded_at SET DEFAULT clock_timestamp();

-- Keys by the time they were recorded: the delete of expired keys, oldest first.
CREATE INDEX enqueue_keys_recorded ON enqueue_keys (recorded_at);
