-- The liveness schema, version 1. Every table carries the namespace in an `ns`
-- column: SQLite has no per-connection schemas, and ATTACHing one database file per
-- namespace would break the one-file, one-transaction story.
-- All times are milliseconds since the Unix epoch by the HOST clock, as read by SQLite
-- itself inside each operation.

-- One row per namespace: the token and item-id counters. Tokens and ids come from
-- here only, so they are strictly increasing and never reused within a namespace.
CREATE TABLE liveness_counters (
    ns         TEXT    NOT NULL PRIMARY KEY,
    next_token INTEGER NOT NULL,
    next_item  INTEGER NOT NULL
) STRICT;

-- The current lease on each key.
CREATE TABLE liveness_leases (
    ns         TEXT    NOT NULL,
    space      TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    holder     TEXT    NOT NULL,
    token      INTEGER NOT NULL,
    ttl_ms     INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (ns, space, name)
) STRICT, WITHOUT ROWID;

-- The expiry index: `expired` and `next_expiry` walk it from the earliest expiry, so
-- their cost grows with the number of expired leases, not with the live ones.
CREATE INDEX liveness_leases_expiry ON liveness_leases (ns, space, expires_at, name);

-- The dead set: tokens reaped or released whose items were not yet requeued.
CREATE TABLE liveness_dead (
    ns    TEXT    NOT NULL,
    token INTEGER NOT NULL,
    space TEXT    NOT NULL,
    name  TEXT    NOT NULL,
    PRIMARY KEY (ns, token)
) STRICT, WITHOUT ROWID;

-- Work items. state: 0 pending, 1 owned (by `owner`, a token), 2 dead-lettered.
-- Completed items are deleted.
CREATE TABLE liveness_items (
    ns           TEXT    NOT NULL,
    id           INTEGER NOT NULL,
    payload      BLOB    NOT NULL,
    attempts     INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    state        INTEGER NOT NULL CHECK (state IN (0, 1, 2)),
    owner        INTEGER,
    PRIMARY KEY (ns, id)
) STRICT;

-- Pending items in id order (claim), dead letters in id order, counts by state.
CREATE INDEX liveness_items_state ON liveness_items (ns, state, id);
-- Items owned by one token (requeue_orphans).
CREATE INDEX liveness_items_owner ON liveness_items (ns, owner) WHERE owner IS NOT NULL;
