//! [`FdbConfig`]: which cluster and namespace, parsed from a URL.

use std::path::PathBuf;
use std::time::Duration;

use liveness_core::{Namespace, Result};

/// The URL schemes this backend serves.
pub const SCHEMES: &[&str] = &["fdb"];

const EXPECTED_URL: &str =
    "fdb:// (default cluster file) or fdb:///PATH/TO/fdb.cluster, optionally ?ns=NAME&timeout_ms=N&prefix=TEXT";

/// Options shared by every handle kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Options {
    /// The first element of the subspace tuple `(prefix, namespace)`.
    pub(crate) prefix: String,
    /// The real client's per-transaction timeout (retries included).
    pub(crate) timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            prefix: "liveness".to_owned(),
            timeout: Duration::from_secs(10),
        }
    }
}

/// Where the FoundationDB cluster is and how this handle uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FdbConfig {
    /// The cluster file; `None` for the client's default (`FDB_CLUSTER_FILE`, then
    /// `/etc/foundationdb/fdb.cluster`).
    pub cluster_file: Option<PathBuf>,
    /// The namespace this handle is scoped to (URL `?ns=`, default `default`): the
    /// subspace `(prefix, namespace)` holds all its keys.
    pub namespace: Namespace,
    pub(crate) options: Options,
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

    pub(crate) fn default_options() -> Options {
        Options::default()
    }

    /// How long one operation may take, retries included, before it fails with a
    /// retryable [`liveness_core::Error::Unavailable`] (URL `?timeout_ms=`, default 10 s).
    pub fn timeout(&self) -> Duration {
        self.options.timeout
    }

    /// The first element of the subspace tuple (URL `?prefix=`, default `liveness`).
    pub fn prefix(&self) -> &str {
        &self.options.prefix
    }

    /// Parses `fdb://` (the default cluster file) or `fdb:///abs/path/fdb.cluster`.
    ///
    /// Query parameters: `ns` (a [`Namespace`], default `default`), `timeout_ms`
    /// (at least 1, default 10000), `prefix` (non-empty, default `liveness`).
    ///
    /// Anything else (another scheme, a host, an unknown or repeated parameter, a bad
    /// value) fails with [`liveness_core::Error::InvalidInput`]: `what` is `"url"` with
    /// [`liveness_core::InputProblem::Malformed`], or `"namespace"` for a bad namespace.
    pub fn from_url(url: &str) -> Result<FdbConfig> {
        let malformed = || liveness_core::url::malformed(EXPECTED_URL);
        let parsed = url::Url::parse(url).map_err(|_| malformed())?;
        if !SCHEMES.contains(&parsed.scheme()) {
            return Err(malformed());
        }
        if parsed.host_str().is_some_and(|h| !h.is_empty()) || parsed.port().is_some() {
            return Err(malformed());
        }
        if !parsed.username().is_empty()
            || parsed.password().is_some()
            || parsed.fragment().is_some()
        {
            return Err(malformed());
        }
        let path = parsed.path();
        let cluster_file = if path.is_empty() || path == "/" {
            None
        } else {
            let decoded = percent_decode(path).ok_or_else(malformed)?;
            Some(PathBuf::from(decoded))
        };
        let mut config = FdbConfig::new(Namespace::new("default")?);
        config.cluster_file = cluster_file;
        let mut seen = Vec::new();
        for (k, v) in parsed.query_pairs() {
            if seen.contains(&k) {
                return Err(malformed());
            }
            match k.as_ref() {
                "ns" => config.namespace = Namespace::new(v.as_ref())?,
                "timeout_ms" => {
                    config.options.timeout = liveness_core::url::millis(&v, EXPECTED_URL)?
                }
                "prefix" if !v.is_empty() => config.options.prefix = v.to_string(),
                _ => return Err(malformed()),
            }
            seen.push(k);
        }
        Ok(config)
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use liveness_core::Error;

    #[test]
    fn parses_urls() {
        let c = FdbConfig::from_url("fdb://").unwrap();
        assert_eq!(c.cluster_file, None);
        assert_eq!(c.namespace.as_str(), "default");
        let c = FdbConfig::from_url("fdb:///etc/foundationdb/fdb.cluster?ns=jobs&timeout_ms=2500")
            .unwrap();
        assert_eq!(
            c.cluster_file,
            Some(PathBuf::from("/etc/foundationdb/fdb.cluster"))
        );
        assert_eq!(c.namespace.as_str(), "jobs");
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
            "not a url",
        ] {
            assert!(
                matches!(FdbConfig::from_url(bad), Err(Error::InvalidInput { .. })),
                "{bad}"
            );
        }
    }
}
