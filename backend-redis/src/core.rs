//! [`RedisStore`]: the handle, its connection (one server or a Redis Cluster), the
//! connect-time set-up, the round trips every operation makes, the Lua script helper
//! and the decoding of script replies into the core types.

use std::sync::Arc;
use std::time::Duration;

use liveness_core::durability::StoreLostState;
use liveness_core::{
    Capabilities, Error, ExpiredLease, FencingToken, HighWater, HolderId, Issuer, ItemId, Key,
    Lease, LeaseStatus, LostCause, Namespace, Result, StoreInfo, Ttl,
};
use redis::{Cmd, ErrorKind, Script, ScriptInvocation, ServerErrorKind, ToRedisArgs, Value};

use crate::config::RedisConfig;
use crate::conns::{check_existing, location, root_cert, Conn};
use crate::error::{corrupt, map};
use crate::keys::Keys;
use crate::signal::PendingSignal;
use crate::BACKEND;

/// The text of the Lua script `src/scripts/<name>.lua`, prefixed with the shared
/// `src/scripts/prelude.lua` and `src/scripts/prelude_declare_dead.lua`; `lua!(renewal
/// "<name>")` leaves the second out, `lua!(queues "<name>")` adds
/// `src/scripts/prelude_queues.lua` (the helpers of the scripts that meet items of
/// any queue off the hot path), `lua!(dead_letters "<name>")` adds
/// `src/scripts/prelude_dead_letters.lua` (removing a dead letter, and the expired
/// ones: the scripts that dead-letter or discard), `lua!(queues dead_letters
/// "<name>")` both. Each call of a script makes every `local function` of its prefix
/// anew (a closure each), so the renewal, the hottest script, is prefixed only with
/// what it runs, the claim, enqueue and finish scripts go without the queues'
/// helpers, and only the scripts that remove dead letters carry that code.
macro_rules! lua {
    ($name:literal) => {
        concat!(
            include_str!("scripts/prelude.lua"),
            include_str!("scripts/prelude_declare_dead.lua"),
            include_str!(concat!("scripts/", $name, ".lua")),
        )
    };
    (queues $name:literal) => {
        concat!(
            include_str!("scripts/prelude.lua"),
            include_str!("scripts/prelude_declare_dead.lua"),
            include_str!("scripts/prelude_queues.lua"),
            include_str!(concat!("scripts/", $name, ".lua")),
        )
    };
    (dead_letters $name:literal) => {
        concat!(
            include_str!("scripts/prelude.lua"),
            include_str!("scripts/prelude_declare_dead.lua"),
            include_str!("scripts/prelude_dead_letters.lua"),
            include_str!(concat!("scripts/", $name, ".lua")),
        )
    };
    (queues dead_letters $name:literal) => {
        concat!(
            include_str!("scripts/prelude.lua"),
            include_str!("scripts/prelude_declare_dead.lua"),
            include_str!("scripts/prelude_queues.lua"),
            include_str!("scripts/prelude_dead_letters.lua"),
            include_str!(concat!("scripts/", $name, ".lua")),
        )
    };
    (renewal $name:literal) => {
        concat!(
            include_str!("scripts/prelude.lua"),
            include_str!(concat!("scripts/", $name, ".lua")),
        )
    };
}

/// Declares a file's Lua scripts, `NAME = "file"` for `src/scripts/<file>.lua`
/// (each prefixed with the prelude, `NAME = renewal "file"` with its renewal part
/// only, `NAME = queues "file"` with the queues' helpers too, `NAME = dead_letters
/// "file"` with the dead letters' removal, `NAME = queues dead_letters "file"` with
/// both: see `lua!`; the file's
/// header says what it does, its `KEYS`
/// and `ARGV`), each as a `static` [`redis::Script`] hashed once per process on first
/// use, in the file of the code that runs them; and that file's `SCRIPTS`, the list
/// of them all, which [`RedisStore::connect`] loads: a script declared here is
/// loaded at connect without a second list to keep in step.
///
/// [`redis::Script`] sends `EVALSHA` and, when the server answers `NOSCRIPT` (after a
/// restart or `SCRIPT FLUSH`), loads the script and retries.
macro_rules! scripts {
    ($($vis:vis $name:ident = $($part:ident)* $file:literal),+ $(,)?) => {
        $(
            $vis static $name: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(
                || redis::Script::new($crate::core::lua!($($part)* $file)),
            );
        )+
        /// Every script this file declares, for `RedisStore::connect` to load.
        pub(crate) static SCRIPTS: &[&std::sync::LazyLock<redis::Script>] = &[$(&$name),+];
    };
}

pub(crate) use {lua, scripts};

scripts! { HELLO = "hello" }

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
///
/// Its pending signal ([`ItemStore::pending`](liveness_core::ItemStore::pending))
/// hears of items made pending by any handle on the same server and namespace, in
/// any process: the first call subscribes to the namespace's shard channel on one
/// more connection, shared by the clones and closed with the last of them.
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
    /// The pending signal, shared by the clones; it subscribes on its first use.
    pub(crate) signal: Arc<PendingSignal>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
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
        let root_cert = root_cert(&config)?;
        let mut conn = Conn::open(&config, root_cert.clone()).await?;
        let keys = Keys::new(config.namespace());
        let report = conn.durability_report(&keys.tokens()).await?;
        crate::durability::check(&report, config.durability(), config.wait())?;
        if config.existing_only() {
            check_existing(&mut conn, &keys, &config).await?;
        }
        for script in crate::all_scripts() {
            script.load_async(&mut conn).await.map_err(map)?;
        }
        // Records the server this handle talks to (the expiry epoch: see hello.lua).
        let mut hello = HELLO.prepare_invoke();
        hello.key(keys.srv());
        hello.invoke_async::<Value>(&mut conn).await.map_err(map)?;
        let signal = Arc::new(PendingSignal::new(&config, &conn, &keys, root_cert)?);
        Ok(RedisStore {
            info: StoreInfo::new(
                BACKEND,
                Capabilities::default()
                    .min_ttl(Duration::from_millis(1))
                    .max_ttl(Ttl::MAX)
                    .pushes_expiry_events(false)
                    .observer_local_expiry(false)
                    .max_batch(1000)
                    .max_payload(MAX_PAYLOAD)
                    .death_retention(config.death_retention().max(1))
                    .sessions(true)
                    .items(true)
                    .operator_views(true)
                    .delays(true)
                    .error_text(true)
                    .item_times(true)
                    .key_retention(Some(config.key_retention()))
                    .dead_letter_retention(Some(config.dead_letter_retention()))
                    .queues(true),
                Issuer::located(BACKEND, &location(&config), config.namespace().clone()),
            ),
            conn,
            keys,
            namespace: config.namespace().clone(),
            high_water: HighWater::default(),
            wait: config.wait().map(|n| (n, config.wait_timeout())),
            signal,
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

    /// Runs `call`, a script that hands out fencing tokens (`acquire_many`,
    /// `join_session_many`). With `wait=N`, the script is followed by `WAIT N T` in the
    /// same pipeline (one round trip, on the same connection, so `WAIT` counts the
    /// replicas that have the script's writes), and fewer than N acknowledgements fail
    /// the call with [`Error::Unavailable`]: the caller never holds a token a failover
    /// to one of those replicas could hand out again. The script may have run all the
    /// same, as after any `Unavailable`.
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
        left @ 2.. => Ok(lease.with_expires_in(us(left - 1))),
        code @ -3..=-1 => Err(lost(lease, code)),
        -4 => Err(StoreLostState::of(BACKEND, lease)),
        _ => Err(unexpected(op, "an unknown status")),
    }
}

/// The members a sweep of a dead session declared dead, from its flat script reply
/// `{key text, holder, token, ...}` (absent: none).
pub(crate) fn swept_members(op: &'static str, v: Value) -> Result<Vec<ExpiredLease>> {
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
        out.push(ExpiredLease::new(key, holder, token));
    }
    Ok(out)
}

/// A duration from a count of microseconds (negative counts are zero).
pub(crate) fn us(n: i64) -> Duration {
    Duration::from_micros(u64::try_from(n).unwrap_or(0))
}

/// A lease's status from its time left in microseconds (-1 when expired).
pub(crate) fn status_of(left_us: i64) -> LeaseStatus {
    LeaseStatus::with_remaining(us(left_us))
}
