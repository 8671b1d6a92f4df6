//! The SQL this backend runs, one constant per statement, beside the migrations
//! (`migrations/*.sql`) that create the tables. `?1` is always the namespace.
//!
//! Times are milliseconds of the store clock, the host's boot clock (`clock.rs`): the
//! store reads it in Rust and binds it as a parameter (the "now" of each statement's
//! doc); SQLite's own `'now'`, the wall clock, is never used.

/// The lease on a key (?1 ns, ?2 space, ?3 name), judged at a `now` read beside it.
pub(crate) const CURRENT: &str = "SELECT holder, token, expires_boot_ms FROM liveness_leases \
    WHERE ns = ?1 AND space = ?2 AND name = ?3";

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
    "INSERT INTO liveness_leases (ns, space, name, holder, token, ttl_ms, expires_boot_ms) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
    ON CONFLICT (ns, space, name) DO UPDATE SET holder = excluded.holder, \
    token = excluded.token, ttl_ms = excluded.ttl_ms, expires_boot_ms = excluded.expires_boot_ms";

/// Extends a current lease, live at ?6 (now), by its ttl (?1 ns, ?2 space, ?3 name, ?4
/// token, ?5 ttl ms), in one statement.
pub(crate) const RENEW: &str = "UPDATE liveness_leases SET ttl_ms = ?5, expires_boot_ms = ?6 + ?5 \
    WHERE ns = ?1 AND space = ?2 AND name = ?3 AND token = ?4 AND expires_boot_ms > ?6";

/// Deletes the lease on a key if it has token ?4 (?1 ns, ?2 space, ?3 name), answering
/// its holder (for the death record).
pub(crate) const RELEASE: &str = "DELETE FROM liveness_leases \
    WHERE ns = ?1 AND space = ?2 AND name = ?3 AND token = ?4 RETURNING holder";

/// The lease on a key (?1 ns, ?2 space, ?3 name).
pub(crate) const INSPECT: &str = "SELECT holder, token, ttl_ms, expires_boot_ms \
    FROM liveness_leases WHERE ns = ?1 AND space = ?2 AND name = ?3";

/// Up to ?3 leases of space ?2 (?1 ns) expired at ?4 (now), earliest expiry first.
pub(crate) const EXPIRED: &str = "SELECT name, holder, token FROM liveness_leases \
    WHERE ns = ?1 AND space = ?2 AND expires_boot_ms <= ?4 \
    ORDER BY expires_boot_ms, name LIMIT ?3";

/// Deletes the lease on a key if it has token ?4 and is expired at ?5 (now) (?1 ns, ?2
/// space, ?3 name), answering its holder (for the death record).
pub(crate) const REAP: &str = "DELETE FROM liveness_leases \
    WHERE ns = ?1 AND space = ?2 AND name = ?3 AND token = ?4 AND expires_boot_ms <= ?5 \
    RETURNING holder";

/// Up to ?2 tokens of the dead set (?1 ns), oldest first.
pub(crate) const DEAD_TOKENS: &str =
    "SELECT token, space, name FROM liveness_dead WHERE ns = ?1 ORDER BY token LIMIT ?2";

/// The time left at ?3 (now) of the lease of space ?2 (?1 ns) that expires first.
pub(crate) const NEXT_EXPIRY: &str = "SELECT expires_boot_ms - ?3 FROM liveness_leases \
    WHERE ns = ?1 AND space = ?2 ORDER BY expires_boot_ms LIMIT 1";

/// The boot of the host the file's expiries are counted in.
pub(crate) const RECORDED_BOOT: &str = "SELECT boot_id FROM liveness_boot WHERE one = 1";

/// Expires every lease of every namespace (their holders died in a reboot).
pub(crate) const RETIRE_ALL: &str = "UPDATE liveness_leases SET expires_boot_ms = 0";

/// Records ?1 as the boot the file's expiries are counted in.
pub(crate) const RECORD_BOOT: &str = "UPDATE liveness_boot SET boot_id = ?1 WHERE one = 1";

/// Draws the namespace's next item id (?1 ns).
pub(crate) const NEXT_ITEM: &str =
    "INSERT INTO liveness_counters (ns, next_token, next_item) VALUES (?1, 0, 1) \
    ON CONFLICT (ns) DO UPDATE SET next_item = next_item + 1 RETURNING next_item";

/// Writes a new pending item (?1 ns, ?2 id, ?3 payload, ?4 max attempts).
pub(crate) const ENQUEUE: &str =
    "INSERT INTO liveness_items (ns, id, payload, attempts, max_attempts, state, owner) \
    VALUES (?1, ?2, ?3, 0, ?4, 0, NULL)";

/// Hands up to ?3 pending items to token ?2 (?1 ns), oldest first, marked with the
/// claim's request id ?4.
pub(crate) const CLAIM: &str = "UPDATE liveness_items \
    SET state = 1, owner = ?2, attempts = attempts + 1, claim_request = ?4 \
    WHERE ns = ?1 AND id IN (SELECT id FROM liveness_items \
    WHERE ns = ?1 AND state = 0 ORDER BY id LIMIT ?3) \
    RETURNING id, payload, attempts, max_attempts, state, owner";

/// The items token ?2 owns that claim request ?3 assigned (?1 ns): a repeated claim's
/// answer.
pub(crate) const CLAIMED_BY: &str =
    "SELECT id, payload, attempts, max_attempts, state, owner FROM liveness_items \
    WHERE ns = ?1 AND state = 1 AND owner = ?2 AND claim_request = ?3 ORDER BY id";

/// The item id enqueue key ?2 answered (?1 ns).
pub(crate) const ENQUEUE_KEY: &str =
    "SELECT id FROM liveness_enqueue_keys WHERE ns = ?1 AND key = ?2";

/// Records that enqueue key ?2 answered item ?3 (?1 ns).
pub(crate) const SAVE_ENQUEUE_KEY: &str =
    "INSERT INTO liveness_enqueue_keys (ns, key, id) VALUES (?1, ?2, ?3)";

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

/// Up to ?4 leases of space ?2 (?1 ns) whose name is greater than ?3, in name (byte)
/// order, on the primary key: O(page).
pub(crate) const MEMBERS: &str = "SELECT name, holder, token, ttl_ms, expires_boot_ms \
    FROM liveness_leases WHERE ns = ?1 AND space = ?2 AND name > ?3 ORDER BY name LIMIT ?4";

/// Draws the namespace's next death seq (?1 ns).
pub(crate) const NEXT_DEATH: &str =
    "INSERT INTO liveness_counters (ns, next_token, next_item, next_death) VALUES (?1, 0, 0, 1) \
    ON CONFLICT (ns) DO UPDATE SET next_death = next_death + 1 RETURNING next_death";

/// Records a death (?1 ns, ?2 seq, ?3 space, ?4 name, ?5 holder, ?6 token, ?7 at, ?8
/// cause).
pub(crate) const RECORD_DEATH: &str = "INSERT INTO liveness_deaths \
    (ns, seq, space, name, holder, token, at_ms, cause) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

/// Drops the death records of seq ?2 and older (?1 ns): those out of the retention.
pub(crate) const TRIM_DEATHS: &str = "DELETE FROM liveness_deaths WHERE ns = ?1 AND seq <= ?2";

/// Fills in what the sweep of token ?2 moved (?1 ns, ?3 requeued, ?4 dead-lettered).
pub(crate) const SWEPT: &str = "UPDATE liveness_deaths SET requeued = ?3, dead_lettered = ?4 \
    WHERE ns = ?1 AND token = ?2 AND requeued IS NULL";

/// Up to ?3 death records with seq below ?2 (?1 ns), newest first.
pub(crate) const DEATHS: &str = "SELECT seq, space, name, holder, token, at_ms, cause, \
    requeued, dead_lettered FROM liveness_deaths WHERE ns = ?1 AND seq < ?2 \
    ORDER BY seq DESC LIMIT ?3";

/// Up to ?4 items in state ?2 with id above ?3 (?1 ns), lowest id first.
pub(crate) const ITEMS: &str =
    "SELECT id, payload, attempts, max_attempts, state, owner FROM liveness_items \
    WHERE ns = ?1 AND state = ?2 AND id > ?3 ORDER BY id LIMIT ?4";

/// Moves dead-lettered item ?2 back to pending with no attempts (?1 ns).
pub(crate) const RETRY_DEAD_LETTER: &str = "UPDATE liveness_items SET state = 0, attempts = 0 \
    WHERE ns = ?1 AND id = ?2 AND state = 2";

/// Moves up to ?2 dead-lettered items, lowest id first, back to pending with no
/// attempts (?1 ns).
pub(crate) const RETRY_DEAD_LETTERS: &str = "UPDATE liveness_items SET state = 0, attempts = 0 \
    WHERE ns = ?1 AND id IN (SELECT id FROM liveness_items \
    WHERE ns = ?1 AND state = 2 ORDER BY id LIMIT ?2) RETURNING id";
