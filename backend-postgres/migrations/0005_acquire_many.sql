-- The liveness schema, version 5: `acquire_many`, many acquires in one
-- statement (one round trip) instead of one statement each. Runs with search_path set
-- to the namespace's schema.

-- Acquires each entry (v_space, v_name, v_holder, v_ttl ms) in the
-- order given, each by the logic of the single `acquire` statement (ACQUIRE in src/lease.rs):
-- a live lease answers held (its holder and token) and changes nothing (it is read
-- without a lock: the row is locked only to take it over); an expired one goes to
-- the dead set (with a death record, cause superseded) and is overwritten; a free
-- key is inserted; a new lease draws its token from `tokens`, so tokens grow in the
-- order of the entries. Each entry's statement
-- runs after the previous one's in the same transaction and sees what it wrote: a
-- second entry on a key an earlier one took answers held naming that lease.
--
-- One row per entry, in order (a_i, from 1): a_token the new lease's token, or NULL
-- when held by (a_holder, a_held_token); all three NULL when concurrent acquires kept
-- inserting the key first (8 times running; the caller answers that entry
-- Unavailable). a_woke: a lease was retired to the dead set (the caller wakes its
-- own waiters).
--
-- The death records of the retired leases are written after the last entry, in entry
-- order, with their retirement instants, by one bump of `death_seq`: the batch takes
-- `death_seq`'s row lock last, after every lease row it locks, as the single
-- statements do (a lease row, then `death_seq`), so a batch and a concurrent release
-- or reap never wait on each other in a cycle. Nothing outside the transaction sees
-- the difference.
CREATE FUNCTION acquire_many(p_spaces text[], p_names text[], p_holders text[],
                             p_ttls bigint[], p_channel text, p_retention bigint)
RETURNS TABLE (a_i integer, a_token bigint, a_holder text, a_held_token bigint,
               a_woke boolean)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_space text;
    v_name text;
    v_holder text;
    v_ttl bigint;
    v_attempt integer;
    v_retired bigint;
    v_at timestamptz;
    v_live boolean;
    v_last bigint;
    d_spaces text[] := '{}';
    d_names text[] := '{}';
    d_holders text[] := '{}';
    d_tokens bigint[] := '{}';
    d_ats timestamptz[] := '{}';
BEGIN
    IF array_length(p_spaces, 1) IS DISTINCT FROM array_length(p_names, 1)
       OR array_length(p_holders, 1) IS DISTINCT FROM array_length(p_names, 1)
       OR array_length(p_ttls, 1) IS DISTINCT FROM array_length(p_names, 1) THEN
        RAISE EXCEPTION 'acquire_many: arrays of different lengths'
            USING ERRCODE = '22023';
    END IF;
    -- The entries as rows (indexing a text array is a walk from its start).
    FOR a_i, v_space, v_name, v_holder, v_ttl IN
        SELECT e.n::integer, e.space, e.name, e.holder, e.ttl
        FROM unnest(p_spaces, p_names, p_holders, p_ttls)
             WITH ORDINALITY AS e(space, name, holder, ttl, n)
        ORDER BY e.n
    LOOP
        a_token := NULL;
        a_holder := NULL;
        a_held_token := NULL;
        a_woke := false;
        -- The key's lease as it stands, read without locking the row. Held live (by
        -- another, or by an earlier entry of this batch): that is the answer, and
        -- the batch holds no lock on a lease it leaves alone (its renewals go on
        -- meanwhile).
        SELECT l.holder, l.token, l.expires_at > clock_timestamp()
        INTO a_holder, a_held_token, v_live
        FROM leases l
        WHERE l.space = v_space AND l.name = v_name;
        IF FOUND AND v_live THEN
            RETURN NEXT;
            CONTINUE;
        END IF;
        a_holder := NULL;
        a_held_token := NULL;
        -- No lease: insert one (what the statement below does for a free key, in
        -- one plain statement); a concurrent acquire that inserted the key
        -- meanwhile makes it insert nothing, and the statement below decides.
        IF NOT FOUND THEN
            INSERT INTO leases (space, name, holder, token, ttl_ms, expires_at)
            VALUES (v_space, v_name, v_holder, nextval('tokens'), v_ttl,
                    clock_timestamp() + v_ttl * interval '1 millisecond')
            ON CONFLICT (space, name) DO NOTHING
            RETURNING leases.token INTO a_token;
            IF a_token IS NOT NULL THEN
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;
        -- An expired lease to take over (or a lost insert race): the single
        -- acquire's statement, which locks the row and decides again.
        FOR v_attempt IN 1 .. 8 LOOP
            WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t),
            cur AS MATERIALIZED (
                SELECT l.holder, l.token, l.expires_at > clk.t AS live
                FROM leases l, clk
                WHERE l.space = v_space AND l.name = v_name
                FOR UPDATE OF l
            ),
            retired AS (
                INSERT INTO dead_tokens (token, space, name)
                SELECT cur.token, v_space, v_name FROM cur WHERE NOT cur.live
                ON CONFLICT (token) DO NOTHING
                RETURNING dead_tokens.token
            ),
            put AS (
                INSERT INTO leases AS l (space, name, holder, token, ttl_ms, expires_at)
                SELECT v_space, v_name, v_holder, nextval('tokens'), v_ttl,
                       clk.t + v_ttl * interval '1 millisecond'
                FROM clk
                WHERE NOT EXISTS (SELECT 1 FROM cur WHERE cur.live)
                ON CONFLICT (space, name) DO UPDATE
                    SET holder = excluded.holder, token = excluded.token,
                        ttl_ms = excluded.ttl_ms, expires_at = excluded.expires_at,
                        last_claim = NULL
                    WHERE l.token = (SELECT cur.token FROM cur WHERE NOT cur.live)
                RETURNING l.token
            )
            SELECT (SELECT put.token FROM put),
                   (SELECT cur.holder FROM cur),
                   (SELECT cur.token FROM cur),
                   (SELECT retired.token FROM retired),
                   (SELECT clk.t FROM clk)
            INTO a_token, a_holder, a_held_token, v_retired, v_at;
            IF v_retired IS NOT NULL THEN
                a_woke := true;
                d_spaces := d_spaces || v_space;
                d_names := d_names || v_name;
                d_holders := d_holders || a_holder;
                d_tokens := d_tokens || v_retired;
                d_ats := d_ats || v_at;
            END IF;
            -- Taken, or held: this entry's answer. Neither: a concurrent acquire
            -- inserted the key after this statement's snapshot; run it again.
            EXIT WHEN a_token IS NOT NULL OR a_held_token IS NOT NULL;
        END LOOP;
        RETURN NEXT;
    END LOOP;
    IF coalesce(array_length(d_tokens, 1), 0) > 0 THEN
        UPDATE death_seq SET last = last + array_length(d_tokens, 1)
        RETURNING last INTO v_last;
        INSERT INTO deaths (seq, space, name, holder, token, at, cause)
        SELECT v_last - array_length(d_tokens, 1) + d.n, d.space, d.name, d.holder,
               d.token, d.at, 2
        FROM unnest(d_spaces, d_names, d_holders, d_tokens, d_ats)
             WITH ORDINALITY AS d(space, name, holder, token, at, n);
        DELETE FROM deaths
        WHERE seq <= v_last - p_retention
          AND seq > v_last - p_retention - 64 - array_length(d_tokens, 1);
        PERFORM pg_notify(p_channel, 'retired');
    END IF;
END
$$;
