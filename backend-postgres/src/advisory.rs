//! A second election flavour: a singleton held through a session-level PostgreSQL
//! advisory lock on a dedicated connection.
//!
//! [`AdvisoryElection::try_lead`] opens a connection of its own (outside the pool),
//! takes `pg_try_advisory_lock` on a key derived from the namespace and the role's
//! name, and draws a fencing token from the namespace's token sequence (the same one
//! lease acquisitions use, so it is strictly greater than every token handed out
//! before). The lock lives exactly as long as that connection's session: when the
//! connection dies — the process crashed, the backend was terminated, the server
//! restarted — PostgreSQL releases it, and a contender can take it at once, with no
//! ttl to wait out.
//!
//! A background task keeps the connection busy with a short `pg_sleep` in a loop. A
//! terminated backend, a server shutdown or a closed socket ends that query with an
//! error at once, and the task fires the leadership's cancellation signal on the
//! spot; a stalled server or network is caught when one loop turn overruns its
//! deadline (`check_every` + `ping_timeout`).
//!
//! A task only runs when it is scheduled: a leader whose process froze (a GC pause,
//! a stopped VM, a suspended host) while the server dropped its session wakes with a
//! contender already leading, and may act before its task runs. So the leadership
//! also keeps a local deadline on the boot clock ([`Clock::boot`]; a
//! [`LocalDeadline`], as the core heartbeat's leases do), extended only by
//! a loop turn answered in time and measured from that turn's send time, and
//! [`AdvisoryLeadership::check`] compares the clock with it synchronously.
//!
//! See the crate README for the trade-offs against the lease-based
//! [`liveness_core::Election`].

use std::sync::Arc;
use std::time::Duration;

use liveness_core::wake::woken;
use liveness_core::{
    CancellationToken, Clock, Error, FencingToken, HolderId, HostClock, InputProblem, Key,
    LocalDeadline, LostCause, Name, Result, Space, Ttl,
};
use sqlx::postgres::PgConnection;
use sqlx::{Connection, Row};
use tokio::task::JoinHandle;

use crate::core::{holder_of, token_of, PostgresStore};
use crate::error::map;
use crate::BACKEND;

/// The SQL of the election. $1 is always the lock's text key.
mod q {
    pub const TRY_LOCK: &str = "SELECT pg_try_advisory_lock(hashtextextended($1, 0))";
    pub const UNLOCK: &str = "SELECT pg_advisory_unlock(hashtextextended($1, 0))";
    /// $1 role name, $2 holder: draws the token and records the leader, one statement.
    pub const RECORD: &str = r#"
        INSERT INTO advisory_leaders (name, holder, token, pid)
        VALUES ($1, $2, next_token(), pg_backend_pid())
        ON CONFLICT (name) DO UPDATE
            SET holder = excluded.holder, token = excluded.token, pid = excluded.pid
        RETURNING token
    "#;
    /// $1 role name, $2 lock key text: the recorded leader, iff its backend still
    /// holds the advisory lock.
    pub const LEADER: &str = r#"
        SELECT a.holder, a.token FROM advisory_leaders a
        WHERE a.name = $1 AND EXISTS (
            SELECT 1 FROM pg_locks k
            WHERE k.locktype = 'advisory' AND k.granted AND k.pid = a.pid AND k.objsubid = 1
              AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND ((k.classid::bigint << 32) | k.objid::bigint) = hashtextextended($2, 0)
        )
    "#;
    pub const HOLD: &str = "SELECT pg_sleep($1)";
    pub const NOTIFY: &str = "SELECT pg_notify($1, 'resigned')";
}

/// A candidate for one role, elected through an advisory lock.
#[derive(Clone, Debug)]
pub struct AdvisoryElection {
    store: PostgresStore,
    name: Name,
    holder: HolderId,
    lock_key: String,
    check_every: Duration,
    ping_timeout: Duration,
    retry_every: Duration,
    clock: Arc<dyn Clock>,
}

/// A duration setting of the election in `(0, MAX_TIMING]`, or `InvalidInput` naming
/// it.
fn timing(what: &'static str, d: Duration) -> Result<Duration> {
    if d.is_zero() {
        return Err(Error::invalid(what, InputProblem::Zero));
    }
    if d > AdvisoryElection::MAX_TIMING {
        return Err(Error::invalid(
            what,
            InputProblem::TooLongDuration {
                max: AdvisoryElection::MAX_TIMING,
                got: d,
            },
        ));
    }
    Ok(d)
}

impl AdvisoryElection {
    /// The longest `check_every` and `ping_timeout` accepted: one day, as
    /// [`Ttl::MAX`] (a leader that hears from its session less often than that has
    /// no lease-like bound left).
    pub const MAX_TIMING: Duration = Ttl::MAX;

    /// A candidate `holder` for role `name` in the store's namespace. Fails with
    /// `InvalidInput` on an invalid name or holder.
    pub fn new(store: &PostgresStore, name: &str, holder: &str) -> Result<Self> {
        let name = Name::new(name)?;
        let lock_key = format!("{}/{}/{}", store.schema(), Space::leaders(), name);
        Ok(AdvisoryElection {
            store: store.clone(),
            name,
            holder: HolderId::new(holder)?,
            lock_key,
            check_every: Duration::from_millis(200),
            ping_timeout: Duration::from_secs(2),
            retry_every: Duration::from_millis(500),
            clock: Arc::new(HostClock::new()),
        })
    }

    /// How long one turn of the holding loop sleeps on the server (default 200 ms):
    /// the longest [`AdvisoryLeadership::resign`] waits, and, with `ping_timeout`,
    /// how soon a silent (not closed) connection counts as lost. Fails with
    /// `InvalidInput` naming `check_every` when zero or over
    /// [`AdvisoryElection::MAX_TIMING`].
    pub fn check_every(mut self, every: Duration) -> Result<Self> {
        self.check_every = timing("check_every", every)?;
        Ok(self)
    }

    /// How long past `check_every` a turn may take before the connection counts as
    /// lost (default 2 s). Fails with `InvalidInput` naming `ping_timeout` when zero
    /// or over [`AdvisoryElection::MAX_TIMING`].
    pub fn ping_timeout(mut self, timeout: Duration) -> Result<Self> {
        self.ping_timeout = timing("ping_timeout", timeout)?;
        Ok(self)
    }

    /// How often [`AdvisoryElection::campaign`] retries while another candidate leads
    /// (default 500 ms; a resignation wakes it earlier through NOTIFY).
    pub fn retry_every(mut self, every: Duration) -> Self {
        self.retry_every = every.max(Duration::from_millis(1));
        self
    }

    /// Measures the leadership's local deadline ([`AdvisoryLeadership::check`]) on
    /// this clock's [`Clock::boot`] (default [`HostClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The role's name.
    pub fn name(&self) -> &Name {
        &self.name
    }

    /// How long a turn of the holding loop may take: `check_every + ping_timeout`
    /// (each at most a day: no overflow).
    fn turn_budget(&self) -> Duration {
        self.check_every + self.ping_timeout
    }

    /// Who leads now: the recorded holder and token, iff its session still holds the
    /// lock.
    pub async fn leader(&self) -> Result<Option<(HolderId, FencingToken)>> {
        let row = sqlx::query(q::LEADER)
            .bind(self.name.as_str())
            .bind(self.lock_key.as_str())
            .fetch_optional(self.store.pool())
            .await
            .map_err(map)?;
        let Some(row) = row else { return Ok(None) };
        let holder: String = row.try_get(0).map_err(map)?;
        let token: i64 = row.try_get(1).map_err(map)?;
        Ok(Some((holder_of(holder)?, token_of(token)?)))
    }

    /// One attempt: leadership if nobody holds the lock now, `None` otherwise.
    ///
    /// Fails with `Unavailable` when the server cannot be reached.
    pub async fn try_lead(&self) -> Result<Option<AdvisoryLeadership>> {
        let mut conn = self.store.open_connection().await?;
        // The lock is taken by a statement sent now: the session is alive then, and
        // the first turn of the holding loop may take a whole turn's budget.
        let sent = self.clock.boot();
        let locked: bool = sqlx::query_scalar(q::TRY_LOCK)
            .bind(self.lock_key.as_str())
            .fetch_one(&mut conn)
            .await
            .map_err(map)?;
        if !locked {
            let _ = conn.close().await;
            return Ok(None);
        }
        let token: i64 = match sqlx::query_scalar(q::RECORD)
            .bind(self.name.as_str())
            .bind(self.holder.as_str())
            .fetch_one(&mut conn)
            .await
        {
            Ok(t) => t,
            Err(e) => {
                // Closing the session drops the lock.
                let _ = conn.close().await;
                return Err(map(e));
            }
        };
        let token = token_of(token)?;
        let standing = Arc::new(LocalDeadline::new(
            self.clock.clone(),
            Key::new(Space::leaders(), self.name.clone()),
            token,
            sent + self.turn_budget(),
        ));
        let stop = CancellationToken::new();
        let task = tokio::spawn(hold(conn, self.clone(), standing.clone(), stop.clone()));
        Ok(Some(AdvisoryLeadership {
            holder: self.holder.clone(),
            standing,
            stop,
            task: Some(task),
        }))
    }

    /// Campaigns until this candidate leads: retries every `retry_every`, or sooner
    /// when a leader resigns. Retryable faults are retried; permanent ones end the
    /// campaign.
    pub async fn campaign(&self) -> Result<AdvisoryLeadership> {
        use liveness_core::LeaseStore;
        let mut wake = self.store.wakeups();
        loop {
            match self.try_lead().await {
                Ok(Some(l)) => return Ok(l),
                Ok(None) => {}
                Err(e) if e.is_retryable() => {}
                Err(e) => return Err(e),
            }
            tokio::select! {
                _ = tokio::time::sleep(self.retry_every) => {}
                _ = woken(&mut wake) => {}
            }
        }
    }
}

/// Fires the loss when the holding loop ends, whatever ends it: an error, an overrun,
/// a resignation, a panic, or the runtime dropping the task.
struct LoseOnEnd(Arc<LocalDeadline>);

impl Drop for LoseOnEnd {
    fn drop(&mut self) {
        self.0.lose(LostCause::Released);
    }
}

/// Holds the session: a short server-side sleep in a loop. A turn answered in time
/// moves the local deadline to its send time + `check_every` (the server slept that
/// long: the session was alive then) + a whole turn's budget (the next turn's
/// allowance). Any error, an overrun, or the deadline passing fires the loss at once;
/// `stop` ends the loop, unlocks and notifies.
async fn hold(
    mut conn: PgConnection,
    election: AdvisoryElection,
    standing: Arc<LocalDeadline>,
    stop: CancellationToken,
) {
    let _lose = LoseOnEnd(standing.clone());
    let secs = election.check_every.as_secs_f64();
    let budget = election.turn_budget();
    while !stop.is_cancelled() {
        let Ok(left) = standing.remaining() else {
            if stop.is_cancelled() {
                break; // given up meanwhile: unlock below
            }
            tracing::warn!(role = %election.name, "advisory leadership lost: its local deadline passed");
            return;
        };
        let sent = election.clock.boot();
        let turn = sqlx::query(q::HOLD).bind(secs).execute(&mut conn);
        match tokio::time::timeout(left.min(budget), turn).await {
            Ok(Ok(_)) => {
                if standing
                    .extend(sent + election.check_every + budget)
                    .is_err()
                {
                    if stop.is_cancelled() {
                        break;
                    }
                    tracing::warn!(role = %election.name, "advisory leadership lost: a turn answered after the local deadline");
                    return;
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, role = %election.name, "advisory leadership lost: connection failed");
                return;
            }
            Err(_) if standing.lost().is_some() => {
                tracing::warn!(role = %election.name, "advisory leadership lost: its local deadline passed");
                return;
            }
            Err(_) => {
                tracing::warn!(role = %election.name, "advisory leadership lost: the server stopped answering");
                // Dropping the connection closes the socket: the server frees the
                // lock once it notices.
                return;
            }
        }
    }
    standing.lose(LostCause::Released);
    let _ = sqlx::query(q::UNLOCK)
        .bind(election.lock_key.as_str())
        .execute(&mut conn)
        .await;
    let _ = sqlx::query(q::NOTIFY)
        .bind(election.store.channel())
        .execute(&mut conn)
        .await;
    let _ = conn.close().await;
    election.store.wake_local();
}

/// Leadership held through an advisory lock. Dropping it gives the role up (the
/// background task unlocks within one `check_every`); [`AdvisoryLeadership::resign`]
/// does the same and waits for it.
#[derive(Debug)]
pub struct AdvisoryLeadership {
    holder: HolderId,
    standing: Arc<LocalDeadline>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl AdvisoryLeadership {
    /// The fencing token: strictly greater than every token drawn before in the
    /// namespace (leases and advisory leaderships share one sequence).
    pub fn token(&self) -> FencingToken {
        self.standing.token()
    }

    /// Who leads.
    pub fn holder(&self) -> &HolderId {
        &self.holder
    }

    /// Fires the moment leadership is lost (the connection failed or stalled, or the
    /// local deadline was found passed) or given up: stop acting as leader at once.
    pub fn cancelled(&self) -> CancellationToken {
        self.standing.cancel().clone()
    }

    /// May this leader still act? Returns its fencing token while the holding loop
    /// has seen nothing wrong, the cancellation has not fired and the local deadline
    /// has not passed by the clock *right now*; otherwise [`Error::Lost`] (and the
    /// cancellation fires, if it had not yet). The deadline is `2 × check_every +
    /// ping_timeout` past the send of the last turn answered in time. Cheap and
    /// synchronous: call it before every write the leader makes. It does not depend on the background task having run,
    /// so a leader woken from a freeze longer than that answers correctly before any
    /// of its tasks ran. A shorter freeze, or a session dropped less than that ago,
    /// is not seen here: fence every write with the token.
    pub fn check(&self) -> Result<FencingToken> {
        self.standing.check()
    }

    /// True once leadership is lost or given up: [`AdvisoryLeadership::check`] fails.
    /// Compares the clock with the deadline itself; it never answers `false` on a
    /// stale belief.
    pub fn is_lost(&self) -> bool {
        self.check().is_err()
    }

    /// Gives the role up: fires the cancellation signal, unlocks, notifies waiting
    /// campaigners and closes the connection.
    pub async fn resign(mut self) -> Result<()> {
        // `stop` first: the loop then takes the loss it finds for a resignation and
        // unlocks, instead of dropping the connection.
        self.stop.cancel();
        self.standing.lose(LostCause::Released);
        if let Some(task) = self.task.take() {
            task.await
                .map_err(|e| Error::backend(BACKEND, std::io::Error::other(e.to_string())))?;
        }
        Ok(())
    }
}

impl Drop for AdvisoryLeadership {
    fn drop(&mut self) {
        self.stop.cancel();
        self.standing.lose(LostCause::GaveUp);
    }
}
