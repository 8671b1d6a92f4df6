//! The native batches (`acquire_many`, `join_session_many`, `renew_many`,
//! `reap_many`, `sweep_many`): each is one write transaction at one instant, so one
//! commit (one fsync with `synchronous=full`) for the whole batch instead of one per
//! entry; the one-entry calls (`acquire`, `renew`, ...) are these with one entry
//! ([`liveness_core::Store`]). And the per-entry steps they run
//! ([`SqliteStore::take_at`], [`SqliteStore::renew_at`]). Their input was checked
//! before the call ([`liveness_core::CheckInput`]: batch sizes, ttls, issuers): every
//! entry is run.

use std::time::{Duration, Instant};

use liveness_core::durability::StoreLostState;
use liveness_core::wake::tick;
use liveness_core::{
    Acquire, BatchResult, DeathCause, Error, FencingToken, HolderId, JoinAsk, Key, Lease,
    LostCause, Result, Sweep, Ttl, DEAD_LETTER_TRIM,
};
#[cfg(doc)]
use liveness_core::{ItemStore, LeaseStore};
use sqlx::sqlite::SqliteConnection;

use crate::core::{as_db, get_u64, to_i64, Current, SqliteStore};
use crate::error::{corrupt, map};
use crate::BACKEND;

/// One entry's step of a batch, on the connection of the batch's write transaction.
type Step<'c, T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T>> + Send + 'c>>;

/// How long one write transaction of `sweep_many` goes on starting sweeps:
/// a renewal waiting for the writer's turn waits about this long at most behind it.
const SWEEP_BUDGET: Duration = Duration::from_millis(25);

/// How many dead tokens one set-based sweep takes at once: a few milliseconds of
/// work, so that the transaction's budget is looked at between runs.
const PLAIN_RUN: usize = 32;

/// Draws the namespace's next fencing token (?1 ns).
const NEXT_TOKEN: &str =
    "INSERT INTO liveness_counters (ns, next_token, next_item) VALUES (?1, 1, 0) \
    ON CONFLICT (ns) DO UPDATE SET next_token = next_token + 1 RETURNING next_token";

/// The highest fencing token the namespace has handed out (?1 ns); no row before the
/// first.
const HANDED_OUT: &str = "SELECT next_token FROM liveness_counters WHERE ns = ?1";

/// Writes the lease on a key (?1 ns, ?2 space, ?3 name, ?4 holder, ?5 token, ?6 ttl ms,
/// ?7 expiry).
const PUT_LEASE: &str =
    "INSERT INTO liveness_leases (ns, space, name, holder, token, ttl_ms, expires_boot_ms) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
    ON CONFLICT (ns, space, name) DO UPDATE SET holder = excluded.holder, \
    token = excluded.token, ttl_ms = excluded.ttl_ms, expires_boot_ms = excluded.expires_boot_ms, \
    last_claim = NULL, session_name = NULL, session_token = NULL";

/// Writes a member riding a session on a key (?1 ns, ?2 space, ?3 name, ?4 holder, ?5
/// token, ?6 ttl ms, ?7 the session's name, ?8 the session's token): no expiry of its
/// own, so no entry in the expiry index.
const PUT_MEMBER: &str = "INSERT INTO liveness_leases \
    (ns, space, name, holder, token, ttl_ms, expires_boot_ms, session_name, session_token) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL, ?7, ?8) \
    ON CONFLICT (ns, space, name) DO UPDATE SET holder = excluded.holder, \
    token = excluded.token, ttl_ms = excluded.ttl_ms, expires_boot_ms = NULL, \
    last_claim = NULL, session_name = excluded.session_name, \
    session_token = excluded.session_token";

/// The session a member joins ([`SqliteStore::take_at`]): its lease, found current and
/// live in the join's write transaction ([`SqliteStore::ride_until`]), and when it
/// expires.
#[derive(Clone, Copy)]
pub(crate) struct Ride<'a> {
    /// The session's lease.
    pub(crate) session: &'a Lease,
    /// When it expires (milliseconds of the store clock).
    pub(crate) until: i64,
}

/// Extends a current lease, live at ?6 (now), by its ttl (?1 ns, ?2 space, ?3 name, ?4
/// token, ?5 ttl ms), in one statement.
const RENEW: &str = "UPDATE liveness_leases SET ttl_ms = ?5, expires_boot_ms = ?6 + ?5 \
    WHERE ns = ?1 AND space = ?2 AND name = ?3 AND token = ?4 AND expires_boot_ms > ?6";

/// The time from store time `now` to `until` (milliseconds), zero when past.
pub(crate) fn left(until: i64, now: i64) -> Duration {
    Duration::from_millis(u64::try_from(until.saturating_sub(now)).unwrap_or(0))
}

impl SqliteStore {
    /// Runs `step` on every entry, in order, inside one write transaction at one
    /// instant read holding the write lock (so a lease that expired while the call
    /// queued for the lock, another process writing, stays expired), and commits
    /// once: one commit (one fsync with synchronous=full) for the whole batch instead
    /// of one per entry. A later entry sees what an earlier one wrote. An error of the
    /// store itself ends the batch, uncommitted.
    async fn in_one_write<'a, E: Sync, T>(
        &'a self,
        entries: &'a [E],
        step: for<'c> fn(&'c SqliteStore, &'c mut SqliteConnection, &'c E, i64) -> Step<'c, T>,
    ) -> Result<Vec<T>> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let mut w = self.write().await?;
        let now = self.now()?;
        let mut out = Vec::with_capacity(entries.len());
        for entry in entries {
            out.push(step(self, w.conn(), entry, now).await?);
        }
        w.commit().await?;
        Ok(out)
    }

    /// [`LeaseStore::acquire_many`]: every entry in one write transaction.
    pub(crate) async fn acquire_batch(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        let out = self
            .in_one_write(asks, |store, conn, ask, now| {
                Box::pin(store.take_at(conn, &ask.key, &ask.holder, ask.ttl, now, None))
            })
            .await?;
        if out.iter().any(|(_, buried)| *buried) {
            tick(&self.wake);
        }
        Ok(out.into_iter().map(|(taken, _)| taken).collect())
    }

    /// When the session `session` a member joins expires, as the write transaction
    /// that read `cur` (its key's current lease) sees it; why it is lost when it is
    /// not current and live, or is itself a member (only a lease of its own is ridden).
    fn ride_until(session: &Lease, cur: &Current) -> std::result::Result<i64, LostCause> {
        match (Self::lost_cause(session, cur), &cur.lease) {
            (Some(lost), _) => Err(lost),
            (None, Some(held)) if !held.rides => Ok(held.until),
            (None, _) => Err(LostCause::Superseded),
        }
    }

    /// [`LeaseStore::join_session_many`]: the session judged once, then every entry
    /// joined in the same write transaction at one instant (a later entry sees what
    /// an earlier one took); a session not current and live answers `Lost` for every
    /// entry and writes nothing.
    pub(crate) async fn join_batch(&self, session: &Lease, asks: &[JoinAsk]) -> BatchResult<Lease> {
        let mut w = self.write().await?;
        let now = self.now()?;
        let cur = self.current(w.conn(), &session.key, now).await?;
        let ride = match Self::ride_until(session, &cur) {
            Ok(until) => Ride { session, until },
            Err(lost) => {
                w.rollback().await?;
                return Ok(asks.iter().map(|_| Err(session.lost(lost))).collect());
            }
        };
        let mut out = Vec::with_capacity(asks.len());
        let mut buried = false;
        for (key, holder) in asks {
            let (joined, superseded) = self
                .take_at(w.conn(), key, holder, session.ttl, now, Some(ride))
                .await?;
            buried |= superseded;
            out.push(joined);
        }
        w.commit().await?;
        if buried {
            tick(&self.wake);
        }
        Ok(out)
    }

    /// [`LeaseStore::renew_many`]: every lease in one write transaction.
    pub(crate) async fn renew_batch(&self, leases: &[Lease]) -> BatchResult<Lease> {
        self.in_one_write(leases, |store, conn, lease, now| {
            Box::pin(store.renew_at(conn, lease, now))
        })
        .await
    }

    /// [`LeaseStore::reap_many`]: every reap in one write transaction (one commit for
    /// a round's deaths). A repeat of a reap in the batch sees the first's: false.
    pub(crate) async fn reap_batch(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
        let out = self
            .in_one_write(expired, |store, conn, (key, token), now| {
                Box::pin(async move { Ok(Ok(store.reap_in(conn, key, *token, now).await?)) })
            })
            .await?;
        if out.iter().any(|r| matches!(r, Ok(true))) {
            tick(&self.wake);
        }
        Ok(out)
    }

    /// [`ItemStore::sweep_many`]: the sweeps in write transactions of at
    /// most [`SWEEP_BUDGET`] each (a mass death's round of hundreds of sweeps would
    /// otherwise hold every other writer, renewals among them, for hundreds of
    /// milliseconds). A repeat of a token sees the first's work: it moves nothing (a
    /// dead session's token declares its next batch of members dead). Each token is
    /// swept as a call with that token alone would, a dead session's token declaring up
    /// to `max_batch` of its own members dead; a transaction starts a token only while
    /// it has declared fewer than `max_batch` members dead (so it declares fewer than
    /// `2 * max_batch`: one never grows with the sessions), and the next transaction
    /// takes the rest. A transaction that dead-lettered items also removes expired
    /// dead letters, up to [`DEAD_LETTER_TRIM`] for the whole call
    /// ([`SqliteStore::forget_dead_letters`]).
    pub(crate) async fn sweep_batch(&self, tokens: &[FencingToken]) -> BatchResult<Sweep> {
        let batch = self.info.caps.max_batch;
        let mut out = Vec::with_capacity(tokens.len());
        let mut trim = DEAD_LETTER_TRIM;
        while out.len() < tokens.len() {
            let mut w = self.write().await?;
            let (mut members, started, first) = (0, Instant::now(), out.len());
            // The sessions with members left among the next tokens: each is swept
            // alone (a batch of its members declared dead); the others, a run at a
            // time, together.
            let ahead = &tokens[out.len()..tokens.len().min(out.len() + batch.max(1))];
            let sessions = self.with_riders(w.conn(), ahead).await?;
            while out.len() < first + ahead.len() {
                // Other writers (renewals among them) wait for this transaction: it
                // ends after the write budget, the rest of the call in the next.
                if members >= batch.max(1)
                    || (out.len() > first && started.elapsed() >= SWEEP_BUDGET)
                {
                    break;
                }
                let rest = &tokens[out.len()..first + ahead.len()];
                let plain = rest
                    .iter()
                    .take(PLAIN_RUN)
                    .take_while(|t| !sessions.contains(&t.0))
                    .count();
                if plain > 0 {
                    out.extend(self.sweep_plain(w.conn(), &rest[..plain]).await?);
                    continue;
                }
                let mut budget = batch;
                let moved = self
                    .sweep_in(w.conn(), rest[0], &mut budget)
                    .await?
                    .unwrap_or_default();
                members += moved.members.len();
                out.push(moved);
            }
            if trim > 0 && out[first..].iter().any(|s| !s.dead_lettered.is_empty()) {
                let now = self.now()?;
                let removed = self.forget_dead_letters(w.conn(), now, trim).await?;
                trim = trim.saturating_sub(removed);
            }
            w.commit().await?;
            if members > 0 {
                tick(&self.wake);
            }
            if out.iter().any(|moved| !moved.requeued.is_empty()) {
                tick(&self.pending);
            }
        }
        Ok(out.into_iter().map(Ok).collect())
    }

    /// Acquires `key` for `holder` at store time `now` inside the open write
    /// transaction on `conn` (`ttl` was checked before the call): the lease, or `Held`
    /// naming the live holder (nothing changed). An expired lease on the key is buried
    /// (dead set, death record) first; the flag says so, for the caller to wake this
    /// process's waiters after the commit. The outer error is a fault of the store
    /// itself.
    ///
    /// With `ride`, it is the join of a member riding that session
    /// ([`LeaseStore::join_session_many`]: no expiry of its own, the session's ttl; the
    /// answer has the session's time left). A live lease on the key (its own, or one
    /// riding a live session) is `Held`; an expired one, or one whose session is
    /// expired or gone, is buried first (cause superseded).
    pub(crate) async fn take_at(
        &self,
        conn: &mut SqliteConnection,
        key: &Key,
        holder: &HolderId,
        ttl: Ttl,
        now: i64,
        ride: Option<Ride<'_>>,
    ) -> Result<(Result<Lease>, bool)> {
        let ttl_ms = to_i64(ttl.as_millis(), "ttl")?;
        let cur = self.current(conn, key, now).await?;
        let mut superseded = false;
        if let Some(held) = cur.lease {
            if cur.now < held.until {
                let held = Error::Held {
                    key: key.clone(),
                    holder: HolderId::new(held.holder)
                        .map_err(|_| corrupt("bad holder in the liveness database"))?,
                    token: FencingToken(held.token),
                };
                return Ok((Err(held), false));
            }
            self.bury(conn, key, held.token).await?;
            self.record_death(
                conn,
                key,
                &held.holder,
                held.token,
                cur.now,
                DeathCause::Superseded,
            )
            .await?;
            superseded = true;
        }
        let token = self.next(conn, NEXT_TOKEN).await?;
        let put = |statement| {
            self.query(statement)
                .bind(key.space().as_ref())
                .bind(key.name().as_ref())
                .bind(holder.as_ref())
                .bind(token)
                .bind(ttl_ms)
        };
        let put = match &ride {
            None => put(PUT_LEASE).bind(cur.now.saturating_add(ttl_ms)),
            Some(ride) => put(PUT_MEMBER)
                .bind(ride.session.key.name().as_ref())
                .bind(to_i64(ride.session.token.0, "token")?),
        };
        put.execute(&mut *conn).await.map_err(map)?;
        let token = FencingToken(
            u64::try_from(token).map_err(|_| corrupt("bad token in the liveness database"))?,
        );
        let mut lease = Lease::granted(&self.info.issuer, key.clone(), holder.clone(), token, ttl);
        if let Some(ride) = ride {
            lease.expires_in = left(ride.until, cur.now);
        }
        Ok((Ok(lease), superseded))
    }

    /// Renews `lease` at store time `now` inside the open write transaction on `conn`:
    /// the renewed lease, or why not, read at the same instant in the same
    /// transaction. The outer error is a fault of the store itself.
    pub(crate) async fn renew_at(
        &self,
        conn: &mut SqliteConnection,
        lease: &Lease,
        now: i64,
    ) -> Result<Result<Lease>> {
        let ttl_ms = to_i64(lease.ttl.as_millis(), "ttl")?;
        let done = self
            .query(RENEW)
            .bind(lease.key.space().as_ref())
            .bind(lease.key.name().as_ref())
            .bind(as_db(lease.token.0))
            .bind(ttl_ms)
            .bind(now)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
        if done.rows_affected() == 1 {
            return Ok(Ok(lease.renewed()));
        }
        // Not an own live lease: perhaps a member riding a live session, which
        // renews nothing and answers its session's time left.
        let cur = self.current(conn, &lease.key, now).await?;
        if let Some(held) = &cur.lease {
            if held.rides && held.token == lease.token.0 && now < held.until {
                let mut renewed = lease.renewed();
                renewed.expires_in = left(held.until, now);
                return Ok(Ok(renewed));
            }
        }
        if cur.lease.is_none() && lease.token.0 > self.handed_out(conn).await? {
            // No record, and a token the namespace never handed out: the file lost
            // state (restored from an older copy), not a release.
            return Ok(Err(StoreLostState::of(BACKEND, lease)));
        }
        // `lost` is never `None` here: the UPDATE matched nothing, so the lease is not
        // current and live at `now`. Should it be, answer as the safe side would.
        Ok(Err(
            Self::lost(lease, &cur).unwrap_or_else(|| lease.lost(LostCause::Expired))
        ))
    }

    /// The highest token the namespace has handed out (0 before the first).
    async fn handed_out(&self, conn: &mut SqliteConnection) -> Result<u64> {
        let row = self
            .query(HANDED_OUT)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map)?;
        match row {
            None => Ok(0),
            Some(row) => get_u64(&row, 0, "next_token"),
        }
    }
}
