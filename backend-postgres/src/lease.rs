//! `impl LeaseStore for PostgresStore`: each method runs its own statement (below),
//! or forwards to `deaths.rs` (expiry, reaping, the dead set, the death records) and
//! `batch.rs` (the `*_many` batches). Their input was checked before the call
//! ([`liveness_core::CheckInput`]): they do not check it again.

use std::time::Duration;

use liveness_core::{
    async_trait, Acquire, BatchResult, DeadToken, DeathCause, DeathRecord, ExpiredLease,
    FencingToken, HolderId, JoinAsk, Key, Lease, LeaseInfo, LeaseStore, LostCause, Page, Result,
    Space, StoreInfo, StoreTime, Ttl,
};
use sqlx::postgres::PgRow;
use tokio::sync::watch;

use crate::conns::Query;
use crate::core::{
    db_token, expiry_of, get, holder_of, limit_param, listed_lease, on_key, session_expiry,
    session_of, status_of, token_of, ttl_ms, ttl_of, PostgresStore,
};
use crate::deaths::retire_gone;
use crate::error::{corrupt, insert_races};

/// How many times `acquire` reruns its statement after losing an insert race on a
/// free key (the rerun then reports the winner as `Held`).
const ACQUIRE_RETRIES: usize = 8;

/// The key's row of `ACQUIRE` and `JOIN_SESSION` ($1 space, $2 name, $3 holder) read
/// and locked when `$filter` (SQL text, empty or starting with ` AND`) holds (CTE
/// `cur`: its holder, token and whether it is live by the server clock `clk.t`, a
/// lease of this holder drawn before the epoch's floor `clk.floor` counting as not
/// live), and an expired one retired ([`retire_gone`], cause superseded, retention
/// `$retention`).
macro_rules! lock_key {
    ($filter:literal, $retention:literal) => {
        concat!(
            r#"
cur AS MATERIALIZED (
    SELECT l.holder, l.token,
           "#,
            expiry_of!("l"),
            r#" > clk.t AND NOT (l.holder = $3 AND l.token < clk.floor) AS live
    FROM leases l, clk
    WHERE l.space = $1 AND l.name = $2"#,
            $filter,
            r#"
    FOR UPDATE OF l
),
gone AS (SELECT token, holder FROM cur WHERE NOT live),"#,
            retire_gone!("2", $retention),
        )
    };
}

/// The end of `ACQUIRE` and `JOIN_SESSION`, from inside their `put` CTE's upsert
/// (which overwrites only the row `gone` retired): the waiters woken on channel
/// `$channel` (SQL text) when a lease was retired, then the first four columns: the
/// new token (NULL when not taken), the live holder and its token (what
/// [`PostgresStore::acquired`] reads), and whether a lease was retired.
macro_rules! take_answer {
    ($channel:literal) => {
        concat!(
            r#"
        WHERE l.token = (SELECT token FROM gone)
    RETURNING token
),
woke AS (SELECT pg_notify("#,
            $channel,
            r#", 'retired') FROM dead)
SELECT (SELECT token FROM put) AS token,
       (SELECT holder FROM cur) AS holder,
       (SELECT token FROM cur) AS held_token,
       (SELECT count(*) FROM woke) AS woke"#
        )
    };
}

/// `acquire`: $1 space, $2 name, $3 holder, $4 ttl_ms, $5 notify channel, $6 death
/// retention.
///
/// Locks the current row (if any); an expired one is retired to the dead set (with
/// its death record, cause superseded) and overwritten in the same statement; a live
/// one is reported as held. The token is drawn by `next_token()` (migration 6): the
/// server's timeline in front of the sequence's value, so tokens never go back, not
/// even across a promotion.
///
/// One exception to "live is held": a lease drawn on an earlier timeline (its token is
/// below `token_epoch() << 40`) that its own holder asks for again is taken over as
/// if expired. A holder asking for a key it holds has lost track of that lease; after
/// a promotion the new primary may have revived it (it lacked the release) with the
/// items claimed under it, which the holder was told to drop. Taken over, its token
/// goes to the dead set and a sweep hands those items back; adopted, nobody would
/// ever complete them. A member riding a session (migration 8) is judged by its
/// session ([`expiry_of`]): one whose session expired or is gone is taken over, and
/// the new lease is a lease of its own. `token` is NULL and `held_token` NULL only
/// when a concurrent acquire inserted the key first: the caller runs the statement
/// again.
const ACQUIRE: &str = concat!(
    r#"
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t, token_epoch() << 40 AS floor),
"#,
    lock_key!("", "$6"),
    r#"
put AS (
    INSERT INTO leases AS l (space, name, holder, token, ttl_ms, expires_at)
    SELECT $1, $2, $3, next_token(), $4, clk.t + $4 * interval '1 millisecond'
    FROM clk
    WHERE NOT EXISTS (SELECT 1 FROM cur WHERE live)
    ON CONFLICT (space, name) DO UPDATE
        SET holder = excluded.holder, token = excluded.token,
            ttl_ms = excluded.ttl_ms, expires_at = excluded.expires_at, last_claim = NULL,
            session_name = NULL, session_token = NULL"#,
    take_answer!("$5"),
    "\n"
);

/// `renew`: $1 space, $2 name, $3 token, $4 ttl_ms.
///
/// The hot path of the whole framework, so it is the bare single-row UPDATE by
/// primary key: it matches (one row affected) iff the token is current and live by
/// the server clock. The liveness check reads `clock_timestamp()` and the new expiry
/// reads it again a few microseconds later, which only ever extends the lease from a
/// later instant. When it matches nothing (the lease is lost: once per lease
/// lifetime), `RENEW_WHY` (in `core.rs`) reads the row to say why.
///
/// This is the one operation that may take two round trips: folding the diagnosis
/// into the same statement (a data-modifying CTE with a second branch) cost 10-20 %
/// of the server's renewals per second in the bench, on every renewal, to save a
/// round trip on the one that fails.
///
/// A lease drawn on an earlier timeline is renewed only when it was drawn under
/// synchronous replication (`synced`, migration 7): after a promotion from an
/// asynchronous standby, or a point-in-time restore, the writes made under it may be
/// gone (a completion, a release), so its holder is told `Lost` and its items go back
/// to the queue when it is reaped.
pub(crate) const RENEW: &str = r#"
UPDATE leases SET expires_at = clock_timestamp() + $4 * interval '1 millisecond', ttl_ms = $4
WHERE space = $1 AND name = $2 AND token = $3 AND expires_at > clock_timestamp()
  AND (synced OR token >= token_epoch() << 40)
"#;

/// The head of `JOIN_SESSION` and `JOIN_SESSION_MANY`, where $4 is the session's name
/// (in `sessions`) and $5 its token: the server's now `clk.t` and the current
/// epoch's token floor `clk.floor`, the session's row read once `FOR KEY SHARE`
/// (CTE `ses`: its token, whether it is live, whether it may outlive a promotion, its
/// time left in µs) and judged once (CTE `ok`: one row iff the session is current).
macro_rules! session_judged_once {
    () => {
        r#"
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t, token_epoch() << 40 AS floor),
ses AS MATERIALIZED (
    SELECT s.token, s.session_token IS NULL AND s.expires_at > clk.t AS live,
           s.synced OR s.token >= clk.floor AS kept,
           (extract(epoch FROM (s.expires_at - clk.t)) * 1000000)::bigint AS left_us
    FROM leases s, clk
    WHERE s.space = 'sessions' AND s.name = $4
    FOR KEY SHARE OF s
),
ok AS MATERIALIZED (SELECT 1 FROM ses WHERE token = $5 AND live AND kept),
"#
    };
}
pub(crate) use session_judged_once;

/// `join_session`: $1 space, $2 name, $3 holder, $4 the session's name (in
/// `sessions`), $5 the session's token, $6 ttl_ms (the session lease's), $7 notify
/// channel, $8 death retention.
///
/// The session's row is read `FOR KEY SHARE`: a concurrent reap, release or takeover
/// of the session (which lock it `FOR UPDATE` or delete it) waits for the join, and a
/// join after them finds it gone; renewals of the session do not wait. So no member
/// joins a session whose token is already in the dead set, and the drain of a dead
/// session (`REQUEUE_ORPHANS` in `deaths.rs`) sees every member it will ever have.
/// The session is current when its row holds the token, rides nothing, is live by
/// the server clock, and may outlive a promotion (`RENEW`'s rule). Then the key is
/// taken as `ACQUIRE` takes it (a live lease, its own or riding a live session, is
/// held; an expired one, or one riding an expired or gone session, is retired with
/// its death record, cause superseded), with a token from `next_token()`, the
/// session's name and token, and no expiry of its own. Columns: the new token (NULL
/// when not taken), the live holder and token, whether a lease was retired, then the
/// session's token, whether it is live, whether it may outlive a promotion (NULL:
/// no session row), and the session's time left in µs.
const JOIN_SESSION: &str = concat!(
    session_judged_once!(),
    lock_key!(" AND EXISTS (SELECT 1 FROM ok)", "$8"),
    r#"
put AS (
    INSERT INTO leases AS l (space, name, holder, token, ttl_ms, expires_at, session_name,
                             session_token)
    SELECT $1, $2, $3, next_token(), $6, NULL, $4, $5
    FROM ok
    WHERE NOT EXISTS (SELECT 1 FROM cur WHERE live)
    ON CONFLICT (space, name) DO UPDATE
        SET holder = excluded.holder, token = excluded.token, ttl_ms = excluded.ttl_ms,
            expires_at = NULL, last_claim = NULL, session_name = excluded.session_name,
            session_token = excluded.session_token"#,
    take_answer!("$7"),
    r#",
       (SELECT token FROM ses) AS session_token,
       (SELECT live FROM ses) AS session_live,
       (SELECT kept FROM ses) AS session_kept,
       (SELECT left_us FROM ses) AS session_left_us
"#
);

/// Why the session of a join is lost, from the session columns (4 to 6: its token,
/// whether it is live, whether it may outlive a promotion) of a `JOIN_SESSION` row;
/// `None` when it is current and live.
pub(crate) fn session_judged(session: &Lease, row: &PgRow) -> Result<Option<LostCause>> {
    let current: Option<i64> = get(row, 4)?;
    let live: Option<bool> = get(row, 5)?;
    let kept: Option<bool> = get(row, 6)?;
    Ok(match current {
        None => Some(LostCause::Released),
        Some(t) if token_of(t)? != session.token => Some(LostCause::Superseded),
        Some(_) if live != Some(true) => Some(LostCause::Expired),
        Some(_) if kept != Some(true) => Some(LostCause::Failover),
        Some(_) => None,
    })
}

/// How many times `join_session` reruns its statement after losing an insert race on
/// a free key (the rerun then reports the winner as `Held`).
const JOIN_RETRIES: usize = 8;

/// `inspect`: $1 space, $2 name. `remaining_us` > 0 iff live (a riding member's: its
/// session's; NULL when its session is gone or superseded); `session_name` the
/// session a member rides (NULL: a lease of its own).
const INSPECT: &str = concat!(
    r#"
SELECT l.holder, l.token, l.ttl_ms,
       (extract(epoch FROM (coalesce(l.expires_at, "#,
    session_expiry!("l"),
    r#") - clk.t)) * 1000000)::bigint AS remaining_us,
       l.session_name
FROM leases l, (SELECT clock_timestamp() AS t) clk
WHERE l.space = $1 AND l.name = $2
"#
);

/// `members`: $1 space, $2 after (the last name of the previous page, '' for the
/// first), $3 limit. Names compare by bytes (`COLLATE "C"`, which the primary key's
/// default collation may not be, so the order is the same on every server) and the
/// page is read on the `leases_members` index, by the function `members_page`
/// (migrations 4 and 8), which keeps the planner on that index whatever its
/// statistics: O(page). Columns: name, holder, token, ttl_ms, remaining_us (> 0 iff
/// live; a riding member's: its session's, NULL when that is gone), session name.
pub(crate) const MEMBERS: &str = r#"
SELECT m_name, m_holder, m_token, m_ttl_ms, m_remaining_us, m_session
FROM members_page($1, $2, $3)
"#;

/// `store_time`: the server clock in microseconds since the Unix epoch.
const STORE_TIME: &str = r#"
SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
"#;

impl PostgresStore {
    /// The one row of `ACQUIRE` or `JOIN_SESSION` ([`take_answer`]): `q` has the
    /// statement's own parameters bound, its last two, the notify channel and the
    /// death retention, are bound here, and this process's waiters are woken when it
    /// retired a lease.
    async fn take_row(&self, q: Query<'_>) -> Result<PgRow> {
        let row = self
            .db()
            .fetch_one(q.bind(self.channel()).bind(self.retention()))
            .await?;
        let woke: i64 = get(&row, 3)?;
        if woke > 0 {
            self.wake_local();
        }
        Ok(row)
    }
}

#[async_trait]
impl LeaseStore for PostgresStore {
    fn info(&self) -> &StoreInfo {
        self.store_info()
    }

    async fn acquire(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Result<Lease> {
        for _ in 0..ACQUIRE_RETRIES {
            let q = on_key(ACQUIRE, key).bind(holder.as_str()).bind(ttl_ms(ttl));
            let row = self.take_row(q).await?;
            if let Some(answer) = self.acquired(key, holder, ttl, &row)? {
                return answer;
            }
            // A concurrent acquire inserted the key after our snapshot: run again.
        }
        Err(insert_races())
    }

    async fn acquire_many(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        self.acquire_batch(asks).await
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let q = on_key(RENEW, &lease.key)
            .bind(db_token(lease.token))
            .bind(ttl_ms(lease.ttl));
        let renewed = self.db().execute(q).await?;
        if renewed > 0 {
            return Ok(lease.renewed());
        }
        // Lost, or a member riding a session: it has no expiry of its own, so the
        // UPDATE never matches it, and it answers as its session stands.
        self.renew_why(lease).await?
    }

    async fn join_session(&self, session: &Lease, key: &Key, holder: &HolderId) -> Result<Lease> {
        for _ in 0..JOIN_RETRIES {
            let q = on_key(JOIN_SESSION, key)
                .bind(holder.as_str())
                .bind(session.key.name().as_str())
                .bind(db_token(session.token))
                .bind(ttl_ms(session.ttl));
            let row = self.take_row(q).await?;
            if let Some(cause) = session_judged(session, &row)? {
                return Err(session.lost(cause));
            }
            if let Some(answer) = self.acquired(key, holder, session.ttl, &row)? {
                let left: i64 = get(&row, 7)?;
                return answer.map(|member| Lease {
                    expires_in: Duration::from_micros(left.unsigned_abs()),
                    ..member
                });
            }
            // A concurrent acquire inserted the key after our snapshot: run again.
        }
        Err(insert_races())
    }

    async fn join_session_many(&self, session: &Lease, asks: &[JoinAsk]) -> BatchResult<Lease> {
        self.join_batch(session, asks).await
    }

    async fn renew_many(&self, leases: &[Lease]) -> BatchResult<Lease> {
        self.renew_batch(leases).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.retire(DeathCause::Released, &lease.key, db_token(lease.token))
            .await
    }

    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        let q = on_key(INSPECT, key);
        let row = self.db().fetch_optional(q).await?;
        let Some(row) = row else {
            return Ok(None);
        };
        Ok(Some(LeaseInfo {
            session: session_of(get(&row, 4)?)?,
            key: key.clone(),
            holder: holder_of(get(&row, 0)?)?,
            token: token_of(get(&row, 1)?)?,
            ttl: ttl_of(get(&row, 2)?)?,
            status: status_of(get(&row, 3)?),
        }))
    }

    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        self.find_expired(space, limit).await
    }

    async fn reap(&self, key: &Key, token: FencingToken) -> Result<bool> {
        let Ok(token) = i64::try_from(token.0) else {
            return Ok(false);
        };
        self.retire(DeathCause::Reaped, key, token).await
    }

    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
        self.reap_batch(expired).await
    }

    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        self.list_dead_tokens(limit).await
    }

    async fn members(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let Page { after, limit } = page;
        let q = sqlx::query(MEMBERS)
            .bind(space.as_str())
            .bind(after.map_or("", |k| k.name().as_str()))
            .bind(limit_param(limit));
        self.list(q, |row| {
            let (key, holder, token) = listed_lease(space, row)?;
            Ok(LeaseInfo {
                session: session_of(get(row, 5)?)?,
                key,
                holder,
                token,
                ttl: ttl_of(get(row, 3)?)?,
                status: status_of(get(row, 4)?),
            })
        })
        .await
    }

    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        self.death_records(before, limit).await
    }

    async fn store_time(&self) -> Result<StoreTime> {
        let q = sqlx::query(STORE_TIME);
        let row = self.db().fetch_one(q).await?;
        let micros: i64 = get(&row, 0)?;
        let micros = u64::try_from(micros).map_err(|_| {
            corrupt(format!(
                "unexpected value in the clock_timestamp column: {micros}"
            ))
        })?;
        // The contract wants it non-decreasing per handle; a server clock stepped
        // back (NTP) must not show through.
        Ok(self.high_water().observe(Duration::from_micros(micros)))
    }

    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        self.time_to_next_expiry(space).await
    }

    fn wakeups(&self) -> Option<watch::Receiver<u64>> {
        Some(self.subscribe())
    }
}

#[cfg(test)]
mod tests {
    /// The bench measures the store's renew statement against the same UPDATE in a
    /// bare loop and in pgbench; it keeps a copy of the text, which must not drift.
    #[test]
    fn the_bench_runs_the_renew_statement() {
        let bench = include_str!("../benches/bench.rs");
        let copy = format!("const RENEW: &str = r#\"{}\"#;", super::RENEW);
        assert!(
            bench.contains(&copy),
            "benches/bench.rs must carry the RENEW statement of src/lease.rs as it is"
        );
    }
}
