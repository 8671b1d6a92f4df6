-- The liveness schema, version 9: items held back until a due time by the server's
-- clock (`EnqueueOptions::delay`, a scheduled job; `Outcome::Retry { after }`, a retry
-- backoff). Runs with search_path set to the namespace's schema.
--
-- A pending item (state 0) with due_at NULL is due at once; with a due_at, no claim
-- takes it before clock_timestamp() reaches it. Owned and dead-lettered items have
-- none. A held-back item is in no index the claim walks in id order: the claim takes
-- the items due at once from `items_ready` (lowest id first, as before) and the
-- held-back ones that came due from a range of `items_held` that ends at the server's
-- now, so an item not yet due is never read by a claim, however often it runs.
ALTER TABLE items
    ADD COLUMN due_at timestamptz,
    ADD CONSTRAINT items_due_pending CHECK (state = 0 OR due_at IS NULL);

-- The claim's path for pending items due at once, lowest id first: `items_pending`
-- (version 1) without the held-back items.
CREATE INDEX items_ready ON items (id) WHERE state = 0 AND due_at IS NULL;
DROP INDEX items_pending;

-- Held-back items by due time: the claim reads the prefix that came due, `next_due`
-- the first entry after the server's now.
CREATE INDEX items_held ON items (due_at, id) WHERE state = 0 AND due_at IS NOT NULL;

-- Held-back items by id: the operator's page of pending items merges it with
-- `items_ready`.
CREATE INDEX items_held_id ON items (id) WHERE state = 0 AND due_at IS NOT NULL;
