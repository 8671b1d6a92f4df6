//! `impl LeaseStore for PostgresStore`: each method runs its own statement (below),
//! or forwards to `deaths.rs` (expiry, releasing) and `batch.rs` (the `*_many`
//! batches, which a single call reaches as a batch of one). Their input was checked
//! before the call ([`liveness_core::CheckInput`]): they do not check it again.

use std::time::Duration;

use liveness_core::{
    async_trait, Acquire, BatchResult, ExpiredLease, FencingToken, HolderId, JoinAsk, Key, Lease,
    LeaseInfo, LeaseStore, LostCause, Result, Space, StoreInfo,
};
use sqlx::postgres::PgRow;
use tokio::sync::watch;

use crate::core::{
    db_token, expiry_of, get, holder_of, on_key, session_expiry, session_of, status_of, token_of,
    ttl_ms, ttl_of, PostgresStore,
};
use crate::deaths::declare_gone_dead;
use crate::error::insert_races;

/// `renew_many` of one lease (`Store::renew`): $1 space, $2 name, $3 token, $4 ttl_ms.
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

/// `join_session_many` of one entry, for an entry its one statement
/// (`JOIN_SESSION_MANY` in `batch.rs`) cannot take: a key the batch names twice, or a
/// key a concurrent insert won. $1 space, $2 name, $3 holder, $4 the session's name
/// (in `sessions`), $5 the session's token, $6 ttl_ms (the session lease's), $7
/// notify channel, $8 death retention.
///
/// The session's row is read `FOR KEY SHARE`: a concurrent reap, release or takeover
/// of the session (which lock it `FOR UPDATE` or delete it) waits for the join, and a
/// join after them finds it gone; renewals of the session do not wait. So no member
/// joins a session whose token is already in the dead set, and the sweep of a dead
/// session (`SWEEP` in `deaths.rs`) sees every member it will ever have.
/// The session is current when its row holds the token, rides nothing, is live by
/// the server clock, and may outlive a promotion (`RENEW`'s rule). Then the key's row
/// is locked (CTE `cur`: its holder, token and whether it is live by the server clock
/// `clk.t`, a lease of this holder drawn before the epoch's floor `clk.floor`
/// counting as not live, as `acquire_many` judges it): a live lease, its own or
/// riding a live session, is held; an expired one, or one riding an expired or gone
/// session, is declared dead ([`declare_gone_dead`]: dead set, death record, cause superseded)
/// and overwritten, with a token from `next_token()`, the session's name and token,
/// and no expiry of its own. Columns: the new token (NULL when not taken), the live
/// holder and token (what [`PostgresStore::acquired`] reads), whether a lease was
/// declared dead, then the session's token, whether it is live, whether it may outlive a
/// promotion (NULL: no session row), and the session's time left in µs. `token` and
/// `held_token` are NULL with a current session only when a concurrent insert won
/// the free key: the caller runs the statement again.
const JOIN_SESSION: &str = concat!(
    session_judged_once!(),
    r#"
cur AS MATERIALIZED (
    SELECT l.holder, l.token,
           "#,
    expiry_of!("l"),
    r#" > clk.t AND NOT (l.holder = $3 AND l.token < clk.floor) AS live
    FROM leases l, clk
    WHERE l.space = $1 AND l.name = $2 AND EXISTS (SELECT 1 FROM ok)
    FOR UPDATE OF l
),
gone AS (SELECT token, holder FROM cur WHERE NOT live),"#,
    declare_gone_dead!("2", "$8"),
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
            session_token = excluded.session_token
        WHERE l.token = (SELECT token FROM gone)
    RETURNING token
),
woke AS (SELECT pg_notify($7, 'retired') FROM dead)
SELECT (SELECT token FROM put) AS token,
       (SELECT holder FROM cur) AS holder,
       (SELECT token FROM cur) AS held_token,
       (SELECT count(*) FROM woke) AS woke,
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

/// How many times [`PostgresStore::join_one`] reruns its statement after losing an
/// insert race on a free key (the rerun then reports the winner as `Held`).
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

impl PostgresStore {
    /// Renews `lease` alone: [`RENEW`], the bare single-row UPDATE, and `renew_why`
    /// when it matched nothing (lost, or a member riding a session: it has no expiry
    /// of its own, so the UPDATE never matches it, and it answers as its session
    /// stands). What `renew_many` runs for a batch of one lease: the heartbeat of a
    /// member without a batcher, the framework's hot path, where `RENEW_MANY` (in
    /// `batch.rs`) costs the server several times the CPU for the same row.
    pub(crate) async fn renew_one(&self, lease: &Lease) -> Result<Lease> {
        let q = on_key(RENEW, &lease.key)
            .bind(db_token(lease.token))
            .bind(ttl_ms(lease.ttl));
        if self.db().execute(q).await? > 0 {
            return Ok(lease.renewed());
        }
        self.renew_why(lease).await?
    }

    /// Joins `key` for `holder` into `session` alone ([`JOIN_SESSION`]), running the
    /// statement again after a lost insert race: what `join_session_many` does for an
    /// entry its one statement cannot take. Wakes this process's waiters when it
    /// declared a lease dead.
    pub(crate) async fn join_one(
        &self,
        session: &Lease,
        key: &Key,
        holder: &HolderId,
    ) -> Result<Lease> {
        for _ in 0..JOIN_RETRIES {
            let q = on_key(JOIN_SESSION, key)
                .bind(holder.as_str())
                .bind(session.key.name().as_str())
                .bind(db_token(session.token))
                .bind(ttl_ms(session.ttl))
                .bind(self.channel())
                .bind(self.retention());
            let row = self.db().fetch_one(q).await?;
            let woke: i64 = get(&row, 3)?;
            if woke > 0 {
                self.wake_local();
            }
            if let Some(cause) = session_judged(session, &row)? {
                return Err(session.lost(cause));
            }
            if let Some(answer) = self.acquired(key, holder, session.ttl, &row)? {
                let left: i64 = get(&row, 7)?;
                return answer.map(|member| {
                    member.with_expires_in(Duration::from_micros(left.unsigned_abs()))
                });
            }
            // A concurrent acquire inserted the key after our snapshot: run again.
        }
        Err(insert_races())
    }
}

#[async_trait]
impl LeaseStore for PostgresStore {
    fn info(&self) -> &StoreInfo {
        self.store_info()
    }

    async fn acquire_many(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        self.acquire_batch(asks).await
    }

    async fn join_session_many(&self, session: &Lease, asks: &[JoinAsk]) -> BatchResult<Lease> {
        self.join_batch(session, asks).await
    }

    async fn renew_many(&self, leases: &[Lease]) -> BatchResult<Lease> {
        match leases {
            [lease] => Ok(vec![self.renew_one(lease).await]),
            _ => self.renew_batch(leases).await,
        }
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.release_lease(&lease.key, db_token(lease.token)).await
    }

    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        let q = on_key(INSPECT, key);
        let row = self.db().fetch_optional(q).await?;
        let Some(row) = row else {
            return Ok(None);
        };
        Ok(Some(
            LeaseInfo::of(
                key.clone(),
                holder_of(get(&row, 0)?)?,
                token_of(get(&row, 1)?)?,
                ttl_of(get(&row, 2)?)?,
                status_of(get(&row, 3)?),
            )
            .with_session(session_of(get(&row, 4)?)?),
        ))
    }

    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        self.find_expired(space, limit).await
    }

    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
        self.reap_batch(expired).await
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
