//! [`SqliteStore`]: the handle on one namespace of one SQLite file in WAL mode. Here:
//! opening the file (the pool, the schema migrations, the reboot check), the write
//! transaction, the raw round-trip helpers every operation uses, and the decoding of
//! rows into the core's types.
//!
//! # How each guarantee is met
//!
//! - Atomicity: every operation is one SQLite transaction. Writes start with
//!   `BEGIN IMMEDIATE`, so concurrent writers (threads or processes) queue on the
//!   database's write lock instead of deadlocking on a read-to-write upgrade; before
//!   it they take turns (`turns.rs`), so that no process's writes starve behind
//!   another's.
//! - The store clock: the host's boot clock (`CLOCK_BOOTTIME`, see `clock.rs`), read
//!   once per operation (by a write after `BEGIN IMMEDIATE` took the write lock) and
//!   bound into its statements: the operation happens at that one instant. SQLite's
//!   wall-clock `'now'` is never used. This is only valid because every process that
//!   opens the file runs on the same host and so reads the same clock. The file
//!   records the boot its expiries count in; opening it under another boot expires
//!   every lease ([`expire_other_boot`]).
//! - Tokens and item ids: from one counter row per namespace, incremented in the
//!   transaction that uses them; strictly increasing, never reused.
//!
//! # Statements
//!
//! Each SQL statement is a constant in the file of the code that runs it, beside the
//! migrations (`migrations/*.sql`) that create the tables. `?1` is always the namespace
//! ([`SqliteStore::query`] binds it). Times are milliseconds of the store clock: the
//! store reads it in Rust and binds it as a parameter (the "now" of each statement's
//! doc).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use liveness_core::{
    Backoff, Capabilities, DeathCause, Error, FencingToken, HighWater, InputProblem, Issuer, Item,
    ItemId, ItemRecord, ItemState, ItemStateKind, ItemTimes, Key, Lease, LeaseStatus, LostCause,
    Namespace, QueueName, Result, SchemaTooNew, StoreInfo, StoreTime,
};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{Connection, Row, SqlSafeStr, Sqlite, Transaction};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::clock::{HostBootClock, StoreClock};
use crate::config::{SqliteConfig, Synchronous};
use crate::error::{corrupt, map, map_migrate};
use crate::turns::{turns, Turn, Turns};
use crate::BACKEND;

/// The embedded schema migrations: version, description, SQL. Append only; never
/// edit an applied one (its checksum is recorded in the database). Public, hidden, only so
/// the schema tests can replay a prefix of it to build an older file.
#[doc(hidden)]
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
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
    (
        6,
        "sessions",
        include_str!("../migrations/0006_sessions.sql"),
    ),
    (7, "due_at", include_str!("../migrations/0007_due_at.sql")),
    (
        8,
        "last_error",
        include_str!("../migrations/0008_last_error.sql"),
    ),
    (
        9,
        "key_times",
        include_str!("../migrations/0009_key_times.sql"),
    ),
    (
        10,
        "ready_at",
        include_str!("../migrations/0010_ready_at.sql"),
    ),
    (11, "queues", include_str!("../migrations/0011_queues.sql")),
    (
        12,
        "item_times",
        include_str!("../migrations/0012_item_times.sql"),
    ),
    (
        13,
        "dead_at",
        include_str!("../migrations/0013_dead_at.sql"),
    ),
];

/// The schema version that gave the idempotency keys their recording time
/// (`liveness_enqueue_keys.recorded_boot_ms`).
const KEY_TIMES_VERSION: i64 = 9;

/// The schema version that gave pending items the time they became claimable
/// (`liveness_items.ready_at`).
const READY_AT_VERSION: i64 = 10;

/// The schema version that gave dead letters the time their retention counts from
/// (`liveness_items.dead_at`).
const DEAD_AT_VERSION: i64 = 13;

/// The table recording applied schema migrations.
const MIGRATIONS_TABLE: &str = "liveness_migrations";

/// Whether the table ?1 exists.
const TABLE_EXISTS: &str = "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?1";

/// The newest migration version applied to the database.
const SCHEMA_FOUND: &str = "SELECT MAX(version) FROM liveness_migrations";

/// Whether the namespace ?1 is in the file: it has handed out a token or an item id.
const NAMESPACE_EXISTS: &str = "SELECT 1 FROM liveness_counters WHERE ns = ?1";

/// The namespaces the file holds.
const NAMESPACES: &str = "SELECT ns FROM liveness_counters ORDER BY ns";

/// The boot of the host the file's expiries are counted in.
const RECORDED_BOOT: &str = "SELECT boot_id FROM liveness_boot WHERE one = 1";

/// Expires every lease of every namespace (their holders died in a reboot). A member
/// riding a session has no expiry of its own: it dies with its session.
const EXPIRE_ALL: &str =
    "UPDATE liveness_leases SET expires_boot_ms = 0 WHERE expires_boot_ms IS NOT NULL";

/// Counts every held-back item's wait again from ?1, the new boot's clock: a reboot
/// restarted the clock its due time was counted in. Never earlier than asked; at
/// most the time before the reboot late. It becomes claimable at its new due time.
const RECOUNT_DUE: &str = "UPDATE liveness_items \
    SET due_at = ?1 + delay_ms + 1, ready_at = ?1 + delay_ms + 1 WHERE due_at IS NOT NULL";

/// Counts every claimable pending item's wait again from ?1, the new boot's clock: a
/// reboot restarted the clock it became claimable by, so its wait before the reboot
/// is not counted (a claim answers it short, never negative).
const RECOUNT_READY: &str =
    "UPDATE liveness_items SET ready_at = ?1 WHERE state = 0 AND due_at IS NULL";

/// Gives every pending item with no time it became claimable its due time, else the
/// store clock's now ?1: the items of a file migrated from before
/// [`READY_AT_VERSION`], counted as waiting from the upgrade.
const DATE_UNDATED_ITEMS: &str = "UPDATE liveness_items SET ready_at = COALESCE(due_at, ?1) \
    WHERE state = 0 AND ready_at IS NULL";

/// Gives every idempotency key with no recording time the store clock's now ?1: the
/// keys of a file migrated from before [`KEY_TIMES_VERSION`], kept one retention
/// from the upgrade.
const DATE_UNDATED_KEYS: &str =
    "UPDATE liveness_enqueue_keys SET recorded_boot_ms = ?1 WHERE recorded_boot_ms IS NULL";

/// Counts every idempotency key's retention again from ?1, the new boot's clock: a
/// reboot restarted the clock its recording time was counted in. Never forgotten
/// earlier than asked; at most the time before the reboot late.
const RECOUNT_KEYS: &str = "UPDATE liveness_enqueue_keys SET recorded_boot_ms = ?1";

/// Gives every dead letter with no time its retention counts from the store clock's
/// now ?1: the dead letters of a file migrated from before [`DEAD_AT_VERSION`], kept
/// one retention from the upgrade.
const DATE_UNDATED_DEAD_LETTERS: &str =
    "UPDATE liveness_items SET dead_at = ?1 WHERE state = 2 AND dead_at IS NULL";

/// Counts every dead letter's retention again from ?1, the new boot's clock: a
/// reboot restarted the clock its `dead_at` was counted in. Never removed earlier
/// than asked; at most the time before the reboot late. (`finished_at`, which the
/// operator reads, is forgotten instead: [`FORGET_ITEM_TIMES`].)
const RECOUNT_DEAD_LETTERS: &str = "UPDATE liveness_items SET dead_at = ?1 WHERE state = 2";

/// Forgets every item's times (migration 12): they were counted on another boot's
/// clock, which the new boot's does not compare with.
const FORGET_ITEM_TIMES: &str = "UPDATE liveness_items \
    SET enqueued_at = NULL, attempted_at = NULL, finished_at = NULL \
    WHERE enqueued_at IS NOT NULL OR attempted_at IS NOT NULL OR finished_at IS NOT NULL";

/// Records ?1 as the boot the file's expiries are counted in.
const RECORD_BOOT: &str = "UPDATE liveness_boot SET boot_id = ?1 WHERE one = 1";

/// `liveness_items.state`: pending, owned, dead-lettered.
pub(crate) const STATE_PENDING: i64 = 0;
pub(crate) const STATE_OWNED: i64 = 1;
pub(crate) const STATE_DEAD: i64 = 2;

/// `v` as an `i64`, or a corrupt-record error naming `what` when it does not fit.
pub(crate) fn to_i64(v: u64, what: &'static str) -> Result<i64> {
    i64::try_from(v).map_err(|_| corrupt(format!("bad {what} in the liveness database")))
}

/// A token or item id as the database stores it. Tokens and ids handed out are at
/// least 1 and fit in an `i64`; a value that does not fit can name nothing stored, so
/// it maps to -1, which matches no row.
pub(crate) fn as_db(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(-1)
}

/// A statement with its parameters bound.
pub(crate) type Query<'q> = sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments>;

/// A limit as an integer parameter.
pub(crate) fn limit_param(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Column `idx` of `row` as a `u64` (a negative value is a corrupt `what`).
pub(crate) fn get_u64(row: &SqliteRow, idx: usize, what: &'static str) -> Result<u64> {
    let v: i64 = row.try_get(idx).map_err(map)?;
    u64::try_from(v).map_err(|_| corrupt(format!("bad {what} in the liveness database")))
}

/// Column `idx` of `row` as a `u32` (a value out of range is a corrupt `what`).
fn get_u32(row: &SqliteRow, idx: usize, what: &'static str) -> Result<u32> {
    let v: i64 = row.try_get(idx).map_err(map)?;
    u32::try_from(v).map_err(|_| corrupt(format!("bad {what} in the liveness database")))
}

/// Column `idx` of `row` as text.
pub(crate) fn get_text(row: &SqliteRow, idx: usize) -> Result<String> {
    row.try_get(idx).map_err(map)
}

/// A queue name stored in `liveness_items.queue`, or a corrupt-record error.
pub(crate) fn queue_of(name: &str) -> Result<QueueName> {
    QueueName::new(name).map_err(|_| corrupt("bad queue name in the liveness database"))
}

/// A write transaction: the writer's turn ([`Turns`]) and a `BEGIN IMMEDIATE`
/// transaction. Dropping it without [`Write::commit`] rolls back.
pub(crate) struct Write<'a> {
    tx: Transaction<'static, Sqlite>,
    _turn: Turn<'a>,
}

impl Write<'_> {
    pub(crate) fn conn(&mut self) -> &mut SqliteConnection {
        &mut self.tx
    }

    pub(crate) async fn commit(self) -> Result<()> {
        self.tx.commit().await.map_err(map)
    }

    pub(crate) async fn rollback(self) -> Result<()> {
        self.tx.rollback().await.map_err(map)
    }
}

/// When the lease row aliased `l` expires, in milliseconds of the store clock: its
/// own expiry, or for a member riding a session, the expiry of the session's row (in
/// the space `sessions`, [`Space::sessions`]) while that row holds the session's token
/// (0 once it does not: expired). One primary-key lookup, made only for a riding
/// member.
///
/// [`Space::sessions`]: liveness_core::Space::sessions
macro_rules! live_until {
    () => {
        "COALESCE(l.expires_boot_ms, (SELECT s.expires_boot_ms FROM liveness_leases s \
        WHERE s.ns = l.ns AND s.space = 'sessions' AND s.name = l.session_name \
        AND s.token = l.session_token), 0)"
    };
}
pub(crate) use live_until;

/// The lease on a key (?1 ns, ?2 space, ?3 name), judged at a `now` read beside it
/// ([`SqliteStore::current`]): holder, token, when it expires ([`live_until`]), and
/// whether it rides a session.
const CURRENT: &str = concat!(
    "SELECT l.holder, l.token, ",
    live_until!(),
    ", l.session_token IS NOT NULL FROM liveness_leases l \
    WHERE l.ns = ?1 AND l.space = ?2 AND l.name = ?3"
);

/// The current lease on a key, as [`CURRENT`] reads it.
pub(crate) struct Held {
    /// Its holder.
    pub(crate) holder: String,
    /// Its token.
    pub(crate) token: u64,
    /// When it expires: its own expiry, or its session's ([`live_until`]).
    pub(crate) until: i64,
    /// Whether it is a member riding a session.
    pub(crate) rides: bool,
}

/// The current lease on a key as a write transaction sees it, with the store's now
/// (milliseconds of the boot clock).
pub(crate) struct Current {
    /// The store's now.
    pub(crate) now: i64,
    /// The lease on the key, if any.
    pub(crate) lease: Option<Held>,
}

/// A store handle on one namespace of one SQLite database file.
///
/// Cheap to clone; clones share the connection pool. Many handles, in many
/// processes of the same host, may open the same file.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    /// The connection pool on the file.
    pub(crate) pool: SqlitePool,
    /// The namespace this handle is scoped to.
    pub(crate) ns: Namespace,
    /// The writers' turns on the file ([`Turns`]), shared by this process's handles.
    pub(crate) writer: Arc<Turns>,
    /// How long a write waits for another process's turn to end.
    pub(crate) busy_timeout: Duration,
    /// Ticked when this handle releases or reaps a lease ([`LeaseStore::wakeups`](liveness_core::LeaseStore::wakeups)).
    pub(crate) wake: Arc<watch::Sender<u64>>,
    /// Ticked when this handle makes an item pending ([`ItemStore::pending`](liveness_core::ItemStore::pending)):
    /// a worker of this process claims at once; one of another process polls.
    pub(crate) pending: Arc<watch::Sender<u64>>,
    /// The store clock: the host's boot clock (a hand-driven one in unit tests).
    clock: Arc<dyn StoreClock>,
    /// The highest store time this handle read, so its store time never goes back,
    /// whatever its clock does.
    high_water: HighWater,
    /// How long an idempotency key is kept after its enqueue, in store-clock ms.
    pub(crate) key_retention_ms: i64,
    /// How long a dead letter is kept after it was dead-lettered, in store-clock ms.
    pub(crate) dead_letter_retention_ms: i64,
    /// What the store is: the backend, its capabilities, the issuer of its leases.
    pub(crate) info: StoreInfo,
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
    /// expired as part of opening. Fails with [`Error::Backend`] when the
    /// host's boot id cannot be read.
    pub async fn connect(config: SqliteConfig) -> Result<SqliteStore> {
        Self::connect_with(config, Arc::new(HostBootClock::new()?)).await
    }

    /// [`SqliteStore::connect`] with the store clock `clock`.
    pub(crate) async fn connect_with(
        config: SqliteConfig,
        clock: Arc<dyn StoreClock>,
    ) -> Result<SqliteStore> {
        let give_up = Instant::now() + config.busy_timeout();
        let mut backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(100));
        loop {
            match Self::open(&config, &clock).await {
                Err(e) if e.is_retryable() && Instant::now() < give_up => {
                    tracing::debug!(error = %e, path = %config.path().display(), "open retried");
                    tokio::time::sleep(backoff.next()).await;
                }
                other => return other,
            }
        }
    }

    /// One attempt of [`SqliteStore::connect`].
    async fn open(config: &SqliteConfig, clock: &Arc<dyn StoreClock>) -> Result<SqliteStore> {
        let existing = config.existing_only();
        let mut options = SqliteConnectOptions::new()
            .filename(config.path())
            // Opening existing stores only: `mode=rw`, never a new file.
            .create_if_missing(!existing)
            .synchronous(match config.synchronous() {
                Synchronous::Full => SqliteSynchronous::Full,
                Synchronous::Normal => SqliteSynchronous::Normal,
            })
            .busy_timeout(config.busy_timeout())
            .foreign_keys(false);
        if !existing {
            // A liveness file is in WAL mode already; another one is left as it is.
            options = options.journal_mode(SqliteJournalMode::Wal);
        }
        let pool = SqlitePoolOptions::new()
            .max_connections(config.max_connections())
            .min_connections(0)
            .acquire_timeout(config.busy_timeout().max(Duration::from_secs(5)))
            .connect_with(options)
            .await
            .map_err(|e| open_failed(config, e))?;
        let lock_path = std::fs::canonicalize(config.path()).unwrap_or(config.path().to_path_buf());
        // A read, before any write turn: a file that is not a liveness database is
        // refused with nothing made beside it (the turns' sidecar files included).
        if existing {
            check_existing(&pool, config).await?;
        }
        let writer = turns(&lock_path);
        {
            let _turn = writer.take(config.busy_timeout()).await?;
            migrate(&pool, config.path(), &**clock, existing).await?;
        }
        Ok(SqliteStore {
            pool,
            ns: config.namespace().clone(),
            writer,
            busy_timeout: config.busy_timeout(),
            wake: Arc::new(watch::channel(0).0),
            pending: Arc::new(watch::channel(0).0),
            clock: clock.clone(),
            high_water: HighWater::default(),
            key_retention_ms: to_i64(
                u64::try_from(config.key_retention().as_millis()).unwrap_or(u64::MAX),
                "key retention",
            )?,
            dead_letter_retention_ms: to_i64(
                u64::try_from(config.dead_letter_retention().as_millis()).unwrap_or(u64::MAX),
                "dead-letter retention",
            )?,
            info: StoreInfo::new(
                BACKEND,
                Capabilities::default()
                    // The store clock counts whole milliseconds.
                    .min_ttl(Duration::from_millis(1))
                    .death_retention(config.death_retention().max(1))
                    // Members ride session leases: no row write while they live, and
                    // the sweep declares a dead session's members dead a batch at a time.
                    .sessions(true)
                    // Held-back items carry their due time by the store clock.
                    .delays(true)
                    // A failed item keeps its latest error text (`last_error`).
                    .error_text(true)
                    // Keys carry their recording time by the store clock.
                    .key_retention(Some(config.key_retention()))
                    // Dead letters carry the time their retention counts from by the
                    // store clock (`dead_at`, migration 13); later dead-letterings
                    // remove the expired ones.
                    .dead_letter_retention(Some(config.dead_letter_retention()))
                    // Each item keeps its queue (`liveness_items.queue`, migration 11).
                    .queues(true)
                    // Each item keeps its times by the store clock (migration 12).
                    .item_times(true),
                Issuer::located(
                    BACKEND,
                    &lock_path.display().to_string(),
                    config.namespace().clone(),
                ),
            ),
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

    /// Opens a write transaction: waits for this writer's turn ([`Turns`]), then
    /// `BEGIN IMMEDIATE` takes the file's write lock.
    pub(crate) async fn write(&self) -> Result<Write<'_>> {
        let turn = self.turn().await?;
        let tx = self.pool.begin_with("BEGIN IMMEDIATE").await.map_err(map)?;
        Ok(Write { tx, _turn: turn })
    }

    /// Waits for this writer's turn on the file, for a write outside [`Write`].
    pub(crate) async fn turn(&self) -> Result<Turn<'_>> {
        self.writer.take(self.busy_timeout).await
    }

    /// The store clock now, in milliseconds, never behind an earlier reading of this
    /// handle. A write reads it after `BEGIN IMMEDIATE`, holding the write lock.
    pub(crate) fn now(&self) -> Result<i64> {
        let now = self.high_water.observe(self.clock.now()?).since_epoch();
        to_i64(
            u64::try_from(now.as_millis()).unwrap_or(u64::MAX),
            "store clock",
        )
    }

    /// Reads the lease on `key`, to judge it at the store's `now`.
    pub(crate) async fn current(
        &self,
        conn: &mut SqliteConnection,
        key: &Key,
        now: i64,
    ) -> Result<Current> {
        let row = self
            .query(CURRENT)
            .bind(key.space().as_ref())
            .bind(key.name().as_ref())
            .fetch_optional(&mut *conn)
            .await
            .map_err(map)?;
        let lease = match row {
            None => None,
            Some(row) => Some(Held {
                holder: get_text(&row, 0)?,
                token: get_u64(&row, 1, "token")?,
                until: row.try_get::<i64, _>(2).map_err(map)?,
                rides: row.try_get::<bool, _>(3).map_err(map)?,
            }),
        };
        Ok(Current { now, lease })
    }

    /// Why `lease` is not current and live, or `None` when it is.
    pub(crate) fn lost(lease: &Lease, cur: &Current) -> Option<Error> {
        Self::lost_cause(lease, cur).map(|cause| lease.lost(cause))
    }

    /// [`SqliteStore::lost`]'s reason alone.
    pub(crate) fn lost_cause(lease: &Lease, cur: &Current) -> Option<LostCause> {
        match &cur.lease {
            None => Some(LostCause::Released),
            Some(held) if held.token != lease.token.0 => Some(LostCause::Superseded),
            Some(held) if cur.now >= held.until => Some(LostCause::Expired),
            Some(_) => None,
        }
    }

    /// A statement of this namespace: `?1` is bound to it.
    pub(crate) fn query(&self, statement: &'static str) -> Query<'_> {
        sqlx::query(statement).bind(self.ns.as_ref())
    }

    /// Every row a listing statement returns, each read by `read`.
    pub(crate) async fn list<T>(
        &self,
        q: Query<'_>,
        read: impl Fn(&SqliteRow) -> Result<T>,
    ) -> Result<Vec<T>> {
        let rows = q.fetch_all(&self.pool).await.map_err(map)?;
        rows.iter().map(read).collect()
    }

    /// Draws the next value of one of the namespace's counters: `counter` is
    /// an `INSERT ... RETURNING` of the counter row (`NEXT_TOKEN`, `NEXT_ITEM`,
    /// `NEXT_DEATH`, each beside the code that draws it).
    pub(crate) async fn next(
        &self,
        conn: &mut SqliteConnection,
        counter: &'static str,
    ) -> Result<i64> {
        sqlx::query_scalar(counter)
            .bind(self.ns.as_ref())
            .fetch_one(conn)
            .await
            .map_err(map)
    }

    /// An item and its state from a row of `id, payload, attempts, max_attempts, state,
    /// owner, queue`.
    pub(crate) fn item_from_row(row: &SqliteRow) -> Result<(Item, ItemState)> {
        let id = ItemId(get_u64(row, 0, "item id")?);
        let payload: Vec<u8> = row.try_get(1).map_err(map)?;
        let attempts = get_u32(row, 2, "attempts")?;
        let max_attempts = get_u32(row, 3, "max_attempts")?;
        let state: i64 = row.try_get(4).map_err(map)?;
        let owner: Option<i64> = row.try_get(5).map_err(map)?;
        let state = match (state, owner) {
            (STATE_PENDING, _) => ItemState::Pending,
            (STATE_OWNED, Some(t)) => ItemState::Owned(FencingToken(
                u64::try_from(t).map_err(|_| corrupt("bad owner in the liveness database"))?,
            )),
            (STATE_DEAD, _) => ItemState::DeadLettered,
            _ => return Err(corrupt("bad item state in the liveness database")),
        };
        let queue = queue_of(&get_text(row, 6)?)?;
        Ok((
            Item::new(id, payload, attempts, max_attempts).with_queue(queue),
            state,
        ))
    }

    /// An item's record from a row of `id, payload, attempts, max_attempts, state,
    /// owner, queue, last_error, enqueued_at, attempted_at, finished_at`
    /// ([`SqliteStore::item_from_row`], the error text and the item's times).
    pub(crate) fn record_from_row(row: &SqliteRow) -> Result<ItemRecord> {
        let (item, state) = Self::item_from_row(row)?;
        let last_error: Option<String> = row.try_get(7).map_err(map)?;
        Ok(ItemRecord::new(item, state)
            .with_last_error(last_error)
            .with_times(times_from_row(row, 8)?))
    }
}

/// Column `idx` of `row` as a store time: store-clock milliseconds (as
/// [`OperatorStore::store_time`](liveness_core::OperatorStore::store_time) reads the
/// clock), NULL for none. A negative value is a corrupt record.
fn time_from_row(row: &SqliteRow, idx: usize) -> Result<Option<StoreTime>> {
    let ms: Option<i64> = row.try_get(idx).map_err(map)?;
    ms.map(|ms| {
        u64::try_from(ms)
            .map(|ms| StoreTime::from_epoch(Duration::from_millis(ms)))
            .map_err(|_| corrupt("bad item time in the liveness database"))
    })
    .transpose()
}

/// An item's times from the columns `enqueued_at, attempted_at, finished_at` of `row`,
/// the first at `idx` (migration 12).
fn times_from_row(row: &SqliteRow, idx: usize) -> Result<ItemTimes> {
    let mut times =
        ItemTimes::default().with(time_from_row(row, idx + 1)?, time_from_row(row, idx + 2)?);
    times.enqueued = time_from_row(row, idx)?;
    Ok(times)
}

/// A lease's status at store time `now`, from its expiry.
pub(crate) fn status_at(expires_at: i64, now: i64) -> LeaseStatus {
    let left_ms = u64::try_from(expires_at.saturating_sub(now)).unwrap_or(0);
    LeaseStatus::with_remaining(Duration::from_millis(left_ms))
}

/// How `liveness_deaths.cause` writes a [`DeathCause`].
pub(crate) fn cause_code(cause: DeathCause) -> i64 {
    match cause {
        DeathCause::Reaped => 0,
        DeathCause::Released => 1,
        DeathCause::Superseded => 2,
    }
}

/// The [`DeathCause`] `liveness_deaths.cause` holds.
pub(crate) fn cause_from_code(code: i64) -> Result<DeathCause> {
    match code {
        0 => Ok(DeathCause::Reaped),
        1 => Ok(DeathCause::Released),
        2 => Ok(DeathCause::Superseded),
        _ => Err(corrupt("bad death cause in the liveness database")),
    }
}

/// How `liveness_items.state` writes an [`ItemStateKind`].
pub(crate) fn state_code(state: ItemStateKind) -> i64 {
    match state {
        ItemStateKind::Pending => STATE_PENDING,
        ItemStateKind::Owned => STATE_OWNED,
        ItemStateKind::DeadLettered => STATE_DEAD,
    }
}

/// Applies the embedded migrations under one `BEGIN IMMEDIATE` transaction, so that
/// processes connecting at once apply them exactly once, after refusing a schema
/// newer than this build; then, in the same transaction, expires every lease when the
/// file was last opened under another boot than `boot_id` ([`expire_other_boot`]).
///
/// With `existing_only`, [`check_existing`] has found the schema current: no migration
/// runs (so nothing but the reboot rule writes), and the write lock is taken only when
/// the boot differs.
async fn migrate(
    pool: &SqlitePool,
    path: &Path,
    clock: &dyn StoreClock,
    existing_only: bool,
) -> Result<()> {
    let boot_id = clock.boot_id();
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
    if existing_only {
        if other_boot(&mut conn, boot_id).await?.is_none() {
            return Ok(());
        }
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(map)?;
        expire_other_boot(&mut tx, clock).await?;
        return tx.commit().await.map_err(map);
    }
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(map)?;
    let exists: Option<String> = sqlx::query_scalar(TABLE_EXISTS)
        .bind(MIGRATIONS_TABLE)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map)?;
    let found = match exists {
        Some(_) => schema_found(&mut tx, path, supported).await?,
        None => None,
    };
    // `run_direct` on the transaction's connection (sqlx's `run` would need a
    // higher-ranked `Acquire` bound that makes this future not `Send`). Each
    // migration runs in a savepoint of our `BEGIN IMMEDIATE` transaction.
    migrator
        .run_direct(None, &mut *tx, false)
        .await
        .map_err(map_migrate)?;
    for (version, date_undated) in [
        (KEY_TIMES_VERSION, DATE_UNDATED_KEYS),
        (READY_AT_VERSION, DATE_UNDATED_ITEMS),
        (DEAD_AT_VERSION, DATE_UNDATED_DEAD_LETTERS),
    ] {
        if found.is_some_and(|v| v < version) {
            sqlx::query(date_undated)
                .bind(clock_ms(clock)?)
                .execute(&mut *tx)
                .await
                .map_err(map)?;
        }
    }
    expire_other_boot(&mut tx, clock).await?;
    tx.commit().await.map_err(map)
}

/// `clock`'s now in milliseconds, as the statements bind it.
fn clock_ms(clock: &dyn StoreClock) -> Result<i64> {
    to_i64(
        u64::try_from(clock.now()?.as_millis()).unwrap_or(u64::MAX),
        "store clock",
    )
}

/// When the file's expiries were counted in another boot than `boot_id` (the host
/// rebooted since a process last opened it, and every holder died with that boot; or
/// the file was just migrated from wall-clock expiries), expires every lease of every
/// namespace and records `boot_id`. The caller holds the write lock (`BEGIN
/// IMMEDIATE`) and commits, so of the processes opening the file at once after a
/// reboot, exactly the first expires the old leases and no later one touches a lease
/// written under this boot. Held-back items wait their whole delay again from the
/// new boot's clock, claimable items count their wait again from it, idempotency
/// keys and dead letters are kept their whole retention again from it, and items
/// forget their times.
async fn expire_other_boot(conn: &mut SqliteConnection, clock: &dyn StoreClock) -> Result<()> {
    let boot_id = clock.boot_id();
    let Some(recorded) = other_boot(conn, boot_id).await? else {
        return Ok(());
    };
    let expired = sqlx::query(EXPIRE_ALL)
        .execute(&mut *conn)
        .await
        .map_err(map)?
        .rows_affected();
    let now = clock_ms(clock)?;
    for recount in [
        RECOUNT_DUE,
        RECOUNT_READY,
        RECOUNT_KEYS,
        RECOUNT_DEAD_LETTERS,
    ] {
        sqlx::query(recount)
            .bind(now)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
    }
    sqlx::query(FORGET_ITEM_TIMES)
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    sqlx::query(RECORD_BOOT)
        .bind(boot_id)
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    tracing::info!(
        expired,
        previous_boot = %recorded,
        boot = %boot_id,
        "first open of the file under this boot of the host: its leases are expired"
    );
    Ok(())
}

/// The schema version the file's migrations table records (`None`: no migration
/// yet), refused as [`SchemaTooNew`] when it is newer than `supported`, the version
/// this build's migrations reach.
async fn schema_found(
    conn: &mut SqliteConnection,
    path: &Path,
    supported: i64,
) -> Result<Option<i64>> {
    let found: Option<i64> = sqlx::query_scalar(SCHEMA_FOUND)
        .fetch_one(conn)
        .await
        .map_err(map)?;
    if let Some(found) = found.filter(|f| *f > supported) {
        return Err(Error::backend(
            BACKEND,
            SchemaTooNew::new(path.display().to_string(), found, supported),
        ));
    }
    Ok(found)
}

/// The boot the file's expiries were last counted in, when it is not `boot_id`.
async fn other_boot(conn: &mut SqliteConnection, boot_id: &str) -> Result<Option<String>> {
    let recorded: String = sqlx::query_scalar(RECORDED_BOOT)
        .fetch_one(conn)
        .await
        .map_err(map)?;
    Ok((recorded != boot_id).then_some(recorded))
}

/// The SQLite result code of a sqlx error (its primary code, without the extended
/// bits), when it is one.
fn result_code(e: &sqlx::Error) -> Option<i32> {
    match e {
        sqlx::Error::Database(db) => db.code().and_then(|c| c.parse::<i32>().ok()),
        _ => None,
    }
    .map(|c| c & 0xff)
}

/// `SQLITE_CANTOPEN`: the file (or its folder) cannot be opened.
const SQLITE_CANTOPEN: i32 = 14;
/// `SQLITE_NOTADB`: the file is not an SQLite database.
const SQLITE_NOTADB: i32 = 26;

/// The path as the error messages name it: as given, and for a relative path the
/// folder it is relative to (`sqlite://x.db` is relative; `sqlite:///x.db` is not).
fn shown_path(path: &Path) -> String {
    match std::env::current_dir() {
        Ok(cwd) if path.is_relative() => {
            format!("{} (relative to {})", path.display(), cwd.display())
        }
        _ => path.display().to_string(),
    }
}

/// [`Error::InvalidInput`] naming the database file (`what: "path"`) and what was
/// expected of it.
fn bad_path(path: &Path, expected: &str) -> Error {
    Error::invalid(
        "path",
        InputProblem::BadValue {
            name: "path",
            got: shown_path(path),
            expected: expected.to_owned(),
        },
    )
}

/// The error of a failed open: a file that cannot be opened (a missing folder, a
/// missing file when opening existing stores only, no permission) or that is not a
/// database is bad input naming the path; anything else as [`map`] says.
fn open_failed(config: &SqliteConfig, e: sqlx::Error) -> Error {
    match result_code(&e) {
        Some(SQLITE_CANTOPEN) if config.existing_only() => bad_path(
            config.path(),
            "an existing liveness database file (opening existing stores only: nothing is created)",
        ),
        Some(SQLITE_CANTOPEN) => bad_path(
            config.path(),
            "a database file this process can open or create: its folder exists and is writable",
        ),
        Some(SQLITE_NOTADB) => bad_path(config.path(), "an SQLite database file"),
        _ => map(e),
    }
}

/// Checks, reading only, that the file holds the liveness tables at the schema version
/// this build writes, and the configured namespace: the opening of a store with
/// [`SqliteConfig::existing_only`].
async fn check_existing(pool: &SqlitePool, config: &SqliteConfig) -> Result<()> {
    let path = config.path();
    let mut conn = pool.acquire().await.map_err(|e| open_failed(config, e))?;
    let exists: Option<String> = sqlx::query_scalar(TABLE_EXISTS)
        .bind(MIGRATIONS_TABLE)
        .fetch_optional(&mut *conn)
        .await
        .map_err(|e| open_failed(config, e))?;
    if exists.is_none() {
        return Err(bad_path(
            path,
            "a liveness database file (this one has no liveness tables; nothing was created)",
        ));
    }
    let supported = MIGRATIONS.iter().map(|m| m.0).max().unwrap_or(0);
    let found = schema_found(&mut conn, path, supported).await?;
    if found != Some(supported) {
        return Err(bad_path(
            path,
            &format!(
                "a liveness database at schema version {supported} (this one is at \
                 version {}; a writing connection migrates it)",
                found.unwrap_or(0)
            ),
        ));
    }
    let ns = config.namespace();
    let there: Option<i64> = sqlx::query_scalar(NAMESPACE_EXISTS)
        .bind(ns.as_ref())
        .fetch_optional(&mut *conn)
        .await
        .map_err(map)?;
    if there.is_some() {
        return Ok(());
    }
    let held: Vec<String> = sqlx::query_scalar(NAMESPACES)
        .fetch_all(&mut *conn)
        .await
        .map_err(map)?;
    Err(missing_namespace(ns, &shown_path(path), &held))
}

/// [`Error::InvalidInput`] for a namespace the store does not hold (`what:
/// "namespace"`), naming where it looked and the namespaces it holds.
fn missing_namespace(ns: &Namespace, location: &str, held: &[String]) -> Error {
    let held = if held.is_empty() {
        "none".to_owned()
    } else {
        held.join(", ")
    };
    Error::invalid(
        "namespace",
        InputProblem::BadValue {
            name: "ns",
            got: ns.to_string(),
            expected: format!("a namespace {location} holds; it holds: {held}"),
        },
    )
}
