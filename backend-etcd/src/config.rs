//! [`EtcdConfig`]: where the etcd members are, which namespace, how to talk to them.

use std::path::PathBuf;
use std::time::Duration;

use liveness_core::{Error, InputProblem, Namespace, Result};

const EXPECTED_URL: &str = "etcd://[user:password@]host[:port][,host[:port]...][/][?ns=NAME&timeout_ms=N&connect_timeout_ms=N] \
     (etcds:// for TLS, with ca=PATH and optionally cert=PATH&key=PATH&domain=NAME)";

const DEFAULT_NAMESPACE: &str = "default";
const DEFAULT_PORT: u16 = 2379;

/// How to reach an etcd cluster and which namespace to use.
///
/// Built from a URL ([`EtcdConfig::from_url`]):
///
/// ```text
/// etcd://[user:password@]host[:port][,host[:port]...][?ns=NAME&timeout_ms=N&connect_timeout_ms=N]
/// etcds://...?ca=PATH[&cert=PATH&key=PATH][&domain=NAME]
/// ```
///
/// - Several comma-separated members may be given; the client balances over them.
///   The port defaults to 2379.
/// - `user:password` (percent-encoded) turns on etcd's user/password authentication;
///   the client refreshes its token when etcd expires it.
/// - `etcds://` talks TLS (rustls): `ca` is the PEM file of the CA that signed the
///   members' certificates (required: this build trusts no system roots); `cert` and
///   `key` give a client certificate for mutual TLS; `domain` overrides the name the
///   server certificate is checked against (default: the host as written).
/// - `ns`: the namespace (default `default`); every key lives under `liveness/<ns>/`.
/// - `timeout_ms`: how long one request waits for its answer before failing with
///   `Unavailable` (default 5000). `connect_timeout_ms`: one connection attempt
///   (default 3000).
///
/// Unknown query parameters are rejected, so a typo cannot silently pick the default
/// namespace. The password never appears in `Debug` output.
#[derive(Clone)]
pub struct EtcdConfig {
    pub(crate) endpoints: Vec<String>,
    pub(crate) namespace: Namespace,
    pub(crate) user: Option<(String, String)>,
    pub(crate) tls: Option<TlsConfig>,
    pub(crate) timeout: Duration,
    pub(crate) connect_timeout: Duration,
}

/// TLS settings of an `etcds://` URL.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TlsConfig {
    pub(crate) ca: Option<PathBuf>,
    pub(crate) cert: Option<PathBuf>,
    pub(crate) key: Option<PathBuf>,
    pub(crate) domain: Option<String>,
}

impl std::fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("namespace", &self.namespace)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

fn malformed() -> Error {
    liveness_core::url::malformed(EXPECTED_URL)
}

fn millis(value: &str) -> Result<Duration> {
    liveness_core::url::millis(value, EXPECTED_URL)
}

fn decode(s: &str) -> Result<String> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| Error::invalid("url", InputProblem::NotUtf8))
}

impl EtcdConfig {
    /// Parses an `etcd://` or `etcds://` URL (see the type's docs).
    ///
    /// Fails with [`Error::InvalidInput`]: `Malformed` for anything that does not
    /// parse (unknown parameter, bad port, `etcds` without `ca`), `UnknownScheme` for
    /// another scheme, and the namespace's own problem for an invalid `ns`. Does no I/O.
    pub fn from_url(url: &str) -> Result<EtcdConfig> {
        let (scheme, rest) = url.split_once("://").ok_or_else(malformed)?;
        let tls = match scheme {
            "etcd" => false,
            "etcds" => true,
            other => {
                return Err(Error::invalid(
                    "url",
                    InputProblem::UnknownScheme {
                        scheme: other.to_owned(),
                        known: crate::SCHEMES.to_vec(),
                    },
                ))
            }
        };
        let (authority, query) = match rest.find(['/', '?']) {
            Some(i) => {
                let (a, q) = rest.split_at(i);
                let q = q.trim_start_matches('/');
                if !q.is_empty() && !q.starts_with('?') {
                    return Err(malformed());
                }
                (a, q.trim_start_matches('?'))
            }
            None => (rest, ""),
        };
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let user = match userinfo {
            None => None,
            Some(u) => {
                let (name, password) = u.split_once(':').ok_or_else(malformed)?;
                let name = decode(name)?;
                if name.is_empty() {
                    return Err(malformed());
                }
                Some((name, decode(password)?))
            }
        };
        let http = if tls { "https" } else { "http" };
        let mut endpoints = Vec::new();
        for host in hosts.split(',') {
            endpoints.push(format!("{http}://{}", host_port(host)?));
        }

        let mut namespace = None;
        let mut timeout = Duration::from_secs(5);
        let mut connect_timeout = Duration::from_secs(3);
        let mut t = TlsConfig::default();
        for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
            match k.as_ref() {
                "ns" => namespace = Some(Namespace::new(v.as_ref())?),
                "timeout_ms" => timeout = millis(&v)?,
                "connect_timeout_ms" => connect_timeout = millis(&v)?,
                "ca" if tls => t.ca = Some(PathBuf::from(v.as_ref())),
                "cert" if tls => t.cert = Some(PathBuf::from(v.as_ref())),
                "key" if tls => t.key = Some(PathBuf::from(v.as_ref())),
                "domain" if tls => t.domain = Some(v.into_owned()),
                _ => return Err(malformed()),
            }
        }
        if tls && (t.ca.is_none() || t.cert.is_some() != t.key.is_some()) {
            return Err(malformed());
        }
        let namespace = match namespace {
            Some(ns) => ns,
            None => Namespace::new(DEFAULT_NAMESPACE)?,
        };
        Ok(EtcdConfig {
            endpoints,
            namespace,
            user,
            tls: tls.then_some(t),
            timeout,
            connect_timeout,
        })
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
}

/// Validates `host[:port]` (a name, an IPv4 address or a bracketed IPv6 address) and
/// adds the default port.
fn host_port(s: &str) -> Result<String> {
    if s.is_empty() {
        return Err(malformed());
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or_else(malformed)?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(malformed)?),
        };
        (format!("[{h}]"), port)
    } else {
        match s.split_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (s.to_owned(), None),
        }
    };
    let valid =
        |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '[' | ']');
    if host.is_empty() || !host.chars().all(valid) {
        return Err(malformed());
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => p.parse::<u16>().map_err(|_| malformed())?,
    };
    Ok(format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_urls() {
        let c = EtcdConfig::from_url("etcd://127.0.0.1:2379?ns=abc").unwrap();
        assert_eq!(c.endpoints, vec!["http://127.0.0.1:2379"]);
        assert_eq!(c.namespace.as_str(), "abc");
        assert!(c.tls.is_none() && c.user.is_none());
        let c = EtcdConfig::from_url("etcd://a,b:1/").unwrap();
        assert_eq!(c.endpoints, vec!["http://a:2379", "http://b:1"]);
        assert_eq!(c.namespace.as_str(), "default");
        let c = EtcdConfig::from_url("etcd://root:p%40ss@h:1?timeout_ms=100").unwrap();
        assert_eq!(c.user, Some(("root".into(), "p@ss".into())));
        assert_eq!(c.timeout, Duration::from_millis(100));
        assert!(!format!("{c:?}").contains("p@ss"));
        let c = EtcdConfig::from_url("etcd://[::1]:5").unwrap();
        assert_eq!(c.endpoints, vec!["http://[::1]:5"]);
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
