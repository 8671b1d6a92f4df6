//! [`RedisConfig`]: where the server is, which namespace, how to talk to it.

use std::path::PathBuf;
use std::time::Duration;

use liveness_core::durability::{Durability, DURABILITY};
use liveness_core::url::{
    bad_value, check_dead_letter_retention, check_key_retention, Authority, Param, UrlForm,
    DEAD_LETTER_RETENTION, KEY_RETENTION,
};
use liveness_core::{Error, InputProblem, Namespace, Result};

/// `timeout_ms`: how long one operation waits for its answer.
const TIMEOUT_MS: Param = Param::timeout_ms("timeout_ms");
/// `connect_timeout_ms`: how long one (re)connection attempt may take.
const CONNECT_TIMEOUT_MS: Param = Param::timeout_ms("connect_timeout_ms");
/// `protocol`: passed to the client.
const PROTOCOL: Param = Param::word("protocol", &["resp2", "resp3"]);
/// `cluster`: the host is a Redis Cluster node.
const CLUSTER: Param = Param::flag("cluster");
/// `seeds`: more cluster nodes, `HOST:PORT,...`.
const SEEDS: Param = Param::text("seeds");
/// `ca`: the PEM file of the CA that signed the server's certificate (`rediss://`).
const CA: Param = Param::text("ca");
/// `wait`: after every script that hands out a fencing token, `WAIT N` replicas.
const WAIT: Param = Param::number("wait", 1, 100);
/// The database, the URL's path `/db`: Redis's default `databases 16` has 0 to 15.
const DB: Param = Param::number("db", 0, 15);

/// The URL schemes this backend serves: `redis://` (plain TCP) and `rediss://` (TLS).
pub const SCHEMES: &[&str] = &["redis", "rediss"];

/// The URLs [`RedisConfig::from_url`] accepts.
pub const URL: UrlForm = UrlForm {
    schemes: SCHEMES,
    authority: Authority::OneHost,
    params: &[
        TIMEOUT_MS,
        CONNECT_TIMEOUT_MS,
        PROTOCOL,
        CLUSTER,
        SEEDS,
        CA,
        DURABILITY,
        WAIT,
        KEY_RETENTION,
        DEAD_LETTER_RETENTION,
    ],
    fragments: &["insecure"],
    expected: "redis://[user[:password]@]host[:port][/db][?ns=NAME&ca=PATH&timeout_ms=N\
               &connect_timeout_ms=N&protocol=resp2|resp3&cluster=true&seeds=HOST:PORT,...\
               &durability=strict|relaxed&wait=N&key_retention_s=N&dead_letter_retention_s=N] \
               (rediss:// for TLS, rediss://...#insecure without certificate checks)",
};

/// How to reach a Redis server and which namespace to use.
///
/// Built from a URL ([`RedisConfig::from_url`]; the crate docs' table lists the
/// parameters, their defaults and ranges):
///
/// ```text
/// redis://[user[:password]@]host[:port][/db][?ns=NAME&timeout_ms=N&...]
/// rediss://...            TLS; the server certificate is checked against the system
///                         roots, or against the PEM file given by `ca=PATH`
/// rediss://...#insecure   TLS without certificate checks (tests only)
/// redis://node:7000/?cluster=true&seeds=HOST:PORT,...   a Redis Cluster
/// ```
///
/// The password never appears in `Debug` output.
#[derive(Clone, Debug)]
pub struct RedisConfig {
    /// The URL handed to the redis client (without this crate's own parameters).
    client_url: ClientUrl,
    namespace: Namespace,
    ca: Option<CaSource>,
    response_timeout: Duration,
    connect_timeout: Duration,
    /// Redis Cluster mode: the node URLs to learn the slot map from (the URL's own
    /// node first); empty for a single server.
    cluster_nodes: Vec<ClientUrl>,
    /// Whether a server that may lose acknowledged writes is refused (the default)
    /// or accepted (`durability=relaxed`).
    durability: Durability,
    /// How many death records the namespace keeps (the newest ones).
    death_retention: usize,
    /// Whether connecting opens only a store that is there already.
    existing_only: bool,
    /// How many replicas must acknowledge a script that hands out a fencing token
    /// (`wait=N`); `None`: no `WAIT`.
    wait: Option<u32>,
    /// How long the server keeps an enqueue's idempotency key (`key_retention_s`),
    /// whole milliseconds.
    key_retention: Duration,
    /// How long the store keeps a dead letter after it was dead-lettered
    /// (`dead_letter_retention_s`), whole milliseconds.
    dead_letter_retention: Duration,
}

/// Where the root certificate for `rediss://` comes from (its `Debug` shows a PEM
/// given in memory as `<pem>`).
#[derive(Clone)]
pub(crate) enum CaSource {
    File(PathBuf),
    Pem(Vec<u8>),
}

impl std::fmt::Debug for CaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CaSource::File(path) => path.fmt(f),
            CaSource::Pem(_) => f.write_str("<pem>"),
        }
    }
}

/// A URL handed to the redis client, which may hold the password: its `Debug` shows
/// `<redacted>` in the password's place.
#[derive(Clone)]
pub(crate) struct ClientUrl(url::Url);

impl std::ops::Deref for ClientUrl {
    type Target = url::Url;

    fn deref(&self) -> &url::Url {
        &self.0
    }
}

impl std::fmt::Debug for ClientUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut shown = self.0.clone();
        if shown.password().is_some() {
            let _ = shown.set_password(Some("<redacted>"));
        }
        shown.as_str().fmt(f)
    }
}

impl RedisConfig {
    /// Parses a `redis://` or `rediss://` URL with [`URL`] (the type's docs and the
    /// README's table list the parameters and their ranges).
    ///
    /// Fails with [`Error::InvalidInput`] naming what is wrong (see
    /// [`liveness_core::url`]): another scheme, no host, an unknown, repeated or empty
    /// parameter, a number outside its range (the database `/db` is 0 to 15, named
    /// `db`), a `protocol` other than `resp2` / `resp3`, `ca` or `#insecure` without
    /// `rediss://`, `seeds` without `cluster=true` or not `HOST:PORT,...`, a database
    /// other than 0 with `cluster=true`, an invalid `ns` (`what: "namespace"`). Changes
    /// nothing and connects to nothing.
    pub fn from_url(url: &str) -> Result<RedisConfig> {
        let parsed = URL.parse(url)?;
        let tls = parsed.scheme() == "rediss";
        let db = match parsed.path() {
            "" | "/" => 0,
            path => DB.parse_number(path.strip_prefix('/').unwrap_or(path))?,
        };
        if parsed.fragment().is_some() && !tls {
            return Err(URL.malformed());
        }
        let ca = match parsed.value(CA) {
            Some(path) if !tls => {
                return Err(bad_value(
                    CA.name,
                    path,
                    "no `ca` without TLS: use rediss://".to_owned(),
                ))
            }
            path => path.map(|p| CaSource::File(PathBuf::from(p))),
        };
        let cluster = parsed.flag(CLUSTER)?.unwrap_or(false);
        // The client gets the URL without this crate's parameters (it reads only
        // `protocol`, which is checked above).
        let mut client_url = url::Url::parse(url).map_err(|_| URL.malformed())?;
        client_url.set_query(None);
        if let Some(protocol) = parsed.word(PROTOCOL)? {
            client_url
                .query_pairs_mut()
                .append_pair(PROTOCOL.name, protocol);
        }
        let cluster_nodes = match (cluster, parsed.value(SEEDS)) {
            (true, _) if db != 0 => {
                return Err(bad_value(
                    DB.name,
                    &db.to_string(),
                    "database 0 with cluster=true: a cluster has no other".to_owned(),
                ))
            }
            (true, seeds) => {
                let mut nodes = vec![ClientUrl(client_url.clone())];
                for seed in seeds.into_iter().flat_map(|s| s.split(',')) {
                    nodes.push(ClientUrl(seed_url(&client_url, seed)?));
                }
                nodes
            }
            (false, Some(seeds)) => {
                return Err(bad_value(
                    SEEDS.name,
                    seeds,
                    "no `seeds` without cluster=true".to_owned(),
                ))
            }
            (false, None) => Vec::new(),
        };
        Ok(RedisConfig {
            client_url: ClientUrl(client_url),
            namespace: parsed.namespace()?,
            ca,
            response_timeout: parsed.millis(TIMEOUT_MS)?.unwrap_or(Duration::from_secs(2)),
            connect_timeout: parsed
                .millis(CONNECT_TIMEOUT_MS)?
                .unwrap_or(Duration::from_secs(2)),
            cluster_nodes,
            durability: Durability::from_url(&parsed)?,
            death_retention: liveness_core::DEFAULT_DEATH_RETENTION,
            existing_only: false,
            wait: parsed.number(WAIT)?,
            key_retention: parsed.key_retention()?,
            dead_letter_retention: parsed.dead_letter_retention()?,
        })
    }

    /// The namespace the store will be scoped to.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The same configuration on another namespace.
    pub fn with_namespace(mut self, namespace: Namespace) -> RedisConfig {
        self.namespace = namespace;
        self
    }

    /// Trusts this PEM root certificate (instead of the system roots) for `rediss://`.
    pub fn with_root_cert_pem(mut self, pem: Vec<u8>) -> RedisConfig {
        self.ca = Some(CaSource::Pem(pem));
        self
    }

    /// How long one operation waits for its answer before failing with `Unavailable`.
    pub fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// How long one (re)connection attempt may take.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// Whether a server whose settings may lose acknowledged writes is refused
    /// ([`Durability::Strict`], the default) or accepted ([`Durability::Relaxed`]).
    pub fn durability(&self) -> Durability {
        self.durability
    }

    liveness_core::existing_only_accessors!(
        RedisConfig,
        /// The same configuration opening only a store that is there already (`true`), for
        /// readers that must never create or change anything (the namespace must have handed
        /// out a token or an item id). Nothing is created and no migration runs; a namespace
        /// the store does not hold fails to connect with [`Error::InvalidInput`] (`what:
        /// "namespace"`), naming it and, on a single server, listing the namespaces a bounded
        /// `SCAN` finds.
    );

    /// The same configuration with another response timeout (zero is `InvalidInput`).
    pub fn with_response_timeout(mut self, timeout: Duration) -> Result<RedisConfig> {
        self.response_timeout = non_zero("timeout", timeout)?;
        Ok(self)
    }

    /// The same configuration with another durability stance: [`Durability::Relaxed`]
    /// accepts a server whose settings may lose acknowledged writes (what the URL's
    /// `durability=relaxed` says).
    pub fn with_durability(mut self, durability: Durability) -> RedisConfig {
        self.durability = durability;
        self
    }

    /// The same configuration keeping another number of death records per namespace
    /// ([`OperatorStore::deaths`](liveness_core::OperatorStore::deaths); default
    /// [`DEFAULT_DEATH_RETENTION`](liveness_core::DEFAULT_DEATH_RETENTION); zero is
    /// `InvalidInput`).
    pub fn with_death_retention(mut self, keep: usize) -> Result<RedisConfig> {
        self.death_retention = non_zero("death_retention", keep)?;
        Ok(self)
    }

    /// How many replicas must acknowledge every script that hands out a fencing token
    /// (`acquire_many`, `join_session_many`, and so the single `acquire` and
    /// `join_session`, batches of one) before it answers (`wait=N`); `None` (the
    /// default): the answer does not wait for replicas.
    pub fn wait(&self) -> Option<u32> {
        self.wait
    }

    /// The same configuration waiting for `replicas` replicas after every script that
    /// hands out a fencing token (what the URL's `wait=N` says): the script is followed
    /// by `WAIT replicas T` on the same connection, `T` half the response timeout,
    /// and the call fails with `Unavailable` when fewer replicas acknowledge. Zero is
    /// `InvalidInput`.
    pub fn with_wait(mut self, replicas: u32) -> Result<RedisConfig> {
        self.wait = Some(non_zero("wait", replicas)?);
        Ok(self)
    }

    /// How long the server keeps an enqueue's idempotency key after that enqueue, by
    /// its own clock (the key's `PX` expiry), and so the store's
    /// [`Capabilities::key_retention`](liveness_core::Capabilities::key_retention):
    /// the URL's `key_retention_s`, or
    /// [`DEFAULT_KEY_RETENTION`](liveness_core::DEFAULT_KEY_RETENTION) (a day).
    pub fn key_retention(&self) -> Duration {
        self.key_retention
    }

    /// The same configuration keeping each enqueue's idempotency key for `retention`
    /// after that enqueue, by the server's clock (what the URL's `key_retention_s`
    /// says, in seconds): a keyed repeat within it answers the first enqueue's id, one
    /// after it may add a new item. Rounded up to whole milliseconds (the key's `PX`
    /// expiry), so that no key is forgotten early. Shorter than 1 s, or longer than 366 days (the
    /// URL's bound), is `InvalidInput`.
    pub fn with_key_retention(mut self, retention: Duration) -> Result<RedisConfig> {
        self.key_retention = whole_ms(check_key_retention(retention)?);
        Ok(self)
    }

    /// How long, by the server's clock, the store keeps a dead letter after it was
    /// dead-lettered, and so the store's
    /// [`Capabilities::dead_letter_retention`](liveness_core::Capabilities::dead_letter_retention):
    /// the URL's `dead_letter_retention_s`, or
    /// [`DEFAULT_DEAD_LETTER_RETENTION`](liveness_core::DEFAULT_DEAD_LETTER_RETENTION)
    /// (30 days).
    pub fn dead_letter_retention(&self) -> Duration {
        self.dead_letter_retention
    }

    /// The same configuration keeping each dead letter for `retention` after it was
    /// dead-lettered, by the server's clock (what the URL's `dead_letter_retention_s`
    /// says, in seconds): after it, a later dead-lettering in the namespace removes it
    /// (at most [`DEAD_LETTER_TRIM`](liveness_core::DEAD_LETTER_TRIM) of the oldest
    /// per call), as an operator's `cancel` would. Rounded up to whole milliseconds, so
    /// that no dead letter is removed early. Shorter than 1 s, or longer than 366 days
    /// (the URL's bound), is `InvalidInput`.
    pub fn with_dead_letter_retention(mut self, retention: Duration) -> Result<RedisConfig> {
        self.dead_letter_retention = whole_ms(check_dead_letter_retention(retention)?);
        Ok(self)
    }

    /// How long a `WAIT` may block: half the response timeout (at least 1 ms), so
    /// that its answer arrives before the response timeout fires.
    pub(crate) fn wait_timeout(&self) -> Duration {
        (self.response_timeout / 2).max(Duration::from_millis(1))
    }

    /// True for `rediss://`.
    pub fn is_tls(&self) -> bool {
        self.client_url.scheme() == "rediss"
    }

    /// True for a Redis Cluster (`cluster=true`).
    pub fn is_cluster(&self) -> bool {
        !self.cluster_nodes.is_empty()
    }

    /// The URL handed to the redis client (without this crate's own parameters).
    pub(crate) fn client_url(&self) -> &url::Url {
        &self.client_url
    }

    /// Where the root certificate for `rediss://` comes from, if not the system roots.
    pub(crate) fn ca(&self) -> Option<&CaSource> {
        self.ca.as_ref()
    }

    /// The node URLs of a Redis Cluster (the URL's own node first); empty for a
    /// single server.
    pub(crate) fn cluster_nodes(&self) -> &[ClientUrl] {
        &self.cluster_nodes
    }
}

/// `retention` rounded up to whole milliseconds (what the scripts take), so that
/// nothing is forgotten early.
fn whole_ms(retention: Duration) -> Duration {
    let ms = retention.as_nanos().div_ceil(1_000_000);
    Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
}

/// `value` for the setting `field`, or `InvalidInput` ([`InputProblem::Zero`]) when
/// it is zero (a timeout, a retention or a number of replicas of nothing).
fn non_zero<T: Default + PartialEq>(field: &'static str, value: T) -> Result<T> {
    if value == T::default() {
        return Err(Error::invalid(field, InputProblem::Zero));
    }
    Ok(value)
}

/// The URL of one more cluster seed `HOST:PORT`: the main URL's scheme, user,
/// password and parameters with another host and port.
fn seed_url(main: &url::Url, seed: &str) -> Result<url::Url> {
    let bad = || {
        bad_value(
            SEEDS.name,
            seed,
            "HOST:PORT,... (each with its port)".to_owned(),
        )
    };
    let host = URL.parse_host(seed).map_err(|_| bad())?;
    let port = host.port.ok_or_else(bad)?;
    let mut url = main.clone();
    url.set_host(Some(
        host.name.trim_start_matches('[').trim_end_matches(']'),
    ))
    .map_err(|_| bad())?;
    url.set_port(Some(port)).map_err(|_| bad())?;
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;
    use liveness_conformance::url_rules::{refused, Expect};
    use liveness_core::url::MAX_KEY_RETENTION;

    #[test]
    fn parses_namespace_and_options() {
        let c =
            RedisConfig::from_url("redis://u:pw@127.0.0.1:7000/2?ns=team_a&timeout_ms=50").unwrap();
        assert_eq!(c.namespace().as_str(), "team_a");
        assert_eq!(c.response_timeout(), Duration::from_millis(50));
        assert_eq!(c.client_url.as_str(), "redis://u:pw@127.0.0.1:7000/2");
        assert!(!format!("{c:?}").contains("pw"));
        let d = RedisConfig::from_url("redis://localhost").unwrap();
        assert_eq!(d.namespace().as_str(), "default");
        let t =
            RedisConfig::from_url("rediss://localhost:6380?ca=/tmp/ca.pem&protocol=resp3").unwrap();
        assert!(t.is_tls());
        assert_eq!(
            t.client_url.as_str(),
            "rediss://localhost:6380?protocol=resp3"
        );
    }

    #[test]
    fn cluster_urls_list_every_seed_with_the_same_credentials() {
        let c = RedisConfig::from_url(
            "rediss://u:pw@10.0.0.1:7000/?ns=a&cluster=true&seeds=10.0.0.2:7001,node-c:7002&ca=/ca.pem",
        )
        .unwrap();
        assert!(c.is_cluster());
        let nodes: Vec<&str> = c.cluster_nodes.iter().map(|u| u.as_str()).collect();
        assert_eq!(
            nodes,
            [
                "rediss://u:pw@10.0.0.1:7000/",
                "rediss://u:pw@10.0.0.2:7001/",
                "rediss://u:pw@node-c:7002/"
            ]
        );
        assert!(!format!("{c:?}").contains("pw"));
        // Every setting shows, the nodes and the PEM without what they hide.
        let pem = b"-----BEGIN CERTIFICATE-----".to_vec();
        let shown = format!("{:?}", c.with_existing_only(true).with_root_cert_pem(pem));
        assert!(!shown.contains("pw") && !shown.contains("BEGIN"), "{shown}");
        assert!(
            shown.contains("node-c:7002") && shown.contains("<pem>"),
            "{shown}"
        );
        assert!(shown.contains("existing_only: true"), "{shown}");
        assert!(!RedisConfig::from_url("redis://h?cluster=false")
            .unwrap()
            .is_cluster());
    }

    #[test]
    fn rejects_bad_urls() {
        for (bad, expect) in [
            ("", Expect::Malformed),
            ("not a url", Expect::Malformed),
            ("redis://", Expect::Malformed),
            ("redis://h#insecure", Expect::Malformed),
            ("redis://h?namespace=x", Expect::Unknown("namespace".into())),
            ("redis://h?ca=/x.pem", Expect::BadValue("ca")),
            ("redis://h?cluster=yes", Expect::BadValue("cluster")),
            ("redis://h/2?cluster=true", Expect::BadValue("db")),
            ("redis://h?seeds=h2:1", Expect::BadValue("seeds")),
            ("redis://h?cluster=true&seeds=h2", Expect::BadValue("seeds")),
            (
                "redis://h?cluster=true&seeds=h2:notaport",
                Expect::BadValue("seeds"),
            ),
            (
                "redis://h?cluster=true&seeds=:7000",
                Expect::BadValue("seeds"),
            ),
            ("redis://h?protocol=resp9", Expect::BadValue("protocol")),
            ("redis://h?timeout_ms=abc", Expect::OutOfRange("timeout_ms")),
            ("redis://h?timeout_ms=0", Expect::OutOfRange("timeout_ms")),
            ("redis://h/16", Expect::OutOfRange("db")),
            ("redis://h/x", Expect::OutOfRange("db")),
            ("postgres://h", Expect::UnknownScheme),
            ("redis://h?ns=Bad", Expect::Namespace),
        ] {
            refused(RedisConfig::from_url, bad, expect);
        }
    }

    #[test]
    fn insecure_tls_and_database_numbers() {
        assert!(RedisConfig::from_url("rediss://h#insecure")
            .unwrap()
            .is_tls());
        let c = RedisConfig::from_url("redis://h/15?protocol=RESP3").unwrap();
        assert_eq!(c.client_url.as_str(), "redis://h/15?protocol=resp3");
    }

    #[test]
    fn key_retention_is_the_url_s_seconds_or_a_day() {
        let d = RedisConfig::from_url("redis://h").unwrap();
        assert_eq!(d.key_retention(), liveness_core::DEFAULT_KEY_RETENTION);
        let c = RedisConfig::from_url("redis://h?key_retention_s=90").unwrap();
        assert_eq!(c.key_retention(), Duration::from_secs(90));
        assert_eq!(c.client_url.as_str(), "redis://h");
        for bad in [
            "redis://h?key_retention_s=0",
            "redis://h?key_retention_s=31622401",
            "redis://h?key_retention_s=1s",
        ] {
            refused(
                RedisConfig::from_url,
                bad,
                Expect::OutOfRange("key_retention_s"),
            );
        }
        let longest = RedisConfig::from_url("redis://h?key_retention_s=31622400").unwrap();
        assert_eq!(longest.key_retention(), MAX_KEY_RETENTION);
        // Whole milliseconds, rounded up: never shorter than asked.
        let fine = c
            .clone()
            .with_key_retention(Duration::from_micros(1_000_500));
        assert_eq!(fine.unwrap().key_retention(), Duration::from_millis(1001));
        assert!(c.clone().with_key_retention(Duration::ZERO).is_err());
        assert!(c
            .clone()
            .with_key_retention(Duration::from_millis(999))
            .is_err());
        assert!(c.clone().with_key_retention(MAX_KEY_RETENTION).is_ok());
        let over = MAX_KEY_RETENTION + Duration::from_nanos(1);
        assert!(c.with_key_retention(over).is_err());
    }

    #[test]
    fn dead_letter_retention_is_the_url_s_seconds_or_30_days() {
        let d = RedisConfig::from_url("redis://h").unwrap();
        assert_eq!(
            d.dead_letter_retention(),
            liveness_core::DEFAULT_DEAD_LETTER_RETENTION
        );
        assert_eq!(
            d.dead_letter_retention(),
            Duration::from_secs(30 * 24 * 3600)
        );
        let c = RedisConfig::from_url("redis://h?dead_letter_retention_s=90").unwrap();
        assert_eq!(c.dead_letter_retention(), Duration::from_secs(90));
        assert_eq!(c.key_retention(), liveness_core::DEFAULT_KEY_RETENTION);
        assert_eq!(c.client_url.as_str(), "redis://h");
        let shortest = RedisConfig::from_url("redis://h?dead_letter_retention_s=1").unwrap();
        assert_eq!(shortest.dead_letter_retention(), Duration::from_secs(1));
        for bad in [
            "redis://h?dead_letter_retention_s=0",
            "redis://h?dead_letter_retention_s=31622401",
            "redis://h?dead_letter_retention_s=-1",
            "redis://h?dead_letter_retention_s=1s",
        ] {
            refused(
                RedisConfig::from_url,
                bad,
                Expect::OutOfRange("dead_letter_retention_s"),
            );
        }
        let longest = RedisConfig::from_url("redis://h?dead_letter_retention_s=31622400").unwrap();
        assert_eq!(longest.dead_letter_retention(), MAX_KEY_RETENTION);
        // Whole milliseconds, rounded up: never shorter than asked.
        let fine = c
            .clone()
            .with_dead_letter_retention(Duration::from_micros(1_000_500));
        assert_eq!(
            fine.unwrap().dead_letter_retention(),
            Duration::from_millis(1001)
        );
        // The builder leaves the key retention alone, and the reverse.
        let both = c
            .clone()
            .with_dead_letter_retention(Duration::from_secs(7))
            .unwrap()
            .with_key_retention(Duration::from_secs(5))
            .unwrap();
        assert_eq!(both.dead_letter_retention(), Duration::from_secs(7));
        assert_eq!(both.key_retention(), Duration::from_secs(5));
        for bad in [
            Duration::ZERO,
            Duration::from_millis(999),
            MAX_KEY_RETENTION + Duration::from_nanos(1),
        ] {
            let err = c.clone().with_dead_letter_retention(bad).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::InvalidInput {
                        what: "dead_letter_retention",
                        ..
                    }
                ),
                "{bad:?}: {err:?}"
            );
        }
        assert!(c.with_dead_letter_retention(MAX_KEY_RETENTION).is_ok());
    }

    #[test]
    fn wait_counts_replicas_and_stays_out_of_the_client_url() {
        assert_eq!(RedisConfig::from_url("redis://h").unwrap().wait(), None);
        let c = RedisConfig::from_url("redis://h?wait=2&timeout_ms=800").unwrap();
        assert_eq!(c.wait(), Some(2));
        assert_eq!(c.wait_timeout(), Duration::from_millis(400));
        assert_eq!(c.client_url.as_str(), "redis://h");
        for bad in ["redis://h?wait=0", "redis://h?wait=x", "redis://h?wait=101"] {
            refused(RedisConfig::from_url, bad, Expect::OutOfRange("wait"));
        }
        assert!(c.with_wait(0).is_err());
    }
}
