-- The liveness schema, version 9: an enqueue's idempotency key is kept for the
-- store's key retention (`key_retention_s`), not for the namespace's lifetime.
--
-- `recorded_boot_ms` is the store-clock millisecond (the host's boot clock, as
-- `expires_boot_ms` and `due_at`) at which the key was recorded. A key recorded more
-- than the retention before the store's now is expired: a lookup ignores it, a new
-- enqueue with it records it again, and keyed enqueues delete expired keys a small
-- batch at a time, oldest first (the index below).
--
-- SQL cannot read the boot clock, so the store fills the column in where it needs
-- its reading, in the same opening transaction: the keys of a file migrated from an
-- older version are given the store's now (kept one retention after the upgrade), and
-- a file opened under another boot gives every key the new boot's now (the boot
-- clock restarted; a key is never forgotten earlier than asked). A key with no time
-- (NULL: written by an older build still running on the file) is never expired.
ALTER TABLE liveness_enqueue_keys ADD COLUMN recorded_boot_ms INTEGER;

-- Keys by the time they were recorded: the delete of expired keys, oldest first.
CREATE INDEX liveness_enqueue_keys_recorded
    ON liveness_enqueue_keys (ns, recorded_boot_ms);
