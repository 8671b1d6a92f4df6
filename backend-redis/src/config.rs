//! [`RedisConfig`]: where the server is, which namespace, how to talk to it.

use std::path::PathBuf;
use std::time::Duration;

use liveness_core::{Error, InputProblem, Namespace, Result};

use crate::SCHEMES;

const EXPECTED_URL: &str =
    "redis://[user[:password]@]host[:port][/db][?ns=NAME&ca=PATH&timeout_ms=N&connect_timeout_ms=N&protocol=resp2|resp3&cluster=true&seeds=HOST:PORT,...] (rediss:// for TLS; no /db with cluster=true)";

const DEFAULT_NAMESPACE: &str = "default";

/// How to reach a Redis server and which namespace to use.
///
/// Built from a URL ([`RedisConfig::from_url`]):
///
/// ```text
/// redis://[user[:password]@]host[:port][/db][?ns=NAME&ca=PATH&timeout_ms=N&connect_timeout_ms=N]
/// rediss://...            TLS; the server certificate is checked against the system
///                         roots, or against the PEM file given by `ca=PATH`
/// rediss://...#insecure   TLS without certificate checks (tests only)
/// ```
///
/// - `ns`: the namespace (default `default`); every key is under `liveness:{ns}:`.
/// - `timeout_ms`: how long one operation waits for its answer before failing with
///   `Unavailable` (default 2000).
/// - `connect_timeout_ms`: how long a (re)connection attempt may take (default 2000).
/// - `protocol`: passed to the client (`resp2`, the default, or `resp3`).
/// - `cluster=true`: the server is a node of a Redis Cluster; the client learns the
///   slot map from it, follows `MOVED` / `ASK` redirections and reconnects to the
///   node that owns the namespace's slot. `seeds=HOST:PORT,...` names more nodes to
///   learn the map from (same scheme, user and password), so that connecting works
///   while the first one is down. A cluster has only database 0: a `/db` is refused.
///
/// Unknown query parameters are rejected, so a typo cannot silently pick the default
/// namespace. The password never appears in `Debug` output.
#[derive(Clone)]
pub struct RedisConfig {
    /// The URL handed to the redis client (without this crate's own parameters).
    pub(crate) client_url: url::Url,
    pub(crate) namespace: Namespace,
    pub(crate) ca: Option<CaSource>,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    /// Redis Cluster mode: the node URLs to learn the slot map from (the URL's own
    /// node first); empty for a single server.
    pub(crate) cluster_nodes: Vec<url::Url>,
}

/// Where the root certificate for `rediss://` comes from.
#[derive(Clone, Debug)]
pub(crate) enum CaSource {
    File(PathBuf),
    Pem(Vec<u8>),
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut shown = self.client_url.clone();
        if shown.password().is_some() {
            let _ = shown.set_password(Some("<redacted>"));
        }
        f.debug_struct("RedisConfig")
            .field("url", &shown.as_str())
            .field("namespace", &self.namespace)
            .field("cluster_nodes", &self.cluster_nodes.len())
            .field(
                "ca",
                &self.ca.as_ref().map(|c| match c {
                    CaSource::File(p) => p.display().to_string(),
                    CaSource::Pem(_) => "<pem>".to_owned(),
                }),
            )
            .field("response_timeout", &self.response_timeout)
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

impl RedisConfig {
    /// Parses a `redis://` or `rediss://` URL (see the type's docs for the format).
    ///
    /// Fails with [`Error::InvalidInput`]: `Malformed` for a URL that does not parse,
    /// has no host, or carries an unknown query parameter; `UnknownScheme` for another
    /// scheme; the namespace's own problem for an invalid `ns`. Changes nothing and
    /// connects to nothing.
    pub fn from_url(url: &str) -> Result<RedisConfig> {
        let parsed = url::Url::parse(url).map_err(|_| malformed())?;
        if !SCHEMES.contains(&parsed.scheme()) {
            return Err(Error::invalid(
                "url",
                InputProblem::UnknownScheme {
                    scheme: parsed.scheme().to_owned(),
                    known: SCHEMES.to_vec(),
                },
            ));
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(malformed());
        }
        let mut namespace = None;
        let mut ca = None;
        let mut response_timeout = Duration::from_secs(2);
        let mut connect_timeout = Duration::from_secs(2);
        let mut passed = Vec::new();
        let mut cluster = false;
        let mut seeds = Vec::new();
        for (k, v) in parsed.query_pairs() {
            match k.as_ref() {
                "ns" => namespace = Some(Namespace::new(v.as_ref())?),
                "cluster" => {
                    cluster = match v.as_ref() {
                        "true" => true,
                        "false" => false,
                        _ => return Err(malformed()),
                    }
                }
                "seeds" => {
                    for seed in v.split(',') {
                        seeds.push(seed.to_owned());
                    }
                }
                "ca" if !v.is_empty() => ca = Some(CaSource::File(PathBuf::from(v.as_ref()))),
                "timeout_ms" => response_timeout = millis(&v)?,
                "connect_timeout_ms" => connect_timeout = millis(&v)?,
                "protocol" => passed.push((k.into_owned(), v.into_owned())),
                _ => return Err(malformed()),
            }
        }
        if ca.is_some() && parsed.scheme() != "rediss" {
            return Err(malformed());
        }
        let mut client_url = parsed.clone();
        client_url.set_query(None);
        if !passed.is_empty() {
            client_url.query_pairs_mut().extend_pairs(passed);
        }
        let cluster_nodes = if cluster {
            if !matches!(parsed.path(), "" | "/" | "/0") {
                return Err(malformed());
            }
            let mut nodes = vec![client_url.clone()];
            for seed in &seeds {
                nodes.push(seed_url(&client_url, seed)?);
            }
            nodes
        } else if !seeds.is_empty() {
            return Err(malformed());
        } else {
            Vec::new()
        };
        let namespace = match namespace {
            Some(ns) => ns,
            None => Namespace::new(DEFAULT_NAMESPACE)?,
        };
        Ok(RedisConfig {
            client_url,
            namespace,
            ca,
            response_timeout,
            connect_timeout,
            cluster_nodes,
        })
    }

    /// The namespace the store will be scoped to.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The same configuration on another namespace.
    pub fn with_namespace(mut self, namespace: Namespace) -> RedisConfig {
        self.namespace = namespace;
        self
    }

    /// Trusts this PEM root certificate (instead of the system roots) for `rediss://`.
    pub fn with_root_cert_pem(mut self, pem: Vec<u8>) -> RedisConfig {
        self.ca = Some(CaSource::Pem(pem));
        self
    }

    /// How long one operation waits for its answer before failing with `Unavailable`.
    pub fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// The same configuration with another response timeout (zero is `InvalidInput`).
    pub fn with_response_timeout(mut self, timeout: Duration) -> Result<RedisConfig> {
        if timeout.is_zero() {
            return Err(Error::invalid("timeout", InputProblem::Zero));
        }
        self.response_timeout = timeout;
        Ok(self)
    }

    /// True for `rediss://`.
    pub fn is_tls(&self) -> bool {
        self.client_url.scheme() == "rediss"
    }

    /// True for a Redis Cluster (`cluster=true`).
    pub fn is_cluster(&self) -> bool {
        !self.cluster_nodes.is_empty()
    }
}

/// The URL of one more cluster seed `HOST:PORT`: the main URL's scheme, user,
/// password and parameters with another host and port.
fn seed_url(main: &url::Url, seed: &str) -> Result<url::Url> {
    let (host, port) = seed.rsplit_once(':').ok_or_else(malformed)?;
    let port: u16 = port.parse().map_err(|_| malformed())?;
    if host.is_empty() {
        return Err(malformed());
    }
    let mut url = main.clone();
    url.set_host(Some(host.trim_start_matches('[').trim_end_matches(']')))
        .map_err(|_| malformed())?;
    url.set_port(Some(port)).map_err(|_| malformed())?;
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_namespace_and_options() {
        let c =
            RedisConfig::from_url("redis://u:pw@127.0.0.1:7000/2?ns=team_a&timeout_ms=50").unwrap();
        assert_eq!(c.namespace().as_str(), "team_a");
        assert_eq!(c.response_timeout(), Duration::from_millis(50));
        assert_eq!(c.client_url.as_str(), "redis://u:pw@127.0.0.1:7000/2");
        assert!(!format!("{c:?}").contains("pw"));
        let d = RedisConfig::from_url("redis://localhost").unwrap();
        assert_eq!(d.namespace().as_str(), "default");
        let t =
            RedisConfig::from_url("rediss://localhost:6380?ca=/tmp/ca.pem&protocol=resp3").unwrap();
        assert!(t.is_tls());
        assert_eq!(
            t.client_url.as_str(),
            "rediss://localhost:6380?protocol=resp3"
        );
    }

    #[test]
    fn cluster_urls_list_every_seed_with_the_same_credentials() {
        let c = RedisConfig::from_url(
            "rediss://u:pw@10.0.0.1:7000/?ns=a&cluster=true&seeds=10.0.0.2:7001,node-c:7002&ca=/ca.pem",
        )
        .unwrap();
        assert!(c.is_cluster());
        let nodes: Vec<&str> = c.cluster_nodes.iter().map(url::Url::as_str).collect();
        assert_eq!(
            nodes,
            [
                "rediss://u:pw@10.0.0.1:7000/",
                "rediss://u:pw@10.0.0.2:7001/",
                "rediss://u:pw@node-c:7002/"
            ]
        );
        assert!(!format!("{c:?}").contains("pw"));
        assert!(!RedisConfig::from_url("redis://h?cluster=false")
            .unwrap()
            .is_cluster());
    }

    #[test]
    fn rejects_bad_urls() {
        for bad in [
            "",
            "not a url",
            "redis://",
            "redis://h?namespace=x",
            "redis://h?timeout_ms=abc",
            "redis://h?ca=/x.pem",
            "redis://h?cluster=yes",
            "redis://h/2?cluster=true",
            "redis://h?seeds=h2:1",
            "redis://h?cluster=true&seeds=h2",
            "redis://h?cluster=true&seeds=h2:notaport",
            "redis://h?cluster=true&seeds=:7000",
        ] {
            assert!(
                matches!(
                    RedisConfig::from_url(bad),
                    Err(Error::InvalidInput {
                        problem: InputProblem::Malformed { .. },
                        ..
                    })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            RedisConfig::from_url("postgres://h"),
            Err(Error::InvalidInput {
                problem: InputProblem::UnknownScheme { .. },
                ..
            })
        ));
        assert!(matches!(
            RedisConfig::from_url("redis://h?ns=Bad"),
            Err(Error::InvalidInput {
                what: "namespace",
                ..
            })
        ));
        assert!(matches!(
            RedisConfig::from_url("redis://h?timeout_ms=0"),
            Err(Error::InvalidInput {
                problem: InputProblem::Zero,
                ..
            })
        ));
    }
}
