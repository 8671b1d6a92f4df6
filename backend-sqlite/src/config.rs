//! [`SqliteConfig`]: where the database file is and how to open it, parsed from a URL.

use std::path::PathBuf;
use std::time::Duration;

use liveness_core::{Error, InputProblem, Namespace, Result};

/// The URL schemes this backend serves.
pub const SCHEMES: &[&str] = &["sqlite"];

const EXPECTED_URL: &str =
    "sqlite://PATH or sqlite:///ABSOLUTE/PATH, optionally ?ns=NAME&busy_timeout_ms=N&synchronous=full|normal&max_connections=N";

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
        }
    }

    /// Parses `sqlite:///abs/path/file.db?ns=NAME` (absolute path), `sqlite://file.db`
    /// or `sqlite:file.db` (relative to the working directory).
    ///
    /// Query parameters: `ns` (a [`Namespace`], default `default`), `busy_timeout_ms`
    /// (default 5000), `synchronous` (`full`, the default, or `normal`),
    /// `max_connections` (default 4). The path may be percent-encoded.
    ///
    /// Anything else (another scheme, an empty path, `:memory:` — which no second
    /// process could share — an unknown or repeated parameter, a bad value) fails with
    /// [`Error::InvalidInput`]: `what` is `"url"` with [`InputProblem::Malformed`], or
    /// `"namespace"` for a bad namespace.
    pub fn from_url(url: &str) -> Result<SqliteConfig> {
        let malformed = || {
            Error::invalid(
                "url",
                InputProblem::Malformed {
                    expected: EXPECTED_URL,
                },
            )
        };
        let (scheme, rest) = url.split_once(':').ok_or_else(malformed)?;
        if !SCHEMES.iter().any(|s| s.eq_ignore_ascii_case(scheme)) {
            return Err(malformed());
        }
        let rest = rest.strip_prefix("//").unwrap_or(rest);
        if rest.contains('#') {
            return Err(malformed());
        }
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (rest, None),
        };
        let path = percent_decode(path).ok_or_else(malformed)?;
        if path.is_empty() || path == ":memory:" || path.ends_with('/') {
            return Err(malformed());
        }
        let mut config =
            SqliteConfig::new(path, Namespace::new("default").map_err(|_| malformed())?);
        let mut seen: Vec<String> = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            if pair.is_empty() {
                continue;
            }
            let (k, v) = pair.split_once('=').ok_or_else(malformed)?;
            let v = percent_decode(v).ok_or_else(malformed)?;
            if seen.iter().any(|s| s == k) {
                return Err(malformed());
            }
            seen.push(k.to_owned());
            match k {
                "ns" => config.namespace = Namespace::new(v)?,
                "busy_timeout_ms" => {
                    let ms: u64 = v.parse().map_err(|_| malformed())?;
                    config.busy_timeout = Duration::from_millis(ms);
                }
                "synchronous" => {
                    config.durability = match v.to_ascii_lowercase().as_str() {
                        "full" => Durability::Full,
                        "normal" => Durability::Normal,
                        _ => return Err(malformed()),
                    }
                }
                "max_connections" => {
                    let n: u32 = v.parse().map_err(|_| malformed())?;
                    if n == 0 {
                        return Err(Error::invalid("max_connections", InputProblem::Zero));
                    }
                    config.max_connections = n;
                }
                _ => return Err(malformed()),
            }
        }
        Ok(config)
    }
}

/// Decodes `%XX` escapes; `None` on a bad escape or a result that is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn malformed(url: &str) -> bool {
        matches!(
            SqliteConfig::from_url(url),
            Err(Error::InvalidInput {
                what: "url",
                problem: InputProblem::Malformed { .. }
            })
        )
    }

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
        for url in [
            "",
            "sqlite",
            "sqlite://",
            "sqlite:///",
            "sqlite://:memory:",
            "redis://x.db",
            "sqlite://x.db?ns",
            "sqlite://x.db?unknown=1",
            "sqlite://x.db?ns=a&ns=b",
            "sqlite://x.db?busy_timeout_ms=soon",
            "sqlite://x.db?synchronous=off",
            "sqlite://x%zz.db",
            "sqlite://x%ff.db",
            "sqlite://x.db#frag",
        ] {
            assert!(malformed(url), "{url:?} should be malformed");
        }
        assert!(matches!(
            SqliteConfig::from_url("sqlite://x.db?ns=Bad-Name"),
            Err(Error::InvalidInput {
                what: "namespace",
                ..
            })
        ));
        assert!(matches!(
            SqliteConfig::from_url("sqlite://x.db?max_connections=0"),
            Err(Error::InvalidInput {
                problem: InputProblem::Zero,
                ..
            })
        ));
    }
}
