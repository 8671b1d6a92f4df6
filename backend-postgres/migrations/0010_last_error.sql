-- The liveness schema, version 10: the error text of an item's latest failure
-- (`ItemStore::finish_with_error`, `ItemRecord::last_error`). Runs with search_path
-- set to the namespace's schema.
--
-- Written by the statement that hands a failed item back (a retry or a dead letter)
-- when the failure gave a text; NULL until then. A hand-back without text, the sweep
-- of a dead owner's items and a dead letter's retry leave it as it was; a completed
-- item's row goes with it. At most 2,048 bytes (checked before the call). A column
-- without a default: adding it rewrites nothing.
ALTER TABLE items ADD COLUMN last_error text;
