//! [`connect`]: a store picked by URL scheme among the backends compiled in.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use liveness_core::url::{Authority, UrlForm};
use liveness_core::{checked, Error, InputProblem, MemoryServer, Result, Store};

const EXPECTED_URL: &str =
    "SCHEME:... with a scheme such as sqlite (sqlite:///path/file.db?ns=NAME) or memory (memory://?ns=NAME)";

/// The schemes of the in-process memory store.
const MEMORY_SCHEMES: &[&str] = &["memory"];

/// How [`connect`] opens one backend's store: the backend's `connect`, boxed.
type Connect =
    for<'a> fn(&'a str) -> Pin<Box<dyn Future<Output = Result<Arc<dyn Store>>> + Send + 'a>>;

/// A backend compiled in: its URL schemes and how to open its store, as [`connect`]
/// does and as [`connect_existing`] does.
struct Backend {
    schemes: &'static [&'static str],
    connect: Connect,
    connect_existing: Connect,
}

/// The [`Backend`] entry of a backend crate: its `SCHEMES`, its `connect`, and its
/// store's `connect` with the config's `with_existing_only(true)`.
#[cfg(any(
    feature = "sqlite",
    feature = "redis",
    feature = "postgres",
    feature = "etcd"
))]
macro_rules! backend {
    ($krate:ident, $store:ident, $config:ident) => {
        Backend {
            schemes: $krate::SCHEMES,
            connect: |url| {
                Box::pin(async move { Ok(Arc::new($krate::connect(url).await?) as Arc<dyn Store>) })
            },
            connect_existing: |url| {
                Box::pin(async move {
                    let config = $krate::$config::from_url(url)?.with_existing_only(true);
                    Ok(Arc::new($krate::$store::connect(config).await?) as Arc<dyn Store>)
                })
            },
        }
    };
}

/// Every backend compiled in through its cargo feature, in the order [`connect`]
/// tries their schemes.
const BACKENDS: &[Backend] = &[
    #[cfg(feature = "sqlite")]
    backend!(liveness_sqlite, SqliteStore, SqliteConfig),
    #[cfg(feature = "redis")]
    backend!(liveness_redis, RedisStore, RedisConfig),
    #[cfg(feature = "postgres")]
    backend!(liveness_postgres, PostgresStore, PostgresConfig),
    #[cfg(feature = "etcd")]
    backend!(liveness_etcd, EtcdStore, EtcdConfig),
    #[cfg(feature = "fdb")]
    Backend {
        schemes: liveness_fdb::SCHEMES,
        connect: |url| {
            Box::pin(
                async move { Ok(Arc::new(liveness_fdb::connect(url).await?) as Arc<dyn Store>) },
            )
        },
        // No cheap check that a namespace is there: connects as `connect` does.
        connect_existing: |url| {
            Box::pin(
                async move { Ok(Arc::new(liveness_fdb::connect(url).await?) as Arc<dyn Store>) },
            )
        },
    },
];

/// Every backend of the workspace, by cargo feature, with its URL schemes: what the
/// error of a scheme whose backend is not compiled in names.
const FEATURES: &[(&str, &[&str])] = &[
    ("sqlite", &["sqlite"]),
    ("redis", &["redis", "rediss"]),
    ("postgres", &["postgres", "postgresql"]),
    ("etcd", &["etcd", "etcds"]),
    ("fdb", &["fdb"]),
];

/// The cargo feature of the `liveness` crate that adds the backend of URL scheme
/// `scheme` (`"redis"` for `rediss`), whether or not this build has it; `None` for
/// `memory` and for a scheme no backend of the workspace serves. What a program built
/// without that backend can tell its user to turn on.
///
/// ```
/// assert_eq!(liveness::feature_of("rediss"), Some("redis"));
/// assert_eq!(liveness::feature_of("postgresql"), Some("postgres"));
/// assert_eq!(liveness::feature_of("nope"), None);
/// ```
pub fn feature_of(scheme: &str) -> Option<&'static str> {
    let scheme = scheme.to_ascii_lowercase();
    FEATURES
        .iter()
        .find(|(_, schemes)| schemes.contains(&scheme.as_str()))
        .map(|(feature, _)| *feature)
}

/// Every URL scheme [`connect`] serves in this build: `memory`, and the schemes of
/// each backend compiled in through its cargo feature.
pub fn schemes() -> Vec<&'static str> {
    let backends = BACKENDS.iter().flat_map(|b| b.schemes);
    MEMORY_SCHEMES.iter().chain(backends).copied().collect()
}

/// Opens the store a URL names, choosing the backend by the URL's scheme. The store
/// stands behind [`CheckInput`](liveness_core::CheckInput): every call's input is
/// checked once, before it reaches the backend.
///
/// - `memory://?ns=NAME`: the in-process reference store. Every `memory://` handle of
///   one process shares one [`MemoryServer`], so two handles on the same namespace see
///   the same state; nothing crosses processes.
/// - `sqlite:///abs/path/file.db?ns=NAME`, `sqlite://relative.db` (feature `sqlite`,
///   on by default): one SQLite file shared by the processes of one host.
/// - `redis://`, `rediss://` (feature `redis`; `?cluster=true` for a Redis Cluster),
///   `postgres://`, `postgresql://` (feature `postgres`), `etcd://`, `etcds://`
///   (feature `etcd`), `fdb://` (feature `fdb`): see each backend crate's docs for its
///   parameters.
///
/// # Errors
///
/// - A URL without a scheme: [`Error::InvalidInput`] with `what: "url"` and
///   [`InputProblem::Malformed`].
/// - The scheme of a backend of this workspace whose cargo feature this build leaves
///   out (`redis` without feature `redis`): [`InputProblem::BadValue`] with `name:
///   "scheme"`, naming the feature and listing [`schemes`].
/// - Any other scheme: [`InputProblem::UnknownScheme`], listing [`schemes`].
/// - Anything the chosen backend refuses (a malformed path or parameter, a server
///   that does not answer), as that backend reports it.
pub async fn connect(url: &str) -> Result<Arc<dyn Store>> {
    open(url, false).await
}

/// Opens the store a URL names, as [`connect`] does, but only when it is there
/// already: for readers (a status command, a dashboard) that must never answer "empty"
/// for a place that does not exist, nor create it by looking. Nothing is created and no
/// schema is migrated; each backend checks natively, reading only:
///
/// - SQLite: the file exists (opened without create), holds the liveness tables at
///   this build's schema version, and holds the namespace. The one write it may make
///   is the reboot rule every handle applies (leases of a previous boot expired).
/// - PostgreSQL: the namespace's schema `liveness_<ns>` exists at this build's schema
///   version; no migration runs.
/// - Redis: the namespace has handed out a token or an item id (its counter keys).
/// - etcd: the namespace has any key (a count-only range read of its prefix).
/// - FoundationDB: no cheap check; it connects as [`connect`] does.
/// - `memory://`: nothing outlives its process; it connects as [`connect`] does.
///
/// # Errors
///
/// As [`connect`], and [`Error::InvalidInput`] when the store is not there: `what:
/// "path"` for an SQLite file that is missing or not a liveness database (the message
/// names the path), `what: "namespace"` for a namespace the store does not hold (the
/// message names it and, where the store can list them cheaply, the namespaces it
/// holds).
pub async fn connect_existing(url: &str) -> Result<Arc<dyn Store>> {
    open(url, true).await
}

/// [`connect`], or with `existing_only` [`connect_existing`].
async fn open(url: &str, existing_only: bool) -> Result<Arc<dyn Store>> {
    let scheme = scheme_of(url)?;
    if MEMORY_SCHEMES.contains(&scheme.as_str()) {
        return memory(url).map(checked);
    }
    if let Some(backend) = BACKENDS
        .iter()
        .find(|b| b.schemes.contains(&scheme.as_str()))
    {
        let connect = if existing_only {
            backend.connect_existing
        } else {
            backend.connect
        };
        return connect(url).await.map(checked);
    }
    if let Some(feature) = feature_of(&scheme) {
        return Err(Error::invalid(
            "url",
            InputProblem::BadValue {
                name: "scheme",
                expected: format!(
                    "a scheme compiled into this build ({}); `{scheme}` needs the cargo \
                     feature `{feature}` of the `liveness` crate, which this build leaves out",
                    schemes().join(", ")
                ),
                got: scheme,
            },
        ));
    }
    Err(Error::invalid(
        "url",
        InputProblem::UnknownScheme {
            scheme,
            known: schemes(),
        },
    ))
}

fn malformed() -> Error {
    Error::invalid(
        "url",
        InputProblem::Malformed {
            expected: EXPECTED_URL,
        },
    )
}

/// The URL's scheme, lowercased: RFC 3986 `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`.
fn scheme_of(url: &str) -> Result<String> {
    let (scheme, _) = url.split_once(':').ok_or_else(malformed)?;
    let mut chars = scheme.chars();
    let starts_alpha = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    if !starts_alpha || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) {
        return Err(malformed());
    }
    Ok(scheme.to_ascii_lowercase())
}

/// The URLs of the in-process memory store: `memory://?ns=NAME` or `memory:?ns=NAME`
/// (namespace `default` when absent), no host, no path, no other parameter.
pub const MEMORY_URL: UrlForm = UrlForm {
    schemes: MEMORY_SCHEMES,
    authority: Authority::Path,
    params: &[],
    fragments: &[],
    expected: "memory://?ns=NAME",
};

fn memory(url: &str) -> Result<Arc<dyn Store>> {
    static SERVER: OnceLock<MemoryServer> = OnceLock::new();
    let parsed = MEMORY_URL.parse(url)?;
    if !matches!(parsed.path(), "" | "/") {
        return Err(MEMORY_URL.malformed());
    }
    let ns = parsed.namespace()?;
    Ok(Arc::new(SERVER.get_or_init(MemoryServer::new).store(&ns)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use liveness_conformance::fixtures::acquire_member;
    use liveness_core::Ttl;

    #[tokio::test]
    async fn unknown_scheme_lists_the_compiled_ones() {
        let err = connect("nosuch://host/x").await.unwrap_err();
        match &err {
            Error::InvalidInput {
                what: "url",
                problem: InputProblem::UnknownScheme { scheme, known },
            } => {
                assert_eq!(scheme, "nosuch");
                assert!(known.contains(&"memory"));
                #[cfg(feature = "sqlite")]
                assert!(known.contains(&"sqlite"));
            }
            other => panic!("expected UnknownScheme, got {other:?}"),
        }
        assert!(err.to_string().contains("memory"), "{err}");
    }

    #[cfg(not(feature = "fdb"))]
    #[tokio::test]
    async fn a_compiled_out_backend_names_its_feature() {
        for url in ["fdb://", "FDB:///etc/fdb.cluster"] {
            let err = connect(url).await.map(|_| ()).unwrap_err();
            assert!(
                matches!(
                    &err,
                    Error::InvalidInput {
                        what: "url",
                        problem: InputProblem::BadValue { name: "scheme", .. }
                    }
                ),
                "{err:?}"
            );
            let text = err.to_string();
            assert!(text.contains("cargo feature `fdb`"), "{text}");
            assert!(text.contains("memory"), "{text}");
            let err = connect_existing(url).await.map(|_| ()).unwrap_err();
            assert!(err.to_string().contains("cargo feature `fdb`"), "{err}");
        }
    }

    #[tokio::test]
    async fn malformed_urls() {
        for url in [
            "",
            "no scheme here",
            "://x",
            "1abc://x",
            "memory://host?ns=a",
            "memory://?ns=BAD",
            "memory://?x=1",
        ] {
            let err = connect(url).await.map(|_| ()).unwrap_err();
            assert!(
                matches!(err, Error::InvalidInput { .. }),
                "{url:?}: {err:?}"
            );
        }
        assert!(matches!(
            connect("no scheme here").await.map(|_| ()),
            Err(Error::InvalidInput {
                what: "url",
                problem: InputProblem::Malformed { .. }
            })
        ));
    }

    #[test]
    fn every_memory_url_rule() {
        liveness_conformance::url_rules::check(&MEMORY_URL, "memory://", memory);
        liveness_conformance::url_rules::check(&MEMORY_URL, "memory:", memory);
    }

    #[tokio::test]
    async fn connect_refuses_every_bad_memory_url() {
        liveness_conformance::url_rules::check_connect(
            &MEMORY_URL,
            "memory://",
            std::time::Duration::from_secs(60),
            |url| async move { connect(&url).await },
        )
        .await;
    }

    #[tokio::test]
    async fn memory_handles_share_a_namespace() {
        let a = connect("memory://?ns=connect_test").await.unwrap();
        let b = connect("MEMORY://?ns=connect_test").await.unwrap();
        let other = connect("memory:").await.unwrap();
        assert_eq!(a.backend(), "memory");
        let lease = acquire_member(&*a, "m", "h", Ttl::from_secs(30).unwrap()).await;
        assert_eq!(
            b.inspect(&lease.key).await.unwrap().unwrap().token,
            lease.token
        );
        assert!(other.inspect(&lease.key).await.unwrap().is_none());
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_by_url() {
        let dir = std::env::temp_dir().join(format!("liveness-connect-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}?ns=connect_test", dir.join("c.db").display());
        let store = connect(&url).await.unwrap();
        assert_eq!(store.backend(), "sqlite");
        let id = store.enqueue(b"x", Default::default()).await.unwrap();
        let again = connect(&url).await.unwrap();
        assert!(again.item(id).await.unwrap().is_some());
        assert!(matches!(
            connect("sqlite://").await.map(|_| ()),
            Err(Error::InvalidInput { .. })
        ));
        drop((store, again));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn connect_existing_opens_only_what_is_there() {
        let dir = std::env::temp_dir().join(format!("liveness-existing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let url = |file: &str, ns: &str| format!("sqlite://{}?ns={ns}", dir.join(file).display());
        let missing = connect_existing(&url("nope.db", "a")).await.map(|_| ());
        assert!(
            matches!(missing, Err(Error::InvalidInput { what: "path", .. })),
            "{missing:?}"
        );
        assert!(!dir.join("nope.db").exists());

        let store = connect(&url("ops.db", "a")).await.unwrap();
        let id = store.enqueue(b"x", Default::default()).await.unwrap();
        let reader = connect_existing(&url("ops.db", "a")).await.unwrap();
        assert!(reader.item(id).await.unwrap().is_some());
        let other = connect_existing(&url("ops.db", "b")).await.map(|_| ());
        assert!(
            matches!(
                other,
                Err(Error::InvalidInput {
                    what: "namespace",
                    ..
                })
            ),
            "{other:?}"
        );
        // The memory store has nothing to check: it connects as `connect` does.
        assert!(connect_existing("memory://?ns=existing_test").await.is_ok());
        drop((store, reader));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
