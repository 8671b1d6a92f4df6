//! [`SqliteConfig`]: where the database file is and how to open it, parsed from a URL.

use std::path::PathBuf;
use std::time::Duration;

use liveness_core::url::{Authority, Param, UrlForm, MAX_TIMEOUT_MS};
#[cfg(doc)]
use liveness_core::{Error, InputProblem};
use liveness_core::{Namespace, Result};

/// The URL schemes this backend serves.
pub const SCHEMES: &[&str] = &["sqlite"];

/// `busy_timeout_ms`: 0 (fail at once when another process writes) to 10 minutes.
const BUSY_TIMEOUT_MS: Param = Param::number("busy_timeout_ms", 0, MAX_TIMEOUT_MS);
/// `synchronous`: the [`Durability`].
const SYNCHRONOUS: Param = Param::word("synchronous", &["full", "normal"]);
/// `max_connections`: 1 to 64 (writes are serialized; a few readers beside them are
/// all a pool can use).
const MAX_CONNECTIONS: Param = Param::number("max_connections", 1, 64);

/// The URLs [`SqliteConfig::from_url`] accepts.
pub const URL: UrlForm = UrlForm {
    schemes: SCHEMES,
    authority: Authority::Path,
    params: &[BUSY_TIMEOUT_MS, SYNCHRONOUS, MAX_CONNECTIONS],
    fragments: &[],
    expected: "sqlite://PATH or sqlite:///ABSOLUTE/PATH, optionally \
               ?ns=NAME&busy_timeout_ms=N&synchronous=full|normal&max_connections=N",
};

/// How durable each commit is (SQLite's `PRAGMA synchronous`, in WAL mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous=FULL`: every commit is on disk before it returns. Survives a power
    /// loss with nothing lost, so a token is never handed out twice. The default.
    #[default]
    Full,
    /// `synchronous=NORMAL`: commits survive a process crash, but a power loss or OS
    /// crash may roll back the last few transactions (tokens may then be handed out
    /// again after the reboot). Faster.
    Normal,
}

/// Where the SQLite database is and how this handle opens it.
///
/// Built from a URL with [`SqliteConfig::from_url`], or by hand with
/// [`SqliteConfig::new`] and the public fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqliteConfig {
    /// The database file. Created (with its schema) when missing.
    pub path: PathBuf,
    /// The namespace this handle is scoped to (URL `?ns=`, default `default`).
    pub namespace: Namespace,
    /// How long one operation waits for another process's write lock before it fails
    /// with a retryable [`Error::Unavailable`] (URL `?busy_timeout_ms=`, default 5 s).
    pub busy_timeout: Duration,
    /// Commit durability (URL `?synchronous=full|normal`, default full).
    pub durability: Durability,
    /// Connections in this handle's pool (URL `?max_connections=`, default 4). Writes
    /// are serialized anyway; extra connections let reads run beside a write.
    pub max_connections: u32,
    /// How many death records ([`LeaseStore::deaths`](liveness_core::LeaseStore::deaths))
    /// the namespace keeps, the newest ones (default
    /// [`DEFAULT_DEATH_RETENTION`](liveness_core::DEFAULT_DEATH_RETENTION); at least 1).
    pub death_retention: usize,
}

impl SqliteConfig {
    /// A configuration for `path` on `namespace` with the defaults.
    pub fn new(path: impl Into<PathBuf>, namespace: Namespace) -> SqliteConfig {
        SqliteConfig {
            path: path.into(),
            namespace,
            busy_timeout: Duration::from_secs(5),
            durability: Durability::Full,
            max_connections: 4,
            death_retention: liveness_core::DEFAULT_DEATH_RETENTION,
        }
    }

    /// Parses `sqlite:///abs/path/file.db?ns=NAME` (absolute path), `sqlite://file.db`
    /// or `sqlite:file.db` (relative to the working directory), with [`URL`]: the
    /// parameters and their ranges are in the README's table. The path may be
    /// percent-encoded.
    ///
    /// Checks everything before anything is opened or created. Anything else fails with
    /// [`Error::InvalidInput`] naming what is wrong (see [`liveness_core::url`]): another
    /// scheme, an unknown, repeated or empty parameter, a number outside its range, a
    /// bad word, an invalid namespace (`what: "namespace"`); and
    /// [`InputProblem::Malformed`] for an empty path, a directory (`.../`), or
    /// `:memory:`, which no second process could share.
    pub fn from_url(url: &str) -> Result<SqliteConfig> {
        let parsed = URL.parse(url)?;
        let path = parsed.path();
        if path.is_empty() || path == ":memory:" || path.ends_with('/') {
            return Err(URL.malformed());
        }
        let mut config = SqliteConfig::new(path, parsed.namespace()?);
        if let Some(timeout) = parsed.millis(BUSY_TIMEOUT_MS)? {
            config.busy_timeout = timeout;
        }
        if let Some(word) = parsed.word(SYNCHRONOUS)? {
            config.durability = match word {
                "normal" => Durability::Normal,
                _ => Durability::Full,
            };
        }
        if let Some(n) = parsed.number(MAX_CONNECTIONS)? {
            config.max_connections = n;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use liveness_conformance::url_rules::{refused, Expect};

    #[test]
    fn parses_absolute_and_relative_paths() {
        let c = SqliteConfig::from_url("sqlite:///tmp/x/live.db?ns=team_a").unwrap();
        assert_eq!(c.path, PathBuf::from("/tmp/x/live.db"));
        assert_eq!(c.namespace.as_ref(), "team_a");
        assert_eq!(c.durability, Durability::Full);

        let c = SqliteConfig::from_url("sqlite://live.db").unwrap();
        assert_eq!(c.path, PathBuf::from("live.db"));
        assert_eq!(c.namespace.as_ref(), "default");

        let c = SqliteConfig::from_url(
            "sqlite:dir/live%20one.db?synchronous=normal&busy_timeout_ms=250&max_connections=2",
        )
        .unwrap();
        assert_eq!(c.path, PathBuf::from("dir/live one.db"));
        assert_eq!(c.durability, Durability::Normal);
        assert_eq!(c.busy_timeout, Duration::from_millis(250));
        assert_eq!(c.max_connections, 2);
    }

    #[test]
    fn rejects_bad_urls() {
        for (url, expect) in [
            ("", Expect::Malformed),
            ("sqlite", Expect::Malformed),
            ("sqlite://", Expect::Malformed),
            ("sqlite:///", Expect::Malformed),
            ("sqlite://:memory:", Expect::Malformed),
            ("sqlite://x%zz.db", Expect::Malformed),
            ("sqlite://x%ff.db", Expect::Malformed),
            ("sqlite://x.db#frag", Expect::Malformed),
            ("redis://x.db", Expect::UnknownScheme),
            ("sqlite://x.db?ns", Expect::Empty("ns")),
            ("sqlite://x.db?unknown=1", Expect::Unknown("unknown".into())),
            ("sqlite://x.db?ns=a&ns=b", Expect::Repeated("ns")),
            (
                "sqlite://x.db?busy_timeout_ms=soon",
                Expect::OutOfRange("busy_timeout_ms"),
            ),
            (
                "sqlite://x.db?synchronous=off",
                Expect::BadValue("synchronous"),
            ),
            ("sqlite://x.db?ns=Bad-Name", Expect::Namespace),
            (
                "sqlite://x.db?max_connections=0",
                Expect::OutOfRange("max_connections"),
            ),
        ] {
            refused(SqliteConfig::from_url, url, expect);
        }
    }
}
