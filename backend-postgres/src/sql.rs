//! Every statement the store sends, one constant each, all parameterised (`$1`, ...).
//!
//! They run with the connection's `search_path` set to the namespace's schema, so no
//! statement names a schema. Expiry is always compared with the server's
//! `clock_timestamp()` inside the statement (most read it once, in a materialized
//! `clk` CTE, and compare every expiry with that one instant); no client timestamp is
//! ever sent. Each operation is one statement: one round trip,
//! atomic by itself.
//!
//! Public so that benches and reviewers can see exactly what runs; not an API.

/// `acquire`: $1 space, $2 name, $3 holder, $4 ttl_ms, $5 notify channel, $6 death
/// retention.
///
/// Locks the current row (if any); an expired one is retired to the dead set (with
/// its death record, cause superseded) and overwritten in the same statement; a live one is reported as held. `token` is
/// NULL and `held_token` NULL only when a concurrent acquire inserted the key first:
/// the caller runs the statement again.
pub const ACQUIRE: &str = r#"
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t),
cur AS MATERIALIZED (
    SELECT l.holder, l.token, l.expires_at > clk.t AS live
    FROM leases l, clk
    WHERE l.space = $1 AND l.name = $2
    FOR UPDATE OF l
),
retired AS (
    INSERT INTO dead_tokens (token, space, name)
    SELECT token, $1, $2 FROM cur WHERE NOT live
    ON CONFLICT (token) DO NOTHING
    RETURNING token
),
dseq AS (
    UPDATE death_seq SET last = last + 1 WHERE EXISTS (SELECT 1 FROM retired) RETURNING last
),
died AS (
    INSERT INTO deaths (seq, space, name, holder, token, at, cause)
    SELECT dseq.last, $1, $2, cur.holder, cur.token, clk.t, 2 FROM dseq, cur, clk WHERE NOT cur.live
),
trimmed AS (
    DELETE FROM deaths
    WHERE seq <= (SELECT last FROM dseq) - $6
      AND seq > (SELECT last FROM dseq) - $6 - 64
),
put AS (
    INSERT INTO leases AS l (space, name, holder, token, ttl_ms, expires_at)
    SELECT $1, $2, $3, nextval('tokens'), $4, clk.t + $4 * interval '1 millisecond'
    FROM clk
    WHERE NOT EXISTS (SELECT 1 FROM cur WHERE live)
    ON CONFLICT (space, name) DO UPDATE
        SET holder = excluded.holder, token = excluded.token,
            ttl_ms = excluded.ttl_ms, expires_at = excluded.expires_at, last_claim = NULL
        WHERE l.token = (SELECT token FROM cur WHERE NOT live)
    RETURNING token
),
woke AS (SELECT pg_notify($5, 'retired') FROM retired)
SELECT (SELECT token FROM put) AS token,
       (SELECT holder FROM cur) AS holder,
       (SELECT token FROM cur) AS held_token,
       (SELECT count(*) FROM woke) AS woke
"#;

/// `acquire_many`: $1 spaces, $2 names, $3 holders, $4 ttls (ms), one element per
/// entry (each with a ttl the store accepts), $5 notify channel, $6 death retention.
///
/// One statement for the whole batch (one round trip, one commit): the function
/// `acquire_many` (migration 6) runs the single [`ACQUIRE`]'s logic for each entry in
/// the order given, each after the previous one in the same transaction, so a later
/// entry on a key sees what an earlier one took and tokens grow in entry order. One
/// row per entry, in order: `token` of the new lease, or NULL with the live `holder`
/// and `held_token`; all three NULL when concurrent acquires kept winning the insert
/// race on the key; `woke` when it retired an expired lease.
pub const ACQUIRE_MANY: &str = r#"
SELECT a_token, a_holder, a_held_token, a_woke
FROM acquire_many($1::text[], $2::text[], $3::text[], $4::bigint[], $5, $6)
ORDER BY a_i
"#;

/// `renew`: $1 space, $2 name, $3 token, $4 ttl_ms, $5 apply (false: change nothing).
///
/// The hot path of the whole framework, so it is the bare single-row UPDATE by
/// primary key: it matches (one row affected) iff the token is current and live by
/// the server clock. The liveness check reads `clock_timestamp()` and the new expiry
/// reads it again a few microseconds later, which only ever extends the lease from a
/// later instant. When it matches nothing (the lease is lost: once per lease
/// lifetime), [`RENEW_WHY`] reads the row to say why.
///
/// This is the one operation that may take two round trips: folding the diagnosis
/// into the same statement (a data-modifying CTE with a second branch) cost 10-20 %
/// of the server's renewals per second in the bench, on every renewal, to save a
/// round trip on the one that fails.
pub const RENEW: &str = r#"
UPDATE leases SET expires_at = clock_timestamp() + $4 * interval '1 millisecond', ttl_ms = $4
WHERE space = $1 AND name = $2 AND token = $3 AND expires_at > clock_timestamp() AND $5
"#;

/// `renew_many`: $1 spaces, $2 names, $3 tokens, $4 ttls (ms), one element per lease
/// (each with a ttl the store accepts). One statement for the whole batch: every
/// current and live lease listed is extended by its own ttl; returns the (space, name,
/// token) of each one renewed. [`RENEW_WHY`] says why for the others.
pub const RENEW_MANY: &str = r#"
UPDATE leases l SET expires_at = clock_timestamp() + b.ttl * interval '1 millisecond', ttl_ms = b.ttl
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS b(space, name, token, ttl)
WHERE l.space = b.space AND l.name = b.name AND l.token = b.token
  AND l.expires_at > clock_timestamp()
RETURNING l.space, l.name, l.token
"#;

/// Why a [`RENEW`] matched nothing: $1 space, $2 name. One row: the key's current
/// token and whether it is live (both NULL when the key has no lease), and the highest
/// token the namespace has handed out (0 before the first): a lease with no record
/// whose token is above it was forgotten by a server that lost state. Read-only.
pub const RENEW_WHY: &str = r#"
SELECT l.token, l.expires_at > clock_timestamp(),
       CASE WHEN s.is_called THEN s.last_value ELSE 0 END
FROM tokens s LEFT JOIN leases l ON l.space = $1 AND l.name = $2
"#;

/// `release` and `reap`: $1 space, $2 name, $3 token, $4 notify channel, $5 death
/// retention, $6 the death's cause (0 reaped, 1 released). Removes the lease iff the
/// token is current — and, for a reap, expired by the server clock — puts it in the
/// dead set with its death record, drops the record that fell out of the retention,
/// and notifies (`reaped` or `released`). Concurrent reaps serialize on the row:
/// exactly one deletes it.
pub const RETIRE: &str = r#"
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t),
del AS (
    DELETE FROM leases l USING clk
    WHERE l.space = $1 AND l.name = $2 AND l.token = $3
      AND ($6 = 1 OR l.expires_at <= clk.t)
    RETURNING l.token, l.holder
),
dead AS (
    INSERT INTO dead_tokens (token, space, name) SELECT token, $1, $2 FROM del
    ON CONFLICT (token) DO NOTHING
    RETURNING token
),
dseq AS (
    UPDATE death_seq SET last = last + 1 WHERE EXISTS (SELECT 1 FROM dead) RETURNING last
),
died AS (
    INSERT INTO deaths (seq, space, name, holder, token, at, cause)
    SELECT dseq.last, $1, $2, del.holder, del.token, clk.t, $6 FROM dseq, del, clk
),
trimmed AS (
    DELETE FROM deaths
    WHERE seq <= (SELECT last FROM dseq) - $5
      AND seq > (SELECT last FROM dseq) - $5 - 64
),
woke AS (
    SELECT pg_notify($4, CASE WHEN $6 = 0 THEN 'reaped' ELSE 'released' END) FROM dead
)
SELECT (SELECT count(*) FROM del) AS removed, (SELECT count(*) FROM woke) AS woke
"#;

/// `reap_many`: $1 spaces, $2 names, $3 tokens (no entry twice),
/// $4 notify channel, $5 death retention. [`RETIRE`] with cause "reaped" for every
/// entry at once, in one statement (one commit): removes each lease whose token is
/// current and that is expired by the server clock, puts each in the dead set with a
/// death record of its own (consecutive sequence numbers, in entry order), drops the
/// records that fell out of the retention, and notifies `reaped` once. The rows are
/// locked in key order first, so two concurrent batches cannot deadlock; concurrent
/// reapers of one lease serialize on its row: exactly one deletes it. Returns the
/// entries removed, by their 1-based position.
pub const REAP_MANY: &str = r#"
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t),
b AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY
        AS b(space, name, token, i)
),
locked AS MATERIALIZED (
    SELECT l.space, l.name, l.token, b.i FROM leases l JOIN b
        ON l.space = b.space AND l.name = b.name AND l.token = b.token
    ORDER BY l.space, l.name
    FOR UPDATE OF l
),
del AS (
    DELETE FROM leases l USING locked, clk
    WHERE l.space = locked.space AND l.name = locked.name AND l.token = locked.token
      AND l.expires_at <= clk.t
    RETURNING locked.i, l.space, l.name, l.token, l.holder
),
dead AS (
    INSERT INTO dead_tokens (token, space, name) SELECT token, space, name FROM del
    ON CONFLICT (token) DO NOTHING
    RETURNING token
),
n AS (SELECT count(*) AS n FROM dead),
dseq AS (
    UPDATE death_seq SET last = last + (SELECT n FROM n)
    WHERE EXISTS (SELECT 1 FROM dead) RETURNING last
),
numbered AS (
    SELECT del.*, row_number() OVER (ORDER BY del.i) AS k
    FROM del WHERE del.token IN (SELECT token FROM dead)
),
died AS (
    INSERT INTO deaths (seq, space, name, holder, token, at, cause)
    SELECT dseq.last - n.n + numbered.k, numbered.space, numbered.name, numbered.holder,
           numbered.token, clk.t, 0
    FROM dseq, n, numbered, clk
),
trimmed AS (
    DELETE FROM deaths
    WHERE seq <= (SELECT last FROM dseq) - $5
      AND seq > (SELECT last FROM dseq) - $5 - 64 - (SELECT n FROM n)
),
woke AS (
    SELECT pg_notify($4, 'reaped') WHERE EXISTS (SELECT 1 FROM dead)
)
SELECT i, (SELECT count(*) FROM woke) FROM del
"#;

/// `requeue_orphans_many`: $1 tokens (no token twice). [`REQUEUE_ORPHANS`] for every
/// token at once, in one statement: each token in the dead set leaves it, its owned
/// items go back to pending (or to the dead-letter set when out of attempts), and its
/// death record gets its swept counts. Returns the moved items with their token.
pub const REQUEUE_ORPHANS_MANY: &str = r#"
WITH d AS (DELETE FROM dead_tokens WHERE token = ANY($1::bigint[]) RETURNING token),
moved AS (
    UPDATE items i
    SET state = CASE WHEN i.attempts < i.max_attempts THEN 0 ELSE 2 END, owner = NULL
    FROM d
    WHERE i.state = 1 AND i.owner = d.token
    RETURNING d.token, i.id, i.state
),
counts AS (
    SELECT d.token,
           count(m.id) FILTER (WHERE m.state = 0) AS requeued,
           count(m.id) FILTER (WHERE m.state = 2) AS dead_lettered
    FROM d LEFT JOIN moved m ON m.token = d.token
    GROUP BY d.token
),
swept AS (
    UPDATE deaths SET requeued = c.requeued, dead_lettered = c.dead_lettered
    FROM counts c
    WHERE deaths.token = c.token AND deaths.requeued IS NULL
)
SELECT token, id, state FROM moved ORDER BY token, id
"#;

/// `inspect`: $1 space, $2 name. `remaining_us` > 0 iff live.
pub const INSPECT: &str = r#"
SELECT holder, token, ttl_ms,
       (extract(epoch FROM (expires_at - clk.t)) * 1000000)::bigint AS remaining_us
FROM leases, (SELECT clock_timestamp() AS t) clk
WHERE space = $1 AND name = $2
"#;

/// `expired`: $1 space, $2 limit. The server's now is an init-plan parameter, so it
/// is an index condition on `leases_expiry`: the scan reads only expired rows.
pub const EXPIRED: &str = r#"
SELECT name, holder, token FROM leases
WHERE space = $1 AND expires_at <= (SELECT clock_timestamp())
ORDER BY expires_at, name
LIMIT $2
"#;

/// `next_expiry`: $1 space. Microseconds until the earliest expiry (negative when
/// already expired); no row when the space is empty.
pub const NEXT_EXPIRY: &str = r#"
SELECT (extract(epoch FROM (expires_at - clock_timestamp())) * 1000000)::bigint
FROM leases WHERE space = $1
ORDER BY expires_at
LIMIT 1
"#;

/// `dead_tokens`: $1 limit.
pub const DEAD_TOKENS: &str = r#"
SELECT token, space, name FROM dead_tokens ORDER BY token LIMIT $1
"#;

/// `store_time`: the server clock in microseconds since the Unix epoch.
pub const STORE_TIME: &str = r#"
SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
"#;

/// `enqueue`: $1 payload, $2 max_attempts.
pub const ENQUEUE: &str = r#"
INSERT INTO items (payload, max_attempts) VALUES ($1, $2) RETURNING id
"#;

/// `enqueue` with an idempotency key: $1 payload, $2 max attempts, $3 key.
///
/// Records the key with a freshly drawn item id and inserts the item under that id;
/// when the key is already recorded (committed before this statement), answers its
/// id and inserts nothing. No row: a concurrent enqueue with the same key committed
/// while this one waited on the key; running the statement again answers its id.
pub const ENQUEUE_KEYED: &str = r#"
WITH k AS (
    INSERT INTO enqueue_keys (key, id)
    VALUES ($3, nextval(pg_get_serial_sequence('items', 'id')))
    ON CONFLICT (key) DO NOTHING
    RETURNING id
),
new AS (
    INSERT INTO items (id, payload, max_attempts) OVERRIDING SYSTEM VALUE
    SELECT id, $1, $2 FROM k
    RETURNING id
)
SELECT id FROM new
UNION ALL
SELECT id FROM enqueue_keys WHERE key = $3 AND NOT EXISTS (SELECT 1 FROM k)
"#;

/// `claim`: $1 space, $2 name, $3 token, $4 n, $5 request id.
///
/// Checks the lease (current and live by the server clock) and takes up to n
/// pending items, lowest id first, skipping rows other claimers have locked, in one
/// statement, recording the request id on each. A repeat of the request (items the
/// token owns carry its id) answers those items and takes nothing new. Otherwise the
/// claim is admitted only when its id is above the token's high-water mark
/// (`leases.last_claim`), which `admit` raises to it on the lease row (a row lock:
/// concurrent claims of one token serialize there, and the later one re-checks the
/// mark the earlier one wrote); a late or repeated copy, or an older id, takes
/// nothing. The lease row is held `FOR KEY SHARE` until commit, so a concurrent
/// reap (a DELETE) waits for the claim and then requeues what it took. One row per
/// claimed item, or one row with NULL item columns; `cur_token` NULL when the key has
/// no lease.
pub const CLAIM: &str = r#"
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t),
cur AS MATERIALIZED (
    SELECT l.token, l.expires_at > clk.t AS live
    FROM leases l, clk
    WHERE l.space = $1 AND l.name = $2
    FOR KEY SHARE OF l
),
prev AS MATERIALIZED (
    SELECT id, payload, attempts, max_attempts FROM items
    WHERE state = 1 AND owner = $3 AND claim_request = $5
      AND EXISTS (SELECT 1 FROM cur WHERE token = $3 AND live)
),
admit AS (
    UPDATE leases l SET last_claim = $5
    FROM clk
    WHERE l.space = $1 AND l.name = $2 AND l.token = $3 AND l.expires_at > clk.t
      AND NOT EXISTS (SELECT 1 FROM prev)
      AND (l.last_claim IS NULL OR l.last_claim < $5)
    RETURNING l.token
),
pick AS (
    SELECT id FROM items
    WHERE state = 0 AND EXISTS (SELECT 1 FROM admit)
    ORDER BY id
    LIMIT $4
    FOR UPDATE SKIP LOCKED
),
got AS (
    UPDATE items i SET state = 1, owner = $3, attempts = i.attempts + 1, claim_request = $5
    FROM pick WHERE i.id = pick.id
    RETURNING i.id, i.payload, i.attempts, i.max_attempts
),
answer AS (
    SELECT * FROM got
    UNION ALL
    SELECT * FROM prev
)
SELECT cur.token AS cur_token, cur.live, answer.id, answer.payload, answer.attempts,
       answer.max_attempts
FROM (SELECT 1) AS one
LEFT JOIN cur ON true
LEFT JOIN answer ON true
ORDER BY answer.id
"#;

/// `complete`: $1 id, $2 token. Deletes the item iff that token owns it.
pub const COMPLETE: &str = r#"
DELETE FROM items WHERE id = $1 AND state = 1 AND owner = $2 RETURNING id
"#;

/// `fail`: $1 id, $2 token, $3 retry. Back to pending (0) or dead-lettered (2) iff
/// that token owns it.
pub const FAIL: &str = r#"
UPDATE items SET state = CASE WHEN $3 AND attempts < max_attempts THEN 0 ELSE 2 END,
                 owner = NULL
WHERE id = $1 AND state = 1 AND owner = $2
RETURNING state
"#;

/// `requeue_orphans`: $1 token. Acts only if the token is in the dead set: removes
/// it and hands every item it owns back (pending, or dead-lettered when out of
/// attempts), and fills in the token's death record with the counts it moved.
/// Concurrent calls serialize on the dead-set row: one moves, the other finds
/// nothing.
pub const REQUEUE_ORPHANS: &str = r#"
WITH d AS (DELETE FROM dead_tokens WHERE token = $1 RETURNING token),
moved AS (
    UPDATE items i
    SET state = CASE WHEN i.attempts < i.max_attempts THEN 0 ELSE 2 END, owner = NULL
    FROM d
    WHERE i.state = 1 AND i.owner = d.token
    RETURNING i.id, i.state
),
swept AS (
    UPDATE deaths
    SET requeued = (SELECT count(*) FROM moved WHERE state = 0),
        dead_lettered = (SELECT count(*) FROM moved WHERE state = 2)
    WHERE token = $1 AND requeued IS NULL AND EXISTS (SELECT 1 FROM d)
)
SELECT id, state FROM moved ORDER BY id
"#;

/// `item`: $1 id.
pub const ITEM: &str = r#"
SELECT id, payload, attempts, max_attempts, state, owner FROM items WHERE id = $1
"#;

/// `item_counts`: one consistent snapshot.
pub const ITEM_COUNTS: &str = r#"
SELECT count(*) FILTER (WHERE state = 0),
       count(*) FILTER (WHERE state = 1),
       count(*) FILTER (WHERE state = 2)
FROM items
"#;

/// `dead_letters`: $1 limit.
pub const DEAD_LETTERS: &str = r#"
SELECT id, payload, attempts, max_attempts FROM items
WHERE state = 2 ORDER BY id LIMIT $1
"#;

/// `members`: $1 space, $2 after (the last name of the previous page, '' for the
/// first), $3 limit. Names compare by bytes (`COLLATE "C"`, which the primary key's
/// default collation may not be, so the order is the same on every server) and the
/// page is read on the `leases_members` index, by the function `members_page`
/// (migration 5), which keeps the planner on that index whatever its statistics:
/// O(page). Columns: name, holder, token, ttl_ms, remaining_us (> 0 iff live).
pub const MEMBERS: &str = r#"
SELECT m_name, m_holder, m_token, m_ttl_ms, m_remaining_us FROM members_page($1, $2, $3)
"#;

/// `deaths`: $1 before (exclusive seq), $2 limit. Newest first; `at` in microseconds
/// since the Unix epoch (the clock of [`STORE_TIME`]).
pub const DEATHS: &str = r#"
SELECT seq, space, name, holder, token,
       (extract(epoch FROM at) * 1000000)::bigint, cause, requeued, dead_lettered
FROM deaths WHERE seq < $1 ORDER BY seq DESC LIMIT $2
"#;

/// `items`: $1 state, $2 after (exclusive id), $3 limit. Lowest id first, on the
/// state's partial index.
pub const ITEMS: &str = r#"
SELECT id, payload, attempts, max_attempts, state, owner FROM items
WHERE state = $1 AND id > $2 ORDER BY id LIMIT $3
"#;

/// `retry_dead_letter`: $1 id. Back to pending with no attempts iff dead-lettered;
/// answers the item's state before (no row: no such item).
pub const RETRY_DEAD_LETTER: &str = r#"
WITH cur AS MATERIALIZED (SELECT id, state FROM items WHERE id = $1 FOR UPDATE),
moved AS (
    UPDATE items i SET state = 0, attempts = 0
    FROM cur WHERE i.id = cur.id AND cur.state = 2
)
SELECT state FROM cur
"#;

/// `retry_dead_letters`: $1 limit. Up to limit dead-lettered items, lowest id first,
/// back to pending with no attempts; answers their ids.
pub const RETRY_DEAD_LETTERS: &str = r#"
WITH pick AS (
    SELECT id FROM items WHERE state = 2 ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED
)
UPDATE items i SET state = 0, attempts = 0 FROM pick WHERE i.id = pick.id
RETURNING i.id
"#;
