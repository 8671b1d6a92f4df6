-- The liveness tables of ONE namespace. This script runs with the connection's
-- search_path set to the namespace's schema (liveness_<ns>), so every name below
-- lands there; it never names a schema itself.

-- Fencing tokens: one counter per namespace, strictly increasing, never reused
-- (sequences are not transactional: a rolled-back nextval is skipped, never reissued).
CREATE SEQUENCE tokens AS bigint MINVALUE 1 START 1 NO CYCLE;

-- Live and expired-but-not-reaped leases. expires_at is in the server's clock
-- (clock_timestamp()); nothing else ever writes it.
CREATE TABLE leases (
    space      text        NOT NULL,
    name       text        NOT NULL,
    holder     text        NOT NULL,
    token      bigint      NOT NULL,
    ttl_ms     bigint      NOT NULL CHECK (ttl_ms > 0),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (space, name)
);

-- The expiry index: `expired` and `next_expiry` read a prefix of it, so their cost
-- grows with the number of expired leases, not with the number of live ones.
CREATE INDEX leases_expiry ON leases (space, expires_at, name);

-- The dead set: tokens reaped or released whose items were not yet requeued.
CREATE TABLE dead_tokens (
    token bigint PRIMARY KEY,
    space text   NOT NULL,
    name  text   NOT NULL
);

-- Work items. state: 0 pending, 1 owned (by `owner`), 2 dead-lettered.
-- Completed items are deleted.
CREATE TABLE items (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payload      bytea   NOT NULL,
    attempts     bigint  NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts bigint  NOT NULL CHECK (max_attempts >= 1),
    state        smallint NOT NULL DEFAULT 0 CHECK (state IN (0, 1, 2)),
    owner        bigint,
    CHECK ((state = 1) = (owner IS NOT NULL))
);

CREATE INDEX items_pending ON items (id) WHERE state = 0;
CREATE INDEX items_owned ON items (owner, id) WHERE state = 1;
CREATE INDEX items_dead ON items (id) WHERE state = 2;

-- The advisory-lock election's record of who leads (the lock itself is the truth;
-- this row says who took it, with which token, from which backend pid).
CREATE TABLE advisory_leaders (
    name   text   PRIMARY KEY,
    holder text   NOT NULL,
    token  bigint NOT NULL,
    pid    integer NOT NULL
);
