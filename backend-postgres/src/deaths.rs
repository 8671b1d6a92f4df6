//! Finding and declaring deaths, and the death history: the expired leases of a
//! space and the time to the next expiry, releasing (a lease's token into the dead
//! set, with its death record; reaping is `REAP_MANY` in `batch.rs`), the dead set,
//! the sweep that hands a dead token's items back, and the death records. Inherent
//! methods that `lease.rs`, `items.rs` and `operator.rs` call.

use std::collections::HashMap;
use std::time::Duration;

use liveness_core::{
    DeadToken, DeathCause, DeathRecord, ExpiredLease, ItemState, Key, Result, Space, StoreTime,
    Sweep, Swept,
};

use crate::core::{
    get, holder_of, id_of, key_of, limit_param, listed_lease, on_key, state_of, token_of,
    PostgresStore,
};
use crate::error::corrupt;
use crate::items::forget_dead_letters;

/// The steps that declare dead what a statement's CTE `gone` (columns `token`, `holder`)
/// removed from `leases`, where $1 and $2 are the key's space and name and `clk.t`
/// the server's now: the token into the dead set (CTE `dead`, the tokens newly put
/// there), a death record with the consecutive next sequence number and `$cause`,
/// and the record that fell out of a retention of `$retention` dropped. Written once
/// for `RELEASE` here and `JOIN_SESSION` in `lease.rs`; `$cause` and `$retention` are
/// SQL text (a parameter or a literal).
macro_rules! declare_gone_dead {
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
),"#,
            $crate::deaths::trim_deaths!($retention, ""),
        )
    };
}
pub(crate) use declare_gone_dead;

/// The CTE `trimmed` of [`declare_gone_dead`] and `declare_gone_dead_many` (in `batch.rs`): once
/// `dseq` holds the last sequence number written, the records that fell out of a
/// retention of `$retention` dropped, looking 64 below it, plus `$written_beyond`
/// (SQL text, empty or starting with ` - `: how many records past one the statement
/// wrote). Both are SQL text.
macro_rules! trim_deaths {
    ($retention:literal, $written_beyond:literal) => {
        concat!(
            r#"
trimmed AS (
    DELETE FROM deaths
    WHERE seq <= (SELECT last FROM dseq) - "#,
            $retention,
            r#"
      AND seq > (SELECT last FROM dseq) - "#,
            $retention,
            r#" - 64"#,
            $written_beyond,
            r#"
),"#
        )
    };
}
pub(crate) use trim_deaths;

/// `release`: $1 space, $2 name, $3 token, $4 notify channel, $5 death retention.
/// Removes the lease iff the token is current (live or expired), puts it in the dead
/// set with its death record (cause released, [`declare_gone_dead`]), drops the record that
/// fell out of the retention, and notifies `released`. Concurrent releases serialize
/// on the row: exactly one deletes it. A riding member released dies alone, with a
/// death record of its own.
const RELEASE: &str = concat!(
    r#"
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t),
gone AS (
    DELETE FROM leases l
    WHERE l.space = $1 AND l.name = $2 AND l.token = $3
    RETURNING l.token, l.holder
),"#,
    declare_gone_dead!("1", "$5"),
    r#"
woke AS (SELECT pg_notify($4, 'released') FROM dead)
SELECT (SELECT count(*) FROM gone) AS removed, (SELECT count(*) FROM woke) AS woke
"#
);

/// `expired`: $1 space, $2 limit. The server's now is an init-plan parameter, so it
/// is an index condition on `leases_expiry`: the scan reads only expired rows. A
/// riding member (no expiry of its own) is never listed: its session is.
pub(crate) const EXPIRED: &str = r#"
SELECT name, holder, token FROM leases
WHERE space = $1 AND expires_at <= (SELECT clock_timestamp())
ORDER BY expires_at, name
LIMIT $2
"#;

/// `next_expiry`: $1 space. Microseconds until the earliest expiry (negative when
/// already expired); no row when the space has no lease of its own (riding members
/// have no expiry: their sessions' count).
const NEXT_EXPIRY: &str = r#"
SELECT (extract(epoch FROM (expires_at - clock_timestamp())) * 1000000)::bigint
FROM leases WHERE space = $1 AND expires_at IS NOT NULL
ORDER BY expires_at
LIMIT 1
"#;

/// `dead_tokens`: $1 limit.
const DEAD_TOKENS: &str = r#"
SELECT token, space, name FROM dead_tokens ORDER BY token LIMIT $1
"#;

/// `sweep_many`: $1 tokens (no token twice), $2 the most riding members one
/// dead session's sweep declares dead (`max_batch`), $3 the pending channel, $4 the
/// dead-letter retention in µs, $5 the most expired dead letters to delete (what is
/// left of the call's [`DEAD_LETTER_TRIM`](liveness_core::DEAD_LETTER_TRIM)).
///
/// Acts only on tokens in the dead set. A dead session's token (its dead-set row is
/// in `sessions`) first declares dead up to $2 of its own riding members, as a call with
/// that token alone would, read on `leases_session` and locked `FOR UPDATE
/// SKIP LOCKED` (`pick`): each is deleted, its token goes into the dead set linked
/// (`record_token`) to the session's death record, with no record of its own, and
/// that record counts them (`members`). The statement takes the dead sessions lowest
/// token first, each while those before it count fewer than $2 members in all
/// (`walk`, counting each up to $2, `go`): it declares fewer than 2 × $2 members dead; a
/// session it does not reach that has members is left as it was, answered by a row
/// of its own (the last rows below), to be sent again.
/// While the statement's snapshot shows a member of a session it did not take
/// (beyond the budget, locked by a concurrent sweep or claim, or not reached:
/// `more`), the session's token stays in the dead set and its items stay put. No
/// member joins a session whose token is dead (a join, `JOIN_SESSION_MANY` in
/// `batch.rs` or `JOIN_SESSION` in `lease.rs`, locks the session's row), so a snapshot that shows none means none is left; a concurrent
/// sweep only ever makes `more` answer true for a member it already took, and the
/// next call finds out.
///
/// Every other token in the dead set leaves it, its owned items go back to pending,
/// due at once, claimable from the server's now (`ready_at`) (or to the dead-letter
/// set when out of attempts, dead-lettered then: `dead_at`), their attempts finished
/// then (`finished_at`), and its death record (a member's: its session's) adds what
/// moved. When it dead-lettered an item, the statement deletes up to $5 expired dead
/// letters (`forgot`, [`forget_dead_letters`]). When at least one item went back to
/// pending, the statement notifies `requeued` once on the pending channel (`woke`). Concurrent sweeps of one token
/// serialize on its dead-set row: one moves, the other finds nothing. Each death
/// record is updated once (`per` sums what the statement did to it), after the
/// records were locked in seq order (`ordered`): sweeps of members of the same
/// sessions meet on their records in one order, and wait rather than deadlock.
///
/// Rows: moved items (`token`, `id`, `state`), then the members declared dead (`token` the
/// session's, `id` NULL, the member's `space`, `name`, `holder` and `member` token),
/// and one row (`token`, the rest NULL) per session token not reached; on the moved
/// items' rows, `woke` counts the notifications (it must be named for the notifying
/// CTE to run) and `forgot` the expired dead letters deleted.
pub(crate) const SWEEP: &str = concat!(
    r#"
WITH RECURSIVE dt AS MATERIALIZED (
    SELECT token, space FROM dead_tokens WHERE token = ANY($1::bigint[])
),
ses AS MATERIALIZED (
    SELECT token, row_number() OVER (ORDER BY token) AS rn FROM dt WHERE space = 'sessions'
),
walk (rn, token, used) AS (
    SELECT 0::bigint, NULL::bigint, 0::bigint
    UNION ALL
    SELECT ses.rn, ses.token, walk.used + (
        SELECT count(*) FROM (
            SELECT 1 FROM leases l WHERE l.session_token = ses.token LIMIT $2
        ) c
    )
    FROM walk JOIN ses ON ses.rn = walk.rn + 1
    WHERE walk.used < $2
),
go AS MATERIALIZED (SELECT token FROM walk WHERE token IS NOT NULL),
pick AS MATERIALIZED (
    SELECT r.space, r.name, r.token, r.by
    FROM go, LATERAL (
        SELECT l.space, l.name, l.token, l.session_token AS by FROM leases l
        WHERE l.session_token = go.token
        LIMIT $2
        FOR UPDATE OF l SKIP LOCKED
    ) r
),
more AS MATERIALIZED (
    SELECT ses.token FROM ses
    WHERE EXISTS (
        SELECT 1 FROM leases l
        WHERE l.session_token = ses.token
          AND NOT EXISTS (SELECT 1 FROM pick p WHERE p.space = l.space AND p.name = l.name)
    )
),
declared AS (
    DELETE FROM leases l USING pick
    WHERE l.space = pick.space AND l.name = pick.name AND l.token = pick.token
    RETURNING pick.by, l.space, l.name, l.holder, l.token
),
linked AS (
    INSERT INTO dead_tokens (token, space, name, record_token)
    SELECT token, space, name, by FROM declared
    ON CONFLICT (token) DO NOTHING
),
d AS (
    DELETE FROM dead_tokens
    WHERE token = ANY($1::bigint[]) AND token NOT IN (SELECT token FROM more)
    RETURNING token, record_token
),
moved AS (
    UPDATE items i
    SET state = CASE WHEN i.attempts < i.max_attempts THEN 0 ELSE 2 END, owner = NULL,
        due_at = NULL, ready_at = clock_timestamp(), finished_at = clock_timestamp(),
        dead_at = CASE WHEN i.attempts < i.max_attempts THEN NULL ELSE clock_timestamp() END
    FROM d
    WHERE i.state = 1 AND i.owner = d.token
    RETURNING d.token, i.id, i.state
),"#,
    forget_dead_letters!("EXISTS (SELECT 1 FROM moved WHERE state = 2)", "$4", "$5"),
    r#",
per AS (
    SELECT x.rec, sum(x.members) AS members, bool_or(x.swept) AS swept,
           sum(x.requeued) AS requeued, sum(x.dead_lettered) AS dead_lettered
    FROM (
        SELECT by AS rec, count(*) AS members, false AS swept, 0 AS requeued,
               0 AS dead_lettered
        FROM declared GROUP BY by
        UNION ALL
        SELECT coalesce(d.record_token, d.token), 0, true,
               count(m.id) FILTER (WHERE m.state = 0), count(m.id) FILTER (WHERE m.state = 2)
        FROM d LEFT JOIN moved m ON m.token = d.token
        GROUP BY d.token, d.record_token
    ) x
    GROUP BY x.rec
),
ordered AS MATERIALIZED (
    SELECT deaths.seq, per.* FROM deaths JOIN per ON deaths.token = per.rec
    ORDER BY deaths.seq
    FOR UPDATE OF deaths
),
recorded AS (
    UPDATE deaths
    SET members = CASE WHEN per.members > 0 THEN coalesce(deaths.members, 0) + per.members
                       ELSE deaths.members END,
        requeued = CASE WHEN per.swept THEN coalesce(deaths.requeued, 0) + per.requeued
                        ELSE deaths.requeued END,
        dead_lettered = CASE WHEN per.swept
                             THEN coalesce(deaths.dead_lettered, 0) + per.dead_lettered
                             ELSE deaths.dead_lettered END
    FROM ordered per
    WHERE deaths.seq = per.seq
),
woke AS (SELECT pg_notify($3, 'requeued') WHERE EXISTS (SELECT 1 FROM moved WHERE state = 0))
SELECT token, id, state, NULL::text AS space, NULL::text AS name, NULL::text AS holder,
       NULL::bigint AS member, (SELECT count(*) FROM woke) AS woke,
       (SELECT count(*) FROM forgot) AS forgot
FROM moved
UNION ALL
SELECT by, NULL, NULL, space, name, holder, token, NULL, NULL FROM declared
UNION ALL
SELECT token, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM more
WHERE token NOT IN (SELECT token FROM go)
ORDER BY 1, 2, 7
"#
);

/// `deaths`: $1 before (exclusive seq), $2 limit. Newest first; `at` in microseconds
/// since the Unix epoch (the clock of `STORE_TIME` in `lease.rs`); the swept counts
/// NULL until a sweep wrote them (a session's sweep writes `members` first).
const DEATHS: &str = r#"
SELECT seq, space, name, holder, token,
       (extract(epoch FROM at) * 1000000)::bigint, cause, requeued, dead_lettered, members
FROM deaths WHERE seq < $1 ORDER BY seq DESC LIMIT $2
"#;

impl PostgresStore {
    /// Runs [`RELEASE`] on the lease on `key` with `token`: true when it removed the
    /// lease (its token went to the dead set), and then wakes this process's waiters.
    pub(crate) async fn release_lease(&self, key: &Key, token: i64) -> Result<bool> {
        let q = on_key(RELEASE, key)
            .bind(token)
            .bind(self.channel())
            .bind(self.retention());
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
            Ok(ExpiredLease::new(key, holder, token))
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
            Ok(DeadToken::new(
                key_of(get(row, 1)?, get(row, 2)?)?,
                token_of(get(row, 0)?)?,
            ))
        })
        .await
    }

    /// Sweeps the dead `tokens` (no token twice), each as a call with that token alone
    /// would (a dead session's sweep declares up to `max_batch` of its own members dead):
    /// one [`SWEEP`], then one more for the dead sessions it did not reach,
    /// until none is left. One answer per token, in order. The statements that
    /// dead-letter delete expired dead letters, at most `trim` in all, which is
    /// lowered by what they deleted (a call's share,
    /// [`DEAD_LETTER_TRIM`](liveness_core::DEAD_LETTER_TRIM), across its statements).
    pub(crate) async fn sweep(&self, tokens: &[i64], trim: &mut usize) -> Result<Vec<Sweep>> {
        let mut out: Vec<Sweep> = tokens.iter().map(|_| Sweep::default()).collect();
        // Where each token of the next statement is in `tokens`.
        let mut todo: Vec<usize> = (0..tokens.len()).collect();
        while !todo.is_empty() {
            let ids: Vec<i64> = todo.iter().map(|at| tokens[*at]).collect();
            let (answers, mut later, forgot) = self.sweep_once(&ids, *trim).await?;
            *trim = trim.saturating_sub(forgot);
            // Each statement sweeps at least its lowest dead session: `later` shrinks.
            if later.len() >= todo.len() {
                return Err(corrupt("sweep_many reached no token it sent"));
            }
            for (at, answer) in todo.iter().zip(answers) {
                let into = &mut out[*at];
                into.requeued.extend(answer.requeued);
                into.dead_lettered.extend(answer.dead_lettered);
                into.members.extend(answer.members);
            }
            later.sort_unstable();
            todo = later.into_iter().map(|i| todo[i]).collect();
        }
        Ok(out)
    }

    /// One [`SWEEP`] of the dead `tokens` (no token twice), deleting at most `trim`
    /// expired dead letters when it dead-letters: one answer per token, in order, the
    /// positions of the dead sessions' tokens it did not reach (their answers empty),
    /// and how many expired dead letters it deleted.
    async fn sweep_once(
        &self,
        tokens: &[i64],
        trim: usize,
    ) -> Result<(Vec<Sweep>, Vec<usize>, usize)> {
        let budget = limit_param(self.caps().max_batch.max(1));
        let q = sqlx::query(SWEEP)
            .bind(tokens.to_vec())
            .bind(budget)
            .bind(self.pending_channel())
            .bind(self.dead_letter_retention_param())
            .bind(limit_param(trim));
        let rows = self.db().fetch_all(q).await?;
        let at: HashMap<i64, usize> = tokens.iter().enumerate().map(|(i, t)| (*t, i)).collect();
        let mut out: Vec<Sweep> = tokens.iter().map(|_| Sweep::default()).collect();
        let mut later = Vec::new();
        let mut forgot = 0;
        for row in &rows {
            let token: i64 = get(row, 0)?;
            let Some(i) = at.get(&token).copied() else {
                return Err(corrupt(format!(
                    "sweep_many answered token {token}, not one it sent"
                )));
            };
            let answer = &mut out[i];
            let id: Option<i64> = get(row, 1)?;
            let member: Option<i64> = get(row, 6)?;
            match (id, member) {
                (Some(id), _) => {
                    let n: i64 = get(row, 8)?;
                    forgot = usize::try_from(n).map_err(|_| {
                        corrupt(format!("unexpected value in the forgot column: {n}"))
                    })?;
                    let id = id_of(id)?;
                    match state_of(get(row, 2)?, None)? {
                        ItemState::Pending => answer.requeued.push(id),
                        _ => answer.dead_lettered.push(id),
                    }
                }
                (None, Some(member)) => answer.members.push(ExpiredLease::new(
                    key_of(get(row, 3)?, get(row, 4)?)?,
                    holder_of(get(row, 5)?)?,
                    token_of(member)?,
                )),
                (None, None) => later.push(i),
            }
        }
        if out.iter().any(|answer| !answer.requeued.is_empty()) {
            self.pending_local();
        }
        Ok((out, later, forgot))
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
            let swept = match (count(7)?, count(8)?, count(9)?) {
                (None, None, None) => None,
                (requeued, dead_lettered, members) => Some(Swept::new(
                    members.unwrap_or(0),
                    requeued.unwrap_or(0),
                    dead_lettered.unwrap_or(0),
                )),
            };
            let seq: i64 = get(row, 0)?;
            let holder: String = get(row, 3)?;
            let at: i64 = get(row, 5)?;
            let cause: i16 = get(row, 6)?;
            let cause = match cause {
                0 => DeathCause::Reaped,
                1 => DeathCause::Released,
                2 => DeathCause::Superseded,
                other => {
                    return Err(corrupt(format!(
                        "unexpected value in the cause column: {other}"
                    )))
                }
            };
            Ok(DeathRecord::new(
                u64::try_from(seq)
                    .map_err(|_| corrupt(format!("unexpected value in the seq column: {seq}")))?,
                key_of(get(row, 1)?, get(row, 2)?)?,
                holder_of(holder)?,
                token_of(get(row, 4)?)?,
                StoreTime::from_epoch(Duration::from_micros(
                    u64::try_from(at)
                        .map_err(|_| corrupt(format!("unexpected value in the at column: {at}")))?,
                )),
                cause,
                swept,
            ))
        })
        .await
    }
}
