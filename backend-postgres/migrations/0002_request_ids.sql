-- The liveness schema, version 2 (lost replies): what makes `claim` and
-- `enqueue` safe to retry. Runs with search_path set to the namespace's schema.

-- The request id (32 hex digits) of the claim that assigned an owned item to its
-- owner: a repeat of that claim answers the items that carry it.
ALTER TABLE items ADD COLUMN claim_request text;

-- Enqueue idempotency keys (32 hex digits) and the item id each answered; kept for
-- the namespace's lifetime.
CREATE TABLE enqueue_keys (
    key text   PRIMARY KEY,
    id  bigint NOT NULL
);
