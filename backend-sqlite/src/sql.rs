//! The SQL this backend runs, one constant per statement, beside the migrations
//! (`migrations/*.sql`) that create the tables. `?1` is always the namespace.

/// The host clock in milliseconds since the Unix epoch, as SQLite reads it. SQLite
/// keeps `'now'` constant within one statement.
macro_rules! now {
    () => {
        "CAST(ROUND(unixepoch('subsec') * 1000.0) AS INTEGER)"
    };
}

/// The store's now and the lease on a key (?1 ns, ?2 space, ?3 name), in one statement.
pub(crate) const CURRENT: &str = concat!(
    "SELECT n.now, l.holder, l.token, l.expires_at FROM (SELECT ",
    now!(),
    " AS now) AS n LEFT JOIN liveness_leases AS l ",
    "ON l.ns = ?1 AND l.space = ?2 AND l.name = ?3"
);

/// Puts a retired lease's token in the dead set (?1 ns, ?2 token, ?3 space, ?4 name).
pub(crate) const BURY: &str =
    "INSERT INTO liveness_dead (ns, token, space, name) VALUES (?1, ?2, ?3, ?4)";

/// Whether the table ?1 exists.
pub(crate) const TABLE_EXISTS: &str =
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?1";

/// The newest migration version applied to the database.
pub(crate) const SCHEMA_FOUND: &str = "SELECT MAX(version) FROM liveness_migrations";

/// Draws the namespace's next fencing token (?1 ns).
pub(crate) const NEXT_TOKEN: &str =
    "INSERT INTO liveness_counters (ns, next_token, next_item) VALUES (?1, 1, 0) \
    ON CONFLICT (ns) DO UPDATE SET next_token = next_token + 1 RETURNING next_token";

/// Writes the lease on a key (?1 ns, ?2 space, ?3 name, ?4 holder, ?5 token, ?6 ttl ms,
/// ?7 expiry).
pub(crate) const PUT_LEASE: &str =
    "INSERT INTO liveness_leases (ns, space, name, holder, token, ttl_ms, expires_at) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
    ON CONFLICT (ns, space, name) DO UPDATE SET holder = excluded.holder, \
    token = excluded.token, ttl_ms = excluded.ttl_ms, expires_at = excluded.expires_at";

/// Extends a current, live lease by its ttl (?1 ns, ?2 space, ?3 name, ?4 token, ?5 ttl
/// ms), in one statement.
pub(crate) const RENEW: &str = concat!(
    "UPDATE liveness_leases SET ttl_ms = ?5, expires_at = ",
    now!(),
    " + ?5 WHERE ns = ?1 AND space = ?2 AND name = ?3 AND token = ?4 AND expires_at > ",
    now!()
);

/// Deletes the lease on a key if it has token ?4 (?1 ns, ?2 space, ?3 name).
pub(crate) const RELEASE: &str =
    "DELETE FROM liveness_leases WHERE ns = ?1 AND space = ?2 AND name = ?3 AND token = ?4";

/// The lease on a key, with the store's now (?1 ns, ?2 space, ?3 name).
pub(crate) const INSPECT: &str = concat!(
    "SELECT holder, token, ttl_ms, expires_at, ",
    now!(),
    " FROM liveness_leases WHERE ns = ?1 AND space = ?2 AND name = ?3"
);

/// Up to ?3 expired leases of space ?2 (?1 ns), earliest expiry first.
pub(crate) const EXPIRED: &str = concat!(
    "SELECT name, holder, token FROM liveness_leases ",
    "WHERE ns = ?1 AND space = ?2 AND expires_at <= ",
    now!(),
    " ORDER BY expires_at, name LIMIT ?3"
);

/// Deletes the lease on a key if it has token ?4 and is expired (?1 ns, ?2 space, ?3
/// name).
pub(crate) const REAP: &str = concat!(
    "DELETE FROM liveness_leases WHERE ns = ?1 AND space = ?2 AND name = ?3 ",
    "AND token = ?4 AND expires_at <= ",
    now!()
);

/// Up to ?2 tokens of the dead set (?1 ns), oldest first.
pub(crate) const DEAD_TOKENS: &str =
    "SELECT token, space, name FROM liveness_dead WHERE ns = ?1 ORDER BY token LIMIT ?2";

/// The store's now.
pub(crate) const STORE_TIME: &str = concat!("SELECT ", now!());

/// The time left of the lease of space ?2 (?1 ns) that expires first.
pub(crate) const NEXT_EXPIRY: &str = concat!(
    "SELECT expires_at - ",
    now!(),
    " FROM liveness_leases WHERE ns = ?1 AND space = ?2 ORDER BY expires_at LIMIT 1"
);

/// Draws the namespace's next item id (?1 ns).
pub(crate) const NEXT_ITEM: &str =
    "INSERT INTO liveness_counters (ns, next_token, next_item) VALUES (?1, 0, 1) \
    ON CONFLICT (ns) DO UPDATE SET next_item = next_item + 1 RETURNING next_item";

/// Writes a new pending item (?1 ns, ?2 id, ?3 payload, ?4 max attempts).
pub(crate) const ENQUEUE: &str =
    "INSERT INTO liveness_items (ns, id, payload, attempts, max_attempts, state, owner) \
    VALUES (?1, ?2, ?3, 0, ?4, 0, NULL)";

/// Hands up to ?3 pending items to token ?2 (?1 ns), oldest first.
pub(crate) const CLAIM: &str =
    "UPDATE liveness_items SET state = 1, owner = ?2, attempts = attempts + 1 \
    WHERE ns = ?1 AND id IN (SELECT id FROM liveness_items \
    WHERE ns = ?1 AND state = 0 ORDER BY id LIMIT ?3) \
    RETURNING id, payload, attempts, max_attempts, state, owner";

/// Deletes item ?2 if token ?3 owns it (?1 ns).
pub(crate) const COMPLETE: &str =
    "DELETE FROM liveness_items WHERE ns = ?1 AND id = ?2 AND state = 1 AND owner = ?3";

/// Gives item ?2 back if token ?3 owns it (?1 ns): pending when ?4 (retry) and it has
/// attempts left, else dead-lettered.
pub(crate) const FAIL: &str = "UPDATE liveness_items SET owner = NULL, \
    state = CASE WHEN ?4 AND attempts < max_attempts THEN 0 ELSE 2 END \
    WHERE ns = ?1 AND id = ?2 AND state = 1 AND owner = ?3 RETURNING state";

/// Takes token ?2 out of the dead set (?1 ns).
pub(crate) const FORGET_DEAD: &str = "DELETE FROM liveness_dead WHERE ns = ?1 AND token = ?2";

/// Gives back every item token ?2 owns (?1 ns): pending when it has attempts left, else
/// dead-lettered.
pub(crate) const REQUEUE_ORPHANS: &str = "UPDATE liveness_items SET owner = NULL, \
    state = CASE WHEN attempts < max_attempts THEN 0 ELSE 2 END \
    WHERE ns = ?1 AND state = 1 AND owner = ?2 RETURNING id, state";

/// Item ?2 (?1 ns).
pub(crate) const ITEM: &str =
    "SELECT id, payload, attempts, max_attempts, state, owner FROM liveness_items \
    WHERE ns = ?1 AND id = ?2";

/// How many items are in each state (?1 ns).
pub(crate) const ITEM_COUNTS: &str =
    "SELECT state, COUNT(*) FROM liveness_items WHERE ns = ?1 GROUP BY state";

/// Up to ?2 dead-lettered items (?1 ns), oldest first.
pub(crate) const DEAD_LETTERS: &str =
    "SELECT id, payload, attempts, max_attempts, state, owner FROM liveness_items \
    WHERE ns = ?1 AND state = 2 ORDER BY id LIMIT ?2";
