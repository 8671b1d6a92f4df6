//! [`SqliteConfig`]: where the database file is and how to open it, parsed from a URL.

use std::path::{Path, PathBuf};
use std::time::Duration;

use liveness_core::url::{
    check_dead_letter_retention, check_key_retention, Authority, Param, UrlForm,
    DEAD_LETTER_RETENTION, KEY_RETENTION, MAX_TIMEOUT_MS,
};
use liveness_core::{Error, InputProblem, Namespace, Result};

/// The URL schemes this backend serves.
pub const SCHEMES: &[&str] = &["sqlite"];

/// `busy_timeout_ms`: 0 (fail at once when another process writes) to 10 minutes.
const BUSY_TIMEOUT_MS: Param = Param::number("busy_timeout_ms", 0, MAX_TIMEOUT_MS);
/// `synchronous`: the [`Synchronous`].
const SYNCHRONOUS: Param = Param::word("synchronous", &["full", "normal"]);
/// The most connections one handle's pool may have: writes are serialized, and a few
/// readers beside them are all a pool can use.
const MAX_POOL: u32 = 64;
/// `max_connections`: 1 to [`MAX_POOL`].
const MAX_CONNECTIONS: Param = Param::number("max_connections", 1, MAX_POOL as u64);

/// The URLs [`SqliteConfig::from_url`] accepts.
pub const URL: UrlForm = UrlForm {
    schemes: SCHEMES,
    authority: Authority::Path,
    params: &[
        BUSY_TIMEOUT_MS,
        SYNCHRONOUS,
        MAX_CONNECTIONS,
        KEY_RETENTION,
        DEAD_LETTER_RETENTION,
    ],
    fragments: &[],
    expected: "sqlite://PATH or sqlite:///ABSOLUTE/PATH, optionally \
               ?ns=NAME&busy_timeout_ms=N&synchronous=full|normal&max_connections=N\
               &key_retention_s=N&dead_letter_retention_s=N",
};

/// How durable each commit is (SQLite's `PRAGMA synchronous`, in WAL mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Synchronous {
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
/// [`SqliteConfig::new`] and the `with_*` setters:
///
/// ```
/// # fn demo() -> liveness_core::Result<()> {
/// use liveness_core::Namespace;
/// use liveness_sqlite::{SqliteConfig, Synchronous};
///
/// let config = SqliteConfig::new("/var/lib/myapp/liveness.db", Namespace::new("jobs")?)
///     .with_synchronous(Synchronous::Normal)
///     .with_busy_timeout(std::time::Duration::from_millis(250))?
///     .with_max_connections(2)?;
/// assert_eq!(config.max_connections(), 2);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqliteConfig {
    path: PathBuf,
    namespace: Namespace,
    busy_timeout: Duration,
    synchronous: Synchronous,
    max_connections: u32,
    death_retention: usize,
    key_retention: Duration,
    dead_letter_retention: Duration,
    existing_only: bool,
}

impl SqliteConfig {
    /// A configuration for `path` on `namespace` with the defaults.
    pub fn new(path: impl Into<PathBuf>, namespace: Namespace) -> SqliteConfig {
        SqliteConfig {
            path: path.into(),
            namespace,
            busy_timeout: Duration::from_secs(5),
            synchronous: Synchronous::Full,
            max_connections: 4,
            death_retention: liveness_core::DEFAULT_DEATH_RETENTION,
            key_retention: liveness_core::DEFAULT_KEY_RETENTION,
            dead_letter_retention: liveness_core::DEFAULT_DEAD_LETTER_RETENTION,
            existing_only: false,
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
            config.synchronous = match word {
                "normal" => Synchronous::Normal,
                _ => Synchronous::Full,
            };
        }
        if let Some(n) = parsed.number(MAX_CONNECTIONS)? {
            config.max_connections = n;
        }
        config.key_retention = parsed.key_retention()?;
        config.dead_letter_retention = parsed.dead_letter_retention()?;
        Ok(config)
    }

    /// The same configuration on another database file. Created (with its schema) when
    /// missing.
    pub fn with_path(mut self, path: impl Into<PathBuf>) -> SqliteConfig {
        self.path = path.into();
        self
    }

    /// The same configuration on another namespace.
    pub fn with_namespace(mut self, namespace: Namespace) -> SqliteConfig {
        self.namespace = namespace;
        self
    }

    /// The same configuration with another busy timeout: how long one operation waits
    /// for another process's write lock before it fails with a retryable
    /// [`Error::Unavailable`] (zero: fail at once). Longer than 10 minutes (the URL's
    /// `busy_timeout_ms` range) is [`Error::InvalidInput`] naming `busy_timeout`.
    pub fn with_busy_timeout(mut self, timeout: Duration) -> Result<SqliteConfig> {
        let max = Duration::from_millis(MAX_TIMEOUT_MS);
        if timeout > max {
            return Err(Error::invalid(
                "busy_timeout",
                InputProblem::TooLongDuration { max, got: timeout },
            ));
        }
        self.busy_timeout = timeout;
        Ok(self)
    }

    /// The same configuration with another commit durability.
    pub fn with_synchronous(mut self, synchronous: Synchronous) -> SqliteConfig {
        self.synchronous = synchronous;
        self
    }

    /// The same configuration with another number of connections in the handle's pool.
    /// Writes are serialized anyway; extra connections let reads run beside a write.
    /// Zero, or more than 64 (the URL's `max_connections` range), is
    /// [`Error::InvalidInput`] naming `max_connections`.
    pub fn with_max_connections(mut self, n: u32) -> Result<SqliteConfig> {
        if n == 0 {
            return Err(Error::invalid("max_connections", InputProblem::Zero));
        }
        if n > MAX_POOL {
            return Err(Error::invalid(
                "max_connections",
                InputProblem::OutOfRange {
                    name: "max_connections",
                    min: 1,
                    max: u64::from(MAX_POOL),
                    got: n.to_string(),
                },
            ));
        }
        self.max_connections = n;
        Ok(self)
    }

    /// The same configuration keeping another number of death records per namespace
    /// ([`OperatorStore::deaths`](liveness_core::OperatorStore::deaths), the newest ones;
    /// default [`DEFAULT_DEATH_RETENTION`](liveness_core::DEFAULT_DEATH_RETENTION)).
    /// Zero is [`Error::InvalidInput`] naming `death_retention`.
    pub fn with_death_retention(mut self, keep: usize) -> Result<SqliteConfig> {
        if keep == 0 {
            return Err(Error::invalid("death_retention", InputProblem::Zero));
        }
        self.death_retention = keep;
        Ok(self)
    }

    /// The same configuration keeping an enqueue's idempotency key
    /// ([`EnqueueOptions::key`](liveness_core::EnqueueOptions::key)) for `retention`
    /// after that enqueue, by the store clock (default
    /// [`DEFAULT_KEY_RETENTION`](liveness_core::DEFAULT_KEY_RETENTION), a day; the URL's
    /// `key_retention_s`): a repeat within it answers the first id, one after it adds a
    /// new item. Shorter than 1 s or longer than 366 days (the URL's range) is
    /// [`Error::InvalidInput`] naming `key_retention`.
    pub fn with_key_retention(mut self, retention: Duration) -> Result<SqliteConfig> {
        self.key_retention = check_key_retention(retention)?;
        Ok(self)
    }

    /// The same configuration keeping a dead letter for `retention` after it was
    /// dead-lettered, by the store clock (default
    /// [`DEFAULT_DEAD_LETTER_RETENTION`](liveness_core::DEFAULT_DEAD_LETTER_RETENTION),
    /// 30 days; the URL's `dead_letter_retention_s`): after it, a later dead-lettering
    /// in the namespace removes it, as an operator's
    /// [`cancel`](liveness_core::OperatorStore::cancel) would
    /// ([`Capabilities::dead_letter_retention`](liveness_core::Capabilities::dead_letter_retention)).
    /// Shorter than 1 s or longer than 366 days (the URL's range) is
    /// [`Error::InvalidInput`] naming `dead_letter_retention`.
    pub fn with_dead_letter_retention(mut self, retention: Duration) -> Result<SqliteConfig> {
        self.dead_letter_retention = check_dead_letter_retention(retention)?;
        Ok(self)
    }

    /// The same configuration opening only a store that is there already (`true`), for
    /// readers that must never create or change anything: the file must exist, hold
    /// the liveness tables at this build's schema version, and hold the namespace (it
    /// has handed out a token or an item id). Nothing is created and no migration
    /// runs. The one write such a handle may make on opening is the reboot rule every
    /// handle applies: when the file was last opened under another boot of the host,
    /// its leases are expired ([`SqliteStore::connect`](crate::SqliteStore::connect)).
    ///
    /// A store that is not there fails to connect with [`Error::InvalidInput`]: a
    /// missing or unopenable file, or one without the liveness tables, names the path
    /// (`what: "path"`); a missing namespace names it and lists the namespaces the file
    /// holds (`what: "namespace"`).
    pub fn with_existing_only(mut self, existing_only: bool) -> SqliteConfig {
        self.existing_only = existing_only;
        self
    }

    /// Whether connecting opens only a store that is there already
    /// ([`SqliteConfig::with_existing_only`]; default false: the file and its schema
    /// are created when missing).
    pub fn existing_only(&self) -> bool {
        self.existing_only
    }

    /// The database file. Created (with its schema) when missing, unless
    /// [`SqliteConfig::existing_only`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The namespace the store handle will be scoped to (URL `?ns=`, default
    /// `default`).
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// How long one operation waits for another process's write lock before it fails
    /// with a retryable [`Error::Unavailable`] (URL `?busy_timeout_ms=`, default 5 s).
    pub fn busy_timeout(&self) -> Duration {
        self.busy_timeout
    }

    /// Commit durability (URL `?synchronous=full|normal`, default full).
    pub fn synchronous(&self) -> Synchronous {
        self.synchronous
    }

    /// Connections in the handle's pool (URL `?max_connections=`, default 4).
    pub fn max_connections(&self) -> u32 {
        self.max_connections
    }

    /// How many death records the namespace keeps, the newest ones (default
    /// [`DEFAULT_DEATH_RETENTION`](liveness_core::DEFAULT_DEATH_RETENTION); at least 1).
    pub fn death_retention(&self) -> usize {
        self.death_retention
    }

    /// How long an enqueue's idempotency key is kept after that enqueue, by the store
    /// clock (URL `?key_retention_s=`, default
    /// [`DEFAULT_KEY_RETENTION`](liveness_core::DEFAULT_KEY_RETENTION), a day).
    pub fn key_retention(&self) -> Duration {
        self.key_retention
    }

    /// How long a dead letter is kept after it was dead-lettered, by the store clock
    /// (URL `?dead_letter_retention_s=`, default
    /// [`DEFAULT_DEAD_LETTER_RETENTION`](liveness_core::DEFAULT_DEAD_LETTER_RETENTION),
    /// 30 days).
    pub fn dead_letter_retention(&self) -> Duration {
        self.dead_letter_retention
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use liveness_conformance::url_rules::{refused, Expect};
    use liveness_core::url::MAX_KEY_RETENTION;

    #[test]
    fn parses_absolute_and_relative_paths() {
        let c = SqliteConfig::from_url("sqlite:///tmp/x/live.db?ns=team_a").unwrap();
        assert_eq!(c.path, PathBuf::from("/tmp/x/live.db"));
        assert_eq!(c.namespace.as_ref(), "team_a");
        assert_eq!(c.synchronous, Synchronous::Full);

        let c = SqliteConfig::from_url("sqlite://live.db").unwrap();
        assert_eq!(c.path, PathBuf::from("live.db"));
        assert_eq!(c.namespace.as_ref(), "default");
        assert_eq!(c.key_retention, liveness_core::DEFAULT_KEY_RETENTION);
        assert_eq!(
            c.dead_letter_retention,
            liveness_core::DEFAULT_DEAD_LETTER_RETENTION
        );

        let c = SqliteConfig::from_url(
            "sqlite:dir/live%20one.db?synchronous=normal&busy_timeout_ms=250&max_connections=2\
             &key_retention_s=90&dead_letter_retention_s=3600",
        )
        .unwrap();
        assert_eq!(c.key_retention, Duration::from_secs(90));
        assert_eq!(c.dead_letter_retention, Duration::from_secs(3600));
        for (secs, at) in [(1, "the least"), (31_622_400, "the most")] {
            let url = format!("sqlite://x.db?dead_letter_retention_s={secs}");
            let c = SqliteConfig::from_url(&url).unwrap();
            assert_eq!(c.dead_letter_retention(), Duration::from_secs(secs), "{at}");
        }
        assert_eq!(c.path, PathBuf::from("dir/live one.db"));
        assert_eq!(c.synchronous, Synchronous::Normal);
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
            (
                "sqlite://x.db?key_retention_s=0",
                Expect::OutOfRange("key_retention_s"),
            ),
            (
                "sqlite://x.db?key_retention_s=31622401",
                Expect::OutOfRange("key_retention_s"),
            ),
            (
                "sqlite://x.db?dead_letter_retention_s=0",
                Expect::OutOfRange("dead_letter_retention_s"),
            ),
            (
                "sqlite://x.db?dead_letter_retention_s=31622401",
                Expect::OutOfRange("dead_letter_retention_s"),
            ),
            (
                "sqlite://x.db?dead_letter_retention_s=1&dead_letter_retention_s=2",
                Expect::Repeated("dead_letter_retention_s"),
            ),
        ] {
            refused(SqliteConfig::from_url, url, expect);
        }
    }

    #[test]
    fn builder_sets_and_checks_fields() {
        let ns = Namespace::new("team_b").unwrap();
        let c = SqliteConfig::new("a.db", Namespace::new("team_a").unwrap())
            .with_path("b.db")
            .with_namespace(ns.clone())
            .with_synchronous(Synchronous::Normal)
            .with_busy_timeout(Duration::ZERO)
            .unwrap()
            .with_max_connections(64)
            .unwrap()
            .with_death_retention(1)
            .unwrap()
            .with_key_retention(Duration::from_secs(1))
            .unwrap()
            .with_dead_letter_retention(Duration::from_secs(2))
            .unwrap();
        assert_eq!(c.path(), Path::new("b.db"));
        assert_eq!(c.namespace(), &ns);
        assert_eq!(c.synchronous(), Synchronous::Normal);
        assert_eq!(c.busy_timeout(), Duration::ZERO);
        assert_eq!(c.max_connections(), 64);
        assert_eq!(c.death_retention(), 1);
        assert_eq!(c.key_retention(), Duration::from_secs(1));
        assert_eq!(c.dead_letter_retention(), Duration::from_secs(2));
        assert!(!c.existing_only());
        assert!(c.clone().with_existing_only(true).existing_only());

        let bad = |r: Result<SqliteConfig>, field: &str| match r {
            Err(Error::InvalidInput { what, .. }) => assert_eq!(what, field),
            other => panic!("{field}: expected InvalidInput, got {other:?}"),
        };
        let c = SqliteConfig::new("a.db", ns);
        bad(c.clone().with_max_connections(0), "max_connections");
        bad(c.clone().with_max_connections(65), "max_connections");
        bad(c.clone().with_death_retention(0), "death_retention");
        bad(
            c.clone().with_key_retention(Duration::from_millis(999)),
            "key_retention",
        );
        bad(
            c.clone()
                .with_key_retention(MAX_KEY_RETENTION + Duration::from_secs(1)),
            "key_retention",
        );
        bad(
            c.clone().with_dead_letter_retention(Duration::ZERO),
            "dead_letter_retention",
        );
        bad(
            c.clone()
                .with_dead_letter_retention(Duration::from_millis(999)),
            "dead_letter_retention",
        );
        bad(
            c.clone()
                .with_dead_letter_retention(MAX_KEY_RETENTION + Duration::from_secs(1)),
            "dead_letter_retention",
        );
        bad(
            c.with_busy_timeout(Duration::from_millis(MAX_TIMEOUT_MS + 1)),
            "busy_timeout",
        );
    }
}
