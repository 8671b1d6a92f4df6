//! [`PostgresStore`]: the lease and item contract over PostgreSQL.

use liveness_core::Page;
use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use liveness_core::durability::StoreLostState;
use liveness_core::wake::tick;
use liveness_core::{
    async_trait, Acquire, Backoff, Capabilities, DeadToken, DeathCause, DeathRecord,
    EnqueueOptions, Error, ExpiredLease, FencingToken, HighWater, HolderId, InputProblem, Issuer,
    Item, ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind, ItemStore, Key, Lease,
    LeaseInfo, LeaseStatus, LeaseStore, LostReason, Name, Namespace, RequestId, Requeued, Result,
    SchemaTooNew, Space, StoreInfo, StoreTime, Swept, Ttl,
};
use sqlx::migrate::{MigrateError, Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnection, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{Row, SqlSafeStr};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::config::PostgresConfig;
use crate::conns::{Conns, Query, Servers};
use crate::error::{corrupt, map, MigrationFailed};
use crate::{sql, BACKEND};

/// The embedded migrations, in order. Each runs with `search_path` set to the
/// namespace's schema.
const MIGRATIONS: &[(i64, &str, &str)] = &[
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
    (5, "deaths", include_str!("../migrations/0005_deaths.sql")),
    (
        6,
        "acquire_many",
        include_str!("../migrations/0006_acquire_many.sql"),
    ),
];

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: i64 = 6;

/// How many times a keyed `enqueue` reruns its statement after waiting on a
/// concurrent enqueue of the same key (the rerun then answers that one's id).
const ENQUEUE_RETRIES: usize = 8;

/// How many times `acquire` reruns its statement after losing an insert race on a
/// free key (the rerun then reports the winner as `Held`).
const ACQUIRE_RETRIES: usize = 8;

/// What an acquire answers when concurrent acquires kept inserting its key first.
fn insert_races() -> Error {
    Error::unavailable(
        BACKEND,
        std::io::Error::other("acquire kept losing insert races; retry"),
    )
}

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
    channel: String,
    notify: bool,
    wake: Arc<watch::Sender<u64>>,
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
fn on_key<'q>(statement: &'static str, key: &'q Key) -> Query<'q> {
    sqlx::query(statement)
        .bind(key.space().as_str())
        .bind(key.name().as_str())
}

/// A statement about item `id` (`$1`) owned by `lease`'s token (`$2`); `None` when
/// either does not fit a bigint: no stored item can match it.
fn on_owned_item(statement: &'static str, lease: &Lease, id: ItemId) -> Option<Query<'static>> {
    let (Some(db_id), Ok(token)) = (id_param(id), i64::try_from(lease.token.0)) else {
        return None;
    };
    Some(sqlx::query(statement).bind(db_id).bind(token))
}

fn get<'r, T>(row: &'r PgRow, idx: usize) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(idx).map_err(map)
}

fn token_of(v: i64) -> Result<FencingToken> {
    u64::try_from(v)
        .map(FencingToken)
        .map_err(|_| corrupt("token", v))
}

fn count_of(v: i64, what: &'static str) -> Result<u32> {
    u32::try_from(v).map_err(|_| corrupt(what, v))
}

/// A token as a bigint parameter. Tokens come from a bigint sequence, so a larger one
/// is not ours: -1 matches no row, and the statement then reports it as not current.
fn db_token(token: FencingToken) -> i64 {
    i64::try_from(token.0).unwrap_or(-1)
}

fn id_param(id: ItemId) -> Option<i64> {
    i64::try_from(id.0).ok()
}

fn ttl_ms(ttl: Ttl) -> i64 {
    // Ttl is at most one day: always fits.
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

fn limit_param(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn state_of(state: i16, owner: Option<i64>) -> Result<ItemState> {
    match (state, owner) {
        (0, _) => Ok(ItemState::Pending),
        (1, Some(t)) => Ok(ItemState::Owned(token_of(t)?)),
        (2, _) => Ok(ItemState::DeadLettered),
        _ => Err(corrupt("state", state)),
    }
}

fn item_of(row: &PgRow) -> Result<Item> {
    let id: i64 = get(row, 0)?;
    Ok(Item {
        id: ItemId(u64::try_from(id).map_err(|_| corrupt("id", id))?),
        payload: get(row, 1)?,
        attempts: count_of(get(row, 2)?, "attempts")?,
        max_attempts: count_of(get(row, 3)?, "max_attempts")?,
    })
}

/// A lease's status from its time left in microseconds (> 0 iff live).
fn status_of(remaining_us: i64) -> LeaseStatus {
    if remaining_us > 0 {
        LeaseStatus::Live {
            remaining: Duration::from_micros(remaining_us.unsigned_abs()),
        }
    } else {
        LeaseStatus::Expired
    }
}

fn key_of(space: String, name: String) -> Result<Key> {
    let space = Space::new(space).map_err(|_| corrupt("space", "invalid space"))?;
    let name = Name::new(name).map_err(|_| corrupt("name", "invalid name"))?;
    Ok(Key::new(space, name))
}

/// The holder stored in a row.
fn holder_of(holder: String) -> Result<HolderId> {
    HolderId::new(holder).map_err(|_| corrupt("holder", "invalid holder"))
}

/// The key (in `space`), holder and token of a lease listed by `EXPIRED` or
/// `MEMBERS`: the row's first three columns.
fn listed_lease(space: &Space, row: &PgRow) -> Result<(Key, HolderId, FencingToken)> {
    Ok((
        key_of(space.as_str().to_owned(), get(row, 0)?)?,
        holder_of(get(row, 1)?)?,
        token_of(get(row, 2)?)?,
    ))
}

/// The ttl stored in a row, in milliseconds.
fn ttl_of(ms: i64) -> Result<Ttl> {
    u64::try_from(ms)
        .ok()
        .and_then(|ms| Ttl::from_millis(ms).ok())
        .ok_or_else(|| corrupt("ttl_ms", ms))
}

impl PostgresStore {
    /// Connects, creates the namespace's schema if needed and applies the embedded
    /// migrations (serialized across processes by sqlx's migration lock).
    ///
    /// Fails with `Unavailable` when the server cannot be reached, and with
    /// `Backend` when the credentials are refused, the schema was migrated by a
    /// newer version of this crate (it is then left untouched), or the server's
    /// settings may lose acknowledged commits (`fsync=off`, `synchronous_commit=off`;
    /// the source is a [`liveness_core::durability::UnsafeSetting`] naming it) and
    /// `config.durability` is strict. Nothing is written before that check.
    pub async fn connect(config: PostgresConfig) -> Result<PostgresStore> {
        let schema = config.schema();
        let servers = Arc::new(Servers::new(
            config
                .servers()
                .into_iter()
                .map(|o| o.options([("search_path", schema.as_str())]))
                .collect(),
        ));
        if !config.hosts.is_empty() {
            // A host list: find the primary first; the pool, the durability check and
            // the migrations go to it.
            drop(servers.connect(config.acquire_timeout).await?);
        }
        let connect = servers.current().clone();
        // A small sqlx pool for migrations, diagnostics and the advisory election's
        // `leader()`; the store's own statements use `conns`.
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections.min(4))
            .acquire_timeout(config.acquire_timeout)
            .idle_timeout(Some(Duration::from_secs(30)))
            .connect_with(connect.clone())
            .await
            .map_err(map)?;
        // Before anything is written: a refused server is left unchanged.
        crate::durability::check(&pool, config.durability).await?;
        migrate(&pool, &schema).await?;
        let channel = schema.clone();
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
        Ok(PostgresStore {
            inner: Arc::new(Inner {
                conns: Conns::new(
                    servers.clone(),
                    config.max_connections,
                    config.acquire_timeout,
                ),
                pool,
                servers,
                acquire_timeout: config.acquire_timeout,
                namespace: config.namespace.clone(),
                schema,
                channel,
                notify: config.notify,
                wake: Arc::new(watch::channel(0).0),
                listener: OnceLock::new(),
                high_water: HighWater::default(),
                info: StoreInfo {
                    backend: BACKEND,
                    caps: Capabilities {
                        death_retention: config.death_retention.max(1),
                        ..Capabilities::default()
                    },
                    issuer: Issuer::located(BACKEND, &location, config.namespace.clone()),
                },
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

    /// The channel `release` and `reap` notify on (the schema's name).
    pub fn channel(&self) -> &str {
        &self.inner.channel
    }

    /// A dedicated connection (outside the pool), to the primary of the host list.
    pub(crate) async fn open_connection(&self) -> Result<PgConnection> {
        self.inner.servers.connect(self.inner.acquire_timeout).await
    }

    /// Every row a listing statement returns, each read by `read`.
    async fn list<T>(&self, q: Query<'_>, read: impl Fn(&PgRow) -> Result<T>) -> Result<Vec<T>> {
        self.db().fetch_all(q).await?.iter().map(read).collect()
    }

    /// How many statements this handle has sent (each one round trip).
    #[cfg(test)]
    pub(crate) fn statements(&self) -> u64 {
        self.inner.conns.statements()
    }

    /// The connections the store's statements run on.
    fn db(&self) -> &Conns {
        &self.inner.conns
    }

    /// Why a renewal of `lease` matched nothing (lost, or an invalid ttl): read after
    /// the UPDATE, which wrote nothing. `Err` only when the read itself failed.
    async fn renew_why(&self, lease: &Lease, ttl_ok: Result<()>) -> Result<Error> {
        let q = on_key(sql::RENEW_WHY, &lease.key);
        let row = self.db().fetch_one(q).await?;
        let (current, live, handed_out): (Option<i64>, Option<bool>, i64) =
            (get(&row, 0)?, get(&row, 1)?, get(&row, 2)?);
        let (Some(current), Some(live)) = (current, live) else {
            if db_token(lease.token) > handed_out {
                return Ok(StoreLostState::of(BACKEND, lease));
            }
            return Ok(lease.lost(LostReason::Released));
        };
        if token_of(current)? != lease.token {
            return Ok(lease.lost(LostReason::Superseded));
        }
        Ok(match (live, ttl_ok) {
            (false, _) => lease.lost(LostReason::Expired),
            (true, Err(e)) => e,
            // Current and live when the diagnosis read it, yet the UPDATE did not
            // match: nothing makes an expired lease live again under the same token,
            // so only a server clock stepped back between the two reads gets here.
            // The UPDATE saw it expired: that is the answer.
            (true, Ok(())) => lease.lost(LostReason::Expired),
        })
    }

    /// The death retention, as the statements that record deaths bind it.
    fn retention(&self) -> i64 {
        i64::try_from(self.inner.info.caps.death_retention).unwrap_or(i64::MAX)
    }

    /// The answer of an acquire of `key` by `holder` for `ttl` from a row whose first
    /// three columns are the new token, the live holder and the live token
    /// ([`sql::ACQUIRE`], [`sql::ACQUIRE_MANY`]): the lease, or `Held`; `None` when
    /// all three are NULL (a concurrent acquire inserted the key first).
    fn acquired(
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

    pub(crate) fn wake_local(&self) {
        tick(&self.inner.wake);
    }

    /// Runs [`sql::RETIRE`] on the lease on `key` with `token`, for `cause`
    /// (`Reaped`: only when expired; `Released`): true when it removed the lease (its
    /// token went to the dead set), and then wakes this process's waiters.
    async fn retire(&self, cause: DeathCause, key: &Key, token: i64) -> Result<bool> {
        let cause: i16 = match cause {
            DeathCause::Reaped => 0,
            DeathCause::Released => 1,
            DeathCause::Superseded => 2,
        };
        let q = on_key(sql::RETIRE, key)
            .bind(token)
            .bind(self.inner.channel.as_str())
            .bind(self.retention())
            .bind(cause);
        let row = self.db().fetch_one(q).await?;
        let removed: i64 = get(&row, 0)?;
        if removed > 0 {
            self.wake_local();
        }
        Ok(removed > 0)
    }

    /// Starts (once) the task that LISTENs on the namespace's channel and ticks the
    /// wake-up signal on every notification, and once after every (re)connection
    /// (notifications sent while it was not listening are lost).
    fn ensure_listener(&self) {
        self.inner.listener.get_or_init(|| {
            let handle = tokio::runtime::Handle::try_current().ok()?;
            let servers = self.inner.servers.clone();
            let channel = self.inner.channel.clone();
            let wake = self.inner.wake.clone();
            let task = handle.spawn(listen(servers, channel, wake));
            Some(task.abort_handle())
        });
    }
}

async fn listen(servers: Arc<Servers>, channel: String, wake: Arc<watch::Sender<u64>>) {
    let pace = || Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    let mut backoff = pace();
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
            if listener.listen(&channel).await.is_ok() {
                backoff = pace();
                tick(&wake);
                loop {
                    match listener.try_recv().await {
                        Ok(Some(_)) => tick(&wake),
                        // The connection was lost and re-established (re-listening):
                        // events may have been missed.
                        Ok(None) => tick(&wake),
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
    // The schema name is validated ([a-z0-9_] after a fixed prefix); quoted anyway.
    let quoted = format!("\"{schema}\"");
    migrator.create_schema(quoted.clone());
    migrator.dangerous_set_table_name(format!("{quoted}._sqlx_migrations"));
    match migrator.run(pool).await {
        Ok(()) => Ok(()),
        Err(MigrateError::VersionMissing(version)) => Err(Error::backend(
            BACKEND,
            SchemaTooNew {
                location: format!("schema {schema}"),
                found: version,
                supported: SCHEMA_VERSION,
            },
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

#[async_trait]
impl LeaseStore for PostgresStore {
    fn info(&self) -> &StoreInfo {
        &self.inner.info
    }

    async fn acquire(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Result<Lease> {
        self.inner.info.caps.check_ttl(ttl)?;
        for _ in 0..ACQUIRE_RETRIES {
            let q = on_key(sql::ACQUIRE, key)
                .bind(holder.as_str())
                .bind(ttl_ms(ttl))
                .bind(self.inner.channel.as_str())
                .bind(self.retention());
            let row = self.db().fetch_one(q).await?;
            let woke: i64 = get(&row, 3)?;
            if woke > 0 {
                self.wake_local();
            }
            if let Some(answer) = self.acquired(key, holder, ttl, &row)? {
                return answer;
            }
            // A concurrent acquire inserted the key after our snapshot: run again.
        }
        Err(insert_races())
    }

    async fn acquire_many(&self, asks: &[Acquire]) -> Result<Vec<Result<Lease>>> {
        let caps = self.inner.info.caps;
        liveness_core::store::check_batch(caps, "acquires", asks.len())?;
        // Entries with a ttl the store refuses answer InvalidInput alone, and are not
        // sent; the others go in one statement, in the order given.
        let mut out: Vec<Option<Result<Lease>>> = Vec::with_capacity(asks.len());
        let (mut spaces, mut names, mut holders, mut ttls) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for ask in asks {
            match caps.check_ttl(ask.ttl) {
                Ok(()) => {
                    spaces.push(ask.key.space().as_str().to_owned());
                    names.push(ask.key.name().as_str().to_owned());
                    holders.push(ask.holder.as_str().to_owned());
                    ttls.push(ttl_ms(ask.ttl));
                    out.push(None);
                }
                Err(e) => out.push(Some(Err(e))),
            }
        }
        if !names.is_empty() {
            let sent = names.len();
            let q = sqlx::query(sql::ACQUIRE_MANY)
                .bind(spaces)
                .bind(names)
                .bind(holders)
                .bind(ttls)
                .bind(self.inner.channel.as_str())
                .bind(self.retention());
            let rows = self.db().fetch_all(q).await?;
            if rows.len() != sent {
                return Err(corrupt("acquire_many rows", rows.len()));
            }
            let mut woke = false;
            let mut rows = rows.iter();
            for (ask, slot) in asks.iter().zip(out.iter_mut()) {
                if slot.is_some() {
                    continue;
                }
                let Some(row) = rows.next() else {
                    return Err(corrupt("acquire_many rows", sent));
                };
                let row_woke: bool = get(row, 3)?;
                woke |= row_woke;
                *slot = Some(
                    self.acquired(&ask.key, &ask.holder, ask.ttl, row)?
                        .unwrap_or_else(|| Err(insert_races())),
                );
            }
            if woke {
                self.wake_local();
            }
        }
        Ok(out
            .into_iter()
            .map(|answer| answer.unwrap_or_else(|| Err(corrupt("acquire_many", "no answer"))))
            .collect())
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        lease.check_issuer(&self.inner.info.issuer)?;
        let ttl_ok = self.inner.info.caps.check_ttl(lease.ttl);
        let q = on_key(sql::RENEW, &lease.key)
            .bind(db_token(lease.token))
            .bind(ttl_ms(lease.ttl))
            .bind(ttl_ok.is_ok());
        let renewed = self.db().execute(q).await?;
        if renewed > 0 {
            return Ok(lease.renewed());
        }
        Err(self.renew_why(lease, ttl_ok).await?)
    }

    async fn renew_many(&self, leases: &[Lease]) -> Result<Vec<Result<Lease>>> {
        liveness_core::store::check_batch(self.inner.info.caps, "leases", leases.len())?;
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        if leases
            .iter()
            .any(|lease| lease.issuer != self.inner.info.issuer)
        {
            // A foreign lease among them: each alone, so `renew` refuses the foreign
            // ones (ForeignLease) and renews the others.
            return liveness_core::store::renew_each(self, leases).await;
        }
        let (mut spaces, mut names, mut tokens, mut ttls) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for lease in leases {
            if self.inner.info.caps.check_ttl(lease.ttl).is_ok() {
                spaces.push(lease.key.space().as_str().to_owned());
                names.push(lease.key.name().as_str().to_owned());
                tokens.push(db_token(lease.token));
                ttls.push(ttl_ms(lease.ttl));
            }
        }
        let q = sqlx::query(sql::RENEW_MANY)
            .bind(spaces)
            .bind(names)
            .bind(tokens)
            .bind(ttls);
        let mut renewed = std::collections::HashSet::new();
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
                let ttl_ok = self.inner.info.caps.check_ttl(lease.ttl);
                out.push(Err(self.renew_why(lease, ttl_ok).await?));
            }
        }
        Ok(out)
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        lease.check_issuer(&self.inner.info.issuer)?;
        self.retire(DeathCause::Released, &lease.key, db_token(lease.token))
            .await
    }

    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        let q = on_key(sql::INSPECT, key);
        let row = self.db().fetch_optional(q).await?;
        let Some(row) = row else {
            return Ok(None);
        };
        Ok(Some(LeaseInfo {
            key: key.clone(),
            holder: holder_of(get(&row, 0)?)?,
            token: token_of(get(&row, 1)?)?,
            ttl: ttl_of(get(&row, 2)?)?,
            status: status_of(get(&row, 3)?),
        }))
    }

    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        let limit = self.inner.info.caps.clamp_limit("limit", limit)?;
        let q = sqlx::query(sql::EXPIRED)
            .bind(space.as_str())
            .bind(limit_param(limit));
        self.list(q, |row| {
            let (key, holder, token) = listed_lease(space, row)?;
            Ok(ExpiredLease { key, holder, token })
        })
        .await
    }

    async fn reap(&self, key: &Key, token: FencingToken) -> Result<bool> {
        let Ok(token) = i64::try_from(token.0) else {
            return Ok(false);
        };
        self.retire(DeathCause::Reaped, key, token).await
    }

    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> Result<Vec<Result<bool>>> {
        liveness_core::store::check_batch(self.inner.info.caps, "expired", expired.len())?;
        // One statement for the batch ([`sql::REAP_MANY`]). An entry given twice is
        // sent once: a repeat of a reap answers false, whatever the first answered. A
        // token no lease can have is false without being sent.
        let mut sent = std::collections::HashSet::new();
        // Where each sent entry is in `expired`, in the order sent.
        let mut positions = Vec::new();
        let (mut spaces, mut names, mut tokens) = (Vec::new(), Vec::new(), Vec::new());
        for (at, (key, token)) in expired.iter().enumerate() {
            let Ok(db) = i64::try_from(token.0) else {
                continue;
            };
            if sent.insert((key, db)) {
                positions.push(at);
                spaces.push(key.space().as_str().to_owned());
                names.push(key.name().as_str().to_owned());
                tokens.push(db);
            }
        }
        let mut out: Vec<Result<bool>> = expired.iter().map(|_| Ok(false)).collect();
        if tokens.is_empty() {
            return Ok(out);
        }
        let q = sqlx::query(sql::REAP_MANY)
            .bind(spaces)
            .bind(names)
            .bind(tokens)
            .bind(self.inner.channel.as_str())
            .bind(self.retention());
        let rows = self.db().fetch_all(q).await?;
        for row in &rows {
            let i: i64 = get(row, 0)?;
            let at = usize::try_from(i - 1)
                .ok()
                .and_then(|i| positions.get(i))
                .ok_or_else(|| corrupt("reap_many position", i))?;
            out[*at] = Ok(true);
        }
        if !rows.is_empty() {
            self.wake_local();
        }
        Ok(out)
    }

    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        let limit = self.inner.info.caps.clamp_limit("limit", limit)?;
        let q = sqlx::query(sql::DEAD_TOKENS).bind(limit_param(limit));
        self.list(q, |row| {
            Ok(DeadToken {
                token: token_of(get(row, 0)?)?,
                key: key_of(get(row, 1)?, get(row, 2)?)?,
            })
        })
        .await
    }

    async fn members(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let Page { after, limit } = page;
        let limit = self.inner.info.caps.clamp_limit("limit", limit)?;
        if after.is_some_and(|k| k.space() != space) {
            return Err(Error::invalid("after", InputProblem::OtherSpace));
        }
        let q = sqlx::query(sql::MEMBERS)
            .bind(space.as_str())
            .bind(after.map_or("", |k| k.name().as_str()))
            .bind(limit_param(limit));
        self.list(q, |row| {
            let (key, holder, token) = listed_lease(space, row)?;
            Ok(LeaseInfo {
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
        let limit = self.inner.info.caps.clamp_limit("limit", limit)?;
        let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        let q = sqlx::query(sql::DEATHS)
            .bind(before)
            .bind(limit_param(limit));
        self.list(q, |row| {
            let count = |i: usize| -> Result<Option<u64>> {
                let v: Option<i64> = get(row, i)?;
                v.map(|v| u64::try_from(v).map_err(|_| corrupt("swept count", v)))
                    .transpose()
            };
            let swept = match (count(7)?, count(8)?) {
                (Some(requeued), Some(dead_lettered)) => Some(Swept {
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
                seq: u64::try_from(seq).map_err(|_| corrupt("seq", seq))?,
                key: key_of(get(row, 1)?, get(row, 2)?)?,
                holder: holder_of(holder)?,
                token: token_of(get(row, 4)?)?,
                at: StoreTime::from_epoch(Duration::from_micros(
                    u64::try_from(at).map_err(|_| corrupt("at", at))?,
                )),
                cause: match cause {
                    0 => DeathCause::Reaped,
                    1 => DeathCause::Released,
                    2 => DeathCause::Superseded,
                    other => return Err(corrupt("cause", other)),
                },
                swept,
            })
        })
        .await
    }

    async fn store_time(&self) -> Result<StoreTime> {
        let q = sqlx::query(sql::STORE_TIME);
        let row = self.db().fetch_one(q).await?;
        let micros: i64 = get(&row, 0)?;
        let micros = u64::try_from(micros).map_err(|_| corrupt("clock_timestamp", micros))?;
        // The contract wants it non-decreasing per handle; a server clock stepped
        // back (NTP) must not show through.
        Ok(self.inner.high_water.observe(Duration::from_micros(micros)))
    }

    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        let q = sqlx::query(sql::NEXT_EXPIRY).bind(space.as_str());
        let row = self.db().fetch_optional(q).await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let micros: i64 = get(&row, 0)?;
        Ok(Some(Duration::from_micros(
            u64::try_from(micros).unwrap_or(0),
        )))
    }

    fn wakeups(&self) -> Option<watch::Receiver<u64>> {
        if self.inner.notify {
            self.ensure_listener();
        }
        Some(self.inner.wake.subscribe())
    }
}

#[async_trait]
impl ItemStore for PostgresStore {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        options.validate(payload, self.inner.info.caps.max_payload)?;
        let row = match options.key {
            None => {
                let q = sqlx::query(sql::ENQUEUE)
                    .bind(payload)
                    .bind(i64::from(options.max_attempts));
                self.db().fetch_one(q).await?
            }
            Some(key) => {
                let key = key.to_hex();
                let mut found = None;
                for _ in 0..ENQUEUE_RETRIES {
                    let q = sqlx::query(sql::ENQUEUE_KEYED)
                        .bind(payload)
                        .bind(i64::from(options.max_attempts))
                        .bind(&key);
                    found = self.db().fetch_optional(q).await?;
                    if found.is_some() {
                        break;
                    }
                }
                found.ok_or_else(|| {
                    Error::unavailable(BACKEND, "enqueue: the key stayed contended; retry")
                })?
            }
        };
        let id: i64 = get(&row, 0)?;
        Ok(ItemId(u64::try_from(id).map_err(|_| corrupt("id", id))?))
    }

    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        lease.check_issuer(&self.inner.info.issuer)?;
        let n = self.inner.info.caps.clamp_limit("n", n)?;
        let q = on_key(sql::CLAIM, &lease.key)
            .bind(db_token(lease.token))
            .bind(limit_param(n))
            .bind(req.to_hex());
        let rows = self.db().fetch_all(q).await?;
        let Some(first) = rows.first() else {
            return Err(corrupt("claim", "no row"));
        };
        let current: Option<i64> = get(first, 0)?;
        let live: Option<bool> = get(first, 1)?;
        match current {
            None => return Err(lease.lost(LostReason::Released)),
            Some(t) if token_of(t)? != lease.token => {
                return Err(lease.lost(LostReason::Superseded))
            }
            Some(_) if live != Some(true) => return Err(lease.lost(LostReason::Expired)),
            Some(_) => {}
        }
        let mut items = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: Option<i64> = get(row, 2)?;
            let Some(id) = id else { continue };
            items.push(Item {
                id: ItemId(u64::try_from(id).map_err(|_| corrupt("id", id))?),
                payload: get(row, 3)?,
                attempts: count_of(get(row, 4)?, "attempts")?,
                max_attempts: count_of(get(row, 5)?, "max_attempts")?,
            });
        }
        Ok(items)
    }

    async fn complete(&self, lease: &Lease, id: ItemId) -> Result<()> {
        lease.check_issuer(&self.inner.info.issuer)?;
        let fenced = || lease.fenced(id);
        let q = on_owned_item(sql::COMPLETE, lease, id).ok_or_else(fenced)?;
        match self.db().fetch_optional(q).await? {
            Some(_) => Ok(()),
            None => Err(fenced()),
        }
    }

    async fn fail(&self, lease: &Lease, id: ItemId, retry: bool) -> Result<ItemState> {
        lease.check_issuer(&self.inner.info.issuer)?;
        let fenced = || lease.fenced(id);
        let q = on_owned_item(sql::FAIL, lease, id).ok_or_else(fenced)?;
        match self.db().fetch_optional(q.bind(retry)).await? {
            Some(row) => state_of(get(&row, 0)?, None),
            None => Err(fenced()),
        }
    }

    async fn requeue_orphans(&self, token: FencingToken) -> Result<Requeued> {
        let Ok(token) = i64::try_from(token.0) else {
            return Ok(Requeued::default());
        };
        let q = sqlx::query(sql::REQUEUE_ORPHANS).bind(token);
        let rows = self.db().fetch_all(q).await?;
        let mut out = Requeued::default();
        for row in &rows {
            let id: i64 = get(row, 0)?;
            let id = ItemId(u64::try_from(id).map_err(|_| corrupt("id", id))?);
            match state_of(get(row, 1)?, None)? {
                ItemState::Pending => out.requeued.push(id),
                _ => out.dead_lettered.push(id),
            }
        }
        Ok(out)
    }

    async fn requeue_orphans_many(&self, tokens: &[FencingToken]) -> Result<Vec<Result<Requeued>>> {
        // One statement per `max_batch` tokens ([`sql::REQUEUE_ORPHANS_MANY`]); a token
        // given twice is sent once (its repeat moves nothing: an empty answer).
        let mut out: Vec<Result<Requeued>> =
            tokens.iter().map(|_| Ok(Requeued::default())).collect();
        // Each token once, with where it first is in `tokens`.
        let mut seen = std::collections::HashSet::new();
        let unique: Vec<(i64, usize)> = tokens
            .iter()
            .enumerate()
            .filter_map(|(at, token)| Some((i64::try_from(token.0).ok()?, at)))
            .filter(|(db, _)| seen.insert(*db))
            .collect();
        for chunk in unique.chunks(self.inner.info.caps.max_batch.max(1)) {
            let ids: Vec<i64> = chunk.iter().map(|(db, _)| *db).collect();
            let at: std::collections::HashMap<i64, usize> = chunk.iter().copied().collect();
            let q = sqlx::query(sql::REQUEUE_ORPHANS_MANY).bind(ids);
            for row in &self.db().fetch_all(q).await? {
                let token: i64 = get(row, 0)?;
                let id: i64 = get(row, 1)?;
                let id = ItemId(u64::try_from(id).map_err(|_| corrupt("id", id))?);
                let Some(Ok(answer)) = at.get(&token).map(|i| &mut out[*i]) else {
                    return Err(corrupt("requeue_orphans_many token", token));
                };
                match state_of(get(row, 2)?, None)? {
                    ItemState::Pending => answer.requeued.push(id),
                    _ => answer.dead_lettered.push(id),
                }
            }
        }
        Ok(out)
    }

    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        let Some(db_id) = id_param(id) else {
            return Ok(None);
        };
        let q = sqlx::query(sql::ITEM).bind(db_id);
        let row = self.db().fetch_optional(q).await?;
        let Some(row) = row else {
            return Ok(None);
        };
        Ok(Some(ItemRecord {
            item: item_of(&row)?,
            state: state_of(get(&row, 4)?, get(&row, 5)?)?,
        }))
    }

    async fn item_counts(&self) -> Result<ItemCounts> {
        let q = sqlx::query(sql::ITEM_COUNTS);
        let row = self.db().fetch_one(q).await?;
        let n = |i: usize| -> Result<u64> {
            let v: i64 = get(&row, i)?;
            u64::try_from(v).map_err(|_| corrupt("count", v))
        };
        Ok(ItemCounts {
            pending: n(0)?,
            owned: n(1)?,
            dead_lettered: n(2)?,
        })
    }

    async fn dead_letters(&self, limit: usize) -> Result<Vec<ItemRecord>> {
        let limit = self.inner.info.caps.clamp_limit("limit", limit)?;
        let q = sqlx::query(sql::DEAD_LETTERS).bind(limit_param(limit));
        self.list(q, |row| {
            Ok(ItemRecord {
                item: item_of(row)?,
                state: ItemState::DeadLettered,
            })
        })
        .await
    }

    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        let Page { after, limit } = page;
        let limit = self.inner.info.caps.clamp_limit("limit", limit)?;
        let code: i16 = match state {
            ItemStateKind::Pending => 0,
            ItemStateKind::Owned => 1,
            ItemStateKind::DeadLettered => 2,
        };
        let after = after.map_or(0, |id| i64::try_from(id.0).unwrap_or(i64::MAX));
        let q = sqlx::query(sql::ITEMS)
            .bind(code)
            .bind(after)
            .bind(limit_param(limit));
        self.list(q, |row| {
            Ok(ItemRecord {
                item: item_of(row)?,
                state: state_of(get(row, 4)?, get(row, 5)?)?,
            })
        })
        .await
    }

    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        let no_such = || Error::invalid("item", InputProblem::NoSuchItem);
        let Some(db_id) = id_param(id) else {
            return Err(no_such());
        };
        let q = sqlx::query(sql::RETRY_DEAD_LETTER).bind(db_id);
        let Some(row) = self.db().fetch_optional(q).await? else {
            return Err(no_such());
        };
        let before: i16 = get(&row, 0)?;
        if before == 2 {
            Ok(())
        } else {
            Err(Error::invalid("item", InputProblem::NotDeadLettered))
        }
    }

    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        let limit = self.inner.info.caps.clamp_limit("limit", limit)?;
        let q = sqlx::query(sql::RETRY_DEAD_LETTERS).bind(limit_param(limit));
        let mut ids = self
            .list(q, |row| {
                let id: i64 = get(row, 0)?;
                Ok(ItemId(u64::try_from(id).map_err(|_| corrupt("id", id))?))
            })
            .await?;
        ids.sort();
        Ok(ids)
    }
}
