-- The liveness schema, version 6: fencing tokens that never go back, not even across
-- a promotion. Runs with search_path set to the namespace's schema.
--
-- A token is (timeline << 40) | nextval('tokens'). A promoted standby, and a
-- point-in-time recovery, writes on a new timeline, numbered above every timeline
-- before it; with asynchronous replication the standby may lack the last values the
-- old primary drew from `tokens`, so the sequence alone would hand a token out a
-- second time. With the timeline in front, every token drawn after a promotion sorts
-- above every token drawn before it (tokens drawn before this migration have
-- timeline 0), and none is handed out twice.
--
-- The timeline is the one WAL is written on now: the first 8 hex digits of the name
-- of the current WAL file. (`pg_control_checkpoint()` reports the timeline of the
-- last checkpoint, which changes only when the first checkpoint after a promotion
-- completes; the new primary takes writes before that.)

-- The timeline WAL is written on now, as a bigint.
CREATE FUNCTION token_epoch() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
$$;

-- The next fencing token. Fails (SQLSTATE 2200H, sequence_generator_limit_exceeded)
-- rather than hand out a token that would not sort above the ones before: when the
-- sequence reaches 2^40 or the timeline 2^23.
CREATE FUNCTION next_token() RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_epoch bigint := token_epoch();
    v_seq bigint := nextval('tokens');
BEGIN
    IF v_seq >= (1::bigint << 40) OR v_epoch >= (1::bigint << 23) THEN
        RAISE EXCEPTION 'next_token: no fencing token left (timeline %, sequence %)',
            v_epoch, v_seq
            USING ERRCODE = '2200H';
    END IF;
    RETURN (v_epoch << 40) | v_seq;
END
$$;

-- `acquire_many` (version 5) drawing its tokens from `next_token()`, and with the
-- rule of `acquire` (ACQUIRE in src/lease.rs) for a lease of an earlier timeline
-- asked for again by its own holder: it is taken over as if expired, not answered
-- held. A holder that asks for a key it holds has lost track of that lease; when the
-- lease was drawn before a promotion, the promoted server may have revived it (it
-- lacked its release), together with the items claimed under it, which its holder
-- was told to drop. Taken over, its token goes to the dead set and a sweep hands the
-- items back; adopted, nobody would ever complete them.
CREATE OR REPLACE FUNCTION acquire_many(p_spaces text[], p_names text[], p_holders text[],
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
    v_floor bigint := token_epoch() << 40;
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
        SELECT l.holder, l.token,
               l.expires_at > clock_timestamp()
               AND NOT (l.holder = v_holder AND l.token < v_floor)
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
            VALUES (v_space, v_name, v_holder, next_token(), v_ttl,
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
                SELECT l.holder, l.token,
                       l.expires_at > clk.t
                       AND NOT (l.holder = v_holder AND l.token < v_floor) AS live
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
                SELECT v_space, v_name, v_holder, next_token(), v_ttl,
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
