//! [`PostgresConfig`]: where the store connects, and how, parsed from a URL.

use std::str::FromStr;
use std::time::Duration;

use liveness_core::durability::{Durability, DURABILITY};
use liveness_core::url::{Authority, Kind, Param, UrlForm};
#[cfg(doc)]
use liveness_core::{Error, InputProblem};
use liveness_core::{Namespace, Result};
use sqlx::postgres::PgConnectOptions;

use crate::SCHEMES;

const DEFAULT_MAX_CONNECTIONS: u32 = 16;
const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// `max_connections`: the pool's size, 1 to 256.
const MAX_CONNECTIONS: Param = Param::number("max_connections", 1, 256);
/// `acquire_timeout_ms`: how long an operation waits for a pooled connection.
const ACQUIRE_TIMEOUT_MS: Param = Param::timeout_ms("acquire_timeout_ms");
/// `notify`: LISTEN for release / reap notifications.
const NOTIFY: Param = Param::flag("notify");

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
    authority: Authority::OneHost,
    params: &[
        MAX_CONNECTIONS,
        ACQUIRE_TIMEOUT_MS,
        NOTIFY,
        DURABILITY,
        SSLMODE,
        SSLROOTCERT,
        SSLCERT,
        SSLKEY,
        APPLICATION_NAME,
    ],
    fragments: &[],
    expected: "postgres://[user[:password]@]host[:port][/database][?ns=NAME&max_connections=N\
               &acquire_timeout_ms=N&notify=true|false&durability=strict|relaxed\
               &sslmode=MODE&sslrootcert=PATH\
               &sslcert=PATH&sslkey=PATH&application_name=NAME]",
};

/// How a [`PostgresStore`](crate::PostgresStore) connects.
///
/// Parsed from a URL ([`PostgresConfig::from_url`]; the crate docs list the
/// parameters), or built by hand with [`PostgresConfig::new`] and the public fields.
#[derive(Clone, Debug)]
pub struct PostgresConfig {
    /// The namespace this store is scoped to.
    pub namespace: Namespace,
    /// The driver's connection options (host, credentials, TLS), without the
    /// namespace's `search_path`, which the store adds.
    pub connect: PgConnectOptions,
    /// The pool's maximum number of connections.
    pub max_connections: u32,
    /// How long an operation waits for a pooled connection.
    pub acquire_timeout: Duration,
    /// Whether [`wakeups`](liveness_core::LeaseStore::wakeups) listens for the
    /// notifications other handles send on release and reap.
    pub notify: bool,
    /// Whether a server whose settings may lose acknowledged commits (`fsync=off`,
    /// `synchronous_commit=off`) is refused at connect ([`Durability::Strict`], the
    /// default) or accepted with a warning ([`Durability::Relaxed`], the URL's
    /// `durability=relaxed`).
    pub durability: Durability,
    /// How many death records ([`LeaseStore::deaths`](liveness_core::LeaseStore::deaths))
    /// the namespace keeps, the newest ones (default
    /// [`DEFAULT_DEATH_RETENTION`](liveness_core::DEFAULT_DEATH_RETENTION); at least 1).
    pub death_retention: usize,
}

impl PostgresConfig {
    /// The default options on namespace `ns` for already-built driver options.
    pub fn new(connect: PgConnectOptions, namespace: Namespace) -> Self {
        PostgresConfig {
            namespace,
            connect,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
            notify: true,
            durability: Durability::Strict,
            death_retention: liveness_core::DEFAULT_DEATH_RETENTION,
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
        let mut driver_url = url::Url::parse(url).map_err(|_| URL.malformed())?;
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
            max_connections: parsed
                .number(MAX_CONNECTIONS)?
                .unwrap_or(DEFAULT_MAX_CONNECTIONS),
            acquire_timeout: parsed
                .millis(ACQUIRE_TIMEOUT_MS)?
                .unwrap_or(DEFAULT_ACQUIRE_TIMEOUT),
            notify: parsed.flag(NOTIFY)?.unwrap_or(true),
            durability: Durability::from_url(&parsed)?,
            death_retention: liveness_core::DEFAULT_DEATH_RETENTION,
        })
    }

    /// The schema that holds this namespace's tables: `liveness_<ns>`.
    pub fn schema(&self) -> String {
        format!("liveness_{}", self.namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use liveness_conformance::url_rules::{refused, Expect};

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
