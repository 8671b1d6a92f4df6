-- The liveness schema, version 4: the operator's read paths. Runs with
-- search_path set to the namespace's schema.

-- The namespace's death sequence: one row, bumped in the statement that records a
-- death (a row, not a sequence, so that seqs have no gaps and the retention window
-- holds exactly the newest records).
CREATE TABLE death_seq (
    one  boolean PRIMARY KEY DEFAULT true CHECK (one),
    last bigint  NOT NULL
);
INSERT INTO death_seq (one, last) VALUES (true, 0);

-- The death history: one row per token that stopped being current, written by the
-- statement that ended it. cause: 0 reaped, 1 released, 2 superseded. requeued /
-- dead_lettered: NULL until requeue_orphans swept the token, then what it moved.
-- The newest `death_retention` rows are kept: each new death deletes the ones that
-- fell out of the window, by seq.
CREATE TABLE deaths (
    seq           bigint      PRIMARY KEY,
    space         text        NOT NULL,
    name          text        NOT NULL,
    holder        text        NOT NULL,
    token         bigint      NOT NULL,
    at            timestamptz NOT NULL,
    cause         smallint    NOT NULL CHECK (cause IN (0, 1, 2)),
    requeued      bigint,
    dead_lettered bigint
);

-- The sweep finds a token's record.
CREATE INDEX deaths_token ON deaths (token);

-- `items` by state in id order: pending and dead-lettered have their partial
-- indexes (0001); owned ones are indexed by (owner, id) only.
CREATE INDEX items_owned_id ON items (id) WHERE state = 1;

-- `members` pages a space's leases in byte order of their names (COLLATE "C", the
-- same on every server whatever the database's collation): O(page) on this index.
CREATE INDEX leases_members ON leases (space, name COLLATE "C");

-- One page of `members`. A function so that the page is read in index order whatever
-- the planner's statistics say: right after many leases were inserted, before any
-- ANALYZE, the planner estimates a handful of rows and would rather collect the whole
-- space and sort it (O(members)); with sorts, bitmap and sequential scans priced out
-- for this one query, it walks `leases_members` and stops after the page.
CREATE FUNCTION members_page(p_space text, p_after text, p_limit bigint)
RETURNS TABLE (m_name text, m_holder text, m_token bigint, m_ttl_ms bigint,
               m_remaining_us bigint)
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
SELECT l.name, l.holder, l.token, l.ttl_ms,
       (extract(epoch FROM (l.expires_at - clk.t)) * 1000000)::bigint
FROM leases l, (SELECT clock_timestamp() AS t) clk
WHERE l.space = p_space AND l.name COLLATE "C" > p_after
ORDER BY l.name COLLATE "C"
LIMIT p_limit
$$;
