//! [`PostgresConfig`]: where the store connects, and how, parsed from a URL.

use std::str::FromStr;
use std::time::Duration;

use liveness_core::{Error, InputProblem, Namespace, Result};
use sqlx::postgres::PgConnectOptions;

use crate::SCHEMES;

const DEFAULT_MAX_CONNECTIONS: u32 = 16;
const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// How a [`PostgresStore`](crate::PostgresStore) connects.
///
/// Parsed from a libpq-style URL:
///
/// ```text
/// postgres://USER:PASSWORD@HOST:PORT/DATABASE?ns=NAME&sslmode=require&max_connections=32
/// ```
///
/// Every parameter PostgreSQL's own URLs take (`sslmode`, `sslrootcert`,
/// `application_name`, ...) is passed to the driver. The liveness parameters are
/// taken out first:
///
/// | parameter | default | meaning |
/// | --- | --- | --- |
/// | `ns` | `default` | the namespace: tables live in schema `liveness_<ns>` |
/// | `max_connections` | 16 | the pool's size |
/// | `acquire_timeout_ms` | 5000 | how long an operation waits for a pooled connection before failing with `Unavailable` |
/// | `notify` | `true` | LISTEN for release/reap notifications to wake checkers early |
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
}

fn malformed(expected: &'static str) -> Error {
    liveness_core::url::malformed(expected)
}

fn flag(v: &str) -> Option<bool> {
    match v {
        "true" | "1" | "on" => Some(true),
        "false" | "0" | "off" => Some(false),
        _ => None,
    }
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
        }
    }

    /// Parses a `postgres://` or `postgresql://` URL.
    ///
    /// Fails with `InvalidInput` (`Malformed`) on an unparsable URL or parameter,
    /// `UnknownScheme` on another scheme, and the namespace's own error on an
    /// invalid `ns`.
    pub fn from_url(url: &str) -> Result<Self> {
        let mut parsed = url::Url::parse(url)
            .map_err(|_| malformed("a postgres://user:password@host:port/db URL"))?;
        if !SCHEMES.contains(&parsed.scheme()) {
            return Err(Error::invalid(
                "url",
                InputProblem::UnknownScheme {
                    scheme: parsed.scheme().to_owned(),
                    known: SCHEMES.to_vec(),
                },
            ));
        }
        let mut namespace = None;
        let mut max_connections = DEFAULT_MAX_CONNECTIONS;
        let mut acquire_timeout = DEFAULT_ACQUIRE_TIMEOUT;
        let mut notify = true;
        let mut rest: Vec<(String, String)> = Vec::new();
        for (k, v) in parsed.query_pairs() {
            match k.as_ref() {
                "ns" => namespace = Some(Namespace::new(v.as_ref())?),
                "max_connections" => {
                    max_connections = v
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| malformed("max_connections=a positive integer"))?;
                }
                "acquire_timeout_ms" => {
                    acquire_timeout =
                        liveness_core::url::millis(&v, "acquire_timeout_ms=a positive integer")?;
                }
                "notify" => {
                    notify = flag(&v).ok_or_else(|| malformed("notify=true or notify=false"))?;
                }
                _ => rest.push((k.into_owned(), v.into_owned())),
            }
        }
        if rest.is_empty() {
            parsed.set_query(None);
        } else {
            parsed.query_pairs_mut().clear().extend_pairs(rest);
        }
        let connect = PgConnectOptions::from_str(parsed.as_str()).map_err(|_| {
            malformed("a postgres://user:password@host:port/db URL with valid parameters")
        })?;
        let namespace = match namespace {
            Some(ns) => ns,
            None => Namespace::new("default")?,
        };
        Ok(PostgresConfig {
            namespace,
            connect,
            max_connections,
            acquire_timeout,
            notify,
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
        assert!(matches!(
            PostgresConfig::from_url("redis://localhost"),
            Err(Error::InvalidInput {
                problem: InputProblem::UnknownScheme { .. },
                ..
            })
        ));
        assert!(matches!(
            PostgresConfig::from_url("not a url"),
            Err(Error::InvalidInput {
                problem: InputProblem::Malformed { .. },
                ..
            })
        ));
        assert!(PostgresConfig::from_url("postgres://h/db?ns=Bad").is_err());
        assert!(PostgresConfig::from_url("postgres://h/db?max_connections=0").is_err());
        assert!(PostgresConfig::from_url("postgres://h/db?sslmode=sometimes").is_err());
    }
}
