//! [`EtcdConfig`]: where the etcd members are, which namespace, how to talk to them.

use std::path::PathBuf;
use std::time::Duration;

use liveness_core::url::{
    bad_value, check_key_retention, Authority, Param, StoreUrl, UrlForm, KEY_RETENTION,
};
use liveness_core::{Error, InputProblem, Namespace, Result};

const DEFAULT_PORT: u16 = 2379;

/// `timeout_ms`: how long one request waits for its answer.
const TIMEOUT_MS: Param = Param::timeout_ms("timeout_ms");
/// `connect_timeout_ms`: how long one connection attempt may take.
const CONNECT_TIMEOUT_MS: Param = Param::timeout_ms("connect_timeout_ms");
/// `ca`, `cert`, `key`, `domain`: TLS settings (`etcds://` only).
const CA: Param = Param::text("ca");
const CERT: Param = Param::text("cert");
const KEY: Param = Param::text("key");
const DOMAIN: Param = Param::text("domain");

/// The URL schemes this backend serves: `etcd` (plain gRPC) and `etcds` (TLS).
pub const SCHEMES: &[&str] = &["etcd", "etcds"];

/// The URLs [`EtcdConfig::from_url`] accepts.
pub const URL: UrlForm = UrlForm {
    schemes: SCHEMES,
    authority: Authority::Hosts,
    params: &[
        TIMEOUT_MS,
        CONNECT_TIMEOUT_MS,
        KEY_RETENTION,
        CA,
        CERT,
        KEY,
        DOMAIN,
    ],
    fragments: &[],
    expected: "etcd://[user:password@]host[:port][,host[:port]...][/][?ns=NAME&timeout_ms=N\
               &connect_timeout_ms=N&key_retention_s=N] (etcds:// for TLS, with ca=PATH \
               and optionally cert=PATH&key=PATH&domain=NAME)",
};

/// How to reach an etcd cluster and which namespace to use.
///
/// Built from a URL ([`EtcdConfig::from_url`]; the crate docs' table lists the
/// parameters, their defaults and ranges):
///
/// ```text
/// etcd://[user:password@]host[:port][,host[:port]...][?ns=NAME&timeout_ms=N&connect_timeout_ms=N&key_retention_s=N]
/// etcds://...?ca=PATH[&cert=PATH&key=PATH][&domain=NAME]
/// ```
///
/// Several comma-separated members may be given; the port defaults to 2379.
/// `user:password` (percent-encoded) turns on etcd's user/password authentication. The
/// password never appears in `Debug` output (the URL is kept as a [`StoreUrl`], whose
/// `Debug` hides it).
///
/// The builder: `with_<field>` setters return the changed configuration, wrapped in
/// a `Result` where the value can be wrong (a zero timeout or retention is
/// [`Error::InvalidInput`] naming the field); accessors read what other code needs.
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// The URL parsed: where `user:password` is read from.
    url: StoreUrl,
    endpoints: Vec<String>,
    namespace: Namespace,
    tls: Option<TlsConfig>,
    timeout: Duration,
    connect_timeout: Duration,
    /// How many death records the namespace keeps (the newest ones).
    death_retention: usize,
    /// How long an enqueue's idempotency key is kept (`key_retention_s`).
    key_retention: Duration,
    /// Whether connecting opens only a store that is there already.
    existing_only: bool,
}

/// TLS settings of an `etcds://` URL.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TlsConfig {
    pub(crate) ca: Option<PathBuf>,
    pub(crate) cert: Option<PathBuf>,
    pub(crate) key: Option<PathBuf>,
    pub(crate) domain: Option<String>,
}

impl EtcdConfig {
    /// Parses an `etcd://` or `etcds://` URL with [`URL`] (see the type's docs and the
    /// crate docs' table).
    ///
    /// Fails with [`Error::InvalidInput`] naming what is wrong (see
    /// [`liveness_core::url`]): another scheme, no host, a bad port, a path, a user
    /// without a password (or the reverse), an unknown, repeated or empty parameter, a
    /// timeout outside its range, TLS parameters without `etcds://`, `etcds://` without
    /// `ca`, `cert` without `key` (or the reverse), an invalid `ns`
    /// (`what: "namespace"`). Does no I/O.
    pub fn from_url(url: &str) -> Result<EtcdConfig> {
        let parsed = URL.parse(url)?;
        if !matches!(parsed.path(), "" | "/") {
            return Err(URL.malformed());
        }
        if parsed.user().is_some() != parsed.password().is_some() {
            return Err(URL.malformed());
        }
        let tls = parsed.scheme() == "etcds";
        let http = if tls { "https" } else { "http" };
        let endpoints = parsed
            .hosts()
            .iter()
            .map(|h| format!("{http}://{}:{}", h.name, h.port.unwrap_or(DEFAULT_PORT)))
            .collect();
        let path = |p: Param| parsed.value(p).map(PathBuf::from);
        let t = TlsConfig {
            ca: path(CA),
            cert: path(CERT),
            key: path(KEY),
            domain: parsed.value(DOMAIN).map(str::to_owned),
        };
        if !tls {
            if let Some((param, value)) = parsed
                .given()
                .find(|(p, _)| [CA, CERT, KEY, DOMAIN].contains(p))
            {
                return Err(bad_value(
                    param.name,
                    value,
                    "no TLS parameter without TLS: use etcds://".to_owned(),
                ));
            }
        } else if t.ca.is_none() {
            return Err(URL.malformed());
        } else if t.cert.is_some() != t.key.is_some() {
            let (param, value) = match &t.cert {
                Some(cert) => (CERT, cert.display().to_string()),
                None => (
                    KEY,
                    t.key
                        .as_ref()
                        .map(|k| k.display().to_string())
                        .unwrap_or_default(),
                ),
            };
            return Err(bad_value(
                param.name,
                &value,
                "`cert` and `key` together (mutual TLS), or neither".to_owned(),
            ));
        }
        Ok(EtcdConfig {
            endpoints,
            namespace: parsed.namespace()?,
            tls: tls.then_some(t),
            timeout: parsed.millis(TIMEOUT_MS)?.unwrap_or(Duration::from_secs(5)),
            connect_timeout: parsed
                .millis(CONNECT_TIMEOUT_MS)?
                .unwrap_or(Duration::from_secs(3)),
            death_retention: liveness_core::DEFAULT_DEATH_RETENTION,
            key_retention: parsed.key_retention()?,
            existing_only: false,
            url: parsed,
        })
    }

    /// The same configuration keeping another number of death records per namespace
    /// ([`OperatorStore::deaths`](liveness_core::OperatorStore::deaths); default
    /// [`DEFAULT_DEATH_RETENTION`](liveness_core::DEFAULT_DEATH_RETENTION); zero is
    /// `InvalidInput`).
    pub fn with_death_retention(mut self, keep: usize) -> Result<EtcdConfig> {
        if keep == 0 {
            return Err(Error::invalid("death_retention", InputProblem::Zero));
        }
        self.death_retention = keep;
        Ok(self)
    }

    /// The same configuration keeping an enqueue's idempotency key
    /// ([`EnqueueOptions::key`](liveness_core::EnqueueOptions::key)) for `retention`
    /// after that enqueue, by etcd's lease countdown, instead of the URL's
    /// `key_retention_s` (default
    /// [`DEFAULT_KEY_RETENTION`](liveness_core::DEFAULT_KEY_RETENTION), a day): a
    /// repeat within it answers the first enqueue's id; some time after it (at most
    /// about a sixteenth of it, or etcd's minimum lease ttl, plus the request
    /// timeout) etcd deletes the key, and a repeat adds a new item. etcd counts whole
    /// seconds: a fraction is rounded up. The store reports it as
    /// [`Capabilities::key_retention`](liveness_core::Capabilities::key_retention).
    /// Zero is `InvalidInput` (`Zero`), under 1 s `TooShort`, over 366 days
    /// `TooLongDuration` (the URL's range), all naming `key_retention`.
    pub fn with_key_retention(mut self, retention: Duration) -> Result<EtcdConfig> {
        self.key_retention = check_key_retention(retention)?;
        Ok(self)
    }

    /// How long an enqueue's idempotency key is kept after that enqueue
    /// (`key_retention_s`, [`EtcdConfig::with_key_retention`]; default
    /// [`DEFAULT_KEY_RETENTION`](liveness_core::DEFAULT_KEY_RETENTION), a day).
    pub fn key_retention(&self) -> Duration {
        self.key_retention
    }

    /// The same configuration on another namespace.
    pub fn with_namespace(mut self, namespace: Namespace) -> EtcdConfig {
        self.namespace = namespace;
        self
    }

    /// The same configuration with another per-request timeout (how long one request
    /// waits before failing with `Unavailable`). Zero is `InvalidInput`.
    pub fn with_timeout(mut self, timeout: Duration) -> Result<EtcdConfig> {
        if timeout.is_zero() {
            return Err(Error::invalid("timeout", InputProblem::Zero));
        }
        self.timeout = timeout;
        Ok(self)
    }

    /// The namespace the store handle will be scoped to.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The gRPC endpoints (`http://host:port` or `https://host:port`).
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// How long one request waits for its answer (`timeout_ms`, default 5 s).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How long one connection attempt may take (`connect_timeout_ms`, default 3 s).
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    liveness_core::existing_only_accessors!(
        EtcdConfig,
        /// The same configuration opening only a store that is there already (`true`), for
        /// readers that must never create or change anything (the namespace must have a key
        /// under its prefix `liveness/<ns>/`). Nothing is created and no migration runs; a
        /// namespace the store does not hold fails to connect with [`Error::InvalidInput`]
        /// (`what: "namespace"`), naming it.
    );

    /// The user name and password of etcd's authentication, if any.
    pub(crate) fn user(&self) -> Option<(&str, &str)> {
        self.url.user().zip(self.url.password())
    }

    /// The TLS settings of an `etcds://` URL (`None` for `etcd://`).
    pub(crate) fn tls(&self) -> Option<&TlsConfig> {
        self.tls.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use liveness_core::url::MAX_KEY_RETENTION;

    #[test]
    fn parses_plain_urls() {
        let c = EtcdConfig::from_url("etcd://127.0.0.1:2379?ns=abc").unwrap();
        assert_eq!(c.endpoints, vec!["http://127.0.0.1:2379"]);
        assert_eq!(c.namespace.as_str(), "abc");
        assert!(c.tls.is_none() && c.user().is_none());
        let c = EtcdConfig::from_url("etcd://a,b:1/").unwrap();
        assert_eq!(c.endpoints, vec!["http://a:2379", "http://b:1"]);
        assert_eq!(c.namespace.as_str(), "default");
        let c = EtcdConfig::from_url("etcd://root:p%40ss@h:1?timeout_ms=100").unwrap();
        assert_eq!(c.user(), Some(("root", "p@ss")));
        assert_eq!(c.timeout, Duration::from_millis(100));
        let shown = format!("{:?}", c.with_existing_only(true));
        assert!(!shown.contains("p@ss"), "{shown}");
        assert!(shown.contains("existing_only: true"), "{shown}");
        let c = EtcdConfig::from_url("etcd://[::1]:5").unwrap();
        assert_eq!(c.endpoints, vec!["http://[::1]:5"]);
    }

    #[test]
    fn key_retention_from_the_url_or_the_builder() {
        let c = EtcdConfig::from_url("etcd://h:1").unwrap();
        assert_eq!(c.key_retention(), liveness_core::DEFAULT_KEY_RETENTION);
        let c = EtcdConfig::from_url("etcd://h:1?key_retention_s=90").unwrap();
        assert_eq!(c.key_retention(), Duration::from_secs(90));
        for bad in ["0", "31622401", "1.5", "-1"] {
            let url = format!("etcd://h:1?key_retention_s={bad}");
            assert!(
                matches!(EtcdConfig::from_url(&url), Err(Error::InvalidInput { .. })),
                "{url} was accepted"
            );
        }
        let c = c.with_key_retention(Duration::from_millis(1500)).unwrap();
        assert_eq!(c.key_retention(), Duration::from_millis(1500));
        let refused = |d: Duration| match c.clone().with_key_retention(d) {
            Err(Error::InvalidInput { what, problem }) => {
                assert_eq!(what, "key_retention");
                problem
            }
            other => panic!("{d:?} gave {other:?}"),
        };
        assert_eq!(refused(Duration::ZERO), InputProblem::Zero);
        assert!(matches!(
            refused(Duration::from_millis(999)),
            InputProblem::TooShort { .. }
        ));
        assert!(matches!(
            refused(MAX_KEY_RETENTION + Duration::from_secs(1)),
            InputProblem::TooLongDuration { .. }
        ));
    }

    #[test]
    fn parses_tls_urls() {
        let c = EtcdConfig::from_url("etcds://h:1?ca=/x/ca.pem&domain=localhost").unwrap();
        assert_eq!(c.endpoints, vec!["https://h:1"]);
        let t = c.tls.unwrap();
        assert_eq!(t.ca, Some(PathBuf::from("/x/ca.pem")));
        assert_eq!(t.domain.as_deref(), Some("localhost"));
        assert!(
            EtcdConfig::from_url("etcds://h:1").is_err(),
            "ca is required"
        );
        assert!(
            EtcdConfig::from_url("etcds://h:1?ca=a&cert=b").is_err(),
            "cert needs key"
        );
        assert!(
            EtcdConfig::from_url("etcd://h:1?ca=a").is_err(),
            "ca needs etcds"
        );
    }

    #[test]
    fn rejects_bad_urls() {
        for bad in [
            "etcd://",
            "etcd://h:notaport",
            "etcd://h:1?nss=x",
            "etcd://h:1?ns=Bad",
            "etcd://h:1/path",
            "etcd://h:1?timeout_ms=0",
            "etcd://:pw@h",
            "nothing",
        ] {
            assert!(
                matches!(EtcdConfig::from_url(bad), Err(Error::InvalidInput { .. })),
                "{bad} was accepted"
            );
        }
        assert!(matches!(
            EtcdConfig::from_url("redis://h"),
            Err(Error::InvalidInput {
                problem: InputProblem::UnknownScheme { .. },
                ..
            })
        ));
    }
}
