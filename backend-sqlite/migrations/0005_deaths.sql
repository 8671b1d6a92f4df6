-- The liveness schema, version 5: the operator's read paths.

-- The death history: one row per token that stopped being current (reaped, released,
-- or superseded by an acquire), written in the same transaction as the death.
-- cause: 0 reaped, 1 released, 2 superseded. requeued / dead_lettered: NULL until
-- requeue_orphans swept the token, then what that sweep moved. at_ms: the store clock
-- (boot clock milliseconds) at the death. The newest `death_retention` rows of a
-- namespace are kept: each new death deletes the rows that fell out of it, by seq.
CREATE TABLE liveness_deaths (
    ns            TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    space         TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    holder        TEXT    NOT NULL,
    token         INTEGER NOT NULL,
    at_ms         INTEGER NOT NULL,
    cause         INTEGER NOT NULL CHECK (cause IN (0, 1, 2)),
    requeued      INTEGER,
    dead_lettered INTEGER,
    PRIMARY KEY (ns, seq)
) STRICT, WITHOUT ROWID;

-- The sweep finds a token's record.
CREATE INDEX liveness_deaths_token ON liveness_deaths (ns, token);

-- The namespace's death sequence.
ALTER TABLE liveness_counters ADD COLUMN next_death INTEGER NOT NULL DEFAULT 0;
