//! Finding and declaring deaths, and the death history: the expired leases of a
//! space and the time to the next expiry, reaping and releasing (a lease's token
//! into the dead set, with its death record), the dead set, the sweep that hands a
//! dead token's items back, and the death records. Inherent methods that `lease.rs`
//! and `items.rs` call.

use std::time::Duration;

use liveness_core::{
    DeadToken, DeathCause, DeathRecord, ExpiredLease, ItemState, Key, Requeued, Result, Space,
    StoreTime, Swept,
};

use crate::core::{
    get, holder_of, id_of, key_of, limit_param, listed_lease, on_key, state_of, token_of,
    PostgresStore,
};
use crate::error::corrupt;

/// The steps that retire what a statement's CTE `gone` (columns `token`, `holder`)
/// removed from `leases`, where $1 and $2 are the key's space and name and `clk.t`
/// the server's now: the token into the dead set (CTE `dead`, the tokens newly put
/// there), a death record with the consecutive next sequence number and `$cause`,
/// and the record that fell out of a retention of `$retention` dropped. Written once
/// for `RETIRE` here and `ACQUIRE` in `lease.rs`; `$cause` and `$retention` are SQL
/// text (a parameter or a literal).
macro_rules! retire_gone {
    ($cause:literal, $retention:literal) => {
        concat!(
            r#"
dead AS (
    INSERT INTO dead_tokens (token, space, name) SELECT token, $1, $2 FROM gone
    ON CONFLICT (token) DO NOTHING
    RETURNING token
),
dseq AS (
    UPDATE death_seq SET last = last + 1 WHERE EXISTS (SELECT 1 FROM dead) RETURNING last
),
died AS (
    INSERT INTO deaths (seq, space, name, holder, token, at, cause)
    SELECT dseq.last, $1, $2, gone.holder, gone.token, clk.t, "#,
            $cause,
            r#" FROM dseq, gone, clk
),
trimmed AS (
    DELETE FROM deaths
    WHERE seq <= (SELECT last FROM dseq) - "#,
            $retention,
            r#"
      AND seq > (SELECT last FROM dseq) - "#,
            $retention,
            r#" - 64
),"#
        )
    };
}
pub(crate) use retire_gone;

/// `release` and `reap`: $1 space, $2 name, $3 token, $4 notify channel, $5 death
/// retention, $6 the death's cause (0 reaped, 1 released). Removes the lease iff the
/// token is current — and, for a reap, expired by the server clock — puts it in the
/// dead set with its death record ([`retire_gone`]), drops the record that fell out
/// of the retention, and notifies (`reaped` or `released`). Concurrent reaps
/// serialize on the row: exactly one deletes it.
const RETIRE: &str = concat!(
    r#"
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t),
gone AS (
    DELETE FROM leases l USING clk
    WHERE l.space = $1 AND l.name = $2 AND l.token = $3
      AND ($6 = 1 OR l.expires_at <= clk.t)
    RETURNING l.token, l.holder
),"#,
    retire_gone!("$6", "$5"),
    r#"
woke AS (
    SELECT pg_notify($4, CASE WHEN $6 = 0 THEN 'reaped' ELSE 'released' END) FROM dead
)
SELECT (SELECT count(*) FROM gone) AS removed, (SELECT count(*) FROM woke) AS woke
"#
);

/// `expired`: $1 space, $2 limit. The server's now is an init-plan parameter, so it
/// is an index condition on `leases_expiry`: the scan reads only expired rows.
pub(crate) const EXPIRED: &str = r#"
SELECT name, holder, token FROM leases
WHERE space = $1 AND expires_at <= (SELECT clock_timestamp())
ORDER BY expires_at, name
LIMIT $2
"#;

/// `next_expiry`: $1 space. Microseconds until the earliest expiry (negative when
/// already expired); no row when the space is empty.
const NEXT_EXPIRY: &str = r#"
SELECT (extract(epoch FROM (expires_at - clock_timestamp())) * 1000000)::bigint
FROM leases WHERE space = $1
ORDER BY expires_at
LIMIT 1
"#;

/// `dead_tokens`: $1 limit.
const DEAD_TOKENS: &str = r#"
SELECT token, space, name FROM dead_tokens ORDER BY token LIMIT $1
"#;

/// `requeue_orphans`: $1 token. Acts only if the token is in the dead set: removes
/// it and hands every item it owns back (pending, or dead-lettered when out of
/// attempts), and fills in the token's death record with the counts it moved.
/// Concurrent calls serialize on the dead-set row: one moves, the other finds
/// nothing.
const REQUEUE_ORPHANS: &str = r#"
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

/// `deaths`: $1 before (exclusive seq), $2 limit. Newest first; `at` in microseconds
/// since the Unix epoch (the clock of `STORE_TIME` in `lease.rs`).
const DEATHS: &str = r#"
SELECT seq, space, name, holder, token,
       (extract(epoch FROM at) * 1000000)::bigint, cause, requeued, dead_lettered
FROM deaths WHERE seq < $1 ORDER BY seq DESC LIMIT $2
"#;

impl PostgresStore {
    /// Runs [`RETIRE`] on the lease on `key` with `token`, for `cause`
    /// (`Reaped`: only when expired; `Released`): true when it removed the lease (its
    /// token went to the dead set), and then wakes this process's waiters.
    pub(crate) async fn retire(&self, cause: DeathCause, key: &Key, token: i64) -> Result<bool> {
        let cause: i16 = match cause {
            DeathCause::Reaped => 0,
            DeathCause::Released => 1,
            DeathCause::Superseded => 2,
        };
        let q = on_key(RETIRE, key)
            .bind(token)
            .bind(self.channel())
            .bind(self.retention())
            .bind(cause);
        let row = self.db().fetch_one(q).await?;
        let removed: i64 = get(&row, 0)?;
        if removed > 0 {
            self.wake_local();
        }
        Ok(removed > 0)
    }

    /// Up to `limit` (already checked) leases of `space` expired by the server clock,
    /// soonest expired first ([`EXPIRED`]).
    pub(crate) async fn find_expired(
        &self,
        space: &Space,
        limit: usize,
    ) -> Result<Vec<ExpiredLease>> {
        let q = sqlx::query(EXPIRED)
            .bind(space.as_str())
            .bind(limit_param(limit));
        self.list(q, |row| {
            let (key, holder, token) = listed_lease(space, row)?;
            Ok(ExpiredLease { key, holder, token })
        })
        .await
    }

    /// The time until the earliest expiry in `space` ([`NEXT_EXPIRY`]; zero when one
    /// is already expired), `None` when the space is empty.
    pub(crate) async fn time_to_next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        let q = sqlx::query(NEXT_EXPIRY).bind(space.as_str());
        let row = self.db().fetch_optional(q).await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let micros: i64 = get(&row, 0)?;
        Ok(Some(Duration::from_micros(
            u64::try_from(micros).unwrap_or(0),
        )))
    }

    /// Up to `limit` (already checked) tokens of the dead set, lowest first
    /// ([`DEAD_TOKENS`]).
    pub(crate) async fn list_dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        let q = sqlx::query(DEAD_TOKENS).bind(limit_param(limit));
        self.list(q, |row| {
            Ok(DeadToken {
                token: token_of(get(row, 0)?)?,
                key: key_of(get(row, 1)?, get(row, 2)?)?,
            })
        })
        .await
    }

    /// Sweeps dead `token` ([`REQUEUE_ORPHANS`]): its items back to pending, or
    /// dead-lettered when out of attempts; nothing when it is not in the dead set.
    pub(crate) async fn sweep(&self, token: i64) -> Result<Requeued> {
        let q = sqlx::query(REQUEUE_ORPHANS).bind(token);
        let rows = self.db().fetch_all(q).await?;
        let mut out = Requeued::default();
        for row in &rows {
            let id = id_of(get(row, 0)?)?;
            match state_of(get(row, 1)?, None)? {
                ItemState::Pending => out.requeued.push(id),
                _ => out.dead_lettered.push(id),
            }
        }
        Ok(out)
    }

    /// Up to `limit` (already checked) death records with a seq below `before`,
    /// newest first ([`DEATHS`]).
    pub(crate) async fn death_records(
        &self,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<DeathRecord>> {
        let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        let q = sqlx::query(DEATHS).bind(before).bind(limit_param(limit));
        self.list(q, |row| {
            let count = |i: usize| -> Result<Option<u64>> {
                let v: Option<i64> = get(row, i)?;
                v.map(|v| {
                    u64::try_from(v).map_err(|_| {
                        corrupt(format!("unexpected value in the swept count column: {v}"))
                    })
                })
                .transpose()
            };
            let swept = match (count(7)?, count(8)?) {
                (Some(requeued), Some(dead_lettered)) => Some(Swept {
                    members: 0,
                    requeued,
                    dead_lettered,
                }),
                _ => None,
            };
            let seq: i64 = get(row, 0)?;
            let holder: String = get(row, 3)?;
            let at: i64 = get(row, 5)?;
            let cause: i16 = get(row, 6)?;
            Ok(DeathRecord {
                seq: u64::try_from(seq)
                    .map_err(|_| corrupt(format!("unexpected value in the seq column: {seq}")))?,
                key: key_of(get(row, 1)?, get(row, 2)?)?,
                holder: holder_of(holder)?,
                token: token_of(get(row, 4)?)?,
                at: StoreTime::from_epoch(Duration::from_micros(
                    u64::try_from(at)
                        .map_err(|_| corrupt(format!("unexpected value in the at column: {at}")))?,
                )),
                cause: match cause {
                    0 => DeathCause::Reaped,
                    1 => DeathCause::Released,
                    2 => DeathCause::Superseded,
                    other => {
                        return Err(corrupt(format!(
                            "unexpected value in the cause column: {other}"
                        )))
                    }
                },
                swept,
            })
        })
        .await
    }
}
