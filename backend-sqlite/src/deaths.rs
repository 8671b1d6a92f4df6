//! Finding and declaring deaths, and their history: the expired leases, the reap or
//! release that declares one dead (its token to the dead set, a death record, in the
//! caller's write transaction), the dead set, the sweep of a dead token's items (for a
//! dead session's token, first its riding members declared dead, a batch per call),
//! and the death records. [`SqliteStore`] methods that `lease.rs`, `items.rs`, `operator.rs`
//! and `batch.rs` call.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use liveness_core::{
    DeadToken, DeathCause, DeathRecord, ExpiredLease, FencingToken, HolderId, ItemId, Key, Name,
    Result, Space, StoreTime, Sweep, Swept,
};
#[cfg(doc)]
use liveness_core::{ItemStore, LeaseStore, OperatorStore};
use sqlx::sqlite::{SqliteConnection, SqliteRow};
use sqlx::Row;

use crate::core::{
    as_db, cause_code, cause_from_code, get_text, get_u64, limit_param, live_until, to_i64,
    SqliteStore, STATE_PENDING,
};
use crate::error::{corrupt, map};

/// Up to ?3 leases of space ?2 (?1 ns) expired at ?4 (now), earliest expiry first.
const EXPIRED: &str = "SELECT name, holder, token FROM liveness_leases \
    WHERE ns = ?1 AND space = ?2 AND expires_boot_ms <= ?4 \
    ORDER BY expires_boot_ms, name LIMIT ?3";

/// Deletes the lease on a key if it has token ?4 and is expired at ?5 (now) (?1 ns, ?2
/// space, ?3 name), answering its holder (for the death record). A member riding a
/// session is expired once its session is ([`live_until`]).
const REAP: &str = concat!(
    "DELETE FROM liveness_leases AS l \
    WHERE l.ns = ?1 AND l.space = ?2 AND l.name = ?3 AND l.token = ?4 AND ",
    live_until!(),
    " <= ?5 RETURNING holder"
);

/// Puts the token of a lease declared dead in the dead set (?1 ns, ?2 token, ?3 space, ?4 name).
const BURY: &str = "INSERT INTO liveness_dead (ns, token, space, name) VALUES (?1, ?2, ?3, ?4)";

/// Up to ?2 tokens of the dead set (?1 ns), oldest first.
const DEAD_TOKENS: &str =
    "SELECT token, space, name FROM liveness_dead WHERE ns = ?1 ORDER BY token LIMIT ?2";

/// Takes token ?2 out of the dead set (?1 ns), answering the death record its sweep
/// counts in when that is not its own (a member declared dead with its session: the
/// session's seq).
const FORGET_DEAD: &str =
    "DELETE FROM liveness_dead WHERE ns = ?1 AND token = ?2 RETURNING death_seq";

/// Whether token ?2 is in the dead set (?1 ns).
const IS_DEAD: &str = "SELECT 1 FROM liveness_dead WHERE ns = ?1 AND token = ?2";

/// Whether members ride session token ?2 (?1 ns), on the session index.
const RIDERS_LEFT: &str =
    "SELECT 1 FROM liveness_leases WHERE ns = ?1 AND session_token = ?2 LIMIT 1";

/// Which of the tokens of the JSON array ?2 members ride (?1 ns), on the session
/// index.
const WITH_RIDERS: &str = "SELECT DISTINCT session_token FROM liveness_leases \
    WHERE ns = ?1 AND session_token IN (SELECT value FROM json_each(?2))";

/// Takes the tokens of the JSON array ?2 out of the dead set (?1 ns): those that were
/// in it, each with the death record it is linked to.
const FORGET_DEAD_MANY: &str = "DELETE FROM liveness_dead \
    WHERE ns = ?1 AND token IN (SELECT value FROM json_each(?2)) RETURNING token, death_seq";

/// The items the tokens of the JSON array ?2 own (?1 ns), each with its owner: read
/// before [`SWEEP_ITEMS_MANY`], whose `RETURNING` sees the owner cleared.
const OWNED_BY_MANY: &str = "SELECT id, owner FROM liveness_items \
    WHERE ns = ?1 AND state = 1 AND owner IN (SELECT value FROM json_each(?2))";

/// Gives back every item the tokens of the JSON array ?2 own (?1 ns), as
/// [`SWEEP_ITEMS`] does for one (claimable from, their attempts finished at, and a
/// dead letter's retention counted from, store-clock ms ?3).
const SWEEP_ITEMS_MANY: &str = "UPDATE liveness_items SET owner = NULL, \
    state = CASE WHEN attempts < max_attempts THEN 0 ELSE 2 END, ready_at = ?3, \
    finished_at = ?3, dead_at = CASE WHEN attempts < max_attempts THEN NULL ELSE ?3 END \
    WHERE ns = ?1 AND state = 1 AND owner IN (SELECT value FROM json_each(?2)) \
    RETURNING id, state";

/// Adds sweeps to the death records of the tokens they name (?1 ns, ?2 a JSON array of
/// `[token, requeued, dead_lettered]`), as [`SWEPT`] does for one.
const SWEPT_MANY: &str = "UPDATE liveness_deaths \
    SET requeued = COALESCE(requeued, 0) + s.r, dead_lettered = COALESCE(dead_lettered, 0) + s.d \
    FROM (SELECT json_extract(value, '$[0]') AS k, SUM(json_extract(value, '$[1]')) AS r, \
    SUM(json_extract(value, '$[2]')) AS d \
    FROM json_each(?2) GROUP BY k) AS s WHERE ns = ?1 AND token = s.k";

/// Adds sweeps to the death records they were linked to by seq (?1 ns, ?2 a JSON array
/// of `[seq, requeued, dead_lettered]`, several per seq summed), as [`SWEPT_UNDER`]
/// does for one.
const SWEPT_UNDER_MANY: &str = "UPDATE liveness_deaths \
    SET requeued = COALESCE(requeued, 0) + s.r, dead_lettered = COALESCE(dead_lettered, 0) + s.d \
    FROM (SELECT json_extract(value, '$[0]') AS k, SUM(json_extract(value, '$[1]')) AS r, \
    SUM(json_extract(value, '$[2]')) AS d \
    FROM json_each(?2) GROUP BY k) AS s WHERE ns = ?1 AND seq = s.k";

/// The greatest token of the first ?3 members riding session token ?2 (?1 ns), in
/// token order: the end of the batch its sweep declares dead.
const BATCH_END: &str = "SELECT MAX(token) FROM (SELECT token FROM liveness_leases \
    WHERE ns = ?1 AND session_token = ?2 ORDER BY token LIMIT ?3)";

/// Puts the members riding session token ?2 with a token up to ?3 into the dead set,
/// linked to the death record ?4 (?1 ns).
const BURY_MEMBERS: &str = "INSERT INTO liveness_dead (ns, token, space, name, death_seq) \
    SELECT ns, token, space, name, ?4 FROM liveness_leases \
    WHERE ns = ?1 AND session_token = ?2 AND token <= ?3";

/// Deletes the members riding session token ?2 with a token up to ?3 (?1 ns).
const REMOVE_MEMBERS: &str = "DELETE FROM liveness_leases \
    WHERE ns = ?1 AND session_token = ?2 AND token <= ?3 RETURNING space, name, holder, token";

/// The seq of token ?2's death record (?1 ns).
const DEATH_OF: &str = "SELECT seq FROM liveness_deaths WHERE ns = ?1 AND token = ?2";

/// Counts ?3 members declared dead under death record ?2 (?1 ns); the record is swept
/// from now on (its counts add up its members' sweeps).
const MEMBERS_UNDER: &str = "UPDATE liveness_deaths SET members = members + ?3, \
    requeued = COALESCE(requeued, 0), dead_lettered = COALESCE(dead_lettered, 0) \
    WHERE ns = ?1 AND seq = ?2";

/// Gives back every item token ?2 owns (?1 ns): pending when it has attempts left,
/// claimable at once, from store-clock ms ?3 (the sweep's now), else dead-lettered,
/// its retention counted from ?3 (`dead_at`); either way its attempt finished at ?3.
const SWEEP_ITEMS: &str = "UPDATE liveness_items SET owner = NULL, \
    state = CASE WHEN attempts < max_attempts THEN 0 ELSE 2 END, ready_at = ?3, \
    finished_at = ?3, dead_at = CASE WHEN attempts < max_attempts THEN NULL ELSE ?3 END \
    WHERE ns = ?1 AND state = 1 AND owner = ?2 RETURNING id, state";

/// Draws the namespace's next death seq (?1 ns).
const NEXT_DEATH: &str =
    "INSERT INTO liveness_counters (ns, next_token, next_item, next_death) VALUES (?1, 0, 0, 1) \
    ON CONFLICT (ns) DO UPDATE SET next_death = next_death + 1 RETURNING next_death";

/// Records a death (?1 ns, ?2 seq, ?3 space, ?4 name, ?5 holder, ?6 token, ?7 at, ?8
/// cause).
const RECORD_DEATH: &str = "INSERT INTO liveness_deaths \
    (ns, seq, space, name, holder, token, at_ms, cause) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

/// Drops the death records of seq ?2 and older (?1 ns): those out of the retention.
const TRIM_DEATHS: &str = "DELETE FROM liveness_deaths WHERE ns = ?1 AND seq <= ?2";

/// Adds what the sweep of token ?2 moved to its death record (?1 ns, ?3 requeued, ?4
/// dead-lettered).
const SWEPT: &str = "UPDATE liveness_deaths \
    SET requeued = COALESCE(requeued, 0) + ?3, dead_lettered = COALESCE(dead_lettered, 0) + ?4 \
    WHERE ns = ?1 AND token = ?2";

/// Adds what the sweep of a member declared dead with its session moved to the session's
/// death record, seq ?2 (?1 ns, ?3 requeued, ?4 dead-lettered).
const SWEPT_UNDER: &str = "UPDATE liveness_deaths \
    SET requeued = COALESCE(requeued, 0) + ?3, dead_lettered = COALESCE(dead_lettered, 0) + ?4 \
    WHERE ns = ?1 AND seq = ?2";

/// Up to ?3 death records with seq below ?2 (?1 ns), newest first.
const DEATHS: &str = "SELECT seq, space, name, holder, token, at_ms, cause, \
    requeued, dead_lettered, members FROM liveness_deaths WHERE ns = ?1 AND seq < ?2 \
    ORDER BY seq DESC LIMIT ?3";

impl SqliteStore {
    /// Up to `limit` leases of `space` expired at the store's now, earliest expiry
    /// first ([`LeaseStore::expired`]; the caller checked `limit`).
    pub(crate) async fn find_expired(
        &self,
        space: &Space,
        limit: usize,
    ) -> Result<Vec<ExpiredLease>> {
        let q = self
            .query(EXPIRED)
            .bind(space.as_ref())
            .bind(limit_param(limit))
            .bind(self.now()?);
        self.list(q, |row| {
            let name = Name::new(get_text(row, 0)?)
                .map_err(|_| corrupt("bad name in the liveness database"))?;
            Ok(ExpiredLease::new(
                Key::new(space.clone(), name),
                HolderId::new(get_text(row, 1)?)
                    .map_err(|_| corrupt("bad holder in the liveness database"))?,
                FencingToken(get_u64(row, 2, "token")?),
            ))
        })
        .await
    }

    /// Reaps the lease on `key` if it still has `token` and is expired at store time
    /// `now` ([`LeaseStore::reap_many`]'s entry), inside the open write transaction on
    /// `conn`: true when this call declared it dead (the caller commits, and wakes the
    /// waiters).
    pub(crate) async fn reap_in(
        &self,
        conn: &mut SqliteConnection,
        key: &Key,
        token: FencingToken,
        now: i64,
    ) -> Result<bool> {
        self.declare_dead_in(conn, REAP, key, token, true, now)
            .await
    }

    /// Runs `RELEASE` (lease.rs) or [`REAP`] on the lease on `key` with `token` inside
    /// the open write transaction on `conn`, at store time `now`: true when it removed
    /// the lease, buried its token and recorded its death (the caller commits, and
    /// wakes the waiters). When `clocked` (`REAP`), `now` is bound last.
    pub(crate) async fn declare_dead_in(
        &self,
        conn: &mut SqliteConnection,
        statement: &'static str,
        key: &Key,
        token: FencingToken,
        clocked: bool,
        now: i64,
    ) -> Result<bool> {
        let mut q = self
            .query(statement)
            .bind(key.space().as_ref())
            .bind(key.name().as_ref())
            .bind(as_db(token.0));
        if clocked {
            q = q.bind(now);
        }
        let holder: Option<String> = q
            .fetch_optional(&mut *conn)
            .await
            .map_err(map)?
            .map(|row| get_text(&row, 0))
            .transpose()?;
        let Some(holder) = holder else {
            return Ok(false);
        };
        self.bury(&mut *conn, key, token.0).await?;
        let cause = if clocked {
            DeathCause::Reaped
        } else {
            DeathCause::Released
        };
        self.record_death(&mut *conn, key, &holder, token.0, now, cause)
            .await?;
        Ok(true)
    }

    /// Moves the lease on `key` with `token` to the dead set (the caller deleted it).
    pub(crate) async fn bury(
        &self,
        conn: &mut SqliteConnection,
        key: &Key,
        token: u64,
    ) -> Result<()> {
        self.query(BURY)
            .bind(to_i64(token, "token")?)
            .bind(key.space().as_ref())
            .bind(key.name().as_ref())
            .execute(&mut *conn)
            .await
            .map_err(map)?;
        Ok(())
    }

    /// Records the death of `token` on `key` (held by `holder`) at store time `now`,
    /// inside the open write transaction, and drops the records that fell out of the
    /// retention (by seq: each record is deleted once, so O(1) amortized).
    pub(crate) async fn record_death(
        &self,
        conn: &mut SqliteConnection,
        key: &Key,
        holder: &str,
        token: u64,
        now: i64,
        cause: DeathCause,
    ) -> Result<()> {
        let seq = self.next(conn, NEXT_DEATH).await?;
        self.query(RECORD_DEATH)
            .bind(seq)
            .bind(key.space().as_ref())
            .bind(key.name().as_ref())
            .bind(holder)
            .bind(to_i64(token, "token")?)
            .bind(now)
            .bind(cause_code(cause))
            .execute(&mut *conn)
            .await
            .map_err(map)?;
        let keep = to_i64(self.info.caps.death_retention.max(1) as u64, "retention")?;
        if seq > keep {
            self.query(TRIM_DEATHS)
                .bind(seq - keep)
                .execute(&mut *conn)
                .await
                .map_err(map)?;
        }
        Ok(())
    }

    /// Up to `limit` tokens of the dead set, oldest first
    /// ([`ItemStore::dead_tokens`]; the caller checked `limit`).
    pub(crate) async fn dead_set(&self, limit: usize) -> Result<Vec<DeadToken>> {
        let q = self.query(DEAD_TOKENS).bind(limit_param(limit));
        self.list(q, |row| {
            let space = Space::new(get_text(row, 1)?)
                .map_err(|_| corrupt("bad space in the liveness database"))?;
            let name = Name::new(get_text(row, 2)?)
                .map_err(|_| corrupt("bad name in the liveness database"))?;
            Ok(DeadToken::new(
                Key::new(space, name),
                FencingToken(get_u64(row, 0, "token")?),
            ))
        })
        .await
    }

    /// Sweeps the items `token` owned ([`ItemStore::sweep_many`]'s entry)
    /// inside the open write transaction on `conn` (the caller commits): takes the
    /// token out of the dead set, gives its items back and fills in its death record;
    /// `None` when the token is not in the dead set (nothing written). A dead
    /// session's token declares at most `budget` riding members dead, lowering it
    /// ([`SqliteStore::sweep_members`]), and leaves the dead set, its items swept, only
    /// in the call that finds none left.
    pub(crate) async fn sweep_in(
        &self,
        conn: &mut SqliteConnection,
        token: FencingToken,
        budget: &mut usize,
    ) -> Result<Option<Sweep>> {
        let t = as_db(token.0);
        let mut out = Sweep::default();
        if self.riders_left(conn, t).await? {
            if self.token_row(conn, IS_DEAD, t).await?.is_none() {
                // A live session's token: its members are not dead.
                return Ok(None);
            }
            out.members = self.sweep_members(conn, t, budget).await?;
            if self.riders_left(conn, t).await? {
                return Ok(Some(out));
            }
        }
        let Some(forgotten) = self.token_row(conn, FORGET_DEAD, t).await? else {
            return Ok((!out.members.is_empty()).then_some(out));
        };
        let linked: Option<i64> = forgotten.try_get(0).map_err(map)?;
        let rows = self
            .query(SWEEP_ITEMS)
            .bind(t)
            .bind(self.now()?)
            .fetch_all(&mut *conn)
            .await
            .map_err(map)?;
        self.record_sweep(&mut *conn, t, linked, &rows).await?;
        for row in &rows {
            let id = ItemId(get_u64(row, 0, "item id")?);
            let state: i64 = row.try_get(1).map_err(map)?;
            if state == STATE_PENDING {
                out.requeued.push(id);
            } else {
                out.dead_lettered.push(id);
            }
        }
        out.requeued.sort();
        out.dead_lettered.sort();
        Ok(Some(out))
    }

    /// Which of `tokens` are sessions with members riding them, in one statement.
    pub(crate) async fn with_riders(
        &self,
        conn: &mut SqliteConnection,
        tokens: &[FencingToken],
    ) -> Result<HashSet<u64>> {
        let rows = self
            .query(WITH_RIDERS)
            .bind(json_tokens(tokens.iter().map(|t| t.0)))
            .fetch_all(&mut *conn)
            .await
            .map_err(map)?;
        rows.iter().map(|row| get_u64(row, 0, "token")).collect()
    }

    /// The sweeps of `tokens`, none of them a session with members left, in the open
    /// write transaction, in a fixed number of statements whatever their number: each
    /// answers what [`sweep_in`](Self::sweep_in) of it alone would (a token not in
    /// the dead set, or a repeat, moves nothing). Each statement is a round trip to the
    /// connection's worker thread, which costs more than the database's work: a mass
    /// death's sweeps are one round trip each per transaction, not several per token.
    pub(crate) async fn sweep_plain(
        &self,
        conn: &mut SqliteConnection,
        tokens: &[FencingToken],
    ) -> Result<Vec<Sweep>> {
        let mut out = vec![Sweep::default(); tokens.len()];
        let forgotten = self
            .query(FORGET_DEAD_MANY)
            .bind(json_tokens(tokens.iter().map(|t| t.0)))
            .fetch_all(&mut *conn)
            .await
            .map_err(map)?;
        if forgotten.is_empty() {
            return Ok(out);
        }
        // Each forgotten token: the death record it is linked to, and its counts.
        let mut swept: HashMap<u64, (Option<i64>, Sweep)> = HashMap::new();
        for row in &forgotten {
            let token = get_u64(row, 0, "token")?;
            let linked: Option<i64> = row.try_get(1).map_err(map)?;
            swept.insert(token, (linked, Sweep::default()));
        }
        let owners = json_tokens(swept.keys().copied());
        let owned = self
            .query(OWNED_BY_MANY)
            .bind(&owners)
            .fetch_all(&mut *conn)
            .await
            .map_err(map)?;
        let mut owner_of = HashMap::with_capacity(owned.len());
        for row in &owned {
            owner_of.insert(get_u64(row, 0, "item id")?, get_u64(row, 1, "owner")?);
        }
        let items = self
            .query(SWEEP_ITEMS_MANY)
            .bind(&owners)
            .bind(self.now()?)
            .fetch_all(&mut *conn)
            .await
            .map_err(map)?;
        for row in &items {
            let id = get_u64(row, 0, "item id")?;
            let state: i64 = row.try_get(1).map_err(map)?;
            let owner = owner_of.get(&id).copied();
            let id = ItemId(id);
            let Some((_, moved)) = owner.and_then(|o| swept.get_mut(&o)) else {
                return Err(corrupt("an item handed back for a token not swept"));
            };
            if state == STATE_PENDING {
                moved.requeued.push(id);
            } else {
                moved.dead_lettered.push(id);
            }
        }
        let (mut by_token, mut by_seq) = (Vec::new(), Vec::new());
        for (token, (linked, moved)) in &mut swept {
            moved.requeued.sort();
            moved.dead_lettered.sort();
            let counts = (moved.requeued.len(), moved.dead_lettered.len());
            match linked {
                None => by_token.push(format!("[{token},{},{}]", counts.0, counts.1)),
                Some(seq) => by_seq.push(format!("[{seq},{},{}]", counts.0, counts.1)),
            }
        }
        for (statement, sums) in [(SWEPT_MANY, by_token), (SWEPT_UNDER_MANY, by_seq)] {
            if sums.is_empty() {
                continue;
            }
            self.query(statement)
                .bind(format!("[{}]", sums.join(",")))
                .execute(&mut *conn)
                .await
                .map_err(map)?;
        }
        // Each token's answer at its first place in the call; a repeat moved nothing.
        for (i, token) in tokens.iter().enumerate() {
            if let Some((_, moved)) = swept.remove(&token.0) {
                out[i] = moved;
            }
        }
        Ok(out)
    }

    /// Whether members ride session token `token`.
    async fn riders_left(&self, conn: &mut SqliteConnection, token: i64) -> Result<bool> {
        Ok(self.token_row(conn, RIDERS_LEFT, token).await?.is_some())
    }

    /// The row, if any, that `statement` (?1 ns, ?2 token) answers for `token`.
    async fn token_row(
        &self,
        conn: &mut SqliteConnection,
        statement: &'static str,
        token: i64,
    ) -> Result<Option<SqliteRow>> {
        self.query(statement)
            .bind(token)
            .fetch_optional(conn)
            .await
            .map_err(map)
    }

    /// Declares up to `budget` of the members riding the dead session `token` dead,
    /// lowering `budget`, in the open write transaction: each row deleted and its token
    /// put in the dead set, linked to the session's death record (no record of its
    /// own), whose member count grows by as many. A fixed number of statements whatever
    /// the batch. Returns the members declared dead.
    async fn sweep_members(
        &self,
        conn: &mut SqliteConnection,
        token: i64,
        budget: &mut usize,
    ) -> Result<Vec<ExpiredLease>> {
        if *budget == 0 {
            return Ok(Vec::new());
        }
        let end: Option<i64> = sqlx::query_scalar(BATCH_END)
            .bind(self.ns.as_ref())
            .bind(token)
            .bind(limit_param(*budget))
            .fetch_one(&mut *conn)
            .await
            .map_err(map)?;
        let Some(end) = end else {
            return Ok(Vec::new());
        };
        let seq: Option<i64> = match self.token_row(conn, DEATH_OF, token).await? {
            Some(row) => row.try_get(0).map_err(map)?,
            None => None,
        };
        // Both statements act on the batch: ?2 the session's token, ?3 the batch's end.
        let on_batch = |statement| self.query(statement).bind(token).bind(end);
        on_batch(BURY_MEMBERS)
            .bind(seq)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
        let rows = on_batch(REMOVE_MEMBERS)
            .fetch_all(&mut *conn)
            .await
            .map_err(map)?;
        *budget = budget.saturating_sub(rows.len());
        if let Some(seq) = seq {
            self.query(MEMBERS_UNDER)
                .bind(seq)
                .bind(i64::try_from(rows.len()).unwrap_or(i64::MAX))
                .execute(&mut *conn)
                .await
                .map_err(map)?;
        }
        let mut members = rows
            .iter()
            .map(|row| {
                let space = Space::new(get_text(row, 0)?)
                    .map_err(|_| corrupt("bad space in the liveness database"))?;
                let name = Name::new(get_text(row, 1)?)
                    .map_err(|_| corrupt("bad name in the liveness database"))?;
                Ok(ExpiredLease::new(
                    Key::new(space, name),
                    HolderId::new(get_text(row, 2)?)
                        .map_err(|_| corrupt("bad holder in the liveness database"))?,
                    FencingToken(get_u64(row, 3, "token")?),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        members.sort_by_key(|m| m.token);
        Ok(members)
    }

    /// Adds what the sweep of `token` moved (`rows` of [`SWEEP_ITEMS`]) to its death
    /// record, or to the record `linked` (a member declared dead with its session: the
    /// session's), inside the sweep's write transaction.
    async fn record_sweep(
        &self,
        conn: &mut SqliteConnection,
        token: i64,
        linked: Option<i64>,
        rows: &[SqliteRow],
    ) -> Result<()> {
        let mut requeued = 0i64;
        for row in rows {
            let state: i64 = row.try_get(1).map_err(map)?;
            if state == STATE_PENDING {
                requeued += 1;
            }
        }
        let dead = i64::try_from(rows.len()).unwrap_or(i64::MAX) - requeued;
        let q = match linked {
            None => self.query(SWEPT).bind(token),
            Some(seq) => self.query(SWEPT_UNDER).bind(seq),
        };
        q.bind(requeued)
            .bind(dead)
            .execute(conn)
            .await
            .map_err(map)?;
        Ok(())
    }

    /// Up to `limit` death records with seq below `before`, newest first
    /// ([`OperatorStore::deaths`]; the caller checked `limit`).
    pub(crate) async fn death_records(
        &self,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<DeathRecord>> {
        let q = self
            .query(DEATHS)
            .bind(before.map_or(i64::MAX, as_db))
            .bind(limit_param(limit));
        self.list(q, |row| {
            let space = Space::new(get_text(row, 1)?)
                .map_err(|_| corrupt("bad space in the liveness database"))?;
            let name = Name::new(get_text(row, 2)?)
                .map_err(|_| corrupt("bad name in the liveness database"))?;
            let requeued: Option<i64> = row.try_get(7).map_err(map)?;
            let dead: Option<i64> = row.try_get(8).map_err(map)?;
            let count = |n: i64| {
                u64::try_from(n).map_err(|_| corrupt("bad swept count in the liveness database"))
            };
            let swept = match (requeued, dead) {
                (Some(r), Some(d)) => Some(Swept::new(
                    count(row.try_get(9).map_err(map)?)?,
                    count(r)?,
                    count(d)?,
                )),
                _ => None,
            };
            Ok(DeathRecord::new(
                get_u64(row, 0, "seq")?,
                Key::new(space, name),
                HolderId::new(get_text(row, 3)?)
                    .map_err(|_| corrupt("bad holder in the liveness database"))?,
                FencingToken(get_u64(row, 4, "token")?),
                StoreTime::from_epoch(Duration::from_millis(get_u64(row, 5, "at")?)),
                cause_from_code(row.try_get(6).map_err(map)?)?,
                swept,
            ))
        })
        .await
    }
}

/// `tokens` as a JSON array of numbers, for `json_each`.
fn json_tokens(tokens: impl Iterator<Item = u64>) -> String {
    let all: Vec<String> = tokens.map(|t| t.to_string()).collect();
    format!("[{}]", all.join(","))
}
