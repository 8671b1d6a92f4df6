-- The liveness schema, version 8: members riding a session (`LeaseStore::join_session`).
-- Runs with search_path set to the namespace's schema.
--
-- A riding member is a `leases` row that names its session, a lease of the space
-- `sessions` (`session_name`, and the session's token `session_token`), and has no
-- expiry of its own (`expires_at` NULL): it is live exactly while the session's row
-- holds that token and is live. So it sits in no range of the expiry index (`expired`
-- and `next_expiry` never see it), and renewing the session alone keeps every member
-- alive: no write per member. Its judged expiry, in every statement that asks, is
--   coalesce(l.expires_at, (the session row's expires_at when it holds l.session_token))
-- (NULL: the session is gone or superseded, and the member is expired; comparisons
-- read it as '-infinity').
ALTER TABLE leases
    ALTER COLUMN expires_at DROP NOT NULL,
    ADD COLUMN session_name text,
    ADD COLUMN session_token bigint,
    ADD CONSTRAINT leases_rides CHECK (
        (session_name IS NULL) = (session_token IS NULL)
        AND (expires_at IS NULL) = (session_token IS NOT NULL)
    );

-- The drain of a dead session reads its riders by the session's token: O(batch).
CREATE INDEX leases_session ON leases (session_token) WHERE session_token IS NOT NULL;

-- The token whose death record a dead token's sweep adds its counts to: for a member
-- retired by its session's drain, the session's token (the session's one record
-- counts its members and what their sweeps moved); NULL, the token's own record.
ALTER TABLE dead_tokens ADD COLUMN record_token bigint;

-- A session's death record counts the members its drain retired (NULL: none yet, or
-- not a session).
ALTER TABLE deaths ADD COLUMN members bigint;

-- `members_page` (version 4) with a riding member judged by its session, and the
-- session it rides (m_session, the name of its key in `sessions`; NULL for a lease of
-- its own). m_remaining_us is NULL for a member whose session is gone or superseded. Same settings: the page is read in index order whatever the statistics.
-- The session's row is read only for a riding member (the scalar subquery inside
-- coalesce runs only when `expires_at` is NULL).
DROP FUNCTION members_page(text, text, bigint);
CREATE FUNCTION members_page(p_space text, p_after text, p_limit bigint)
RETURNS TABLE (m_name text, m_holder text, m_token bigint, m_ttl_ms bigint,
               m_remaining_us bigint, m_session text)
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
SELECT l.name, l.holder, l.token, l.ttl_ms,
       (extract(epoch FROM (coalesce(l.expires_at,
           (SELECT ses.expires_at FROM leases ses
            WHERE ses.space = 'sessions' AND ses.name = l.session_name
              AND ses.token = l.session_token)) - clk.t)) * 1000000)::bigint,
       l.session_name
FROM leases l, (SELECT clock_timestamp() AS t) clk
WHERE l.space = p_space AND l.name COLLATE "C" > p_after
ORDER BY l.name COLLATE "C"
LIMIT p_limit
$$;

-- `acquire_many` (version 6) judging a riding member by its session: a key whose
-- member rides an expired or gone session is taken over (dead set, death record,
-- cause superseded), as `ACQUIRE` (src/lease.rs) does; the new lease is a lease of
-- its own (no session, an expiry).
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
        SELECT l.holder, l.token,
               coalesce(l.expires_at,
                   (SELECT ses.expires_at FROM leases ses
                    WHERE ses.space = 'sessions' AND ses.name = l.session_name
                      AND ses.token = l.session_token),
                   '-infinity') > clock_timestamp()
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
        FOR v_attempt IN 1 .. 8 LOOP
            WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t),
            cur AS MATERIALIZED (
                SELECT l.holder, l.token,
                       coalesce(l.expires_at,
                           (SELECT ses.expires_at FROM leases ses
                            WHERE ses.space = 'sessions' AND ses.name = l.session_name
                              AND ses.token = l.session_token),
                           '-infinity') > clk.t
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
                        last_claim = NULL, session_name = NULL, session_token = NULL
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
