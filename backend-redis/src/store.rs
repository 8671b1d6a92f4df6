//! [`RedisStore`]: the lease and item store on a Redis server.

use liveness_core::Page;
use std::time::Duration;

use liveness_core::durability::StoreLostState;
use liveness_core::store::check_batch;
use liveness_core::{
    async_trait, Acquire, Capabilities, DeadToken, DeathCause, DeathRecord, EnqueueOptions, Error,
    ExpiredLease, FencingToken, HighWater, HolderId, InputProblem, Issuer, Item, ItemCounts,
    ItemId, ItemRecord, ItemState, ItemStateKind, ItemStore, Key, Lease, LeaseInfo, LeaseStatus,
    LeaseStore, LostReason, Name, Namespace, RequestId, Requeued, Result, Space, StoreInfo,
    StoreTime, Swept, Ttl,
};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{
    Cmd, ErrorKind, Pipeline, RedisFuture, RedisResult, Script, ScriptInvocation, ServerErrorKind,
    Value,
};

use crate::config::{CaSource, RedisConfig};
use crate::error::{map, unexpected};
use crate::keys::Keys;
use crate::reply::{array, bytes, int, record, text, u32_, uint};
use crate::scripts::scripts;
use crate::BACKEND;

/// The largest item payload this backend accepts (1 MiB, well under Redis' 512 MB
/// string limit, so that one `claim` of `max_batch` items stays a sane reply).
pub const MAX_PAYLOAD: usize = 1024 * 1024;

/// A lease and item store on one namespace of a Redis server.
///
/// Every operation is one Lua script that reads the server's `TIME` (see the crate
/// docs): only the Redis server's clock decides expiry. All keys of the namespace
/// share the hash tag `{ns}`, so they live in one Redis Cluster slot.
///
/// The handle holds one multiplexed connection that reconnects by itself after a
/// fault (on a Redis Cluster, one per node, following the slot map); cloning it is
/// cheap and shares the connection. An operation that meets a transport fault or a
/// timeout fails with [`Error::Unavailable`]; the next one uses a fresh connection.
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    keys: Keys,
    namespace: Namespace,
    /// The highest store time this handle reported, so that `store_time` never goes
    /// backwards on one handle even if the server's clock is stepped back.
    high_water: HighWater,
    /// What the store is: the backend, its capabilities, the issuer of its leases.
    info: StoreInfo,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// The connection: to one server, or to a Redis Cluster. Every script names its
/// namespace's keys (one hash slot), so the cluster client sends it to the node that
/// owns the slot and follows redirections while slots move.
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

impl Conn {
    /// Runs a keyless command (`SCAN`) where `key` lives: on a cluster, on the
    /// primary that owns the key's slot.
    async fn query_at(&mut self, cmd: Cmd, key: &str) -> RedisResult<Value> {
        match self {
            Conn::Single(c) => cmd.query_async(c).await,
            Conn::Cluster(c) => {
                let route = Route::with_key(key, SlotAddr::Master);
                c.route_command(
                    cmd,
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                )
                .await
            }
        }
    }
}

fn lost(lease: &Lease, code: i64) -> Error {
    let reason = match code {
        -2 => LostReason::Superseded,
        -3 => LostReason::Expired,
        _ => LostReason::Released,
    };
    lease.lost(reason)
}

fn us(n: i64) -> Duration {
    Duration::from_micros(u64::try_from(n).unwrap_or(0))
}

impl RedisStore {
    /// Connects to the server (or, with `cluster=true`, learns the cluster's slot map
    /// from its seed nodes), checks its durability settings and loads the scripts.
    ///
    /// Fails with [`Error::Unavailable`] when the server cannot be reached within the
    /// connect timeout, and with [`Error::Backend`] when it refuses us (wrong password,
    /// missing ACL permissions, a TLS certificate that does not verify, no Lua, a
    /// server that is not in cluster mode while `cluster=true`), or when its settings
    /// may lose acknowledged writes (`appendonly` not `yes`, `appendfsync` not
    /// `always`, `maxmemory-policy` not `noeviction`; the source is a
    /// [`liveness_core::durability::UnsafeSetting`] naming it) and the config does not
    /// accept that (`durability=relaxed`). Where `CONFIG GET` is not allowed, a warning
    /// is logged and the connection goes on.
    pub async fn connect(config: RedisConfig) -> Result<RedisStore> {
        let root_cert = match &config.ca {
            Some(ca) if config.is_tls() => Some(match ca {
                CaSource::Pem(pem) => pem.clone(),
                CaSource::File(path) => std::fs::read(path).map_err(|e| {
                    Error::backend(
                        BACKEND,
                        std::io::Error::new(
                            e.kind(),
                            format!("cannot read the CA file {}: {e}", path.display()),
                        ),
                    )
                })?,
            }),
            _ => None,
        };
        if config.is_tls() {
            install_crypto_provider();
        }
        let mut conn = if config.is_cluster() {
            Conn::Cluster(connect_cluster(&config, root_cert).await?)
        } else {
            Conn::Single(connect_single(&config, root_cert).await?)
        };
        crate::durability::check(&mut conn, config.durability).await?;
        let all = scripts();
        for script in [
            &all.acquire,
            &all.renew,
            &all.release,
            &all.reap,
            &all.inspect,
            &all.expired,
            &all.dead_tokens,
            &all.store_time,
            &all.next_expiry,
            &all.enqueue,
            &all.claim,
            &all.complete,
            &all.fail,
            &all.requeue_orphans,
            &all.item,
            &all.item_counts,
            &all.dead_letters,
        ] {
            script.load_async(&mut conn).await.map_err(map)?;
        }
        let keys = Keys::new(&config.namespace);
        // Records the server this handle talks to (the expiry epoch: see hello.lua).
        let mut hello = all.hello.prepare_invoke();
        hello.key(keys.srv());
        hello.invoke_async::<Value>(&mut conn).await.map_err(map)?;
        Ok(RedisStore {
            info: StoreInfo {
                backend: BACKEND,
                caps: Capabilities {
                    min_ttl: Duration::from_millis(1),
                    max_ttl: Ttl::MAX,
                    pushes_expiry_events: false,
                    observer_local_expiry: false,
                    max_batch: 1000,
                    max_payload: MAX_PAYLOAD,
                    death_retention: config.death_retention.max(1),
                },
                issuer: Issuer::located(BACKEND, &location(&config), config.namespace.clone()),
            },
            conn,
            keys,
            namespace: config.namespace,
            high_water: HighWater::default(),
        })
    }

    /// The namespace this handle is scoped to.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// True when this handle talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// Deletes every key of this handle's namespace (leases, tokens, items). Meant for
    /// tests and tear-down: the token counter goes too, so tokens handed out afterwards
    /// restart from 1 and fencing against older tokens of the namespace is void.
    ///
    /// Not atomic: run it only when nothing else uses the namespace. Returns how many
    /// keys it deleted.
    pub async fn purge(&self) -> Result<u64> {
        let mut conn = self.conn.clone();
        let mut cursor: u64 = 0;
        let mut deleted = 0;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(self.keys.pattern())
                .arg("COUNT")
                .arg(1000);
            let reply = conn
                .query_at(scan, &self.keys.tokens())
                .await
                .map_err(map)?;
            let (next, keys): (u64, Vec<String>) = redis::from_redis_value(reply)
                .map_err(|_| unexpected("purge", "a SCAN reply that is not a cursor and keys"))?;
            if !keys.is_empty() {
                let n: u64 = redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async(&mut conn)
                    .await
                    .map_err(map)?;
                deleted += n;
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }

    /// The answer of one acquire from its script reply: `{1, token}` taken, or
    /// `{0, holder, token}` held by a live lease.
    fn acquired(
        &self,
        op: &'static str,
        key: &Key,
        holder: &HolderId,
        ttl: Ttl,
        reply: Value,
    ) -> Result<Lease> {
        let mut reply = array(op, reply)?.into_iter();
        let mut next = || reply.next().unwrap_or(Value::Nil);
        match int(op, &next())? {
            1 => {
                let token = uint(op, &next())?;
                Ok(Lease::granted(
                    &self.info.issuer,
                    key.clone(),
                    holder.clone(),
                    FencingToken(token),
                    ttl,
                ))
            }
            0 => {
                let held_by = text(op, next())?;
                let token = uint(op, &next())?;
                Err(Error::Held {
                    key: key.clone(),
                    holder: HolderId::new(held_by)
                        .map_err(|_| unexpected(op, "an invalid stored holder"))?,
                    token: FencingToken(token),
                })
            }
            _ => Err(unexpected(op, "an unknown status")),
        }
    }

    async fn run(&self, call: ScriptInvocation<'_>) -> Result<Value> {
        let mut conn = self.conn.clone();
        call.invoke_async::<Value>(&mut conn).await.map_err(map)
    }

    /// Runs `call`, an `EVALSHA` of `script` built by hand; like
    /// [`ScriptInvocation::invoke_async`], loads the script and sends the call again
    /// when the server does not know it (after a restart or `SCRIPT FLUSH`).
    async fn run_script(&self, script: &Script, call: &Cmd) -> Result<Value> {
        let mut conn = self.conn.clone();
        match call.query_async::<Value>(&mut conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                script.load_async(&mut conn).await.map_err(map)?;
                call.query_async::<Value>(&mut conn).await.map_err(map)
            }
            answer => answer.map_err(map),
        }
    }
}

/// Picks rustls' `ring` provider for the process unless one is installed already
/// (another crate may have installed its own: that is fine).
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn renew_call<'a>(keys: &Keys, lease: &Lease, ttl_ms: u64) -> ScriptInvocation<'a> {
    let mut call = scripts().renew.prepare_invoke();
    call.key(keys.lease(&lease.key))
        .key(keys.expiry(lease.key.space()))
        .key(keys.tokens())
        .arg(lease.key.name().as_str())
        .arg(lease.token.0)
        .arg(ttl_ms);
    call
}

fn key_text(key: &Key) -> String {
    key.to_string()
}

#[async_trait]
impl LeaseStore for RedisStore {
    fn info(&self) -> &StoreInfo {
        &self.info
    }

    async fn acquire(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Result<Lease> {
        self.info.caps.check_ttl(ttl)?;
        let mut call = scripts().acquire.prepare_invoke();
        call.key(self.keys.lease(key))
            .key(self.keys.expiry(key.space()))
            .key(self.keys.tokens())
            .key(self.keys.dead())
            .arg(key.name().as_str())
            .arg(holder.as_str())
            .arg(ttl.as_millis())
            .arg(key_text(key))
            .arg(self.info.caps.death_retention);
        let reply = self.run(call).await?;
        self.acquired("acquire", key, holder, ttl, reply)
    }

    async fn acquire_many(&self, asks: &[Acquire]) -> Result<Vec<Result<Lease>>> {
        check_batch(self.info.caps, "acquires", asks.len())?;
        // An entry with a ttl outside the capabilities fails alone, here; the others
        // go to one script for the whole batch: one round trip, one server instant.
        let checked: Vec<Result<()>> = asks
            .iter()
            .map(|ask| self.info.caps.check_ttl(ask.ttl))
            .collect();
        let mut call = scripts().acquire_many.prepare_invoke();
        call.key(self.keys.tokens())
            .key(self.keys.dead())
            .arg(self.info.caps.death_retention);
        let mut sent = 0;
        for (ask, _) in asks.iter().zip(&checked).filter(|(_, ok)| ok.is_ok()) {
            call.key(self.keys.lease(&ask.key))
                .key(self.keys.expiry(ask.key.space()))
                .arg(ask.key.name().as_str())
                .arg(ask.holder.as_str())
                .arg(ask.ttl.as_millis())
                .arg(key_text(&ask.key));
            sent += 1;
        }
        let replies = if sent == 0 {
            Vec::new()
        } else {
            array("acquire_many", self.run(call).await?)?
        };
        if replies.len() != sent {
            return Err(unexpected("acquire_many", "a reply of another length"));
        }
        let mut replies = replies.into_iter();
        Ok(asks
            .iter()
            .zip(checked)
            .map(|(ask, ok)| {
                ok?;
                let reply = replies.next().unwrap_or(Value::Nil);
                self.acquired("acquire_many", &ask.key, &ask.holder, ask.ttl, reply)
            })
            .collect())
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        lease.check_issuer(&self.info.issuer)?;
        // The reference model checks the lease before the ttl: an out-of-bounds ttl on
        // a lost lease reports the loss. Ttl 0 asks the script to check only.
        let ttl_ok = self.info.caps.check_ttl(lease.ttl);
        let ttl_ms = if ttl_ok.is_ok() {
            lease.ttl.as_millis()
        } else {
            0
        };
        let v = self.run(renew_call(&self.keys, lease, ttl_ms)).await?;
        match int("renew", &v)? {
            1 => Ok(lease.renewed()),
            0 => ttl_ok.map(|()| lease.clone()),
            code @ -3..=-1 => Err(lost(lease, code)),
            -4 => Err(StoreLostState::of(BACKEND, lease)),
            _ => Err(unexpected("renew", "an unknown status")),
        }
    }

    async fn renew_many(&self, leases: &[Lease]) -> Result<Vec<Result<Lease>>> {
        check_batch(self.info.caps, "leases", leases.len())?;
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        if leases.iter().any(|lease| lease.issuer != self.info.issuer) {
            // A foreign lease among them: each alone, so `renew` refuses the foreign
            // ones (ForeignLease) and renews the others.
            return liveness_core::store::renew_each(self, leases).await;
        }
        // One script for the whole batch: one round trip, one server instant. The
        // command is written straight into one buffer, without a buffer per argument.
        // Leases come in runs of the same space (usually one run): per run, its expiry
        // index as a key, and its lease keys' prefix, count and leases as arguments;
        // the script derives each lease key (prefix and name, same hash slot), so a
        // lease costs the server three arguments, not five.
        let script = &scripts().renew_many;
        let mut runs: Vec<(&Space, usize)> = Vec::new();
        for lease in leases {
            let space = lease.key.space();
            match runs.last_mut() {
                Some((s, n)) if *s == space => *n += 1,
                _ => runs.push((space, 1)),
            }
        }
        let mut call = Cmd::with_capacity(
            3 + 3 * runs.len() + 3 * leases.len(),
            64 + 96 * runs.len() + 48 * leases.len(),
        );
        call.arg("EVALSHA").arg(script.get_hash()).arg(runs.len());
        for (space, _) in &runs {
            call.arg(self.keys.expiry(space));
        }
        let mut ttl_ok = Vec::with_capacity(leases.len());
        let mut rest = leases.iter();
        for (space, n) in &runs {
            call.arg(self.keys.lease_prefix(space)).arg(*n);
            for lease in rest.by_ref().take(*n) {
                let ok = self.info.caps.check_ttl(lease.ttl);
                let ttl_ms = if ok.is_ok() { lease.ttl.as_millis() } else { 0 };
                call.arg(lease.key.name().as_str())
                    .arg(lease.token.0)
                    .arg(ttl_ms);
                ttl_ok.push(ok);
            }
        }
        let codes = array("renew_many", self.run_script(script, &call).await?)?;
        if codes.len() != leases.len() {
            return Err(unexpected("renew_many", "a reply of another length"));
        }
        Ok(leases
            .iter()
            .zip(ttl_ok)
            .zip(codes)
            .map(|((lease, ok), code)| match int("renew_many", &code)? {
                1 => Ok(lease.renewed()),
                0 => ok.map(|()| lease.clone()),
                code @ -3..=-1 => Err(lost(lease, code)),
                -4 => Err(StoreLostState::of(BACKEND, lease)),
                _ => Err(unexpected("renew_many", "an unknown status")),
            })
            .collect())
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        lease.check_issuer(&self.info.issuer)?;
        let mut call = scripts().release.prepare_invoke();
        call.key(self.keys.lease(&lease.key))
            .key(self.keys.expiry(lease.key.space()))
            .key(self.keys.dead())
            .arg(lease.key.name().as_str())
            .arg(lease.token.0)
            .arg(key_text(&lease.key))
            .arg(self.info.caps.death_retention);
        Ok(int("release", &self.run(call).await?)? == 1)
    }

    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        let mut call = scripts().inspect.prepare_invoke();
        call.key(self.keys.lease(key));
        let Some(mut rec) = record("inspect", self.run(call).await?)? else {
            return Ok(None);
        };
        let mut next = || rec.next().unwrap_or(Value::Nil);
        let holder = HolderId::new(text("inspect", next())?)
            .map_err(|_| unexpected("inspect", "an invalid stored holder"))?;
        let token = FencingToken(uint("inspect", &next())?);
        let ttl = Ttl::from_millis(uint("inspect", &next())?)
            .map_err(|_| unexpected("inspect", "an invalid stored ttl"))?;
        let left = int("inspect", &next())?;
        Ok(Some(LeaseInfo {
            key: key.clone(),
            holder,
            token,
            ttl,
            status: if left > 0 {
                LeaseStatus::Live {
                    remaining: us(left),
                }
            } else {
                LeaseStatus::Expired
            },
        }))
    }

    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        let mut call = scripts().expired.prepare_invoke();
        call.key(self.keys.expiry(space))
            .arg(self.keys.lease_prefix(space))
            .arg(limit);
        let flat = array("expired", self.run(call).await?)?;
        let mut out = Vec::with_capacity(flat.len() / 3);
        let mut it = flat.into_iter();
        while let (Some(name), Some(holder), Some(token)) = (it.next(), it.next(), it.next()) {
            let name = Name::new(text("expired", name)?)
                .map_err(|_| unexpected("expired", "an invalid stored name"))?;
            out.push(ExpiredLease {
                key: Key::new(space.clone(), name),
                holder: HolderId::new(text("expired", holder)?)
                    .map_err(|_| unexpected("expired", "an invalid stored holder"))?,
                token: FencingToken(uint("expired", &token)?),
            });
        }
        Ok(out)
    }

    async fn reap(&self, key: &Key, token: FencingToken) -> Result<bool> {
        let mut call = scripts().reap.prepare_invoke();
        call.key(self.keys.lease(key))
            .key(self.keys.expiry(key.space()))
            .key(self.keys.dead())
            .arg(key.name().as_str())
            .arg(token.0)
            .arg(key_text(key))
            .arg(self.info.caps.death_retention);
        Ok(int("reap", &self.run(call).await?)? == 1)
    }

    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> Result<Vec<Result<bool>>> {
        check_batch(self.info.caps, "expired", expired.len())?;
        if expired.is_empty() {
            return Ok(Vec::new());
        }
        let mut call = scripts().reap_many.prepare_invoke();
        call.key(self.keys.dead())
            .arg(self.info.caps.death_retention);
        for (key, token) in expired {
            call.key(self.keys.lease(key))
                .key(self.keys.expiry(key.space()))
                .arg(key.name().as_str())
                .arg(token.0)
                .arg(key_text(key));
        }
        let codes = array("reap_many", self.run(call).await?)?;
        if codes.len() != expired.len() {
            return Err(unexpected("reap_many", "a reply of another length"));
        }
        Ok(codes
            .iter()
            .map(|c| int("reap_many", c).map(|c| c == 1))
            .collect())
    }

    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        let mut call = scripts().dead_tokens.prepare_invoke();
        call.key(self.keys.dead()).arg(limit);
        array("dead_tokens", self.run(call).await?)?
            .into_iter()
            .map(|member| {
                let member = text("dead_tokens", member)?;
                let (token, key) = member
                    .split_once(':')
                    .ok_or_else(|| unexpected("dead_tokens", "a member without a token"))?;
                Ok(DeadToken {
                    key: Key::parse(key)
                        .map_err(|_| unexpected("dead_tokens", "an invalid stored key"))?,
                    token: FencingToken(
                        token
                            .parse()
                            .map_err(|_| unexpected("dead_tokens", "an invalid token"))?,
                    ),
                })
            })
            .collect()
    }

    async fn members(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let Page { after, limit } = page;
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        if after.is_some_and(|k| k.space() != space) {
            return Err(Error::invalid("after", InputProblem::OtherSpace));
        }
        let mut call = scripts().members.prepare_invoke();
        call.key(self.keys.members(space))
            .arg(after.map_or_else(|| "-".to_owned(), |k| format!("({}", k.name())))
            .arg(limit)
            .arg(self.keys.lease_prefix(space));
        let flat = array("members", self.run(call).await?)?;
        let mut out = Vec::with_capacity(flat.len() / 5);
        let mut it = flat.into_iter();
        while let Some(name) = it.next() {
            let mut next = || it.next().unwrap_or(Value::Nil);
            let name = Name::new(text("members", name)?)
                .map_err(|_| unexpected("members", "an invalid stored name"))?;
            let holder = HolderId::new(text("members", next())?)
                .map_err(|_| unexpected("members", "an invalid stored holder"))?;
            let token = FencingToken(uint("members", &next())?);
            let ttl = Ttl::from_millis(uint("members", &next())?)
                .map_err(|_| unexpected("members", "an invalid stored ttl"))?;
            let left = int("members", &next())?;
            out.push(LeaseInfo {
                key: Key::new(space.clone(), name),
                holder,
                token,
                ttl,
                status: status_of(left),
            });
        }
        Ok(out)
    }

    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        let mut call = scripts().deaths.prepare_invoke();
        call.key(self.keys.death_seq())
            .arg(before.map_or_else(String::new, |b| b.to_string()))
            .arg(limit);
        let flat = array("deaths", self.run(call).await?)?;
        let mut out = Vec::with_capacity(flat.len() / 8);
        let mut it = flat.into_iter();
        while let Some(seq) = it.next() {
            let mut next = || it.next().unwrap_or(Value::Nil);
            let seq = uint("deaths", &seq)?;
            let key = Key::parse(&text("deaths", next())?)
                .map_err(|_| unexpected("deaths", "an invalid stored key"))?;
            let holder = HolderId::new(text("deaths", next())?)
                .map_err(|_| unexpected("deaths", "an invalid stored holder"))?;
            let token = FencingToken(uint("deaths", &next())?);
            let at = StoreTime::from_epoch(Duration::from_micros(uint("deaths", &next())?));
            let cause = match uint("deaths", &next())? {
                0 => DeathCause::Reaped,
                1 => DeathCause::Released,
                2 => DeathCause::Superseded,
                _ => return Err(unexpected("deaths", "an invalid stored cause")),
            };
            let (requeued, dead) = (text("deaths", next())?, text("deaths", next())?);
            let swept = if requeued.is_empty() {
                None
            } else {
                let count = |v: &str| {
                    v.parse::<u64>()
                        .map_err(|_| unexpected("deaths", "an invalid stored count"))
                };
                Some(Swept {
                    requeued: count(&requeued)?,
                    dead_lettered: count(&dead)?,
                })
            };
            out.push(DeathRecord {
                seq,
                key,
                holder,
                token,
                at,
                cause,
                swept,
            });
        }
        Ok(out)
    }

    async fn store_time(&self) -> Result<StoreTime> {
        // The counter key only routes the call to the namespace's node on a cluster
        // (each node has its own clock); the script reads no key.
        let mut call = scripts().store_time.prepare_invoke();
        call.key(self.keys.tokens());
        let now = uint("store_time", &self.run(call).await?)?;
        Ok(self.high_water.observe(Duration::from_micros(now)))
    }

    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        let mut call = scripts().next_expiry.prepare_invoke();
        call.key(self.keys.expiry(space))
            .arg(self.keys.lease_prefix(space));
        match self.run(call).await? {
            Value::Nil => Ok(None),
            v => Ok(Some(us(int("next_expiry", &v)?))),
        }
    }
}

fn item_state(op: &'static str, s: &str) -> Result<ItemState> {
    match s {
        "p" => Ok(ItemState::Pending),
        "d" => Ok(ItemState::DeadLettered),
        t => t
            .parse()
            .map(|t| ItemState::Owned(FencingToken(t)))
            .map_err(|_| unexpected(op, "an invalid item state")),
    }
}

/// Reads `{id, payload, attempts, max}` groups of a flat reply.
fn items(op: &'static str, flat: Vec<Value>) -> Result<Vec<Item>> {
    let mut out = Vec::with_capacity(flat.len() / 4);
    let mut it = flat.into_iter();
    while let (Some(id), Some(payload), Some(attempts), Some(max)) =
        (it.next(), it.next(), it.next(), it.next())
    {
        out.push(Item {
            id: ItemId(uint(op, &id)?),
            payload: bytes(op, payload)?,
            attempts: u32_(op, &attempts)?,
            max_attempts: u32_(op, &max)?,
        });
    }
    Ok(out)
}

fn ids(op: &'static str, v: Value) -> Result<Vec<ItemId>> {
    array(op, v)?
        .iter()
        .map(|id| uint(op, id).map(ItemId))
        .collect()
}

#[async_trait]
impl ItemStore for RedisStore {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        options.validate(payload, self.info.caps.max_payload)?;
        let mut call = scripts().enqueue.prepare_invoke();
        call.key(self.keys.item_ids())
            .key(self.keys.pending())
            .key(self.keys.enqueue_keys())
            .arg(self.keys.item_prefix())
            .arg(payload)
            .arg(options.max_attempts)
            .arg(options.key.map(RequestId::to_hex).unwrap_or_default());
        Ok(ItemId(uint("enqueue", &self.run(call).await?)?))
    }

    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        lease.check_issuer(&self.info.issuer)?;
        let n = self.info.caps.clamp_limit("n", n)?;
        let mut call = scripts().claim.prepare_invoke();
        call.key(self.keys.lease(&lease.key))
            .key(self.keys.pending())
            .key(self.keys.owned(lease.token))
            .key(self.keys.owned_count())
            .arg(lease.token.0)
            .arg(n)
            .arg(self.keys.item_prefix())
            .arg(req.to_hex());
        let mut flat = array("claim", self.run(call).await?)?;
        if flat.is_empty() {
            return Err(unexpected("claim", "an empty reply"));
        }
        let rest = flat.split_off(1);
        match int("claim", &flat[0])? {
            1 => items("claim", rest),
            code @ -3..=-1 => Err(lost(lease, code)),
            _ => Err(unexpected("claim", "an unknown status")),
        }
    }

    async fn complete(&self, lease: &Lease, id: ItemId) -> Result<()> {
        lease.check_issuer(&self.info.issuer)?;
        let mut call = scripts().complete.prepare_invoke();
        call.key(self.keys.item(id))
            .key(self.keys.owned(lease.token))
            .key(self.keys.owned_count())
            .arg(id.0)
            .arg(lease.token.0);
        match int("complete", &self.run(call).await?)? {
            1 => Ok(()),
            _ => Err(lease.fenced(id)),
        }
    }

    async fn fail(&self, lease: &Lease, id: ItemId, retry: bool) -> Result<ItemState> {
        lease.check_issuer(&self.info.issuer)?;
        let mut call = scripts().fail.prepare_invoke();
        call.key(self.keys.item(id))
            .key(self.keys.owned(lease.token))
            .key(self.keys.owned_count())
            .key(self.keys.pending())
            .key(self.keys.dead_letters())
            .arg(id.0)
            .arg(lease.token.0)
            .arg(if retry { "1" } else { "0" });
        match int("fail", &self.run(call).await?)? {
            1 => Ok(ItemState::Pending),
            2 => Ok(ItemState::DeadLettered),
            _ => Err(lease.fenced(id)),
        }
    }

    async fn requeue_orphans(&self, token: FencingToken) -> Result<Requeued> {
        let mut call = scripts().requeue_orphans.prepare_invoke();
        call.key(self.keys.dead())
            .key(self.keys.owned(token))
            .key(self.keys.owned_count())
            .key(self.keys.pending())
            .key(self.keys.dead_letters())
            .arg(token.0)
            .arg(self.keys.item_prefix());
        let mut parts = array("requeue_orphans", self.run(call).await?)?.into_iter();
        Ok(Requeued {
            requeued: ids("requeue_orphans", parts.next().unwrap_or(Value::Nil))?,
            dead_lettered: ids("requeue_orphans", parts.next().unwrap_or(Value::Nil))?,
        })
    }

    async fn requeue_orphans_many(&self, tokens: &[FencingToken]) -> Result<Vec<Result<Requeued>>> {
        let mut out = Vec::with_capacity(tokens.len());
        // One script per `max_batch` tokens.
        for chunk in tokens.chunks(self.info.caps.max_batch.max(1)) {
            let mut call = scripts().requeue_orphans_many.prepare_invoke();
            call.key(self.keys.dead())
                .key(self.keys.owned_count())
                .key(self.keys.pending())
                .key(self.keys.dead_letters())
                .arg(self.keys.item_prefix());
            for token in chunk {
                call.key(self.keys.owned(*token)).arg(token.0);
            }
            let answers = array("requeue_orphans_many", self.run(call).await?)?;
            if answers.len() != chunk.len() {
                return Err(unexpected(
                    "requeue_orphans_many",
                    "a reply of another length",
                ));
            }
            for answer in answers {
                out.push(array("requeue_orphans_many", answer).and_then(|parts| {
                    let mut parts = parts.into_iter();
                    Ok(Requeued {
                        requeued: ids("requeue_orphans_many", parts.next().unwrap_or(Value::Nil))?,
                        dead_lettered: ids(
                            "requeue_orphans_many",
                            parts.next().unwrap_or(Value::Nil),
                        )?,
                    })
                }));
            }
        }
        Ok(out)
    }

    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        let mut call = scripts().item.prepare_invoke();
        call.key(self.keys.item(id));
        let Some(mut rec) = record("item", self.run(call).await?)? else {
            return Ok(None);
        };
        let mut next = || rec.next().unwrap_or(Value::Nil);
        let payload = bytes("item", next())?;
        let attempts = u32_("item", &next())?;
        let max_attempts = u32_("item", &next())?;
        let state = item_state("item", &text("item", next())?)?;
        Ok(Some(ItemRecord {
            item: Item {
                id,
                payload,
                attempts,
                max_attempts,
            },
            state,
        }))
    }

    async fn item_counts(&self) -> Result<ItemCounts> {
        let mut call = scripts().item_counts.prepare_invoke();
        call.key(self.keys.pending())
            .key(self.keys.owned_count())
            .key(self.keys.dead_letters());
        let mut it = array("item_counts", self.run(call).await?)?.into_iter();
        let mut next = || -> Result<u64> { uint("item_counts", &it.next().unwrap_or(Value::Nil)) };
        Ok(ItemCounts {
            pending: next()?,
            owned: next()?,
            dead_lettered: next()?,
        })
    }

    async fn dead_letters(&self, limit: usize) -> Result<Vec<ItemRecord>> {
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        let mut call = scripts().dead_letters.prepare_invoke();
        call.key(self.keys.dead_letters())
            .arg(limit)
            .arg(self.keys.item_prefix());
        Ok(items(
            "dead_letters",
            array("dead_letters", self.run(call).await?)?,
        )?
        .into_iter()
        .map(|item| ItemRecord {
            item,
            state: ItemState::DeadLettered,
        })
        .collect())
    }

    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        let Page { after, limit } = page;
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        let mut call = scripts().items.prepare_invoke();
        let code = match state {
            ItemStateKind::Pending => {
                call.key(self.keys.pending());
                "p"
            }
            ItemStateKind::Owned => {
                call.key(self.keys.item_ids());
                "o"
            }
            ItemStateKind::DeadLettered => {
                call.key(self.keys.dead_letters());
                "d"
            }
        };
        call.arg(code)
            .arg(after.map_or(0, |id| id.0))
            .arg(limit)
            .arg(self.keys.item_prefix());
        let flat = array("items", self.run(call).await?)?;
        let mut out = Vec::with_capacity(flat.len() / 5);
        let mut it = flat.into_iter();
        while let Some(id) = it.next() {
            let mut next = || it.next().unwrap_or(Value::Nil);
            let id = ItemId(uint("items", &id)?);
            let payload = bytes("items", next())?;
            let attempts = u32::try_from(uint("items", &next())?)
                .map_err(|_| unexpected("items", "an invalid stored attempt count"))?;
            let max_attempts = u32::try_from(uint("items", &next())?)
                .map_err(|_| unexpected("items", "an invalid stored attempt limit"))?;
            let state = match text("items", next())?.as_str() {
                "p" => ItemState::Pending,
                "d" => ItemState::DeadLettered,
                owner => ItemState::Owned(FencingToken(
                    owner
                        .parse()
                        .map_err(|_| unexpected("items", "an invalid stored owner"))?,
                )),
            };
            out.push(ItemRecord {
                item: Item {
                    id,
                    payload,
                    attempts,
                    max_attempts,
                },
                state,
            });
        }
        Ok(out)
    }

    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        let mut call = scripts().retry_dead_letter.prepare_invoke();
        call.key(self.keys.item(id))
            .key(self.keys.dead_letters())
            .key(self.keys.pending())
            .arg(id.0);
        match int("retry_dead_letter", &self.run(call).await?)? {
            2 => Ok(()),
            1 => Err(Error::invalid("item", InputProblem::NotDeadLettered)),
            _ => Err(Error::invalid("item", InputProblem::NoSuchItem)),
        }
    }

    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        let mut call = scripts().retry_dead_letters.prepare_invoke();
        call.key(self.keys.dead_letters())
            .key(self.keys.pending())
            .arg(limit)
            .arg(self.keys.item_prefix());
        ids("retry_dead_letters", self.run(call).await?)
    }
}

/// A lease's status from its time left in microseconds (-1 when expired).
fn status_of(left_us: i64) -> LeaseStatus {
    if left_us > 0 {
        LeaseStatus::Live {
            remaining: Duration::from_micros(left_us.unsigned_abs()),
        }
    } else {
        LeaseStatus::Expired
    }
}

/// One multiplexed connection to a single server, reconnecting after faults.
async fn connect_single(
    config: &RedisConfig,
    root_cert: Option<Vec<u8>>,
) -> Result<ConnectionManager> {
    let client = match root_cert {
        Some(pem) => redis::Client::build_with_tls(
            config.client_url.as_str(),
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem),
            },
        ),
        None => redis::Client::open(config.client_url.as_str()),
    }
    .map_err(|e| Error::backend(BACKEND, e))?;
    let manager_config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(config.response_timeout))
        .set_connection_timeout(Some(config.connect_timeout))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(500));
    client
        .get_connection_manager_with_config(manager_config)
        .await
        .map_err(map)
}

/// A cluster connection: the slot map learnt from the seeds, one connection per node.
async fn connect_cluster(
    config: &RedisConfig,
    root_cert: Option<Vec<u8>>,
) -> Result<ClusterConnection> {
    let mut builder =
        ClusterClientBuilder::new(config.cluster_nodes.iter().map(|u| u.as_str().to_owned()))
            .connection_timeout(config.connect_timeout)
            .response_timeout(config.response_timeout)
            // No re-sends: the cluster client re-sends a request after an I/O error
            // (and after MOVED / ASK), and a script that ran before the connection broke
            // would run twice. The caller sees `Unavailable` and retries by the
            // contract's rules instead (a redirect still refreshes the slot map).
            .retries(0);
    if let Some(pem) = root_cert {
        builder = builder.certs(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem),
        });
    }
    let client = builder.build().map_err(|e| Error::backend(BACKEND, e))?;
    client.get_async_connection().await.map_err(map)
}

/// Where a handle's store is, for its [`Issuer`]: `host:port/db` of the server, or
/// `cluster:` and the sorted `host:port` of the configured nodes — no credentials, no
/// tuning parameters, so that every handle on the same server agrees.
fn location(config: &RedisConfig) -> String {
    let node = |u: &url::Url| {
        format!(
            "{}:{}",
            u.host_str().unwrap_or_default(),
            u.port_or_known_default().unwrap_or(6379)
        )
    };
    if config.cluster_nodes.is_empty() {
        let db = config.client_url.path().trim_start_matches('/');
        let db = if db.is_empty() { "0" } else { db };
        format!("{}/{db}", node(&config.client_url))
    } else {
        let mut nodes: Vec<String> = config.cluster_nodes.iter().map(node).collect();
        nodes.sort();
        nodes.dedup();
        format!("cluster:{}", nodes.join(","))
    }
}
