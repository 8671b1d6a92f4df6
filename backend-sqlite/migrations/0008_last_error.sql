-- The liveness schema, version 8: the error text of an item's latest failure
-- (`ItemStore::finish_with_error`, `ItemRecord::last_error`).
--
-- Written by the hand-back of a failed item that gave a text (a retry or a dead
-- letter), in the statement that moves it; NULL until then. A hand-back without text,
-- the sweep of a dead owner's items and a dead letter's retry leave it as it was; a
-- completed item's row goes with it. At most 2,048 bytes (checked before the call).
ALTER TABLE liveness_items ADD COLUMN last_error TEXT;
