//! The native batches: `acquire_many`, `join_session_many`, `renew_many`,
//! `reap_many` and `sweep_many`, each one statement for the whole batch (or one per
//! `max_batch` tokens, and one more when dead sessions' members fill a statement), as
//! inherent methods that `lease.rs` and `items.rs` call. They are the store's only
//! path for these operations: a single call (`Store::acquire`, `Store::reap`, ...)
//! reaches them as a batch of one, except a renewal of one lease (`RENEW` in
//! `lease.rs`).
//! Their input was checked before the call ([`liveness_core::CheckInput`]: batch
//! sizes, ttls, issuers): every entry that reaches them is sent.

use std::collections::HashSet;

use std::time::Duration;

use liveness_core::{
    Acquire, BatchResult, FencingToken, JoinAsk, Key, Lease, Result, Sweep, DEAD_LETTER_TRIM,
};

use sqlx::postgres::PgRow;

use crate::conns::Query;
use crate::core::{db_token, expiry_of, get, ttl_ms, PostgresStore};
use crate::error::{corrupt, insert_races};
use crate::lease::{session_judged, session_judged_once};

/// `acquire_many`: $1 spaces, $2 names, $3 holders, $4 ttls (ms), one element per
/// entry, $5 notify channel, $6 death retention.
///
/// One statement for the whole batch (one round trip, one commit), also for a batch
/// of one (`Store::acquire`): the function `acquire_many` (migrations 5, 6 and 8)
/// takes each entry in the order given, each after the previous one in the same
/// transaction, so a later entry on a key sees what an earlier one took and tokens
/// grow in entry order. A live lease is held (read without a lock); an expired one,
/// one riding an expired or gone session, and a live one of an earlier timeline
/// asked for again by its own holder (a promoted standby may have revived it, with
/// items its holder was told to drop) are locked `FOR UPDATE`, put in the dead set
/// with a death record (cause superseded) and overwritten; a free key is inserted; an
/// insert race on a free key is run again, up to 8 times. Tokens come from
/// `next_token()`. One row per entry, in order: `token` of the new lease, or NULL
/// with the live `holder` and `held_token`; all three NULL when concurrent acquires
/// kept winning the insert race on the key (`Unavailable`); `woke` when it declared a
/// lease dead.
pub(crate) const ACQUIRE_MANY: &str = r#"
SELECT a_token, a_holder, a_held_token, a_woke
FROM acquire_many($1::text[], $2::text[], $3::text[], $4::bigint[], $5, $6)
ORDER BY a_i
"#;

/// The steps that declare dead what a batch statement's CTE `$src` (columns `i`, the entry's
/// place, and `space`, `name`, `holder`, `token`) removed from `leases`, where `clk.t`
/// is the server's now: the tokens into the dead set (CTE `dead`, the tokens newly put
/// there), a death record each with `$cause` and consecutive sequence numbers in entry
/// order, and the records that fell out of a retention of `$retention` dropped. Written
/// once for `JOIN_SESSION_MANY` and `REAP_MANY`; `$cause` and `$retention` are SQL text
/// (a parameter or a literal).
macro_rules! declare_gone_dead_many {
    ($src:literal, $cause:literal, $retention:literal) => {
        concat!(
            r#"
dead AS (
    INSERT INTO dead_tokens (token, space, name) SELECT token, space, name FROM "#,
            $src,
            r#"
    ON CONFLICT (token) DO NOTHING
    RETURNING token
),
n AS (SELECT count(*) AS n FROM dead),
dseq AS (
    UPDATE death_seq SET last = last + (SELECT n FROM n)
    WHERE EXISTS (SELECT 1 FROM dead) RETURNING last
),
numbered AS (
    SELECT "#,
            $src,
            r#".*, row_number() OVER (ORDER BY "#,
            $src,
            r#".i) AS k
    FROM "#,
            $src,
            r#" WHERE "#,
            $src,
            r#".token IN (SELECT token FROM dead)
),
died AS (
    INSERT INTO deaths (seq, space, name, holder, token, at, cause)
    SELECT dseq.last - n.n + numbered.k, numbered.space, numbered.name, numbered.holder,
           numbered.token, clk.t, "#,
            $cause,
            r#"
    FROM dseq, n, numbered, clk
),"#,
            $crate::deaths::trim_deaths!($retention, " - (SELECT n FROM n)"),
        )
    };
}

/// `join_session_many`: $1 spaces, $2 names, $3 holders, one element per entry (no
/// key twice), $4 the session's name (in `sessions`), $5 the session's token, $6
/// ttl_ms (the session lease's), $7 notify channel, $8 death retention.
///
/// One statement for the whole batch (one round trip, one commit), also for a batch
/// of one (`Store::join_session`), `JOIN_SESSION` (in `lease.rs`) for every entry at
/// once: the session's row read once `FOR KEY SHARE` and judged once; the entries' rows locked in key order (two concurrent
/// batches cannot deadlock); each live one held; each expired one, or one riding an
/// expired or gone session, declared dead with a death record of its own (cause
/// superseded, consecutive sequence numbers in entry order, as `REAP_MANY` numbers
/// them) and overwritten; the others taken with tokens from `next_token()` drawn in
/// entry order. One row per entry, in order, with `JOIN_SESSION`'s columns: a NULL
/// token and no live holder when a concurrent insert won the key (the caller runs
/// that entry alone, by `JOIN_SESSION`).
const JOIN_SESSION_MANY: &str = concat!(
    session_judged_once!(),
    r#"
b AS MATERIALIZED (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY
        AS b(space, name, holder, i)
),
cur AS MATERIALIZED (
    SELECT b.i, l.space, l.name, l.holder, l.token,
           "#,
    expiry_of!("l"),
    r#" > clk.t AND NOT (l.holder = b.holder AND l.token < clk.floor) AS live
    FROM leases l JOIN b ON l.space = b.space AND l.name = b.name, clk
    WHERE EXISTS (SELECT 1 FROM ok)
    ORDER BY l.space, l.name
    FOR UPDATE OF l
),
gone AS (SELECT i, space, name, holder, token FROM cur WHERE NOT live),
"#,
    declare_gone_dead_many!("gone", "2", "$8"),
    r#"
tok AS MATERIALIZED (
    SELECT w.i, next_token() AS token
    FROM (
        SELECT b.i FROM b
        WHERE EXISTS (SELECT 1 FROM ok)
          AND NOT EXISTS (SELECT 1 FROM cur WHERE cur.i = b.i AND cur.live)
        ORDER BY b.i
    ) w
),
put AS (
    INSERT INTO leases AS l (space, name, holder, token, ttl_ms, expires_at, session_name,
                             session_token)
    SELECT b.space, b.name, b.holder, tok.token, $6, NULL, $4, $5
    FROM tok JOIN b ON b.i = tok.i
    ON CONFLICT (space, name) DO UPDATE
        SET holder = excluded.holder, token = excluded.token, ttl_ms = excluded.ttl_ms,
            expires_at = NULL, last_claim = NULL, session_name = excluded.session_name,
            session_token = excluded.session_token
        WHERE l.token IN (SELECT token FROM gone)
    RETURNING l.space, l.name, l.token
),
woke AS (SELECT pg_notify($7, 'retired') WHERE EXISTS (SELECT 1 FROM dead))
SELECT p.token AS token,
       c.holder AS holder,
       c.token AS held_token,
       (SELECT count(*) FROM woke) AS woke,
       (SELECT token FROM ses) AS session_token,
       (SELECT live FROM ses) AS session_live,
       (SELECT kept FROM ses) AS session_kept,
       (SELECT left_us FROM ses) AS session_left_us
FROM b LEFT JOIN cur c ON c.i = b.i AND c.live
    LEFT JOIN put p ON p.space = b.space AND p.name = b.name
ORDER BY b.i
"#
);

/// `renew_many` of more than one lease (one lease runs `RENEW`, in `lease.rs`): $1
/// spaces, $2 names, $3 tokens, $4 ttls (ms), one element per lease. One statement
/// for the whole batch: every
/// current and live lease listed is extended by its own ttl; returns the (space, name,
/// token) of each one renewed, under `RENEW`'s rule for leases drawn before a promotion.
/// `RENEW_WHY` (in `core.rs`) says why for the others.
const RENEW_MANY: &str = r#"
UPDATE leases l SET expires_at = clock_timestamp() + b.ttl * interval '1 millisecond', ttl_ms = b.ttl
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS b(space, name, token, ttl)
WHERE l.space = b.space AND l.name = b.name AND l.token = b.token
  AND l.expires_at > clock_timestamp()
  AND (l.synced OR l.token >= token_epoch() << 40)
RETURNING l.space, l.name, l.token
"#;

/// `reap_many`, also for a batch of one (`Store::reap`): $1 spaces, $2 names, $3
/// tokens (no entry twice), $4 notify channel, $5 death retention. In one statement
/// (one commit): removes each lease whose token is current and that is expired by the
/// server clock (a riding member: its session, by [`expiry_of`]), puts each in the
/// dead set with a death record of its own (cause reaped, consecutive sequence
/// numbers, in entry order), drops the records that fell out of the retention, and
/// notifies `reaped` once. The rows are
/// locked in key order first, so two concurrent batches cannot deadlock; concurrent
/// reapers of one lease serialize on its row: exactly one deletes it. Returns the
/// entries removed, by their 1-based position.
const REAP_MANY: &str = concat!(
    r#"
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
      AND "#,
    expiry_of!("l"),
    r#" <= clk.t
    RETURNING locked.i, l.space, l.name, l.token, l.holder
),
"#,
    declare_gone_dead_many!("del", "0", "$5"),
    r#"
woke AS (
    SELECT pg_notify($4, 'reaped') WHERE EXISTS (SELECT 1 FROM dead)
)
SELECT i, (SELECT count(*) FROM woke) FROM del
"#
);

/// The key columns of a batch statement, `$1` spaces and `$2` names: one element per
/// entry, in the order the entries are pushed.
#[derive(Default)]
struct KeyColumns {
    spaces: Vec<String>,
    names: Vec<String>,
}

impl KeyColumns {
    fn push(&mut self, key: &Key) {
        self.spaces.push(key.space().as_str().to_owned());
        self.names.push(key.name().as_str().to_owned());
    }

    /// The statement `sql` with these columns bound as `$1` and `$2`.
    fn query(self, sql: &'static str) -> Query<'static> {
        sqlx::query(sql).bind(self.spaces).bind(self.names)
    }
}

impl PostgresStore {
    /// Every row of a batch statement that records deaths ([`ACQUIRE_MANY`],
    /// [`REAP_MANY`]): `q` has its per-entry arrays bound, and its last two
    /// parameters, the notify channel and the death retention, are bound here.
    async fn fetch_recording_deaths<'q>(&'q self, q: Query<'q>) -> Result<Vec<PgRow>> {
        let q = q.bind(self.channel()).bind(self.retention());
        self.db().fetch_all(q).await
    }

    /// [`PostgresStore::fetch_recording_deaths`] for a statement `op` that answers one
    /// row per entry of a batch of `entries`: any other count is a corrupt answer.
    async fn fetch_row_each<'q>(
        &'q self,
        op: &str,
        q: Query<'q>,
        entries: usize,
    ) -> Result<Vec<PgRow>> {
        let rows = self.fetch_recording_deaths(q).await?;
        if rows.len() != entries {
            return Err(corrupt(format!(
                "{op} answered {} rows for {entries} entries",
                rows.len()
            )));
        }
        Ok(rows)
    }

    /// `acquire_many`: one [`ACQUIRE_MANY`] for the whole batch, in the order given.
    pub(crate) async fn acquire_batch(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        let mut keys = KeyColumns::default();
        let (mut holders, mut ttls) = (Vec::new(), Vec::new());
        for ask in asks {
            keys.push(&ask.key);
            holders.push(ask.holder.as_str().to_owned());
            ttls.push(ttl_ms(ask.ttl));
        }
        let q = keys.query(ACQUIRE_MANY).bind(holders).bind(ttls);
        let rows = self.fetch_row_each("acquire_many", q, asks.len()).await?;
        let mut woke = false;
        let mut out = Vec::with_capacity(asks.len());
        for (ask, row) in asks.iter().zip(&rows) {
            let row_woke: bool = get(row, 3)?;
            woke |= row_woke;
            out.push(
                self.acquired(&ask.key, &ask.holder, ask.ttl, row)?
                    .unwrap_or_else(|| Err(insert_races())),
            );
        }
        if woke {
            self.wake_local();
        }
        Ok(out)
    }

    /// `join_session_many`: one [`JOIN_SESSION_MANY`] for the whole batch, the
    /// session judged once. A batch that names a key twice (one statement cannot
    /// take a row twice), and an entry whose key a concurrent insert won, are joined
    /// alone ([`PostgresStore::join_one`]).
    pub(crate) async fn join_batch(&self, session: &Lease, asks: &[JoinAsk]) -> BatchResult<Lease> {
        let distinct: HashSet<&Key> = asks.iter().map(|(key, _)| key).collect();
        if distinct.len() != asks.len() {
            let mut out = Vec::with_capacity(asks.len());
            for (key, holder) in asks {
                out.push(self.join_one(session, key, holder).await);
            }
            return Ok(out);
        }
        let mut keys = KeyColumns::default();
        let mut holders = Vec::with_capacity(asks.len());
        for (key, holder) in asks {
            keys.push(key);
            holders.push(holder.as_str().to_owned());
        }
        let q = keys
            .query(JOIN_SESSION_MANY)
            .bind(holders)
            .bind(session.key.name().as_str().to_owned())
            .bind(db_token(session.token))
            .bind(ttl_ms(session.ttl));
        let rows = self
            .fetch_row_each("join_session_many", q, asks.len())
            .await?;
        let woke: i64 = get(&rows[0], 3)?;
        if woke > 0 {
            self.wake_local();
        }
        if let Some(cause) = session_judged(session, &rows[0])? {
            return Ok(asks.iter().map(|_| Err(session.lost(cause))).collect());
        }
        let left: i64 = get(&rows[0], 7)?;
        let mut out = Vec::with_capacity(asks.len());
        for ((key, holder), row) in asks.iter().zip(&rows) {
            let answer = match self.acquired(key, holder, session.ttl, row)? {
                Some(answer) => answer.map(|member| {
                    member.with_expires_in(Duration::from_micros(left.unsigned_abs()))
                }),
                // A concurrent insert won the key after the statement's snapshot.
                None => self.join_one(session, key, holder).await,
            };
            out.push(answer);
        }
        Ok(out)
    }

    /// `renew_many` of more than one lease: one [`RENEW_MANY`] for the whole batch; each lease it
    /// did not renew (lost, or a member riding a session, which it never matches) is
    /// answered by `renew_why`.
    pub(crate) async fn renew_batch(&self, leases: &[Lease]) -> BatchResult<Lease> {
        let mut keys = KeyColumns::default();
        let (mut tokens, mut ttls) = (Vec::new(), Vec::new());
        for lease in leases {
            keys.push(&lease.key);
            tokens.push(db_token(lease.token));
            ttls.push(ttl_ms(lease.ttl));
        }
        let q = keys.query(RENEW_MANY).bind(tokens).bind(ttls);
        let mut renewed = HashSet::new();
        for row in self.db().fetch_all(q).await? {
            let space: String = get(&row, 0)?;
            let name: String = get(&row, 1)?;
            let token: i64 = get(&row, 2)?;
            renewed.insert((space, name, token));
        }
        let mut out = Vec::with_capacity(leases.len());
        for lease in leases {
            let id = (
                lease.key.space().as_str().to_owned(),
                lease.key.name().as_str().to_owned(),
                db_token(lease.token),
            );
            if renewed.contains(&id) {
                out.push(Ok(lease.renewed()));
            } else {
                out.push(self.renew_why(lease).await?);
            }
        }
        Ok(out)
    }

    /// `reap_many`: one [`REAP_MANY`] for the batch.
    pub(crate) async fn reap_batch(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
        // One statement for the batch ([`REAP_MANY`]). An entry given twice is
        // sent once: a repeat of a reap answers false, whatever the first answered. A
        // token no lease can have is false without being sent.
        let mut sent = HashSet::new();
        // Where each sent entry is in `expired`, in the order sent.
        let mut positions = Vec::new();
        let (mut keys, mut tokens) = (KeyColumns::default(), Vec::new());
        for (at, (key, token)) in expired.iter().enumerate() {
            let Ok(db) = i64::try_from(token.0) else {
                continue;
            };
            if sent.insert((key, db)) {
                positions.push(at);
                keys.push(key);
                tokens.push(db);
            }
        }
        let mut out: Vec<Result<bool>> = expired.iter().map(|_| Ok(false)).collect();
        if tokens.is_empty() {
            return Ok(out);
        }
        let q = keys.query(REAP_MANY).bind(tokens);
        let rows = self.fetch_recording_deaths(q).await?;
        for row in &rows {
            let i: i64 = get(row, 0)?;
            let at = usize::try_from(i - 1)
                .ok()
                .and_then(|i| positions.get(i))
                .ok_or_else(|| {
                    corrupt(format!(
                        "reap_many answered position {i}, not an entry it sent"
                    ))
                })?;
            out[*at] = Ok(true);
        }
        if !rows.is_empty() {
            self.wake_local();
        }
        Ok(out)
    }

    /// `sweep_many`, also for one token (`Store::sweep`): one
    /// `SWEEP` (in `deaths.rs`) per `max_batch` tokens, and one more for the
    /// dead sessions a statement did not reach; each dead session's sweep declares up
    /// to `max_batch` of its own members dead, as a call with that token alone would, and
    /// one statement fewer than `2 * max_batch`.
    pub(crate) async fn sweep_batch(&self, tokens: &[FencingToken]) -> BatchResult<Sweep> {
        // A token given twice is sent once (its repeat moves nothing: an empty answer).
        let mut out: Vec<Result<Sweep>> = tokens.iter().map(|_| Ok(Sweep::default())).collect();
        // Each token once, with where it first is in `tokens`.
        let mut seen = HashSet::new();
        let unique: Vec<(i64, usize)> = tokens
            .iter()
            .enumerate()
            .filter_map(|(at, token)| Some((i64::try_from(token.0).ok()?, at)))
            .filter(|(db, _)| seen.insert(*db))
            .collect();
        // The call's share of expired dead letters to delete, across its statements.
        let mut trim = DEAD_LETTER_TRIM;
        for chunk in unique.chunks(self.caps().max_batch.max(1)) {
            let ids: Vec<i64> = chunk.iter().map(|(db, _)| *db).collect();
            let answers = self.sweep(&ids, &mut trim).await?;
            for ((_, at), answer) in chunk.iter().zip(answers) {
                out[*at] = Ok(answer);
            }
        }
        Ok(out)
    }
}
