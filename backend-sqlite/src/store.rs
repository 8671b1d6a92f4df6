//! [`SqliteStore`]: the contract over one SQLite file in WAL mode.
//!
//! # How each guarantee is met
//!
//! - Atomicity: every operation is one SQLite transaction. Writes start with
//!   `BEGIN IMMEDIATE`, so concurrent writers (threads or processes) queue on the
//!   database's write lock instead of deadlocking on a read-to-write upgrade; inside a
//!   process they also queue on an async mutex per file, so they do not spin in
//!   SQLite's busy handler against each other.
//! - The store clock: the host's boot clock (`CLOCK_BOOTTIME`, see `clock.rs`), read
//!   once per operation (by a write after `BEGIN IMMEDIATE` took the write lock) and
//!   bound into its statements: the operation happens at that one instant. SQLite's
//!   wall-clock `'now'` is never used. This is only valid because every process that
//!   opens the file runs on the same host and so reads the same clock. The file
//!   records the boot its expiries count in; opening it under another boot retires
//!   every lease ([`retire_other_boot`]).
//! - Tokens and item ids: from one counter row per namespace, incremented in the
//!   transaction that uses them; strictly increasing, never reused.

use liveness_core::Page;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex as StdMutex, OnceLock};
use std::time::Duration;

use liveness_core::durability::StoreLostState;
use liveness_core::sync::lock;
use liveness_core::wake::tick;
use liveness_core::{
    async_trait, Acquire, Backoff, Capabilities, DeadToken, DeathCause, DeathRecord,
    EnqueueOptions, Error, ExpiredLease, FencingToken, HighWater, HolderId, InputProblem, Issuer,
    Item, ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind, ItemStore, Key, Lease,
    LeaseInfo, LeaseStatus, LeaseStore, LostReason, Name, Namespace, RequestId, Requeued, Result,
    SchemaTooNew, Space, StoreInfo, StoreTime, Swept, Ttl,
};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{Connection, Row, SqlSafeStr, Sqlite, Transaction};
use tokio::sync::{watch, Mutex, MutexGuard};
use tokio::time::Instant;

use crate::clock::{HostBootClock, StoreClock};
use crate::config::{Durability, SqliteConfig};
use crate::error::{corrupt, map, map_migrate};
use crate::{sql, BACKEND};

/// The embedded schema migrations: version, description, SQL. Append only; never
/// edit an applied one (its checksum is recorded in the database).
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "initial", include_str!("../migrations/0001_initial.sql")),
    (
        2,
        "boot clock",
        include_str!("../migrations/0002_boot_clock.sql"),
    ),
    (
        3,
        "request_ids",
        include_str!("../migrations/0003_request_ids.sql"),
    ),
    (
        4,
        "claim_high_water",
        include_str!("../migrations/0004_claim_high_water.sql"),
    ),
    (5, "deaths", include_str!("../migrations/0005_deaths.sql")),
];

/// The table recording applied schema migrations.
const MIGRATIONS_TABLE: &str = "liveness_migrations";

const STATE_PENDING: i64 = 0;
const STATE_OWNED: i64 = 1;
const STATE_DEAD: i64 = 2;

fn to_i64(v: u64, what: &'static str) -> Result<i64> {
    i64::try_from(v).map_err(|_| corrupt(what))
}

/// A token or item id as the database stores it. Tokens and ids handed out are at
/// least 1 and fit in an `i64`; a value that does not fit can name nothing stored, so
/// it maps to -1, which matches no row.
fn as_db(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(-1)
}

/// A statement with its parameters bound.
type Query<'q> = sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments>;

/// A limit as an integer parameter.
fn limit_param(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn get_u64(row: &SqliteRow, idx: usize, what: &'static str) -> Result<u64> {
    let v: i64 = row.try_get(idx).map_err(map)?;
    u64::try_from(v).map_err(|_| corrupt(what))
}

fn get_u32(row: &SqliteRow, idx: usize, what: &'static str) -> Result<u32> {
    let v: i64 = row.try_get(idx).map_err(map)?;
    u32::try_from(v).map_err(|_| corrupt(what))
}

fn get_text(row: &SqliteRow, idx: usize) -> Result<String> {
    row.try_get(idx).map_err(map)
}

/// One async mutex per database file in this process: writers of one process queue
/// here instead of polling SQLite's busy handler against each other.
fn writer_lock(path: &Path) -> Arc<Mutex<()>> {
    static LOCKS: OnceLock<StdMutex<HashMap<PathBuf, Arc<Mutex<()>>>>> = OnceLock::new();
    let mut locks = lock(LOCKS.get_or_init(StdMutex::default));
    locks.entry(path.to_path_buf()).or_default().clone()
}

/// A write transaction: the process-local writer lock and a `BEGIN IMMEDIATE`
/// transaction. Dropping it without [`Write::commit`] rolls back.
struct Write<'a> {
    tx: Transaction<'static, Sqlite>,
    _guard: MutexGuard<'a, ()>,
}

impl Write<'_> {
    fn conn(&mut self) -> &mut SqliteConnection {
        &mut self.tx
    }

    async fn commit(self) -> Result<()> {
        self.tx.commit().await.map_err(map)
    }

    async fn rollback(self) -> Result<()> {
        self.tx.rollback().await.map_err(map)
    }
}

/// The current lease on a key as a write transaction sees it, with the store's now
/// (milliseconds of the boot clock).
struct Current {
    now: i64,
    lease: Option<(String, u64, i64)>,
}

/// A store handle on one namespace of one SQLite database file.
///
/// Cheap to clone; clones share the connection pool. Many handles, in many
/// processes of the same host, may open the same file.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    ns: Namespace,
    writer: Arc<Mutex<()>>,
    wake: Arc<watch::Sender<u64>>,
    /// The store clock: the host's boot clock (a hand-driven one in unit tests).
    clock: Arc<dyn StoreClock>,
    /// The highest store time this handle read, so its store time never goes back,
    /// whatever its clock does.
    high_water: HighWater,
    /// What the store is: the backend, its capabilities, the issuer of its leases.
    info: StoreInfo,
}

impl SqliteStore {
    /// Opens (creating when missing) the database file, switches it to WAL mode,
    /// applies the embedded schema migrations, and returns a handle on the
    /// configured namespace.
    ///
    /// Fails with [`Error::Backend`] carrying [`SchemaTooNew`] when the file's schema
    /// is newer than this build knows, with [`Error::Unavailable`] when the file stays
    /// locked past the busy timeout, and with [`Error::Backend`] when it cannot be
    /// opened or is not a liveness database.
    ///
    /// Handles opening a brand-new file at the same moment (processes starting
    /// together) can meet `SQLITE_BUSY` while one of them switches the file to WAL,
    /// which SQLite reports without waiting in its busy handler; such faults are
    /// retried, with backoff, until the busy timeout has passed.
    ///
    /// The store clock is the host's boot clock; when the file was last opened under
    /// another boot of the host (a reboot killed every holder), every lease in it is
    /// retired (expired) as part of opening. Fails with [`Error::Backend`] when the
    /// host's boot id cannot be read.
    pub async fn connect(config: SqliteConfig) -> Result<SqliteStore> {
        Self::connect_with(config, Arc::new(HostBootClock::new()?)).await
    }

    /// [`SqliteStore::connect`] with the store clock `clock`.
    pub(crate) async fn connect_with(
        config: SqliteConfig,
        clock: Arc<dyn StoreClock>,
    ) -> Result<SqliteStore> {
        let give_up = Instant::now() + config.busy_timeout;
        let mut backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(100));
        loop {
            match Self::open(&config, &clock).await {
                Err(e) if e.is_retryable() && Instant::now() < give_up => {
                    tracing::debug!(error = %e, path = %config.path.display(), "open retried");
                    tokio::time::sleep(backoff.next()).await;
                }
                other => return other,
            }
        }
    }

    /// One attempt of [`SqliteStore::connect`].
    async fn open(config: &SqliteConfig, clock: &Arc<dyn StoreClock>) -> Result<SqliteStore> {
        let options = SqliteConnectOptions::new()
            .filename(&config.path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match config.durability {
                Durability::Full => SqliteSynchronous::Full,
                Durability::Normal => SqliteSynchronous::Normal,
            })
            .busy_timeout(config.busy_timeout)
            .foreign_keys(false);
        let pool = SqlitePoolOptions::new()
            .max_connections(config.max_connections)
            .min_connections(0)
            .acquire_timeout(config.busy_timeout.max(Duration::from_secs(5)))
            .connect_with(options)
            .await
            .map_err(map)?;
        let lock_path = std::fs::canonicalize(&config.path).unwrap_or(config.path.clone());
        let writer = writer_lock(&lock_path);
        {
            let _guard = writer.lock().await;
            migrate(&pool, &config.path, clock.boot_id()).await?;
        }
        Ok(SqliteStore {
            pool,
            ns: config.namespace.clone(),
            writer,
            wake: Arc::new(watch::channel(0).0),
            clock: clock.clone(),
            high_water: HighWater::default(),
            info: StoreInfo {
                backend: BACKEND,
                caps: Capabilities {
                    // The store clock counts whole milliseconds.
                    min_ttl: Duration::from_millis(1),
                    death_retention: config.death_retention.max(1),
                    ..Capabilities::default()
                },
                issuer: Issuer::located(
                    BACKEND,
                    &lock_path.display().to_string(),
                    config.namespace.clone(),
                ),
            },
        })
    }

    /// The namespace this handle is scoped to.
    pub fn namespace(&self) -> &Namespace {
        &self.ns
    }

    /// The connection pool, for diagnostics and benches (a raw-primitive baseline).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Closes the pool; later operations fail with [`Error::Unavailable`].
    pub async fn close(&self) {
        self.pool.close().await;
    }

    async fn write(&self) -> Result<Write<'_>> {
        let guard = self.writer.lock().await;
        let tx = self.pool.begin_with("BEGIN IMMEDIATE").await.map_err(map)?;
        Ok(Write { tx, _guard: guard })
    }

    /// The store clock now, in milliseconds, never behind an earlier reading of this
    /// handle. A write reads it after `BEGIN IMMEDIATE`, holding the write lock.
    fn now(&self) -> Result<i64> {
        let now = self.high_water.observe(self.clock.now()?).since_epoch();
        to_i64(
            u64::try_from(now.as_millis()).unwrap_or(u64::MAX),
            "store clock",
        )
    }

    /// Renews `lease` at store time `now` inside the open write transaction on `conn`:
    /// the renewed lease, or why not, read at the same instant in the same
    /// transaction. The outer error is a fault of the store itself.
    async fn renew_at(
        &self,
        conn: &mut SqliteConnection,
        lease: &Lease,
        now: i64,
    ) -> Result<Result<Lease>> {
        let ttl_ok = self.info.caps.check_ttl(lease.ttl);
        if ttl_ok.is_ok() {
            let ttl_ms = to_i64(lease.ttl.as_millis(), "ttl")?;
            let done = self
                .query(sql::RENEW)
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
        }
        let cur = self.current(conn, &lease.key, now).await?;
        if cur.lease.is_none() && lease.token.0 > self.handed_out(conn).await? {
            // No record, and a token the namespace never handed out: the file lost
            // state (restored from an older copy), not a release.
            return Ok(Err(StoreLostState::of(BACKEND, lease)));
        }
        Ok(match Self::lost(lease, &cur) {
            Some(e) => Err(e),
            None => match ttl_ok {
                Err(e) => Err(e),
                // Unreachable: the UPDATE matched nothing, so the lease is not current
                // and live at `now`. Answer as the safe side would.
                Ok(()) => Err(lease.lost(LostReason::Expired)),
            },
        })
    }

    /// Acquires `key` for `holder` at store time `now` inside the open write
    /// transaction on `conn` (the caller checked `ttl`): the lease, or `Held` naming
    /// the live holder (nothing changed). An expired lease on the key is buried (dead
    /// set, death record) first; the flag says so, for the caller to wake this
    /// process's waiters after the commit. The outer error is a fault of the store
    /// itself.
    async fn acquire_at(
        &self,
        conn: &mut SqliteConnection,
        key: &Key,
        holder: &HolderId,
        ttl: Ttl,
        now: i64,
    ) -> Result<(Result<Lease>, bool)> {
        let ttl_ms = to_i64(ttl.as_millis(), "ttl")?;
        let cur = self.current(conn, key, now).await?;
        let mut retired = false;
        if let Some((live_holder, token, expires_at)) = cur.lease {
            if cur.now < expires_at {
                let held = Error::Held {
                    key: key.clone(),
                    holder: HolderId::new(live_holder).map_err(|_| corrupt("holder"))?,
                    token: FencingToken(token),
                };
                return Ok((Err(held), false));
            }
            self.bury(conn, key, token).await?;
            self.record_death(
                conn,
                key,
                &live_holder,
                token,
                cur.now,
                DeathCause::Superseded,
            )
            .await?;
            retired = true;
        }
        let token = self.next(conn, sql::NEXT_TOKEN).await?;
        self.query(sql::PUT_LEASE)
            .bind(key.space().as_ref())
            .bind(key.name().as_ref())
            .bind(holder.as_ref())
            .bind(token)
            .bind(ttl_ms)
            .bind(cur.now.saturating_add(ttl_ms))
            .execute(&mut *conn)
            .await
            .map_err(map)?;
        let token = FencingToken(u64::try_from(token).map_err(|_| corrupt("token"))?);
        let lease = Lease::granted(&self.info.issuer, key.clone(), holder.clone(), token, ttl);
        Ok((Ok(lease), retired))
    }

    /// The highest token the namespace has handed out (0 before the first).
    async fn handed_out(&self, conn: &mut SqliteConnection) -> Result<u64> {
        let row = self
            .query(sql::HANDED_OUT)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map)?;
        match row {
            None => Ok(0),
            Some(row) => get_u64(&row, 0, "next_token"),
        }
    }

    /// Reads the lease on `key`, to judge it at the store's `now`.
    async fn current(&self, conn: &mut SqliteConnection, key: &Key, now: i64) -> Result<Current> {
        let row = self
            .query(sql::CURRENT)
            .bind(key.space().as_ref())
            .bind(key.name().as_ref())
            .fetch_optional(&mut *conn)
            .await
            .map_err(map)?;
        let lease = match row {
            None => None,
            Some(row) => Some((
                get_text(&row, 0)?,
                get_u64(&row, 1, "token")?,
                row.try_get::<i64, _>(2).map_err(map)?,
            )),
        };
        Ok(Current { now, lease })
    }

    /// Why `lease` is not current and live, or `None` when it is.
    fn lost(lease: &Lease, cur: &Current) -> Option<Error> {
        let reason = match &cur.lease {
            None => LostReason::Released,
            Some((_, token, _)) if *token != lease.token.0 => LostReason::Superseded,
            Some((_, _, expires_at)) if cur.now >= *expires_at => LostReason::Expired,
            Some(_) => return None,
        };
        Some(lease.lost(reason))
    }

    /// Runs [`sql::RELEASE`] or [`sql::REAP`] on the lease on `key` with `token`:
    /// true when it deleted the lease, whose token then goes to the dead set in the
    /// same transaction; wakes this process's waiters. When `clocked` (`REAP`), the
    /// store's now, read holding the write lock, is bound last.
    async fn retire(
        &self,
        statement: &'static str,
        key: &Key,
        token: FencingToken,
        clocked: bool,
    ) -> Result<bool> {
        let mut w = self.write().await?;
        let now = self.now()?;
        if !self
            .retire_in(w.conn(), statement, key, token, clocked, now)
            .await?
        {
            w.rollback().await?;
            return Ok(false);
        }
        w.commit().await?;
        tick(&self.wake);
        Ok(true)
    }

    /// [`SqliteStore::retire`]'s work inside the open write transaction on `conn`, at
    /// store time `now`: true when it removed the lease, buried its token and
    /// recorded its death (the caller commits, and wakes the waiters).
    async fn retire_in(
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

    /// [`ItemStore::requeue_orphans`]'s work inside the open write transaction on
    /// `conn` (the caller commits); `None` when the token is not in the dead set
    /// (nothing written).
    async fn requeue_in(
        &self,
        conn: &mut SqliteConnection,
        token: FencingToken,
    ) -> Result<Option<Requeued>> {
        let t = as_db(token.0);
        let done = self
            .query(sql::FORGET_DEAD)
            .bind(t)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        let rows = self
            .query(sql::REQUEUE_ORPHANS)
            .bind(t)
            .fetch_all(&mut *conn)
            .await
            .map_err(map)?;
        self.record_sweep(&mut *conn, t, &rows).await?;
        let mut out = Requeued::default();
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

    /// A statement of this namespace: `?1` is bound to it.
    fn query(&self, statement: &'static str) -> Query<'_> {
        sqlx::query(statement).bind(self.ns.as_ref())
    }

    /// Every row a listing statement returns, each read by `read`.
    async fn list<T>(
        &self,
        q: Query<'_>,
        read: impl Fn(&SqliteRow) -> Result<T>,
    ) -> Result<Vec<T>> {
        let rows = q.fetch_all(&self.pool).await.map_err(map)?;
        rows.iter().map(read).collect()
    }

    /// Draws the next value of one of the namespace's counters: `counter` is
    /// [`sql::NEXT_TOKEN`] or [`sql::NEXT_ITEM`].
    async fn next(&self, conn: &mut SqliteConnection, counter: &'static str) -> Result<i64> {
        sqlx::query_scalar(counter)
            .bind(self.ns.as_ref())
            .fetch_one(conn)
            .await
            .map_err(map)
    }

    /// Moves the lease on `key` with `token` to the dead set (the caller deleted it).
    async fn bury(&self, conn: &mut SqliteConnection, key: &Key, token: u64) -> Result<()> {
        self.query(sql::BURY)
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
    async fn record_death(
        &self,
        conn: &mut SqliteConnection,
        key: &Key,
        holder: &str,
        token: u64,
        now: i64,
        cause: DeathCause,
    ) -> Result<()> {
        let seq = self.next(conn, sql::NEXT_DEATH).await?;
        self.query(sql::RECORD_DEATH)
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
            self.query(sql::TRIM_DEATHS)
                .bind(seq - keep)
                .execute(&mut *conn)
                .await
                .map_err(map)?;
        }
        Ok(())
    }

    /// Fills in the death record of `token` with what its sweep moved (`rows` of
    /// [`sql::REQUEUE_ORPHANS`]), inside the sweep's write transaction.
    async fn record_sweep(
        &self,
        conn: &mut SqliteConnection,
        token: i64,
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
        self.query(sql::SWEPT)
            .bind(token)
            .bind(requeued)
            .bind(dead)
            .execute(conn)
            .await
            .map_err(map)?;
        Ok(())
    }

    fn item_from_row(row: &SqliteRow) -> Result<(Item, ItemState)> {
        let id = ItemId(get_u64(row, 0, "item id")?);
        let payload: Vec<u8> = row.try_get(1).map_err(map)?;
        let attempts = get_u32(row, 2, "attempts")?;
        let max_attempts = get_u32(row, 3, "max_attempts")?;
        let state: i64 = row.try_get(4).map_err(map)?;
        let owner: Option<i64> = row.try_get(5).map_err(map)?;
        let state = match (state, owner) {
            (STATE_PENDING, _) => ItemState::Pending,
            (STATE_OWNED, Some(t)) => ItemState::Owned(FencingToken(
                u64::try_from(t).map_err(|_| corrupt("owner"))?,
            )),
            (STATE_DEAD, _) => ItemState::DeadLettered,
            _ => return Err(corrupt("item state")),
        };
        Ok((
            Item {
                id,
                payload,
                attempts,
                max_attempts,
            },
            state,
        ))
    }
}

/// A lease's status at store time `now`, from its expiry.
fn status_at(expires_at: i64, now: i64) -> LeaseStatus {
    if now < expires_at {
        LeaseStatus::Live {
            remaining: Duration::from_millis(u64::try_from(expires_at - now).unwrap_or(0)),
        }
    } else {
        LeaseStatus::Expired
    }
}

/// How `liveness_deaths.cause` writes a [`DeathCause`].
fn cause_code(cause: DeathCause) -> i64 {
    match cause {
        DeathCause::Reaped => 0,
        DeathCause::Released => 1,
        DeathCause::Superseded => 2,
    }
}

fn cause_from_code(code: i64) -> Result<DeathCause> {
    match code {
        0 => Ok(DeathCause::Reaped),
        1 => Ok(DeathCause::Released),
        2 => Ok(DeathCause::Superseded),
        _ => Err(corrupt("death cause")),
    }
}

fn state_code(state: ItemStateKind) -> i64 {
    match state {
        ItemStateKind::Pending => STATE_PENDING,
        ItemStateKind::Owned => STATE_OWNED,
        ItemStateKind::DeadLettered => STATE_DEAD,
    }
}

/// Applies the embedded migrations under one `BEGIN IMMEDIATE` transaction, so that
/// processes connecting at once apply them exactly once, after refusing a schema
/// newer than this build; then, in the same transaction, retires every lease when the
/// file was last opened under another boot than `boot_id` ([`retire_other_boot`]).
async fn migrate(pool: &SqlitePool, path: &Path, boot_id: &str) -> Result<()> {
    let mut migrator = Migrator::with_migrations(
        MIGRATIONS
            .iter()
            .map(|(version, description, sql)| {
                Migration::new(
                    *version,
                    (*description).into(),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect(),
    );
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    let supported = migrator.iter().map(|m| m.version).max().unwrap_or(0);

    let mut conn = pool.acquire().await.map_err(map)?;
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(map)?;
    let exists: Option<String> = sqlx::query_scalar(sql::TABLE_EXISTS)
        .bind(MIGRATIONS_TABLE)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map)?;
    if exists.is_some() {
        let found: Option<i64> = sqlx::query_scalar(sql::SCHEMA_FOUND)
            .fetch_one(&mut *tx)
            .await
            .map_err(map)?;
        if let Some(found) = found.filter(|f| *f > supported) {
            return Err(Error::backend(
                BACKEND,
                SchemaTooNew {
                    location: path.display().to_string(),
                    found,
                    supported,
                },
            ));
        }
    }
    // `run_direct` on the transaction's connection (sqlx's `run` would need a
    // higher-ranked `Acquire` bound that makes this future not `Send`). Each
    // migration runs in a savepoint of our `BEGIN IMMEDIATE` transaction.
    migrator
        .run_direct(None, &mut *tx, false)
        .await
        .map_err(map_migrate)?;
    retire_other_boot(&mut tx, boot_id).await?;
    tx.commit().await.map_err(map)
}

/// When the file's expiries were counted in another boot than `boot_id` (the host
/// rebooted since a process last opened it, and every holder died with that boot; or
/// the file was just migrated from wall-clock expiries), expires every lease of every
/// namespace and records `boot_id`. The caller holds the write lock (`BEGIN
/// IMMEDIATE`) and commits, so of the processes opening the file at once after a
/// reboot, exactly the first retires the old leases and no later one touches a lease
/// written under this boot.
async fn retire_other_boot(conn: &mut SqliteConnection, boot_id: &str) -> Result<()> {
    let recorded: String = sqlx::query_scalar(sql::RECORDED_BOOT)
        .fetch_one(&mut *conn)
        .await
        .map_err(map)?;
    if recorded == boot_id {
        return Ok(());
    }
    let retired = sqlx::query(sql::RETIRE_ALL)
        .execute(&mut *conn)
        .await
        .map_err(map)?
        .rows_affected();
    sqlx::query(sql::RECORD_BOOT)
        .bind(boot_id)
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    tracing::info!(
        retired,
        previous_boot = %recorded,
        boot = %boot_id,
        "first open of the file under this boot of the host: its leases are expired"
    );
    Ok(())
}

#[async_trait]
impl LeaseStore for SqliteStore {
    fn info(&self) -> &StoreInfo {
        &self.info
    }

    async fn acquire(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Result<Lease> {
        self.info.caps.check_ttl(ttl)?;
        let mut w = self.write().await?;
        let now = self.now()?;
        let (taken, retired) = self.acquire_at(w.conn(), key, holder, ttl, now).await?;
        if taken.is_ok() {
            w.commit().await?;
        } else {
            w.rollback().await?;
        }
        if retired {
            tick(&self.wake);
        }
        taken
    }

    async fn acquire_many(&self, asks: &[Acquire]) -> Result<Vec<Result<Lease>>> {
        liveness_core::store::check_batch(self.info.caps, "acquires", asks.len())?;
        if asks.is_empty() {
            return Ok(Vec::new());
        }
        // Every entry in one write transaction, in order, at one instant read holding
        // the write lock (as `acquire` does): one commit (one fsync with
        // synchronous=full) for the whole batch instead of one per key. An entry with
        // a ttl outside the capabilities fails alone.
        let mut w = self.write().await?;
        let now = self.now()?;
        let mut out = Vec::with_capacity(asks.len());
        let mut retired = false;
        for ask in asks {
            if let Err(e) = self.info.caps.check_ttl(ask.ttl) {
                out.push(Err(e));
                continue;
            }
            let (taken, buried) = self
                .acquire_at(w.conn(), &ask.key, &ask.holder, ask.ttl, now)
                .await?;
            retired |= buried;
            out.push(taken);
        }
        w.commit().await?;
        if retired {
            tick(&self.wake);
        }
        Ok(out)
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        lease.check_issuer(&self.info.issuer)?;
        // The clock is read holding the write lock, so the renewal happens at that
        // instant: a lease that expired while this call queued for the lock (another
        // process writing) stays expired.
        let mut w = self.write().await?;
        let now = self.now()?;
        let renewed = self.renew_at(w.conn(), lease, now).await?;
        if renewed.is_ok() {
            w.commit().await?;
        } else {
            w.rollback().await?;
        }
        renewed
    }

    async fn renew_many(&self, leases: &[Lease]) -> Result<Vec<Result<Lease>>> {
        liveness_core::store::check_batch(self.info.caps, "leases", leases.len())?;
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        if leases.iter().any(|lease| lease.issuer != self.info.issuer) {
            // A foreign lease among them: each alone, so `renew` refuses the foreign
            // ones (ForeignLease) and renews the others.
            return liveness_core::store::renew_each(self, leases).await;
        }
        // Every lease in one write transaction, at one instant read holding the write
        // lock (as `renew` does): one commit (one fsync with synchronous=full) for the
        // whole batch instead of one per lease.
        let mut w = self.write().await?;
        let now = self.now()?;
        let mut out = Vec::with_capacity(leases.len());
        for lease in leases {
            out.push(self.renew_at(w.conn(), lease, now).await?);
        }
        w.commit().await?;
        Ok(out)
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        lease.check_issuer(&self.info.issuer)?;
        self.retire(sql::RELEASE, &lease.key, lease.token, false)
            .await
    }

    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        let now = self.now()?;
        let row = self
            .query(sql::INSPECT)
            .bind(key.space().as_ref())
            .bind(key.name().as_ref())
            .fetch_optional(&self.pool)
            .await
            .map_err(map)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let holder = HolderId::new(get_text(&row, 0)?).map_err(|_| corrupt("holder"))?;
        let token = FencingToken(get_u64(&row, 1, "token")?);
        let ttl = Ttl::from_millis(get_u64(&row, 2, "ttl")?).map_err(|_| corrupt("ttl"))?;
        let expires_at: i64 = row.try_get(3).map_err(map)?;
        let status = if now < expires_at {
            LeaseStatus::Live {
                remaining: Duration::from_millis(u64::try_from(expires_at - now).unwrap_or(0)),
            }
        } else {
            LeaseStatus::Expired
        };
        Ok(Some(LeaseInfo {
            key: key.clone(),
            holder,
            token,
            ttl,
            status,
        }))
    }

    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        let q = self
            .query(sql::EXPIRED)
            .bind(space.as_ref())
            .bind(limit_param(limit))
            .bind(self.now()?);
        self.list(q, |row| {
            let name = Name::new(get_text(row, 0)?).map_err(|_| corrupt("name"))?;
            Ok(ExpiredLease {
                key: Key::new(space.clone(), name),
                holder: HolderId::new(get_text(row, 1)?).map_err(|_| corrupt("holder"))?,
                token: FencingToken(get_u64(row, 2, "token")?),
            })
        })
        .await
    }

    async fn reap(&self, key: &Key, token: FencingToken) -> Result<bool> {
        self.retire(sql::REAP, key, token, true).await
    }

    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> Result<Vec<Result<bool>>> {
        liveness_core::store::check_batch(self.info.caps, "expired", expired.len())?;
        if expired.is_empty() {
            return Ok(Vec::new());
        }
        // Every reap in one write transaction at one instant read holding the write
        // lock (as `reap` does): one commit for a round's deaths instead of one per
        // lease. A repeat of a reap in the batch sees the first's: false.
        let mut w = self.write().await?;
        let now = self.now()?;
        let mut out = Vec::with_capacity(expired.len());
        for (key, token) in expired {
            out.push(Ok(self
                .retire_in(w.conn(), sql::REAP, key, *token, true, now)
                .await?));
        }
        w.commit().await?;
        if out.iter().any(|r| matches!(r, Ok(true))) {
            tick(&self.wake);
        }
        Ok(out)
    }

    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        let q = self.query(sql::DEAD_TOKENS).bind(limit_param(limit));
        self.list(q, |row| {
            let space = Space::new(get_text(row, 1)?).map_err(|_| corrupt("space"))?;
            let name = Name::new(get_text(row, 2)?).map_err(|_| corrupt("name"))?;
            Ok(DeadToken {
                token: FencingToken(get_u64(row, 0, "token")?),
                key: Key::new(space, name),
            })
        })
        .await
    }

    async fn members(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let Page { after, limit } = page;
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        if after.is_some_and(|k| k.space() != space) {
            return Err(Error::invalid("after", InputProblem::OtherSpace));
        }
        let now = self.now()?;
        let q = self
            .query(sql::MEMBERS)
            .bind(space.as_ref())
            .bind(after.map_or("", |k| k.name().as_ref()))
            .bind(limit_param(limit));
        self.list(q, |row| {
            let name = Name::new(get_text(row, 0)?).map_err(|_| corrupt("name"))?;
            let expires_at: i64 = row.try_get(4).map_err(map)?;
            Ok(LeaseInfo {
                key: Key::new(space.clone(), name),
                holder: HolderId::new(get_text(row, 1)?).map_err(|_| corrupt("holder"))?,
                token: FencingToken(get_u64(row, 2, "token")?),
                ttl: Ttl::from_millis(get_u64(row, 3, "ttl")?).map_err(|_| corrupt("ttl"))?,
                status: status_at(expires_at, now),
            })
        })
        .await
    }

    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        let q = self
            .query(sql::DEATHS)
            .bind(before.map_or(i64::MAX, as_db))
            .bind(limit_param(limit));
        self.list(q, |row| {
            let space = Space::new(get_text(row, 1)?).map_err(|_| corrupt("space"))?;
            let name = Name::new(get_text(row, 2)?).map_err(|_| corrupt("name"))?;
            let requeued: Option<i64> = row.try_get(7).map_err(map)?;
            let dead: Option<i64> = row.try_get(8).map_err(map)?;
            let count = |n: i64| u64::try_from(n).map_err(|_| corrupt("swept count"));
            let swept = match (requeued, dead) {
                (Some(r), Some(d)) => Some(Swept {
                    requeued: count(r)?,
                    dead_lettered: count(d)?,
                }),
                _ => None,
            };
            Ok(DeathRecord {
                seq: get_u64(row, 0, "seq")?,
                key: Key::new(space, name),
                holder: HolderId::new(get_text(row, 3)?).map_err(|_| corrupt("holder"))?,
                token: FencingToken(get_u64(row, 4, "token")?),
                at: StoreTime::from_epoch(Duration::from_millis(get_u64(row, 5, "at")?)),
                cause: cause_from_code(row.try_get(6).map_err(map)?)?,
                swept,
            })
        })
        .await
    }

    async fn store_time(&self) -> Result<StoreTime> {
        if self.pool.is_closed() {
            return Err(map(sqlx::Error::PoolClosed));
        }
        let now = u64::try_from(self.now()?).unwrap_or(0);
        Ok(StoreTime::from_epoch(Duration::from_millis(now)))
    }

    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        let now = self.now()?;
        let left: Option<i64> = sqlx::query_scalar(sql::NEXT_EXPIRY)
            .bind(self.ns.as_ref())
            .bind(space.as_ref())
            .bind(now)
            .fetch_optional(&self.pool)
            .await
            .map_err(map)?;
        Ok(left.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
    }

    fn wakeups(&self) -> Option<watch::Receiver<u64>> {
        Some(self.wake.subscribe())
    }
}

#[async_trait]
impl ItemStore for SqliteStore {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        options.validate(payload, self.info.caps.max_payload)?;
        let mut w = self.write().await?;
        let key = options.key.map(RequestId::to_hex);
        if let Some(key) = &key {
            let earlier: Option<i64> = sqlx::query_scalar(sql::ENQUEUE_KEY)
                .bind(self.ns.as_ref())
                .bind(key)
                .fetch_optional(w.conn())
                .await
                .map_err(map)?;
            if let Some(id) = earlier {
                w.rollback().await?;
                return Ok(ItemId(u64::try_from(id).map_err(|_| corrupt("item id"))?));
            }
        }
        let id = self.next(w.conn(), sql::NEXT_ITEM).await?;
        self.query(sql::ENQUEUE)
            .bind(id)
            .bind(payload)
            .bind(i64::from(options.max_attempts))
            .execute(w.conn())
            .await
            .map_err(map)?;
        if let Some(key) = &key {
            self.query(sql::SAVE_ENQUEUE_KEY)
                .bind(key)
                .bind(id)
                .execute(w.conn())
                .await
                .map_err(map)?;
        }
        w.commit().await?;
        Ok(ItemId(u64::try_from(id).map_err(|_| corrupt("item id"))?))
    }

    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        lease.check_issuer(&self.info.issuer)?;
        let n = self.info.caps.clamp_limit("n", n)?;
        let req = req.to_hex();
        let mut w = self.write().await?;
        let now = self.now()?;
        let cur = self.current(w.conn(), &lease.key, now).await?;
        if let Some(e) = Self::lost(lease, &cur) {
            w.rollback().await?;
            return Err(e);
        }
        // A repeat of this request answers what it assigned and assigns nothing new.
        let mut rows = self
            .query(sql::CLAIMED_BY)
            .bind(as_db(lease.token.0))
            .bind(&req)
            .fetch_all(w.conn())
            .await
            .map_err(map)?;
        // Else admitted only above the token's high-water mark, which it raises: a
        // late or repeated copy, or an older id after a newer one, assigns nothing.
        let admitted = rows.is_empty()
            && self
                .query(sql::ADMIT_CLAIM)
                .bind(lease.key.space().as_ref())
                .bind(lease.key.name().as_ref())
                .bind(as_db(lease.token.0))
                .bind(&req)
                .execute(w.conn())
                .await
                .map_err(map)?
                .rows_affected()
                == 1;
        if admitted {
            rows = self
                .query(sql::CLAIM)
                .bind(as_db(lease.token.0))
                .bind(limit_param(n))
                .bind(&req)
                .fetch_all(w.conn())
                .await
                .map_err(map)?;
        }
        w.commit().await?;
        let mut items = rows
            .iter()
            .map(|row| Self::item_from_row(row).map(|(item, _)| item))
            .collect::<Result<Vec<_>>>()?;
        items.sort_by_key(|i| i.id);
        Ok(items)
    }

    async fn complete(&self, lease: &Lease, id: ItemId) -> Result<()> {
        lease.check_issuer(&self.info.issuer)?;
        // One DELETE in autocommit: atomic on its own.
        let _guard = self.writer.lock().await;
        let done = self
            .query(sql::COMPLETE)
            .bind(as_db(id.0))
            .bind(as_db(lease.token.0))
            .execute(&self.pool)
            .await
            .map_err(map)?;
        if done.rows_affected() == 0 {
            return Err(lease.fenced(id));
        }
        Ok(())
    }

    async fn fail(&self, lease: &Lease, id: ItemId, retry: bool) -> Result<ItemState> {
        lease.check_issuer(&self.info.issuer)?;
        let mut w = self.write().await?;
        let state: Option<i64> = sqlx::query_scalar(sql::FAIL)
            .bind(self.ns.as_ref())
            .bind(as_db(id.0))
            .bind(as_db(lease.token.0))
            .bind(retry)
            .fetch_optional(w.conn())
            .await
            .map_err(map)?;
        let Some(state) = state else {
            w.rollback().await?;
            return Err(lease.fenced(id));
        };
        w.commit().await?;
        Ok(if state == STATE_PENDING {
            ItemState::Pending
        } else {
            ItemState::DeadLettered
        })
    }

    async fn requeue_orphans(&self, token: FencingToken) -> Result<Requeued> {
        let mut w = self.write().await?;
        let Some(out) = self.requeue_in(w.conn(), token).await? else {
            w.rollback().await?;
            return Ok(Requeued::default());
        };
        w.commit().await?;
        Ok(out)
    }

    async fn requeue_orphans_many(&self, tokens: &[FencingToken]) -> Result<Vec<Result<Requeued>>> {
        // Every token in one write transaction: one commit (one fsync with
        // synchronous=full) for a round's deaths instead of one per token. A repeat of
        // a token sees the first's work: it moves nothing.
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        let mut w = self.write().await?;
        let mut out = Vec::with_capacity(tokens.len());
        for token in tokens {
            out.push(Ok(self
                .requeue_in(w.conn(), *token)
                .await?
                .unwrap_or_default()));
        }
        w.commit().await?;
        Ok(out)
    }

    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        let row = self
            .query(sql::ITEM)
            .bind(as_db(id.0))
            .fetch_optional(&self.pool)
            .await
            .map_err(map)?;
        row.map(|row| Self::item_from_row(&row).map(|(item, state)| ItemRecord { item, state }))
            .transpose()
    }

    async fn item_counts(&self) -> Result<ItemCounts> {
        let rows = self
            .query(sql::ITEM_COUNTS)
            .fetch_all(&self.pool)
            .await
            .map_err(map)?;
        let mut counts = ItemCounts::default();
        for row in &rows {
            let state: i64 = row.try_get(0).map_err(map)?;
            let n = get_u64(row, 1, "count")?;
            match state {
                STATE_PENDING => counts.pending = n,
                STATE_OWNED => counts.owned = n,
                STATE_DEAD => counts.dead_lettered = n,
                _ => return Err(corrupt("item state")),
            }
        }
        Ok(counts)
    }

    async fn dead_letters(&self, limit: usize) -> Result<Vec<ItemRecord>> {
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        let q = self.query(sql::DEAD_LETTERS).bind(limit_param(limit));
        self.list(q, |row| {
            Self::item_from_row(row).map(|(item, state)| ItemRecord { item, state })
        })
        .await
    }

    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        let Page { after, limit } = page;
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        let q = self
            .query(sql::ITEMS)
            .bind(state_code(state))
            .bind(after.map_or(0, |id| as_db(id.0)))
            .bind(limit_param(limit));
        self.list(q, |row| {
            Self::item_from_row(row).map(|(item, state)| ItemRecord { item, state })
        })
        .await
    }

    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        let mut w = self.write().await?;
        let done = self
            .query(sql::RETRY_DEAD_LETTER)
            .bind(as_db(id.0))
            .execute(w.conn())
            .await
            .map_err(map)?;
        if done.rows_affected() == 1 {
            return w.commit().await;
        }
        let found = self
            .query(sql::ITEM)
            .bind(as_db(id.0))
            .fetch_optional(w.conn())
            .await
            .map_err(map)?;
        w.rollback().await?;
        Err(Error::invalid(
            "item",
            if found.is_some() {
                InputProblem::NotDeadLettered
            } else {
                InputProblem::NoSuchItem
            },
        ))
    }

    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        let mut w = self.write().await?;
        let rows = self
            .query(sql::RETRY_DEAD_LETTERS)
            .bind(limit_param(limit))
            .fetch_all(w.conn())
            .await
            .map_err(map)?;
        w.commit().await?;
        let mut ids = rows
            .iter()
            .map(|row| get_u64(row, 0, "item id").map(ItemId))
            .collect::<Result<Vec<_>>>()?;
        ids.sort();
        Ok(ids)
    }
}
