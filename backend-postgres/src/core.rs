//! [`PostgresStore`]: the handle, its connection set-up (migrations, the durability
//! check, the LISTEN task), the raw round-trip helpers, and the decoding of rows into
//! the core's types.
//!
//! Every statement the store sends is a constant next to the code that runs it, all
//! parameterised (`$1`, ...). They run with the connection's `search_path` set to the
//! namespace's schema, so no statement names a schema. Expiry is always compared with
//! the server's `clock_timestamp()` inside the statement (most read it once, in a
//! materialized `clk` CTE, and compare every expiry with that one instant); no client
//! timestamp is ever sent. Each operation is one statement: one round trip, atomic by
//! itself.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use liveness_core::durability::StoreLostState;
use liveness_core::wake::tick;
use liveness_core::{
    Backoff, Capabilities, Error, FencingToken, HighWater, HolderId, Issuer, Item, ItemId,
    ItemRecord, ItemState, ItemTimes, Key, Lease, LeaseStatus, LostCause, Name, Namespace,
    QueueName, Result, SchemaTooNew, Space, StoreInfo, StoreTime, Ttl,
};
use sqlx::migrate::{MigrateError, Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnection, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{Row, SqlSafeStr};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::config::PostgresConfig;
use crate::conns::{Conns, Query, Servers};
use crate::error::{corrupt, map, MigrationFailed};
use crate::BACKEND;

/// The embedded migrations, in order. Each runs with `search_path` set to the
/// namespace's schema. Crate-visible so that the tests can build an older schema.
pub(crate) const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "leases_items",
        include_str!("../migrations/0001_leases_items.sql"),
    ),
    (
        2,
        "request_ids",
        include_str!("../migrations/0002_request_ids.sql"),
    ),
    (
        3,
        "claim_high_water",
        include_str!("../migrations/0003_claim_high_water.sql"),
    ),
    (4, "deaths", include_str!("../migrations/0004_deaths.sql")),
    (
        5,
        "acquire_many",
        include_str!("../migrations/0005_acquire_many.sql"),
    ),
    (
        6,
        "token_epochs",
        include_str!("../migrations/0006_token_epochs.sql"),
    ),
    (
        7,
        "synced_leases",
        include_str!("../migrations/0007_synced_leases.sql"),
    ),
    (
        8,
        "sessions",
        include_str!("../migrations/0008_sessions.sql"),
    ),
    (9, "due_at", include_str!("../migrations/0009_due_at.sql")),
    (
        10,
        "last_error",
        include_str!("../migrations/0010_last_error.sql"),
    ),
    (
        11,
        "key_times",
        include_str!("../migrations/0011_key_times.sql"),
    ),
    (
        12,
        "ready_at",
        include_str!("../migrations/0012_ready_at.sql"),
    ),
    (13, "queues", include_str!("../migrations/0013_queues.sql")),
    (
        14,
        "item_times",
        include_str!("../migrations/0014_item_times.sql"),
    ),
    (
        15,
        "dead_at",
        include_str!("../migrations/0015_dead_at.sql"),
    ),
];

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: i64 = 15;

/// The expiry of the session a riding member (migration 8: no expiry of its own)
/// rides, as SQL text, for the lease row aliased `$l`: the row of its session
/// (`sessions/<session_name>`) while that row holds the member's `session_token`,
/// else NULL (the session is gone or superseded). A scalar subquery: inside a
/// `coalesce` after `$l.expires_at` it runs only for a riding member.
macro_rules! session_expiry {
    ($l:literal) => {
        concat!(
            "(SELECT ses.expires_at FROM leases ses WHERE ses.space = 'sessions' AND ses.name = ",
            $l,
            ".session_name AND ses.token = ",
            $l,
            ".session_token)"
        )
    };
}
pub(crate) use session_expiry;

/// The judged expiry of the lease row aliased `$l`, as SQL text for comparisons: its
/// own `expires_at`, or for a riding member its session's ([`session_expiry`]), or
/// '-infinity' (expired) when that session is gone or superseded. Every statement
/// that judges a lease live or expired, other than the renewals (a riding member has
/// nothing to renew), judges it by this.
macro_rules! expiry_of {
    ($l:literal) => {
        concat!(
            "coalesce(",
            $l,
            ".expires_at, ",
            $crate::core::session_expiry!($l),
            ", '-infinity')"
        )
    };
}
pub(crate) use expiry_of;

/// A store handle on one namespace of a PostgreSQL database.
///
/// Cheap to clone: clones share one connection pool. The namespace's tables live in
/// schema `liveness_<ns>`; every pooled connection has its `search_path` set to it.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    conns: Conns,
    pool: PgPool,
    /// Where new connections go (the host list, and the server that worked last).
    servers: Arc<Servers>,
    /// How long a new connection may take.
    acquire_timeout: Duration,
    namespace: Namespace,
    schema: String,
    /// The channel lease wake-ups are notified on (the schema's name).
    channel: String,
    /// The channel pending items are notified on ([`pending_channel_of`]).
    pending_channel: String,
    /// The pending notification sent after commits ([`PostgresStore::notify_pending`]).
    notifier: Notifier,
    notify: bool,
    /// The lease wake-up signal ([`LeaseStore::wakeups`](liveness_core::LeaseStore::wakeups)).
    wake: Arc<watch::Sender<u64>>,
    /// The pending signal ([`ItemStore::pending`](liveness_core::ItemStore::pending)).
    pending: Arc<watch::Sender<u64>>,
    /// The LISTEN task of both channels, started by the first `wakeups` or `pending`.
    listener: OnceLock<Option<AbortHandle>>,
    high_water: HighWater,
    /// What the store is: the backend, its capabilities, the issuer of its leases.
    info: StoreInfo,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(Some(task)) = self.listener.get() {
            task.abort();
        }
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("namespace", &self.inner.namespace)
            .field("schema", &self.inner.schema)
            .finish_non_exhaustive()
    }
}

/// A statement about one key: its space and name are `$1` and `$2`.
pub(crate) fn on_key<'q>(statement: &'static str, key: &'q Key) -> Query<'q> {
    sqlx::query(statement)
        .bind(key.space().as_str())
        .bind(key.name().as_str())
}

/// A statement about item `id` (`$1`) owned by `lease`'s token (`$2`); `None` when
/// either does not fit a bigint: no stored item can match it.
pub(crate) fn on_owned_item(
    statement: &'static str,
    lease: &Lease,
    id: ItemId,
) -> Option<Query<'static>> {
    let (Some(db_id), Ok(token)) = (id_param(id), i64::try_from(lease.token.0)) else {
        return None;
    };
    Some(sqlx::query(statement).bind(db_id).bind(token))
}

/// Column `idx` of `row`, as `T`.
pub(crate) fn get<'r, T>(row: &'r PgRow, idx: usize) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(idx).map_err(map)
}

/// A fencing token stored in a row.
pub(crate) fn token_of(v: i64) -> Result<FencingToken> {
    u64::try_from(v)
        .map(FencingToken)
        .map_err(|_| corrupt(format!("unexpected value in the token column: {v}")))
}

/// A count stored in column `what` of a row (attempts, max attempts).
pub(crate) fn count_of(v: i64, what: &'static str) -> Result<u32> {
    u32::try_from(v).map_err(|_| corrupt(format!("unexpected value in the {what} column: {v}")))
}

/// An item id stored in a row.
pub(crate) fn id_of(id: i64) -> Result<ItemId> {
    u64::try_from(id)
        .map(ItemId)
        .map_err(|_| corrupt(format!("unexpected value in the id column: {id}")))
}

/// A token as a bigint parameter. Tokens come from a bigint sequence, so a larger one
/// is not ours: -1 matches no row, and the statement then reports it as not current.
pub(crate) fn db_token(token: FencingToken) -> i64 {
    i64::try_from(token.0).unwrap_or(-1)
}

/// An item id as a bigint parameter; `None` when no stored item can have it.
pub(crate) fn id_param(id: ItemId) -> Option<i64> {
    i64::try_from(id.0).ok()
}

/// A ttl as a bigint parameter, in milliseconds.
pub(crate) fn ttl_ms(ttl: Ttl) -> i64 {
    // Ttl is at most one day: always fits.
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

/// A delay (an enqueue's, a retry's `after`; already checked against
/// [`liveness_core::MAX_DELAY`]) as a bigint parameter in microseconds, rounded up so
/// that an item is never due earlier than asked; `None` (SQL NULL: due at once) for
/// zero. The statements add it to the server's `clock_timestamp()`.
pub(crate) fn delay_param(delay: Duration) -> Option<i64> {
    (!delay.is_zero()).then(|| i64::try_from(delay.as_nanos().div_ceil(1000)).unwrap_or(i64::MAX))
}

/// A limit (already checked) as a bigint parameter.
pub(crate) fn limit_param(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// An item's state from its stored code (0 pending, 1 owned by `owner`, 2
/// dead-lettered).
pub(crate) fn state_of(state: i16, owner: Option<i64>) -> Result<ItemState> {
    match (state, owner) {
        (0, _) => Ok(ItemState::Pending),
        (1, Some(t)) => Ok(ItemState::Owned(token_of(t)?)),
        (2, _) => Ok(ItemState::DeadLettered),
        _ => Err(corrupt(format!(
            "unexpected value in the state column: {state}"
        ))),
    }
}

/// An item from a row whose first four columns are id, payload, attempts and max
/// attempts.
pub(crate) fn item_of(row: &PgRow) -> Result<Item> {
    let id: i64 = get(row, 0)?;
    Ok(Item::new(
        id_of(id)?,
        get(row, 1)?,
        count_of(get(row, 2)?, "attempts")?,
        count_of(get(row, 3)?, "max_attempts")?,
    ))
}

/// The columns of an item's times (migration 14), as SQL text, for the `items` row
/// whose columns are named with the prefix `$i` (`""`, or an alias and a dot): when it
/// was enqueued, last claimed and last finished an attempt, each in µs since the Unix
/// epoch by the server's clock (as `store_time` reads it), NULL for none.
macro_rules! item_times {
    ($i:literal) => {
        concat!(
            "(extract(epoch FROM ",
            $i,
            "enqueued_at) * 1000000)::bigint, (extract(epoch FROM ",
            $i,
            "attempted_at) * 1000000)::bigint, (extract(epoch FROM ",
            $i,
            "finished_at) * 1000000)::bigint"
        )
    };
}
pub(crate) use item_times;

/// An item's record from a row of id, payload, attempts, max attempts, state, owner,
/// last error, queue and its times ([`item_times`]).
pub(crate) fn record_of(row: &PgRow) -> Result<ItemRecord> {
    let item = item_of(row)?.with_queue(queue_of(get(row, 7)?)?);
    let mut times = ItemTimes::default().with(time_of(get(row, 9)?)?, time_of(get(row, 10)?)?);
    times.enqueued = time_of(get(row, 8)?)?;
    Ok(ItemRecord::new(item, state_of(get(row, 4)?, get(row, 5)?)?)
        .with_last_error(get(row, 6)?)
        .with_times(times))
}

/// A time of an item read as [`item_times`] answers it (µs since the Unix epoch), as a
/// store time; `None` for none.
fn time_of(micros: Option<i64>) -> Result<Option<StoreTime>> {
    micros
        .map(|us| {
            u64::try_from(us)
                .map(|us| StoreTime::from_epoch(Duration::from_micros(us)))
                .map_err(|_| corrupt(format!("unexpected value in an item time column: {us}")))
        })
        .transpose()
}

/// A queue name stored in `items.queue` (migration 13).
pub(crate) fn queue_of(name: String) -> Result<QueueName> {
    QueueName::new(&name)
        .map_err(|_| corrupt(format!("unexpected value in the queue column: {name:?}")))
}

/// A lease's status from its time left in microseconds (> 0 iff live; NULL, for a
/// member whose session is gone or superseded: expired).
pub(crate) fn status_of(remaining_us: Option<i64>) -> LeaseStatus {
    let left_us = remaining_us.map_or(0, |us| u64::try_from(us).unwrap_or(0));
    LeaseStatus::with_remaining(Duration::from_micros(left_us))
}

/// The session a riding member rides, from its stored `session_name` (NULL: a lease
/// of its own).
pub(crate) fn session_of(name: Option<String>) -> Result<Option<Key>> {
    name.map(|name| key_of(Space::sessions().as_str().to_owned(), name))
        .transpose()
}

/// A key stored in a row as its space and name.
pub(crate) fn key_of(space: String, name: String) -> Result<Key> {
    let space = Space::new(space)
        .map_err(|_| corrupt("unexpected value in the space column: invalid space"))?;
    let name = Name::new(name)
        .map_err(|_| corrupt("unexpected value in the name column: invalid name"))?;
    Ok(Key::new(space, name))
}

/// The holder stored in a row.
pub(crate) fn holder_of(holder: String) -> Result<HolderId> {
    HolderId::new(holder)
        .map_err(|_| corrupt("unexpected value in the holder column: invalid holder"))
}

/// The key (in `space`), holder and token of a lease listed by `EXPIRED` or
/// `LEASES`: the row's first three columns.
pub(crate) fn listed_lease(space: &Space, row: &PgRow) -> Result<(Key, HolderId, FencingToken)> {
    Ok((
        key_of(space.as_str().to_owned(), get(row, 0)?)?,
        holder_of(get(row, 1)?)?,
        token_of(get(row, 2)?)?,
    ))
}

/// The ttl stored in a row, in milliseconds.
pub(crate) fn ttl_of(ms: i64) -> Result<Ttl> {
    u64::try_from(ms)
        .ok()
        .and_then(|ms| Ttl::from_millis(ms).ok())
        .ok_or_else(|| corrupt(format!("unexpected value in the ttl_ms column: {ms}")))
}

/// Why a renewal (`RENEW` in `lease.rs` for one lease, `RENEW_MANY` in `batch.rs` for
/// more) matched nothing:
/// $1 space, $2 name. One row: the key's current token (NULL when the key has no
/// lease), and the highest token the namespace has handed out on the server's
/// current timeline (its sequence part 0 before the first; see `next_token()`,
/// migration 6): a lease with no record whose token is above it was forgotten by a
/// server that lost state; and whether the lease may outlive a promotion (`synced`,
/// migration 7). For a member riding a session (migration 8), which the renewal never
/// matches (it has no expiry of its own to extend): whether it rides, its session's
/// time left in µs (NULL when the session is gone or superseded), and whether the
/// session may outlive a promotion, as `RENEW` judges the session. Read-only.
const RENEW_WHY: &str = r#"
SELECT l.token, (token_epoch() << 40) | CASE WHEN s.is_called THEN s.last_value ELSE 0 END,
       l.synced, l.session_token IS NOT NULL,
       (extract(epoch FROM (ses.expires_at - clock_timestamp())) * 1000000)::bigint,
       ses.synced OR ses.token >= token_epoch() << 40
FROM tokens s LEFT JOIN leases l ON l.space = $1 AND l.name = $2
LEFT JOIN leases ses
    ON ses.space = 'sessions' AND ses.name = l.session_name AND ses.token = l.session_token
"#;

impl PostgresStore {
    /// Connects, creates the namespace's schema if needed and applies the embedded
    /// migrations (serialized across processes by sqlx's migration lock). With
    /// [`PostgresConfig::existing_only`], creates and migrates nothing: the schema must
    /// be there at [`SCHEMA_VERSION`], or connecting fails with
    /// [`Error::InvalidInput`] (`what: "namespace"`) naming it and the namespaces
    /// (`liveness_*` schemas) the database holds.
    ///
    /// Fails with `Unavailable` when the server cannot be reached, and with
    /// `Backend` when the credentials are refused, the schema was migrated by a
    /// newer version of this crate (it is then left untouched), or the server's
    /// settings may lose acknowledged commits (`fsync=off`, `synchronous_commit=off`;
    /// the source is a [`liveness_core::durability::UnsafeSetting`] naming it) and
    /// `config.durability()` is strict. Nothing is written before that check.
    pub async fn connect(config: PostgresConfig) -> Result<PostgresStore> {
        let schema = config.schema();
        let servers = Arc::new(Servers::new(
            config
                .servers()
                .into_iter()
                .map(|o| o.options([("search_path", schema.as_str())]))
                .collect(),
        ));
        if !config.hosts().is_empty() {
            // A host list: find the primary first; the pool, the durability check and
            // the migrations go to it.
            drop(servers.connect(config.acquire_timeout()).await?);
        }
        let connect = servers.current().clone();
        // A small sqlx pool for migrations, diagnostics and the advisory election's
        // `leader()`; the store's own statements use `conns`.
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections().min(4))
            .acquire_timeout(config.acquire_timeout())
            .idle_timeout(Some(Duration::from_secs(30)))
            .connect_with(connect.clone())
            .await
            .map_err(map)?;
        // Every server of the list, in order: handles connected before and after a
        // failover name the same issuer.
        let hosts: Vec<String> = config
            .servers()
            .iter()
            .map(|o| format!("{}:{}", o.get_host(), o.get_port()))
            .collect();
        let location = format!(
            "{}/{}",
            hosts.join(","),
            connect
                .get_database()
                .unwrap_or_else(|| connect.get_username())
        );
        // Before anything is written: a refused server is left unchanged.
        crate::durability::check(&pool, config.durability()).await?;
        if config.existing_only() {
            check_existing(&pool, config.namespace(), &schema, &location).await?;
        } else {
            migrate(&pool, &schema).await?;
        }
        let channel = schema.clone();
        let pending_channel = pending_channel_of(&schema);
        Ok(PostgresStore {
            inner: Arc::new(Inner {
                conns: Conns::new(
                    servers.clone(),
                    config.max_connections(),
                    config.acquire_timeout(),
                ),
                pool,
                servers,
                acquire_timeout: config.acquire_timeout(),
                namespace: config.namespace().clone(),
                schema,
                channel,
                pending_channel,
                notifier: Notifier::default(),
                notify: config.notify(),
                wake: Arc::new(watch::channel(0).0),
                pending: Arc::new(watch::channel(0).0),
                listener: OnceLock::new(),
                high_water: HighWater::default(),
                info: StoreInfo::new(
                    BACKEND,
                    Capabilities::default()
                        .death_retention(config.death_retention().max(1))
                        .sessions(true)
                        .delays(true)
                        .error_text(true)
                        // Keys carry their recording time by the server's clock.
                        .key_retention(Some(config.key_retention()))
                        // Dead letters carry their dead-lettering time by the server's
                        // clock (migration 15).
                        .dead_letter_retention(Some(config.dead_letter_retention()))
                        // Each item keeps its queue (`items.queue`, migration 13).
                        .queues(true)
                        // Each item keeps its times by the server's clock (migration 14).
                        .item_times(true),
                    Issuer::located(BACKEND, &location, config.namespace().clone()),
                ),
            }),
        })
    }

    /// The namespace this handle is scoped to.
    pub fn namespace(&self) -> &Namespace {
        &self.inner.namespace
    }

    /// The schema that holds the namespace's tables (`liveness_<ns>`).
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// A small sqlx pool on the namespace's schema (its connections' `search_path`
    /// is set to it), for diagnostics, benches and tests. The store's own statements
    /// run on a separate set of connections.
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The channel `release` and `reap_many` notify on (the schema's name).
    pub fn channel(&self) -> &str {
        &self.inner.channel
    }

    /// The channel the writes that make items pending notify on (`enqueue`,
    /// `enqueue_many`, a retry by `finish`, a `sweep_many` that requeued, a dead letter
    /// retried): the schema's name followed by `:items`. Another channel than
    /// [`PostgresStore::channel`], so that lease wake-ups never tick for an enqueue.
    pub fn pending_channel(&self) -> &str {
        &self.inner.pending_channel
    }

    /// What the store is: the backend, its capabilities, the issuer of its leases.
    pub(crate) fn store_info(&self) -> &StoreInfo {
        &self.inner.info
    }

    /// The store's capabilities.
    pub(crate) fn caps(&self) -> &Capabilities {
        &self.inner.info.caps
    }

    /// The handle's store-time high-water mark (`store_time` never goes back).
    pub(crate) fn high_water(&self) -> &HighWater {
        &self.inner.high_water
    }

    /// A receiver of the handle's wake-up signal, starting the LISTEN task first when
    /// the handle listens for notifications.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        // Taken before the task starts, so it sees the tick that follows the LISTEN.
        let rx = self.inner.wake.subscribe();
        if self.inner.notify {
            self.ensure_listener();
        }
        rx
    }

    /// A receiver of the handle's pending signal, starting the LISTEN task first when
    /// the handle listens for notifications.
    pub(crate) fn subscribe_pending(&self) -> watch::Receiver<u64> {
        // Taken before the task starts, so it sees the tick that follows the LISTEN.
        let rx = self.inner.pending.subscribe();
        if self.inner.notify {
            self.ensure_listener();
        }
        rx
    }

    /// A dedicated connection (outside the pool), to the primary of the host list.
    pub(crate) async fn open_connection(&self) -> Result<PgConnection> {
        self.inner.servers.connect(self.inner.acquire_timeout).await
    }

    /// Every row a listing statement returns, each read by `read`.
    pub(crate) async fn list<T>(
        &self,
        q: Query<'_>,
        read: impl Fn(&PgRow) -> Result<T>,
    ) -> Result<Vec<T>> {
        self.db().fetch_all(q).await?.iter().map(read).collect()
    }

    /// How many statements this handle has sent (each one round trip).
    #[cfg(test)]
    pub(crate) fn statements(&self) -> u64 {
        self.inner.conns.statements()
    }

    /// The connections the store's statements run on.
    pub(crate) fn db(&self) -> &Conns {
        &self.inner.conns
    }

    /// The answer of a renewal of `lease` that matched nothing: read after the UPDATE,
    /// which wrote nothing. A member riding a live session is renewed (it lives as its
    /// session does: nothing to write), with its session's time left; any other lease
    /// is lost, and the error says why. The outer `Err` only when the read itself
    /// failed.
    pub(crate) async fn renew_why(&self, lease: &Lease) -> Result<Result<Lease>> {
        let q = on_key(RENEW_WHY, &lease.key);
        let row = self.db().fetch_one(q).await?;
        let (current, handed_out): (Option<i64>, i64) = (get(&row, 0)?, get(&row, 1)?);
        let Some(current) = current else {
            if db_token(lease.token) > handed_out {
                return Ok(Err(StoreLostState::of(BACKEND, lease)));
            }
            return Ok(Err(lease.lost(LostCause::Released)));
        };
        if token_of(current)? != lease.token {
            return Ok(Err(lease.lost(LostCause::Superseded)));
        }
        let rides: Option<bool> = get(&row, 3)?;
        if rides == Some(true) {
            let left: Option<i64> = get(&row, 4)?;
            let kept: Option<bool> = get(&row, 5)?;
            return Ok(match left {
                Some(left) if left > 0 && kept == Some(false) => {
                    Err(lease.lost(LostCause::Failover))
                }
                Some(left) if left > 0 => {
                    Ok(lease.with_expires_in(Duration::from_micros(left.unsigned_abs())))
                }
                _ => Err(lease.lost(LostCause::Expired)),
            });
        }
        let synced: Option<bool> = get(&row, 2)?;
        if synced == Some(false) && db_token(lease.token) >> 40 < handed_out >> 40 {
            return Ok(Err(lease.lost(LostCause::Failover)));
        }
        // The token is current, so the UPDATE matched nothing because it found the
        // lease expired. Nothing makes an expired lease live again under the same
        // token (a server clock stepped back between the two reads could show it
        // live here): the UPDATE's answer stands.
        Ok(Err(lease.lost(LostCause::Expired)))
    }

    /// The death retention, as the statements that record deaths bind it.
    pub(crate) fn retention(&self) -> i64 {
        i64::try_from(self.inner.info.caps.death_retention).unwrap_or(i64::MAX)
    }

    /// The answer of an acquire of `key` by `holder` for `ttl` from a row whose first
    /// three columns are the new token, the live holder and the live token
    /// (`ACQUIRE_MANY` and `JOIN_SESSION_MANY` in `batch.rs`, `JOIN_SESSION` in
    /// `lease.rs`): the lease, or `Held`; `None` when all three are NULL (a concurrent
    /// acquire inserted the key first).
    pub(crate) fn acquired(
        &self,
        key: &Key,
        holder: &HolderId,
        ttl: Ttl,
        row: &PgRow,
    ) -> Result<Option<Result<Lease>>> {
        let token: Option<i64> = get(row, 0)?;
        let held_by: Option<String> = get(row, 1)?;
        let held_token: Option<i64> = get(row, 2)?;
        if let Some(token) = token {
            return Ok(Some(Ok(Lease::granted(
                &self.inner.info.issuer,
                key.clone(),
                holder.clone(),
                token_of(token)?,
                ttl,
            ))));
        }
        if let (Some(h), Some(t)) = (held_by, held_token) {
            return Ok(Some(Err(Error::Held {
                key: key.clone(),
                holder: holder_of(h)?,
                token: token_of(t)?,
            })));
        }
        Ok(None)
    }

    /// Ticks this handle's lease wake-up signal (a release or reap it made).
    pub(crate) fn wake_local(&self) {
        tick(&self.inner.wake);
    }

    /// Ticks this handle's pending signal (an item it made pending), at once and also
    /// without a listener; other handles hear of it through the NOTIFY the statement
    /// sent on [`PostgresStore::pending_channel`], or [`PostgresStore::notify_pending`].
    pub(crate) fn pending_local(&self) {
        tick(&self.inner.pending);
    }

    /// Tells other handles that items became pending, after the write's commit: one
    /// `pg_notify` in a statement of its own, at most one in flight per handle; the
    /// writes that commit while one is in flight are told by the next. PostgreSQL
    /// serializes the commits of notifying transactions, so a notification inside
    /// each of many concurrent single enqueues made them wait on each other (64 at
    /// once ran 4 to 10 times slower); this way they commit as before. A hint only:
    /// a failed notification is logged, and idle workers find the items at their
    /// next poll.
    pub(crate) fn notify_pending(&self) {
        let notifier = &self.inner.notifier;
        notifier.again.store(true, Ordering::SeqCst);
        if notifier.in_flight.swap(true, Ordering::SeqCst) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            notifier.in_flight.store(false, Ordering::SeqCst);
            return;
        };
        let store = self.clone();
        runtime.spawn(async move {
            let notifier = &store.inner.notifier;
            loop {
                notifier.again.store(false, Ordering::SeqCst);
                let q = sqlx::query(NOTIFY_PENDING).bind(store.pending_channel());
                if let Err(e) = store.db().execute(q).await {
                    tracing::debug!(error = %e, "a pending notification failed; workers poll");
                }
                notifier.in_flight.store(false, Ordering::SeqCst);
                // A write told nobody since this notification was sent: send another,
                // unless a new caller took the turn meanwhile.
                if !notifier.again.load(Ordering::SeqCst)
                    || notifier.in_flight.swap(true, Ordering::SeqCst)
                {
                    break;
                }
            }
        });
    }

    /// Starts (once) the task that LISTENs on the namespace's two channels and ticks
    /// the signal of the channel a notification came on (the lease wake-up signal
    /// for [`PostgresStore::channel`], the pending signal for
    /// [`PostgresStore::pending_channel`]), and both once after every (re)connection
    /// (notifications sent while it was not listening are lost).
    fn ensure_listener(&self) {
        self.inner.listener.get_or_init(|| {
            let handle = tokio::runtime::Handle::try_current().ok()?;
            let servers = self.inner.servers.clone();
            let signals = Signals {
                wake: (self.inner.channel.clone(), self.inner.wake.clone()),
                pending: (
                    self.inner.pending_channel.clone(),
                    self.inner.pending.clone(),
                ),
            };
            let task = handle.spawn(listen(servers, signals));
            Some(task.abort_handle())
        });
    }
}

/// The notification [`PostgresStore::notify_pending`] sends: $1 the pending channel.
const NOTIFY_PENDING: &str = "SELECT pg_notify($1, 'pending')";

/// Whether a pending notification is in flight for a handle, and whether a write
/// made items pending since it was sent ([`PostgresStore::notify_pending`]).
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    in_flight: AtomicBool,
    again: AtomicBool,
}

/// The pending channel of the namespace whose schema is `schema`: the schema's name
/// followed by `:items`. A namespace's name has no `:`, so no namespace's channel is
/// another's; and it fits PostgreSQL's limit of 63 bytes for a channel (the longest
/// schema, `liveness_` and 48 bytes, makes 63).
pub(crate) fn pending_channel_of(schema: &str) -> String {
    format!("{schema}:items")
}

/// What the LISTEN task listens to: each signal with its channel.
struct Signals {
    /// The lease wake-ups' channel and signal.
    wake: (String, Arc<watch::Sender<u64>>),
    /// The pending items' channel and signal.
    pending: (String, Arc<watch::Sender<u64>>),
}

impl Signals {
    /// Ticks the signal of `channel` (a notification came on it).
    fn tick(&self, channel: &str) {
        if channel == self.pending.0 {
            tick(&self.pending.1);
        } else if channel == self.wake.0 {
            tick(&self.wake.1);
        }
    }

    /// Ticks both signals: notifications may have been missed.
    fn tick_all(&self) {
        tick(&self.wake.1);
        tick(&self.pending.1);
    }
}

/// The LISTEN task: listens on both channels of `signals` on a connection of its own to
/// the server of `servers` that worked last, ticking as [`Signals`] says, and connects
/// again (with a backoff) whenever the connection fails.
async fn listen(servers: Arc<Servers>, signals: Signals) {
    let pace = || Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    let mut backoff = pace();
    let channels = [signals.wake.0.as_str(), signals.pending.0.as_str()];
    loop {
        // Its own one-connection pool, so the listener never starves the store's pool;
        // made afresh on each attempt, on the server that worked last (a failover
        // moves it with the store's own connections).
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .max_lifetime(None)
            .idle_timeout(None)
            .connect_lazy_with(servers.current().clone());
        if let Ok(mut listener) = PgListener::connect_with(&pool).await {
            // Both channels in one round trip.
            if listener.listen_all(channels).await.is_ok() {
                backoff = pace();
                signals.tick_all();
                loop {
                    match listener.try_recv().await {
                        Ok(Some(n)) => signals.tick(n.channel()),
                        // The connection was lost and re-established (re-listening):
                        // events may have been missed.
                        Ok(None) => signals.tick_all(),
                        Err(e) => {
                            tracing::debug!(error = %e, "postgres listener failed; reconnecting");
                            break;
                        }
                    }
                }
            }
        }
        tokio::time::sleep(backoff.next()).await;
    }
}

/// Whether the schema $1 exists.
const SCHEMA_EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)";

/// The namespaces' schemas of the database.
const LIVENESS_SCHEMAS: &str =
    "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'liveness\\_%' ORDER BY 1";

/// Checks, reading only, that `schema` (namespace `ns`) exists and was migrated to
/// [`SCHEMA_VERSION`]: the opening of a store with [`PostgresConfig::existing_only`].
/// `location` names the database in the errors.
async fn check_existing(pool: &PgPool, ns: &Namespace, schema: &str, location: &str) -> Result<()> {
    let there: bool = sqlx::query_scalar(SCHEMA_EXISTS)
        .bind(schema)
        .fetch_one(pool)
        .await
        .map_err(map)?;
    let missing = |expected: String| {
        Error::invalid(
            "namespace",
            liveness_core::InputProblem::BadValue {
                name: "ns",
                got: ns.to_string(),
                expected,
            },
        )
    };
    if !there {
        let held: Vec<String> = sqlx::query_scalar(LIVENESS_SCHEMAS)
            .fetch_all(pool)
            .await
            .map_err(map)?;
        let held: Vec<&str> = held
            .iter()
            .filter_map(|s| s.strip_prefix("liveness_"))
            .collect();
        let held = if held.is_empty() {
            "none".to_owned()
        } else {
            held.join(", ")
        };
        return Err(missing(format!(
            "a namespace the database {location} holds (a schema liveness_NAME); it holds: {held}"
        )));
    }
    // The schema name is validated ([a-z0-9_-] after a fixed prefix) and quoted.
    let newest = format!("SELECT MAX(version) FROM \"{schema}\"._sqlx_migrations WHERE success");
    let found: Option<i64> = match sqlx::query_scalar(sqlx::AssertSqlSafe(newest))
        .fetch_one(pool)
        .await
    {
        Ok(found) => found,
        // No migrations table: a schema of that name, never migrated.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => None,
        Err(e) => return Err(map(e)),
    };
    match found {
        Some(found) if found > SCHEMA_VERSION => Err(Error::backend(
            BACKEND,
            SchemaTooNew::new(format!("schema {schema}"), found, SCHEMA_VERSION),
        )),
        Some(SCHEMA_VERSION) => Ok(()),
        found => Err(missing(format!(
            "a namespace at schema version {SCHEMA_VERSION} (schema {schema} in {location} \
             is at version {}; a writing connection migrates it)",
            found.unwrap_or(0)
        ))),
    }
}

async fn migrate(pool: &PgPool, schema: &str) -> Result<()> {
    let migrations = MIGRATIONS
        .iter()
        .map(|(version, description, sql)| {
            Migration::new(
                *version,
                Cow::Borrowed(*description),
                MigrationType::Simple,
                sql.into_sql_str(),
                false,
            )
        })
        .collect();
    let mut migrator = Migrator::with_migrations(migrations);
    // The schema name is validated ([a-z0-9_-] after a fixed prefix) and quoted.
    let quoted = format!("\"{schema}\"");
    migrator.create_schema(quoted.clone());
    migrator.dangerous_set_table_name(format!("{quoted}._sqlx_migrations"));
    match migrator.run(pool).await {
        Ok(()) => Ok(()),
        Err(MigrateError::VersionMissing(version)) => Err(Error::backend(
            BACKEND,
            SchemaTooNew::new(format!("schema {schema}"), version, SCHEMA_VERSION),
        )),
        Err(MigrateError::Execute(e)) => Err(map(e)),
        Err(source) => Err(Error::backend(
            BACKEND,
            MigrationFailed {
                schema: schema.to_owned(),
                source,
            },
        )),
    }
}
