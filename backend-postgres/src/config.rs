//! [`PostgresConfig`]: where the store connects, and how, parsed from a URL.

use std::str::FromStr;
use std::time::Duration;

use liveness_core::durability::{Durability, DURABILITY};
use liveness_core::url::{
    check_dead_letter_retention, check_key_retention, Authority, Kind, Param, UrlForm,
    DEAD_LETTER_RETENTION, KEY_RETENTION,
};
use liveness_core::{Error, InputProblem, Namespace, Result};
use sqlx::postgres::PgConnectOptions;

/// The URL schemes this backend serves.
pub const SCHEMES: &[&str] = &["postgres", "postgresql"];

const DEFAULT_MAX_CONNECTIONS: u32 = 16;
const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// `max_connections`: the pool's size, 1 to 256.
const MAX_CONNECTIONS: Param = Param::number("max_connections", 1, 256);
/// `acquire_timeout_ms`: how long an operation waits for a pooled connection.
const ACQUIRE_TIMEOUT_MS: Param = Param::timeout_ms("acquire_timeout_ms");
/// `notify`: LISTEN for release / reap and pending-item notifications.
const NOTIFY: Param = Param::flag("notify");
/// `target_session_attrs`: libpq's name for "connect only to a server that takes
/// writes". The only behaviour this store has (it always writes), so the only values
/// accepted are `read-write` and `primary`; given for libpq URLs pasted as they are.
const TARGET_SESSION_ATTRS: Param = Param::word("target_session_attrs", &["read-write", "primary"]);

/// PostgreSQL's port when a host names none.
const DEFAULT_PORT: u16 = 5432;

/// The driver's (libpq's) parameters this crate passes on: the ones sqlx reads.
/// Anything sqlx would ignore (`connect_timeout`, `target_session_attrs`, ...) or that
/// would fight the store (`options` could set `search_path`; `host`, `dbname`, `user`
/// belong in the URL's own parts) is refused like any unknown parameter.
const DRIVER: &[Param] = &[SSLMODE, SSLROOTCERT, SSLCERT, SSLKEY, APPLICATION_NAME];
const SSLMODE: Param = Param::word(
    "sslmode",
    &[
        "disable",
        "allow",
        "prefer",
        "require",
        "verify-ca",
        "verify-full",
    ],
);
const SSLROOTCERT: Param = Param::text("sslrootcert");
const SSLCERT: Param = Param::text("sslcert");
const SSLKEY: Param = Param::text("sslkey");
const APPLICATION_NAME: Param = Param::text("application_name");

/// The URLs [`PostgresConfig::from_url`] accepts.
pub const URL: UrlForm = UrlForm {
    schemes: SCHEMES,
    authority: Authority::Hosts,
    params: &[
        MAX_CONNECTIONS,
        ACQUIRE_TIMEOUT_MS,
        NOTIFY,
        DURABILITY,
        KEY_RETENTION,
        DEAD_LETTER_RETENTION,
        TARGET_SESSION_ATTRS,
        SSLMODE,
        SSLROOTCERT,
        SSLCERT,
        SSLKEY,
        APPLICATION_NAME,
    ],
    fragments: &[],
    expected: "postgres://[user[:password]@]host[:port][,host[:port]...][/database]\
               [?ns=NAME&max_connections=N\
               &acquire_timeout_ms=N&notify=true|false&durability=strict|relaxed\
               &key_retention_s=N&dead_letter_retention_s=N\
               &target_session_attrs=read-write\
               &sslmode=MODE&sslrootcert=PATH\
               &sslcert=PATH&sslkey=PATH&application_name=NAME]",
};

/// How a [`PostgresStore`](crate::PostgresStore) connects.
///
/// Parsed from a URL ([`PostgresConfig::from_url`]; the crate docs list the
/// parameters), or built by hand with [`PostgresConfig::new`] and the `with_*`
/// setters; each setting has a read accessor of the same name.
#[derive(Clone, Debug)]
pub struct PostgresConfig {
    /// The namespace this store is scoped to.
    namespace: Namespace,
    /// The driver's connection options (host, credentials, TLS), without the
    /// namespace's `search_path`, which the store adds.
    connect: PgConnectOptions,
    /// Every server to connect to, in order (see [`PostgresConfig::with_hosts`]).
    hosts: Vec<(String, u16)>,
    /// The pool's maximum number of connections.
    max_connections: u32,
    /// How long an operation waits for a pooled connection.
    acquire_timeout: Duration,
    /// Whether `wakeups` and `pending` listen for NOTIFY.
    notify: bool,
    /// Whether an unsafe server is refused or accepted with a warning.
    durability: Durability,
    /// How many death records the namespace keeps.
    death_retention: usize,
    /// How long an enqueue's idempotency key is kept, by the server's clock.
    key_retention: Duration,
    /// How long a dead letter is kept after it was dead-lettered, by the server's clock.
    dead_letter_retention: Duration,
    /// Whether connecting opens only a store that is there already.
    existing_only: bool,
}

impl PostgresConfig {
    /// The default options on namespace `ns` for already-built driver options.
    pub fn new(connect: PgConnectOptions, namespace: Namespace) -> Self {
        PostgresConfig {
            namespace,
            connect,
            hosts: Vec::new(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
            notify: true,
            durability: Durability::Strict,
            death_retention: liveness_core::DEFAULT_DEATH_RETENTION,
            key_retention: liveness_core::DEFAULT_KEY_RETENTION,
            dead_letter_retention: liveness_core::DEFAULT_DEAD_LETTER_RETENTION,
            existing_only: false,
        }
    }

    /// Parses a `postgres://` or `postgresql://` URL with [`URL`]. The host is required
    /// (a Unix socket directory is given percent-encoded as the host,
    /// `postgres://%2Fvar%2Frun%2Fpostgresql/db`); the driver's own parameters that
    /// are passed on are listed in [`URL`] and the crate docs.
    ///
    /// Fails with [`Error::InvalidInput`] naming what is wrong (see
    /// [`liveness_core::url`]), before any connection is attempted: another scheme
    /// ([`InputProblem::UnknownScheme`]), no host ([`InputProblem::Malformed`]), an
    /// unknown (`namespace=`, `NS=`, `connect_timeout=`), repeated or empty parameter, a
    /// number outside its range, a bad `sslmode` or `notify`, an invalid `ns`
    /// (`what: "namespace"`).
    pub fn from_url(url: &str) -> Result<Self> {
        let parsed = URL.parse(url)?;
        let hosts = parsed
            .hosts()
            .iter()
            .map(|h| Some((h.decoded()?, h.port.unwrap_or(DEFAULT_PORT))))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| URL.malformed())?;
        let first = parsed.hosts().first().ok_or_else(|| URL.malformed())?;
        let one_host = with_one_host(url, first).ok_or_else(|| URL.malformed())?;
        let mut driver_url = url::Url::parse(&one_host).map_err(|_| URL.malformed())?;
        driver_url.set_query(None);
        for (param, value) in parsed.given() {
            if DRIVER.contains(&param) {
                let value = match param.kind {
                    Kind::Word(_) => parsed.word(param)?.unwrap_or(value),
                    _ => value,
                };
                driver_url.query_pairs_mut().append_pair(param.name, value);
            }
        }
        let connect =
            PgConnectOptions::from_str(driver_url.as_str()).map_err(|_| URL.malformed())?;
        Ok(PostgresConfig {
            namespace: parsed.namespace()?,
            connect,
            hosts: if hosts.len() > 1 { hosts } else { Vec::new() },
            max_connections: parsed
                .number(MAX_CONNECTIONS)?
                .unwrap_or(DEFAULT_MAX_CONNECTIONS),
            acquire_timeout: parsed
                .millis(ACQUIRE_TIMEOUT_MS)?
                .unwrap_or(DEFAULT_ACQUIRE_TIMEOUT),
            notify: parsed.flag(NOTIFY)?.unwrap_or(true),
            durability: Durability::from_url(&parsed)?,
            death_retention: liveness_core::DEFAULT_DEATH_RETENTION,
            key_retention: parsed.key_retention()?,
            dead_letter_retention: parsed.dead_letter_retention()?,
            existing_only: false,
        })
    }

    /// The schema that holds this namespace's tables: `liveness_<ns>`.
    pub fn schema(&self) -> String {
        format!("liveness_{}", self.namespace)
    }

    /// The namespace this store is scoped to.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The same configuration on another namespace.
    pub fn with_namespace(mut self, namespace: Namespace) -> PostgresConfig {
        self.namespace = namespace;
        self
    }

    /// The driver's connection options (host, credentials, TLS), without the
    /// namespace's `search_path`, which the store adds.
    pub fn connect(&self) -> &PgConnectOptions {
        &self.connect
    }

    /// The same configuration with other driver options (host, credentials, TLS).
    pub fn with_connect(mut self, connect: PgConnectOptions) -> PostgresConfig {
        self.connect = connect;
        self
    }

    /// Every server to connect to, in order (empty: [`PostgresConfig::connect`]'s own
    /// host).
    pub fn hosts(&self) -> &[(String, u16)] {
        &self.hosts
    }

    /// The same configuration with every server to connect to, in order, each with
    /// [`PostgresConfig::connect`]'s credentials, database and TLS (a URL's host list,
    /// `h1:5432,h2:5432`). Empty (the default of [`PostgresConfig::new`]): `connect`'s
    /// own host. With more than one, a new connection goes to the first server,
    /// starting with the last one that worked, that answers and is not in recovery (a
    /// primary, not a standby): after a failover the store follows the promoted
    /// standby by itself.
    pub fn with_hosts(mut self, hosts: Vec<(String, u16)>) -> PostgresConfig {
        self.hosts = hosts;
        self
    }

    /// The pool's maximum number of connections (default 16).
    pub fn max_connections(&self) -> u32 {
        self.max_connections
    }

    /// The same configuration with another pool size (zero is `InvalidInput`).
    pub fn with_max_connections(mut self, max: u32) -> Result<PostgresConfig> {
        self.max_connections = non_zero("max_connections", max)?;
        Ok(self)
    }

    /// How long an operation waits for a pooled connection (default 5 s).
    pub fn acquire_timeout(&self) -> Duration {
        self.acquire_timeout
    }

    /// The same configuration with another wait for a pooled connection (zero is
    /// `InvalidInput`).
    pub fn with_acquire_timeout(mut self, timeout: Duration) -> Result<PostgresConfig> {
        self.acquire_timeout = non_zero("acquire_timeout", timeout)?;
        Ok(self)
    }

    /// Whether [`wakeups`](liveness_core::LeaseStore::wakeups) and
    /// [`pending`](liveness_core::ItemStore::pending) listen for the notifications
    /// other handles send on release and reap, and when they make items pending
    /// (default true). Without it both signals tick only for this handle's own
    /// writes; the notifications are sent either way.
    pub fn notify(&self) -> bool {
        self.notify
    }

    /// The same configuration, listening for notifications (`true`) or not.
    pub fn with_notify(mut self, notify: bool) -> PostgresConfig {
        self.notify = notify;
        self
    }

    /// Whether a server whose settings may lose acknowledged commits (`fsync=off`,
    /// `synchronous_commit=off`) is refused at connect ([`Durability::Strict`], the
    /// default) or accepted with a warning ([`Durability::Relaxed`], the URL's
    /// `durability=relaxed`).
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The same configuration with another durability stance (see
    /// [`PostgresConfig::durability`]).
    pub fn with_durability(mut self, durability: Durability) -> PostgresConfig {
        self.durability = durability;
        self
    }

    liveness_core::existing_only_accessors!(
        PostgresConfig,
        /// The same configuration opening only a store that is there already (`true`), for
        /// readers that must never create or change anything (the namespace's schema
        /// `liveness_<ns>` must exist at this build's schema version). Nothing is created and
        /// no migration runs; a namespace the store does not hold fails to connect with
        /// [`Error::InvalidInput`] (`what: "namespace"`), naming it and listing the
        /// `liveness_*` schemas the database holds.
    );

    /// The same configuration keeping another number of death records per namespace
    /// (zero is `InvalidInput`).
    pub fn with_death_retention(mut self, keep: usize) -> Result<PostgresConfig> {
        self.death_retention = non_zero("death_retention", keep)?;
        Ok(self)
    }

    /// How long an enqueue's idempotency key
    /// ([`EnqueueOptions::key`](liveness_core::EnqueueOptions::key)) is kept after that
    /// enqueue, by the server's `clock_timestamp()` (URL `?key_retention_s=`, default
    /// [`DEFAULT_KEY_RETENTION`](liveness_core::DEFAULT_KEY_RETENTION), a day).
    pub fn key_retention(&self) -> Duration {
        self.key_retention
    }

    /// The same configuration keeping an enqueue's idempotency key for `retention`
    /// after that enqueue, by the server's clock: a repeat within it answers the first
    /// id, one after it adds a new item (see [`PostgresConfig::key_retention`]).
    /// Shorter than 1 s or longer than 366 days (the URL's range) is `InvalidInput`
    /// naming `key_retention`.
    pub fn with_key_retention(mut self, retention: Duration) -> Result<PostgresConfig> {
        self.key_retention = check_key_retention(retention)?;
        Ok(self)
    }

    /// How long a dead letter is kept after it was dead-lettered, by the server's
    /// `clock_timestamp()` (URL `?dead_letter_retention_s=`, default
    /// [`DEFAULT_DEAD_LETTER_RETENTION`](liveness_core::DEFAULT_DEAD_LETTER_RETENTION),
    /// 30 days): after it, a later dead-lettering in the namespace removes it, as an
    /// operator's [`cancel`](liveness_core::OperatorStore::cancel) would (see
    /// [`Capabilities::dead_letter_retention`](liveness_core::Capabilities::dead_letter_retention)).
    pub fn dead_letter_retention(&self) -> Duration {
        self.dead_letter_retention
    }

    /// The same configuration keeping a dead letter for `retention` after it was
    /// dead-lettered, by the server's clock (see
    /// [`PostgresConfig::dead_letter_retention`]). Shorter than 1 s or longer than 366
    /// days (the URL's range) is `InvalidInput` naming `dead_letter_retention`.
    pub fn with_dead_letter_retention(mut self, retention: Duration) -> Result<PostgresConfig> {
        self.dead_letter_retention = check_dead_letter_retention(retention)?;
        Ok(self)
    }

    /// The driver's options for each server to try, in order: `connect` itself when
    /// [`PostgresConfig::hosts`] is empty, else `connect` pointed at each host.
    pub(crate) fn servers(&self) -> Vec<PgConnectOptions> {
        if self.hosts.is_empty() {
            return vec![self.connect.clone()];
        }
        self.hosts
            .iter()
            .map(|(host, port)| self.connect.clone().host(host).port(*port))
            .collect()
    }
}

/// `value` for the setting `field`, or `InvalidInput` ([`InputProblem::Zero`]) when
/// it is zero (a pool size, a wait or a retention of nothing).
fn non_zero<T: Default + PartialEq>(field: &'static str, value: T) -> Result<T> {
    if value == T::default() {
        return Err(Error::invalid(field, InputProblem::Zero));
    }
    Ok(value)
}

/// `url` with its host list replaced by `first` alone (the driver parses one host).
fn with_one_host(url: &str, first: &liveness_core::url::Host) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let userinfo = authority.rfind('@').map_or("", |i| &authority[..=i]);
    let host = match first.port {
        Some(port) => format!("{}:{port}", first.name),
        None => first.name.clone(),
    };
    Some(format!("{scheme}://{userinfo}{host}{tail}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use liveness_conformance::url_rules::{refused, Expect};
    use liveness_core::url::MAX_KEY_RETENTION;

    #[test]
    fn parses_liveness_parameters() {
        let c = PostgresConfig::from_url(
            "postgres://u:p@127.0.0.1:5433/db?ns=team_a&sslmode=require&max_connections=3&notify=false",
        )
        .unwrap();
        assert_eq!(c.namespace.as_str(), "team_a");
        assert_eq!(c.max_connections, 3);
        assert!(!c.notify);
        assert_eq!(c.schema(), "liveness_team_a");
        assert_eq!(c.connect.get_port(), 5433);
        assert_eq!(c.connect.get_database(), Some("db"));
        assert_eq!(c.key_retention, liveness_core::DEFAULT_KEY_RETENTION);
        let c = PostgresConfig::from_url("postgres://h/db?key_retention_s=90").unwrap();
        assert_eq!(c.key_retention(), Duration::from_secs(90));
        let c = c.with_key_retention(Duration::from_secs(1)).unwrap();
        assert_eq!(c.key_retention(), Duration::from_secs(1));
        for bad in [Duration::from_millis(999), MAX_KEY_RETENTION * 2] {
            match c.clone().with_key_retention(bad) {
                Err(Error::InvalidInput { what, .. }) => assert_eq!(what, "key_retention"),
                other => panic!("{bad:?}: {:?}", other.map(|_| ())),
            }
        }
    }

    #[test]
    fn parses_the_dead_letter_retention() {
        let c = PostgresConfig::from_url("postgres://h/db").unwrap();
        assert_eq!(
            c.dead_letter_retention(),
            liveness_core::DEFAULT_DEAD_LETTER_RETENTION
        );
        let c = PostgresConfig::from_url("postgres://h/db?dead_letter_retention_s=90").unwrap();
        assert_eq!(c.dead_letter_retention(), Duration::from_secs(90));
        assert_eq!(c.key_retention(), liveness_core::DEFAULT_KEY_RETENTION);
        let most =
            PostgresConfig::from_url("postgres://h/db?dead_letter_retention_s=31622400").unwrap();
        assert_eq!(most.dead_letter_retention(), MAX_KEY_RETENTION);
        let c = c
            .with_dead_letter_retention(Duration::from_secs(1))
            .unwrap();
        assert_eq!(c.dead_letter_retention(), Duration::from_secs(1));
        let c = c.with_dead_letter_retention(MAX_KEY_RETENTION).unwrap();
        assert_eq!(c.dead_letter_retention(), MAX_KEY_RETENTION);
        for bad in [
            Duration::ZERO,
            Duration::from_millis(999),
            MAX_KEY_RETENTION + Duration::from_secs(1),
        ] {
            match c.clone().with_dead_letter_retention(bad) {
                Err(Error::InvalidInput { what, .. }) => {
                    assert_eq!(what, "dead_letter_retention")
                }
                other => panic!("{bad:?}: {:?}", other.map(|_| ())),
            }
        }
        assert_eq!(
            c.dead_letter_retention(),
            MAX_KEY_RETENTION,
            "left as it was"
        );
        for bad in [
            "postgres://h/db?dead_letter_retention_s=0",
            "postgres://h/db?dead_letter_retention_s=31622401",
            "postgres://h/db?dead_letter_retention_s=-1",
        ] {
            refused(
                PostgresConfig::from_url,
                bad,
                Expect::OutOfRange("dead_letter_retention_s"),
            );
        }
    }

    #[test]
    fn a_host_list_names_every_server_in_order() {
        let c = PostgresConfig::from_url(
            "postgres://u:p@10.0.0.1:5433,db2,[::1]:6000/jobs?target_session_attrs=read-write",
        )
        .unwrap();
        assert_eq!(
            c.hosts,
            [
                ("10.0.0.1".to_owned(), 5433),
                ("db2".to_owned(), 5432),
                ("::1".to_owned(), 6000)
            ]
        );
        assert_eq!(c.connect.get_host(), "10.0.0.1");
        assert_eq!(c.connect.get_database(), Some("jobs"));
        let servers = c.servers();
        assert_eq!(servers.len(), 3);
        assert_eq!(
            (servers[1].get_host(), servers[1].get_port()),
            ("db2", 5432)
        );
        assert_eq!(servers[2].get_database(), Some("jobs"));
        assert_eq!(servers[2].get_username(), "u");
        // One host: no list, the URL's own options.
        let one = PostgresConfig::from_url("postgres://u@h:5433/db").unwrap();
        assert!(one.hosts.is_empty());
        assert_eq!(one.servers().len(), 1);
        refused(
            PostgresConfig::from_url,
            "postgres://h1,h2/db?target_session_attrs=any",
            Expect::BadValue("target_session_attrs"),
        );
    }

    #[test]
    fn defaults_and_errors() {
        let c = PostgresConfig::from_url("postgresql://localhost/db").unwrap();
        assert_eq!(c.namespace.as_str(), "default");
        assert!(c.notify);
        for (bad, expect) in [
            ("redis://localhost", Expect::UnknownScheme),
            ("not a url", Expect::Malformed),
            ("postgres://h/db?ns=Bad", Expect::Namespace),
            (
                "postgres://h/db?max_connections=0",
                Expect::OutOfRange("max_connections"),
            ),
            (
                "postgres://h/db?sslmode=sometimes",
                Expect::BadValue("sslmode"),
            ),
            (
                "postgres://h/db?connect_timeout=3",
                Expect::Unknown("connect_timeout".into()),
            ),
            (
                "postgres://h/db?key_retention_s=0",
                Expect::OutOfRange("key_retention_s"),
            ),
        ] {
            refused(PostgresConfig::from_url, bad, expect);
        }
    }

    #[test]
    fn passes_the_driver_parameters_on() {
        let c = PostgresConfig::from_url(
            "postgres://u@%2Fvar%2Frun%2Fpostgresql/db?sslmode=Verify-Full&application_name=jobs",
        )
        .unwrap();
        assert_eq!(c.connect.get_application_name(), Some("jobs"));
        assert_eq!(
            c.connect
                .get_socket()
                .map(|p| p.display().to_string())
                .as_deref(),
            Some("/var/run/postgresql")
        );
        assert!(matches!(
            c.connect.get_ssl_mode(),
            sqlx::postgres::PgSslMode::VerifyFull
        ));
    }
}
