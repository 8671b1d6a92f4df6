-- The liveness schema, version 3 (lost replies): what makes `claim` and
-- `enqueue` safe to retry.

-- The request id (32 hex digits) of the claim that assigned an owned item to its
-- owner: a repeat of that claim answers the items that carry it.
ALTER TABLE liveness_items ADD COLUMN claim_request TEXT;

-- Enqueue idempotency keys (32 hex digits) and the item id each answered; kept for
-- the namespace's lifetime.
CREATE TABLE liveness_enqueue_keys (
    ns  TEXT    NOT NULL,
    key TEXT    NOT NULL,
    id  INTEGER NOT NULL,
    PRIMARY KEY (ns, key)
) STRICT, WITHOUT ROWID;
