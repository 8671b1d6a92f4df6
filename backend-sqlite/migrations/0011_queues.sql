-- The liveness schema, version 11: named queues (`EnqueueOptions::queue`,
-- `ItemStore::claim_from`, `OperatorStore::queue_counts`).
--
-- `queue` is the name of the queue an item waits in: 1 to 64 bytes of ASCII letters,
-- digits, `_`, `-` and `.` (checked before any call), compared by bytes (SQLite's
-- BINARY collation). An item keeps it for its whole life: no hand-back, sweep or dead
-- letter's retry writes it. The items already there land in `default`, the queue of
-- every item enqueued without one, so an upgraded file goes on working as before.
ALTER TABLE liveness_items ADD COLUMN queue TEXT NOT NULL DEFAULT 'default';

-- Pending items that may be claimed, by queue, in id order: what a claim from one
-- queue walks (an index range), in place of version 7's `(ns, id)`. Held-back items
-- stay out of it, as before, until a claim clears their `due_at`.
DROP INDEX liveness_items_ready;
CREATE INDEX liveness_items_ready_queue ON liveness_items (ns, queue, id)
    WHERE state = 0 AND due_at IS NULL;
