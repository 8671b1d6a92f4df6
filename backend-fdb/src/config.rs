//! [`FdbConfig`]: which cluster and namespace (parsed from a URL or built with the
//! `with_*` setters), and the URL form this backend serves.

use std::path::{Path, PathBuf};
use std::time::Duration;

use liveness_core::url::{Authority, Param, UrlForm, MAX_TIMEOUT_MS};
use liveness_core::{Error, InputProblem, Namespace, Result};

/// The URL schemes this backend serves.
pub const SCHEMES: &[&str] = &["fdb"];

/// `timeout_ms`: one operation's timeout, retries included.
const TIMEOUT_MS: Param = Param::timeout_ms("timeout_ms");
/// `prefix`: the first element of the subspace tuple.
const PREFIX: Param = Param::text("prefix");

/// The URLs [`FdbConfig::from_url`] accepts.
pub const URL: UrlForm = UrlForm {
    schemes: SCHEMES,
    authority: Authority::Path,
    params: &[TIMEOUT_MS, PREFIX],
    fragments: &[],
    expected: "fdb:// (default cluster file) or fdb:///PATH/TO/fdb.cluster, \
               optionally ?ns=NAME&timeout_ms=N&prefix=TEXT",
};

/// The options a store handle runs with (what [`FdbConfig`] sets besides the cluster
/// file and the namespace; the test double's handles take them too).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Options {
    /// The first element of the subspace tuple `(prefix, namespace)`.
    pub(crate) prefix: String,
    /// The real client's per-transaction timeout (retries included).
    pub(crate) timeout: Duration,
    /// How many death records the namespace keeps (the newest ones).
    pub(crate) death_retention: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            prefix: "liveness".to_owned(),
            timeout: Duration::from_secs(10),
            death_retention: liveness_core::DEFAULT_DEATH_RETENTION,
        }
    }
}

/// Where the FoundationDB cluster is and how this handle uses it: built by
/// [`FdbConfig::new`] or [`FdbConfig::from_url`], then the `with_*` setters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FdbConfig {
    /// The cluster file; `None` for the client's default.
    cluster_file: Option<PathBuf>,
    /// The namespace: the subspace `(prefix, namespace)` holds all its keys.
    namespace: Namespace,
    options: Options,
}

impl FdbConfig {
    /// The default cluster file, on `namespace`, with the default options.
    pub fn new(namespace: Namespace) -> FdbConfig {
        FdbConfig {
            cluster_file: None,
            namespace,
            options: Options::default(),
        }
    }

    /// Parses `fdb://` (the default cluster file) or `fdb:///abs/path/fdb.cluster`
    /// with [`URL`]: query parameters `ns` (a [`Namespace`], default `default`),
    /// `timeout_ms` (1 to 600000, default 10000), `prefix` (default `liveness`).
    ///
    /// Anything else fails with [`liveness_core::Error::InvalidInput`] naming what is
    /// wrong (see [`liveness_core::url`]): another scheme, an unknown, repeated or empty
    /// parameter, a timeout outside its range, an invalid `ns` (`what: "namespace"`),
    /// and [`liveness_core::InputProblem::Malformed`] for a host or a relative path.
    pub fn from_url(url: &str) -> Result<FdbConfig> {
        let parsed = URL.parse(url)?;
        let cluster_file = match parsed.path() {
            "" | "/" => None,
            path if path.starts_with('/') => Some(PathBuf::from(path)),
            _ => return Err(URL.malformed()),
        };
        let mut config = FdbConfig::new(parsed.namespace()?);
        config.cluster_file = cluster_file;
        if let Some(timeout) = parsed.millis(TIMEOUT_MS)? {
            config.options.timeout = timeout;
        }
        if let Some(prefix) = parsed.value(PREFIX) {
            config.options.prefix = prefix.to_owned();
        }
        Ok(config)
    }

    /// The same configuration on the cluster that the cluster file at `path` names
    /// (URL path; default: the client's own choice, `FDB_CLUSTER_FILE` and then
    /// `/etc/foundationdb/fdb.cluster`).
    pub fn with_cluster_file(mut self, path: impl Into<PathBuf>) -> FdbConfig {
        self.cluster_file = Some(path.into());
        self
    }

    /// The same configuration on another namespace.
    pub fn with_namespace(mut self, namespace: Namespace) -> FdbConfig {
        self.namespace = namespace;
        self
    }

    /// The same configuration with another first element of the subspace tuple (URL
    /// `?prefix=`, default `liveness`).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> FdbConfig {
        self.options.prefix = prefix.into();
        self
    }

    /// The same configuration with another timeout for one operation, retries
    /// included (URL `?timeout_ms=`, default 10 s). The client counts it in whole
    /// milliseconds: zero is `InvalidInput` (`Zero`), under 1 ms `TooShort`, over
    /// [`MAX_TIMEOUT_MS`](liveness_core::url::MAX_TIMEOUT_MS) `TooLongDuration`, all
    /// naming `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Result<FdbConfig> {
        let (min, max) = (
            Duration::from_millis(1),
            Duration::from_millis(MAX_TIMEOUT_MS),
        );
        let problem = if timeout.is_zero() {
            InputProblem::Zero
        } else if timeout < min {
            InputProblem::TooShort { min, got: timeout }
        } else if timeout > max {
            InputProblem::TooLongDuration { max, got: timeout }
        } else {
            self.options.timeout = timeout;
            return Ok(self);
        };
        Err(Error::invalid("timeout", problem))
    }

    /// The same configuration keeping another number of death records per namespace
    /// ([`OperatorStore::deaths`](liveness_core::OperatorStore::deaths); default
    /// [`DEFAULT_DEATH_RETENTION`](liveness_core::DEFAULT_DEATH_RETENTION); zero is
    /// `InvalidInput`).
    pub fn with_death_retention(mut self, keep: usize) -> Result<FdbConfig> {
        if keep == 0 {
            return Err(Error::invalid("death_retention", InputProblem::Zero));
        }
        self.options.death_retention = keep;
        Ok(self)
    }

    /// The cluster file; `None` for the client's default (`FDB_CLUSTER_FILE`, then
    /// `/etc/foundationdb/fdb.cluster`).
    pub fn cluster_file(&self) -> Option<&Path> {
        self.cluster_file.as_deref()
    }

    /// The namespace the store handle will be scoped to (URL `?ns=`, default
    /// `default`): the subspace `(prefix, namespace)` holds all its keys.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The first element of the subspace tuple (URL `?prefix=`, default `liveness`).
    pub fn prefix(&self) -> &str {
        &self.options.prefix
    }

    /// How long one operation may take, retries included, before it fails with a
    /// retryable [`liveness_core::Error::Unavailable`] (URL `?timeout_ms=`, default 10 s).
    pub fn timeout(&self) -> Duration {
        self.options.timeout
    }

    /// How many death records the namespace keeps (the newest ones).
    pub fn death_retention(&self) -> usize {
        self.options.death_retention
    }

    /// The handle options this configuration sets (what `connect` gives the handle).
    #[cfg(feature = "native")]
    pub(crate) fn options(&self) -> &Options {
        &self.options
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let c = FdbConfig::from_url("fdb://").unwrap();
        assert_eq!(c.cluster_file(), None);
        assert_eq!(c.namespace().as_str(), "default");
        let c = FdbConfig::from_url("fdb:///etc/foundationdb/fdb.cluster?ns=jobs&timeout_ms=2500")
            .unwrap();
        assert_eq!(
            c.cluster_file(),
            Some(Path::new("/etc/foundationdb/fdb.cluster"))
        );
        assert_eq!(c.namespace().as_str(), "jobs");
        assert_eq!(c.timeout(), Duration::from_millis(2500));
        assert_eq!(
            FdbConfig::from_url("fdb://?prefix=app").unwrap().prefix(),
            "app"
        );
    }

    #[test]
    fn rejects_bad_urls() {
        for bad in [
            "redis://x",
            "fdb://host/x",
            "fdb://?ns=Bad",
            "fdb://?ns=a&ns=b",
            "fdb://?nope=1",
            "fdb://?timeout_ms=0",
            "fdb://?timeout_ms=x",
            "fdb://?prefix=",
            "fdb://?timeout_ms=600001",
            "fdb:relative/fdb.cluster",
            "fdb:///x#frag",
            "not a url",
        ] {
            assert!(
                matches!(FdbConfig::from_url(bad), Err(Error::InvalidInput { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn builds_with_setters() {
        let ns = Namespace::new("jobs").unwrap();
        let c = FdbConfig::new(Namespace::new("default").unwrap())
            .with_cluster_file("/etc/foundationdb/fdb.cluster")
            .with_namespace(ns.clone())
            .with_prefix("app")
            .with_timeout(Duration::from_millis(2500))
            .unwrap()
            .with_death_retention(7)
            .unwrap();
        assert_eq!(
            c,
            FdbConfig::from_url(
                "fdb:///etc/foundationdb/fdb.cluster?ns=jobs&timeout_ms=2500&prefix=app"
            )
            .unwrap()
            .with_death_retention(7)
            .unwrap()
        );
        assert_eq!(c.namespace(), &ns);
        assert_eq!(c.death_retention(), 7);
        for bad in [
            Duration::ZERO,
            Duration::from_micros(999),
            Duration::from_millis(MAX_TIMEOUT_MS + 1),
        ] {
            assert!(
                matches!(
                    c.clone().with_timeout(bad),
                    Err(Error::InvalidInput { what, .. }) if what == "timeout"
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(
            c.with_death_retention(0),
            Err(Error::InvalidInput { what, .. }) if what == "death_retention"
        ));
    }
}
