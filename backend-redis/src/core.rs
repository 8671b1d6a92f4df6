//! [`RedisStore`]: the handle, its connection (one server or a Redis Cluster), the
//! connect-time set-up, the round trips every operation makes, the Lua script helper
//! and the decoding of script replies into the core types.

use std::time::Duration;

use liveness_core::durability::StoreLostState;
use liveness_core::{
    Capabilities, Error, ExpiredLease, FencingToken, HighWater, HolderId, Issuer, ItemId, Key,
    Lease, LeaseStatus, LostCause, Namespace, Result, StoreInfo, Ttl,
};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{
    Cmd, ErrorKind, Pipeline, RedisFuture, RedisResult, Script, ScriptInvocation, ServerErrorKind,
    ToRedisArgs, Value,
};

use crate::config::{CaSource, RedisConfig};
use crate::durability::{parse_info, Report};
use crate::error::{corrupt, map};
use crate::keys::Keys;
use crate::BACKEND;

/// The text of the Lua script `src/scripts/<name>.lua`, prefixed with the shared
/// `src/scripts/prelude.lua`.
macro_rules! lua {
    ($name:literal) => {
        concat!(
            include_str!("scripts/prelude.lua"),
            include_str!(concat!("scripts/", $name, ".lua")),
        )
    };
}

/// Declares a file's Lua scripts, `NAME = "file"` for `src/scripts/<file>.lua`
/// (each prefixed with the prelude; the file's header says what it does, its `KEYS`
/// and `ARGV`), each as a `static` [`redis::Script`] hashed once per process on first
/// use, in the file of the code that runs them; and that file's `SCRIPTS`, the list
/// of them all, which [`RedisStore::connect`] loads: a script declared here is
/// loaded at connect without a second list to keep in step.
///
/// [`redis::Script`] sends `EVALSHA` and, when the server answers `NOSCRIPT` (after a
/// restart or `SCRIPT FLUSH`), loads the script and retries.
macro_rules! scripts {
    ($($vis:vis $name:ident = $file:literal),+ $(,)?) => {
        $(
            $vis static $name: std::sync::LazyLock<redis::Script> =
                std::sync::LazyLock::new(|| redis::Script::new($crate::core::lua!($file)));
        )+
        /// Every script this file declares, for `RedisStore::connect` to load.
        pub(crate) static SCRIPTS: &[&std::sync::LazyLock<redis::Script>] = &[$(&$name),+];
    };
}

pub(crate) use {lua, scripts};

scripts! { HELLO = "hello" }

/// The scripts [`RedisStore::connect`] loads onto the server before it returns, so
/// that a server that cannot run them refuses the connection and the operations find
/// them loaded: every one the crate declares, file by file.
fn all_scripts() -> impl Iterator<Item = &'static Script> {
    [
        SCRIPTS,
        crate::lease::SCRIPTS,
        crate::items::SCRIPTS,
        crate::deaths::SCRIPTS,
        crate::batch::SCRIPTS,
    ]
    .into_iter()
    .flatten()
    .map(|script| &***script)
}

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
    /// The key layout of the namespace.
    pub(crate) keys: Keys,
    namespace: Namespace,
    /// The highest store time this handle reported, so that `store_time` never goes
    /// backwards on one handle even if the server's clock is stepped back.
    pub(crate) high_water: HighWater,
    /// What the store is: the backend, its capabilities, the issuer of its leases.
    pub(crate) info: StoreInfo,
    /// `wait=N`: how many replicas must acknowledge a script that hands out a token,
    /// and how long the `WAIT` may block.
    wait: Option<(u32, Duration)>,
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

    /// What the node serving `key` says of its durability settings, for
    /// [`crate::durability::check`]: a refused `CONFIG GET` or `INFO` (renamed away,
    /// denied by an ACL) is recorded as such; a transport fault fails.
    async fn durability_report(&mut self, key: &str) -> Result<Report> {
        // A server error (unknown command, NOPERM) says this server does not let us
        // read it; a transport fault is `Unavailable` as anywhere else.
        let refused = |e: redis::RedisError| -> Result<String> {
            if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
                Err(map(e))
            } else {
                Ok(e.to_string())
            }
        };
        let mut config = redis::cmd("CONFIG");
        config
            .arg("GET")
            .arg("appendonly")
            .arg("appendfsync")
            .arg("maxmemory-policy");
        let config = match self.query_at(config, key).await {
            Ok(reply) => redis::from_redis_value(reply).map_err(|e| e.to_string()),
            Err(e) => Err(refused(e)?),
        };
        let mut info = redis::cmd("INFO");
        info.arg("persistence").arg("memory").arg("replication");
        let info = match self.query_at(info, key).await {
            Ok(reply) => redis::from_redis_value::<String>(reply)
                .map(|text| parse_info(&text))
                .map_err(|e| e.to_string()),
            Err(e) => Err(refused(e)?),
        };
        Ok(Report { config, info })
    }
}

/// Parses `url` ([`RedisConfig::from_url`]) and connects ([`RedisStore::connect`]).
///
/// Fails with [`liveness_core::Error::InvalidInput`] on a malformed URL, with
/// [`liveness_core::Error::Unavailable`] when the server cannot be reached, and with
/// [`liveness_core::Error::Backend`] when it refuses the connection (authentication,
/// TLS, a server too old for the scripts).
pub async fn connect(url: &str) -> Result<RedisStore> {
    RedisStore::connect(RedisConfig::from_url(url)?).await
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
    /// [`liveness_core::durability::UnsafeSetting`] naming it), or when it has replicas
    /// or is one (`INFO replication`) and the URL has no `wait=N`, and the config does
    /// not accept that (`durability=relaxed`). Where `CONFIG GET` is not allowed, the
    /// check judges what `INFO` shows (`aof_enabled`, `maxmemory_policy`, the
    /// replication) and logs a warning naming what it could not check
    /// (`appendfsync`); a refusal's message says it too.
    ///
    /// With [`RedisConfig::existing_only`], fails with [`Error::InvalidInput`] (`what:
    /// "namespace"`) when the namespace has handed out no token and no item id (its
    /// counter keys are absent), before anything is written; on a single server the
    /// message lists the namespaces a bounded `SCAN` finds. In a namespace that is
    /// there, its one write is the server record every handle writes on connecting
    /// (`hello.lua`), which the expiry judgement of reads depends on.
    pub async fn connect(config: RedisConfig) -> Result<RedisStore> {
        let root_cert = match config.ca() {
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
        let keys = Keys::new(config.namespace());
        let report = conn.durability_report(&keys.tokens()).await?;
        crate::durability::check(&report, config.durability(), config.wait())?;
        if config.existing_only() {
            check_existing(&mut conn, &keys, &config).await?;
        }
        for script in all_scripts() {
            script.load_async(&mut conn).await.map_err(map)?;
        }
        // Records the server this handle talks to (the expiry epoch: see hello.lua).
        let mut hello = HELLO.prepare_invoke();
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
                    death_retention: config.death_retention().max(1),
                    sessions: true,
                },
                issuer: Issuer::located(BACKEND, &location(&config), config.namespace().clone()),
            },
            conn,
            keys,
            namespace: config.namespace().clone(),
            high_water: HighWater::default(),
            wait: config.wait().map(|n| (n, config.wait_timeout())),
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
    pub(crate) fn acquired(
        &self,
        op: &'static str,
        key: &Key,
        holder: &HolderId,
        ttl: Ttl,
        reply: Value,
    ) -> Result<Lease> {
        self.taken(op, key, holder, ttl, &mut array(op, reply)?.into_iter())
    }

    /// The answer a reply of an acquire or a join leads with: `1, token`, the lease
    /// taken for `ttl`, or `0, holder, token`, `Held` by a live lease. What follows
    /// stays in `fields`.
    pub(crate) fn taken(
        &self,
        op: &'static str,
        key: &Key,
        holder: &HolderId,
        ttl: Ttl,
        fields: &mut impl Iterator<Item = Value>,
    ) -> Result<Lease> {
        let mut next = || fields.next().unwrap_or(Value::Nil);
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

    /// Runs one prepared script call on a clone of the handle's connection.
    pub(crate) async fn run(&self, call: ScriptInvocation<'_>) -> Result<Value> {
        let mut conn = self.conn.clone();
        call.invoke_async::<Value>(&mut conn).await.map_err(map)
    }

    /// Runs `call`, an `EVALSHA` of `script` built by hand; like
    /// [`ScriptInvocation::invoke_async`], loads the script and sends the call again
    /// when the server does not know it (after a restart or `SCRIPT FLUSH`).
    pub(crate) async fn run_script(&self, script: &Script, call: &Cmd) -> Result<Value> {
        let mut conn = self.conn.clone();
        match call.query_async::<Value>(&mut conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                script.load_async(&mut conn).await.map_err(map)?;
                call.query_async::<Value>(&mut conn).await.map_err(map)
            }
            answer => answer.map_err(map),
        }
    }

    /// Runs `call`, a script that hands out fencing tokens (`acquire`,
    /// `acquire_many`). With `wait=N`, the script is followed by `WAIT N T` in the same
    /// pipeline (one round trip, on the same connection, so `WAIT` counts the replicas
    /// that have the script's writes), and fewer than N acknowledgements fail the call
    /// with [`Error::Unavailable`]: the caller never holds a token a failover to one of
    /// those replicas could hand out again. The script may have run all the same, as
    /// after any `Unavailable`.
    pub(crate) async fn run_issuing(&self, script: &Script, call: ScriptCall) -> Result<Value> {
        let call = call.evalsha(script);
        let Some((replicas, timeout)) = self.wait else {
            return self.run_script(script, &call).await;
        };
        let mut pipe = redis::pipe();
        pipe.add_command(call).cmd("WAIT").arg(replicas).arg(
            u64::try_from(timeout.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
        );
        let mut conn = self.conn.clone();
        let (reply, acked): (Value, i64) = match pipe.query_async(&mut conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                script.load_async(&mut conn).await.map_err(map)?;
                pipe.query_async(&mut conn).await.map_err(map)?
            }
            answer => answer.map_err(map)?,
        };
        if acked < i64::from(replicas) {
            return Err(Error::unavailable(
                BACKEND,
                format!(
                    "wait={replicas}: {acked} replica(s) acknowledged within {timeout:?}; \
                     the token is not handed out (a failover could hand it out again)"
                ),
            ));
        }
        Ok(reply)
    }
}

/// The keys and arguments of a script call built before it is sent (keys and
/// arguments may be added in any order), for [`RedisStore::run_issuing`].
#[derive(Default)]
pub(crate) struct ScriptCall {
    keys: Vec<String>,
    args: Vec<Vec<u8>>,
}

impl ScriptCall {
    /// Adds a key.
    pub(crate) fn key(&mut self, key: String) -> &mut ScriptCall {
        self.keys.push(key);
        self
    }

    /// Adds an argument.
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut ScriptCall {
        self.args.extend(arg.to_redis_args());
        self
    }

    /// `EVALSHA` of `script` with these keys and arguments.
    fn evalsha(self, script: &Script) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash())
            .arg(self.keys.len())
            .arg(self.keys)
            .arg(self.args);
        cmd
    }
}

/// Picks rustls' `ring` provider for the process unless one is installed already
/// (another crate may have installed its own: that is fine).
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// One multiplexed connection to a single server, reconnecting after faults.
/// The most keys the namespace listing of [`check_existing`] looks at: a `SCAN` is
/// not free on a large server.
const LISTING_SCAN_LIMIT: usize = 10_000;

/// Checks, reading only, that the namespace of `keys` has handed out a token or an
/// item id: the opening of a store with [`RedisConfig::existing_only`].
async fn check_existing(conn: &mut Conn, keys: &Keys, config: &RedisConfig) -> Result<()> {
    let found: u64 = redis::cmd("EXISTS")
        .arg(keys.tokens())
        .arg(keys.item_ids())
        .query_async(conn)
        .await
        .map_err(map)?;
    if found > 0 {
        return Ok(());
    }
    let held = match conn {
        // One node of a cluster holds only its slots' namespaces: no listing.
        Conn::Cluster(_) => String::new(),
        Conn::Single(_) => format!("; it holds: {}", list_namespaces(conn).await?),
    };
    Err(Error::invalid(
        "namespace",
        liveness_core::InputProblem::BadValue {
            name: "ns",
            got: config.namespace().to_string(),
            expected: format!("a namespace the server {} holds{held}", location(config)),
        },
    ))
}

/// The namespaces with a token or item id counter that a `SCAN` of at most
/// [`LISTING_SCAN_LIMIT`] keys finds on a single server, for an error message.
async fn list_namespaces(conn: &mut Conn) -> Result<String> {
    let mut found = std::collections::BTreeSet::new();
    let mut cursor: u64 = 0;
    let mut seen = 0;
    let mut more = String::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("liveness:{*}:*")
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .map_err(map)?;
        seen += 1000;
        for key in &batch {
            let ns = key
                .strip_prefix("liveness:{")
                .and_then(|rest| rest.split_once("}:"))
                .filter(|(_, what)| matches!(*what, "tokens" | "ids"))
                .map(|(ns, _)| ns.to_owned());
            found.extend(ns);
        }
        if next == 0 {
            break;
        }
        if seen >= LISTING_SCAN_LIMIT {
            more = format!(" (and maybe more: the scan stopped after {seen} keys)");
            break;
        }
        cursor = next;
    }
    let found = if found.is_empty() {
        "none".to_owned()
    } else {
        found.into_iter().collect::<Vec<_>>().join(", ")
    };
    Ok(found + &more)
}

async fn connect_single(
    config: &RedisConfig,
    root_cert: Option<Vec<u8>>,
) -> Result<ConnectionManager> {
    let client = match root_cert {
        Some(pem) => redis::Client::build_with_tls(
            config.client_url().as_str(),
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem),
            },
        ),
        None => redis::Client::open(config.client_url().as_str()),
    }
    .map_err(|e| Error::backend(BACKEND, e))?;
    let manager_config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(config.response_timeout()))
        .set_connection_timeout(Some(config.connect_timeout()))
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
        ClusterClientBuilder::new(config.cluster_nodes().iter().map(|u| u.as_str().to_owned()))
            .connection_timeout(config.connect_timeout())
            .response_timeout(config.response_timeout())
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
    if config.cluster_nodes().is_empty() {
        let url = config.client_url();
        let db = url.path().trim_start_matches('/');
        let db = if db.is_empty() { "0" } else { db };
        format!("{}/{db}", node(url))
    } else {
        let mut nodes: Vec<String> = config.cluster_nodes().iter().map(|u| node(u)).collect();
        nodes.sort();
        nodes.dedup();
        format!("cluster:{}", nodes.join(","))
    }
}

// Arguments: how values are written into a script call.

/// A key's text (`space/name`), as the dead set and the death records keep it.
pub(crate) fn key_text(key: &Key) -> String {
    key.to_string()
}

// Decoding script replies: each reader names the operation, so a reply that does not
// parse is reported as a corrupt record of that operation.

/// A script answered something this client does not understand (a corrupt record, a
/// foreign key under the namespace's prefix, a script of another version):
/// [`liveness_core::Corrupt`], naming the operation.
pub(crate) fn unexpected(op: &'static str, problem: &'static str) -> Error {
    corrupt(format!("unexpected reply to {op}: {problem}"))
}

/// A reply as an integer (an integer reply, or a bulk string of digits).
pub(crate) fn int(op: &'static str, v: &Value) -> Result<i64> {
    match v {
        Value::Int(n) => Ok(*n),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| unexpected(op, "a number that does not parse")),
        Value::SimpleString(s) => s
            .parse()
            .map_err(|_| unexpected(op, "a number that does not parse")),
        _ => Err(unexpected(op, "expected a number")),
    }
}

/// A reply as an unsigned integer.
pub(crate) fn uint(op: &'static str, v: &Value) -> Result<u64> {
    u64::try_from(int(op, v)?).map_err(|_| unexpected(op, "a negative number"))
}

/// A reply as a u32.
pub(crate) fn u32_(op: &'static str, v: &Value) -> Result<u32> {
    u32::try_from(int(op, v)?).map_err(|_| unexpected(op, "a number out of range"))
}

/// A reply as bytes.
pub(crate) fn bytes(op: &'static str, v: Value) -> Result<Vec<u8>> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        _ => Err(unexpected(op, "expected a string")),
    }
}

/// A reply as UTF-8 text.
pub(crate) fn text(op: &'static str, v: Value) -> Result<String> {
    String::from_utf8(bytes(op, v)?).map_err(|_| unexpected(op, "a string that is not UTF-8"))
}

/// A reply as an array (nil is an empty array).
pub(crate) fn array(op: &'static str, v: Value) -> Result<Vec<Value>> {
    match v {
        Value::Array(items) | Value::Set(items) => Ok(items),
        Value::Nil => Ok(Vec::new()),
        _ => Err(unexpected(op, "expected an array")),
    }
}

/// A record reply: its fields in order, or `None` for nil (no such record).
pub(crate) fn record(op: &'static str, v: Value) -> Result<Option<std::vec::IntoIter<Value>>> {
    match v {
        Value::Nil => Ok(None),
        v => Ok(Some(array(op, v)?.into_iter())),
    }
}

/// A reply as a list of item ids.
pub(crate) fn ids(op: &'static str, v: Value) -> Result<Vec<ItemId>> {
    array(op, v)?
        .iter()
        .map(|id| uint(op, id).map(ItemId))
        .collect()
}

/// The error of a lease a script found lost, from its status code: -2 superseded,
/// -3 expired, anything else (-1) released.
pub(crate) fn lost(lease: &Lease, code: i64) -> Error {
    let reason = match code {
        -2 => LostCause::Superseded,
        -3 => LostCause::Expired,
        _ => LostCause::Released,
    };
    lease.lost(reason)
}

/// The answer of a renewal from its script code (the prelude's `renew_one`): 1
/// renewed, n >= 2 a riding member whose session has n - 1 µs left, -1..=-3 lost, -4
/// the store lost its state.
pub(crate) fn renewed(op: &'static str, lease: &Lease, code: i64) -> Result<Lease> {
    match code {
        1 => Ok(lease.renewed()),
        left @ 2.. => Ok(Lease {
            expires_in: us(left - 1),
            ..lease.clone()
        }),
        code @ -3..=-1 => Err(lost(lease, code)),
        -4 => Err(StoreLostState::of(BACKEND, lease)),
        _ => Err(unexpected(op, "an unknown status")),
    }
}

/// The members a sweep of a dead session retired, from its flat script reply
/// `{key text, holder, token, ...}` (absent: none).
pub(crate) fn retired(op: &'static str, v: Value) -> Result<Vec<ExpiredLease>> {
    if v == Value::Nil {
        return Ok(Vec::new());
    }
    let flat = array(op, v)?;
    let mut out = Vec::with_capacity(flat.len() / 3);
    let mut it = flat.into_iter();
    while let Some(key) = it.next() {
        let key =
            Key::parse(&text(op, key)?).map_err(|_| unexpected(op, "an invalid stored key"))?;
        let holder = HolderId::new(text(op, it.next().unwrap_or(Value::Nil))?)
            .map_err(|_| unexpected(op, "an invalid stored holder"))?;
        let token = FencingToken(uint(op, &it.next().unwrap_or(Value::Nil))?);
        out.push(ExpiredLease { key, holder, token });
    }
    Ok(out)
}

/// A duration from a count of microseconds (negative counts are zero).
pub(crate) fn us(n: i64) -> Duration {
    Duration::from_micros(u64::try_from(n).unwrap_or(0))
}

/// A lease's status from its time left in microseconds (-1 when expired).
pub(crate) fn status_of(left_us: i64) -> LeaseStatus {
    if left_us > 0 {
        LeaseStatus::Live {
            remaining: Duration::from_micros(left_us.unsigned_abs()),
        }
    } else {
        LeaseStatus::Expired
    }
}

#[cfg(test)]
mod tests {
    /// Every script file (but the prelude, which each one includes) is declared and
    /// loaded at connect: none is left to its first `NOSCRIPT`.
    #[test]
    fn connect_loads_every_script_file() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts");
        let files = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with(".lua") && name != "prelude.lua")
            .count();
        let mut hashes: Vec<&str> = super::all_scripts().map(|s| s.get_hash()).collect();
        hashes.sort_unstable();
        hashes.dedup();
        assert_eq!(
            hashes.len(),
            files,
            "a script file is not declared with scripts!"
        );
    }
}
