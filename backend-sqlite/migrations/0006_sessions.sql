-- The liveness schema, version 6: members riding a session (`join_session`).
--
-- A riding member is a lease row with the session's name (`session_name`, a key of
-- the `sessions` space) and token (`session_token`) and no expiry of its own
-- (`expires_boot_ms` NULL): it is live while the session's row holds that very token
-- and is live, so renewing the session alone keeps every member alive, and a member
-- costs no write while it lives. SQLite cannot drop a column's NOT NULL in place, so
-- the table is rebuilt (the usual create, copy, drop, rename); every lease keeps its
-- holder, token, expiry and claim mark.
CREATE TABLE liveness_leases_v6 (
    ns              TEXT    NOT NULL,
    space           TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    holder          TEXT    NOT NULL,
    token           INTEGER NOT NULL,
    ttl_ms          INTEGER NOT NULL,
    expires_boot_ms INTEGER,
    last_claim      TEXT,
    session_name    TEXT,
    session_token   INTEGER,
    PRIMARY KEY (ns, space, name),
    -- A lease has its own expiry, or rides a session: never both, never neither.
    CHECK ((expires_boot_ms IS NULL) = (session_token IS NOT NULL)),
    CHECK ((session_name IS NULL) = (session_token IS NULL))
) STRICT, WITHOUT ROWID;

INSERT INTO liveness_leases_v6
    (ns, space, name, holder, token, ttl_ms, expires_boot_ms, last_claim)
    SELECT ns, space, name, holder, token, ttl_ms, expires_boot_ms, last_claim
    FROM liveness_leases;

DROP TABLE liveness_leases;

ALTER TABLE liveness_leases_v6 RENAME TO liveness_leases;

-- The expiry index, as before, without the riding members: they have no expiry to
-- index, so `expired` never lists one and joining or renewing one moves no entry.
CREATE INDEX liveness_leases_expiry ON liveness_leases (ns, space, expires_boot_ms, name)
    WHERE expires_boot_ms IS NOT NULL;

-- The members riding each session, in token order: what the sweep of a dead
-- session's token retires, a batch at a time.
CREATE INDEX liveness_leases_session ON liveness_leases (ns, session_token, token)
    WHERE session_token IS NOT NULL;

-- A member retired with its dead session has no death record of its own: its dead-set
-- row links to the session's record (its seq), which the sweep of the member's items
-- adds to. NULL: the token's own record.
ALTER TABLE liveness_dead ADD COLUMN death_seq INTEGER;

-- How many riding members were retired under this record (a session's).
ALTER TABLE liveness_deaths ADD COLUMN members INTEGER NOT NULL DEFAULT 0;
