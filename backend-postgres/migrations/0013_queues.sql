-- The liveness schema, version 13: named queues (`EnqueueOptions::queue`,
-- `ItemStore::claim_from`, `OperatorStore::queue_counts`). Runs with search_path set
-- to the namespace's schema.
--
-- `queue` is the name of the queue an item waits in: 1 to 64 bytes of ASCII letters,
-- digits, `_`, `-` and `.` (checked before any statement), compared by bytes
-- (`COLLATE "C"`: the same order on every server, and the cheapest comparison in the
-- indexes below). An item keeps it for its whole life: no hand-back, sweep or dead
-- letter's retry writes it. The items already there land in `default`, the queue of
-- every item enqueued without one, so an upgraded namespace goes on working as
-- before; a constant default is stored once in the catalog: the table is not
-- rewritten.
ALTER TABLE items ADD COLUMN queue text COLLATE "C" NOT NULL DEFAULT 'default';

-- The claim's paths (version 9's `items_ready` and `items_held`) led by the queue, so
-- that a claim from one queue reads ranges of its own and never another queue's
-- items: those due at once, lowest id first, and the held-back ones that came due,
-- earliest due first. An index left beside them without the queue would be a
-- cheaper-looking path to the planner (a smaller index, and no statistics yet for
-- the new column), walking every queue's items.
CREATE INDEX items_ready_queue ON items (queue, id) WHERE state = 0 AND due_at IS NULL;
DROP INDEX items_ready;
CREATE INDEX items_held_queue ON items (queue, due_at, id)
    WHERE state = 0 AND due_at IS NOT NULL;
DROP INDEX items_held;
