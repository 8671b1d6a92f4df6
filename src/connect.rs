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

/// A backend compiled in: its URL schemes and how to open its store.
struct Backend {
    schemes: &'static [&'static str],
    connect: Connect,
}

/// The [`Backend`] entry of a backend crate (its `SCHEMES` and its `connect`).
macro_rules! backend {
    ($krate:ident) => {
        Backend {
            schemes: $krate::SCHEMES,
            connect: |url| {
                Box::pin(async move { Ok(Arc::new($krate::connect(url).await?) as Arc<dyn Store>) })
            },
        }
    };
}

/// Every backend compiled in through its cargo feature, in the order [`connect`]
/// tries their schemes.
const BACKENDS: &[Backend] = &[
    #[cfg(feature = "sqlite")]
    backend!(liveness_sqlite),
    #[cfg(feature = "redis")]
    backend!(liveness_redis),
    #[cfg(feature = "postgres")]
    backend!(liveness_postgres),
    #[cfg(feature = "etcd")]
    backend!(liveness_etcd),
    #[cfg(feature = "fdb")]
    backend!(liveness_fdb),
];

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
/// - A scheme no compiled-in backend serves: [`InputProblem::UnknownScheme`], listing
///   [`schemes`] (enable the backend's cargo feature to get it).
/// - Anything the chosen backend refuses (a malformed path or parameter, a server
///   that does not answer), as that backend reports it.
pub async fn connect(url: &str) -> Result<Arc<dyn Store>> {
    let scheme = scheme_of(url)?;
    if MEMORY_SCHEMES.contains(&scheme.as_str()) {
        return memory(url).map(checked);
    }
    if let Some(backend) = BACKENDS
        .iter()
        .find(|b| b.schemes.contains(&scheme.as_str()))
    {
        return (backend.connect)(url).await.map(checked);
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
}
