//! The connection: one server or a Redis Cluster, opened with its TLS settings,
//! and what connecting reads through it before the store is handed out (the
//! durability report, whether the namespace exists).

use std::time::Duration;

use liveness_core::{Error, Result};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use crate::config::{CaSource, RedisConfig};
use crate::durability::{parse_info, Report};
use crate::error::map;
use crate::keys::Keys;
use crate::BACKEND;

/// The connection: to one server, or to a Redis Cluster. Every script names its
/// namespace's keys (one hash slot), so the cluster client sends it to the node that
/// owns the slot and follows redirections while slots move.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

impl Conn {
    /// Connects to the server, or with `cluster=true` learns the cluster's slot map
    /// from its seed nodes (TLS with `root_cert`, the configured CA read by
    /// [`root_cert`], where the URL asks for it).
    pub(crate) async fn open(config: &RedisConfig, root_cert: Option<Vec<u8>>) -> Result<Conn> {
        if config.is_tls() {
            install_crypto_provider();
        }
        Ok(if config.is_cluster() {
            Conn::Cluster(connect_cluster(config, root_cert).await?)
        } else {
            Conn::Single(connect_single(config, root_cert).await?)
        })
    }

    /// Runs a keyless command (`SCAN`) where `key` lives: on a cluster, on the
    /// primary that owns the key's slot.
    pub(crate) async fn query_at(&mut self, cmd: Cmd, key: &str) -> RedisResult<Value> {
        match self {
            Conn::Single(c) => cmd.query_async(c).await,
            Conn::Cluster(c) => {
                let route = Route::with_key(key, SlotAddr::Master);
                c.route_command(
                    cmd,
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                )
                .await
            }
        }
    }

    /// What the node serving `key` says of its durability settings, for
    /// [`crate::durability::check`]: a refused `CONFIG GET` or `INFO` (renamed away,
    /// denied by an ACL) is recorded as such; a transport fault fails.
    pub(crate) async fn durability_report(&mut self, key: &str) -> Result<Report> {
        // A server error (unknown command, NOPERM) says this server does not let us
        // read it; a transport fault is `Unavailable` as anywhere else.
        let refused = |e: redis::RedisError| -> Result<String> {
            if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
                Err(map(e))
            } else {
                Ok(e.to_string())
            }
        };
        let mut config = redis::cmd("CONFIG");
        config
            .arg("GET")
            .arg("appendonly")
            .arg("appendfsync")
            .arg("maxmemory-policy");
        let config = match self.query_at(config, key).await {
            Ok(reply) => redis::from_redis_value(reply).map_err(|e| e.to_string()),
            Err(e) => Err(refused(e)?),
        };
        let mut info = redis::cmd("INFO");
        info.arg("persistence").arg("memory").arg("replication");
        let info = match self.query_at(info, key).await {
            Ok(reply) => redis::from_redis_value::<String>(reply)
                .map(|text| parse_info(&text))
                .map_err(|e| e.to_string()),
            Err(e) => Err(refused(e)?),
        };
        Ok(Report { config, info })
    }
}

/// The PEM of the CA configured for `rediss://` (`ca=` or
/// [`RedisConfig::with_root_cert_pem`]), read once at connect; `None`: the system
/// roots, or no TLS.
pub(crate) fn root_cert(config: &RedisConfig) -> Result<Option<Vec<u8>>> {
    Ok(match config.ca() {
        Some(ca) if config.is_tls() => Some(match ca {
            CaSource::Pem(pem) => pem.clone(),
            CaSource::File(path) => std::fs::read(path).map_err(|e| {
                Error::backend(
                    BACKEND,
                    std::io::Error::new(
                        e.kind(),
                        format!("cannot read the CA file {}: {e}", path.display()),
                    ),
                )
            })?,
        }),
        _ => None,
    })
}

/// A client of the one server at `url`, checking its certificate against
/// `root_cert` when given (else the system roots, for `rediss://`).
pub(crate) fn client(url: &str, root_cert: Option<Vec<u8>>) -> Result<redis::Client> {
    match root_cert {
        Some(pem) => redis::Client::build_with_tls(
            url,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem),
            },
        ),
        None => redis::Client::open(url),
    }
    .map_err(|e| Error::backend(BACKEND, e))
}

/// Picks rustls' `ring` provider for the process unless one is installed already
/// (another crate may have installed its own: that is fine).
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The most keys the namespace listing of [`check_existing`] looks at: a `SCAN` is
/// not free on a large server.
const LISTING_SCAN_LIMIT: usize = 10_000;

/// Checks, reading only, that the namespace of `keys` has handed out a token or an
/// item id: the opening of a store with [`RedisConfig::existing_only`].
pub(crate) async fn check_existing(
    conn: &mut Conn,
    keys: &Keys,
    config: &RedisConfig,
) -> Result<()> {
    let found: u64 = redis::cmd("EXISTS")
        .arg(keys.tokens())
        .arg(keys.item_ids())
        .query_async(conn)
        .await
        .map_err(map)?;
    if found > 0 {
        return Ok(());
    }
    let held = match conn {
        // One node of a cluster holds only its slots' namespaces: no listing.
        Conn::Cluster(_) => String::new(),
        Conn::Single(_) => format!("; it holds: {}", list_namespaces(conn).await?),
    };
    Err(Error::invalid(
        "namespace",
        liveness_core::InputProblem::BadValue {
            name: "ns",
            got: config.namespace().to_string(),
            expected: format!("a namespace the server {} holds{held}", location(config)),
        },
    ))
}

/// The namespaces with a token or item id counter that a `SCAN` of at most
/// [`LISTING_SCAN_LIMIT`] keys finds on a single server, for an error message.
async fn list_namespaces(conn: &mut Conn) -> Result<String> {
    let mut found = std::collections::BTreeSet::new();
    let mut cursor: u64 = 0;
    let mut seen = 0;
    let mut more = String::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("liveness:{*}:*")
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .map_err(map)?;
        seen += 1000;
        for key in &batch {
            let ns = key
                .strip_prefix("liveness:{")
                .and_then(|rest| rest.split_once("}:"))
                .filter(|(_, what)| matches!(*what, "tokens" | "ids"))
                .map(|(ns, _)| ns.to_owned());
            found.extend(ns);
        }
        if next == 0 {
            break;
        }
        if seen >= LISTING_SCAN_LIMIT {
            more = format!(" (and maybe more: the scan stopped after {seen} keys)");
            break;
        }
        cursor = next;
    }
    let found = if found.is_empty() {
        "none".to_owned()
    } else {
        found.into_iter().collect::<Vec<_>>().join(", ")
    };
    Ok(found + &more)
}

/// One multiplexed connection to a single server, reconnecting after faults.
async fn connect_single(
    config: &RedisConfig,
    root_cert: Option<Vec<u8>>,
) -> Result<ConnectionManager> {
    let client = client(config.client_url().as_str(), root_cert)?;
    let manager_config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(config.response_timeout()))
        .set_connection_timeout(Some(config.connect_timeout()))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(500));
    client
        .get_connection_manager_with_config(manager_config)
        .await
        .map_err(map)
}

/// A cluster connection: the slot map learnt from the seeds, one connection per node.
async fn connect_cluster(
    config: &RedisConfig,
    root_cert: Option<Vec<u8>>,
) -> Result<ClusterConnection> {
    let mut builder =
        ClusterClientBuilder::new(config.cluster_nodes().iter().map(|u| u.as_str().to_owned()))
            .connection_timeout(config.connect_timeout())
            .response_timeout(config.response_timeout())
            // No re-sends: the cluster client re-sends a request after an I/O error
            // (and after MOVED / ASK), and a script that ran before the connection broke
            // would run twice. The caller sees `Unavailable` and retries by the
            // contract's rules instead (a redirect still refreshes the slot map).
            .retries(0);
    if let Some(pem) = root_cert {
        builder = builder.certs(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem),
        });
    }
    let client = builder.build().map_err(|e| Error::backend(BACKEND, e))?;
    client.get_async_connection().await.map_err(map)
}

/// Where a handle's store is, for its [`Issuer`]: `host:port/db` of the server, or
/// `cluster:` and the sorted `host:port` of the configured nodes — no credentials, no
/// tuning parameters, so that every handle on the same server agrees.
pub(crate) fn location(config: &RedisConfig) -> String {
    let node = |u: &url::Url| {
        format!(
            "{}:{}",
            u.host_str().unwrap_or_default(),
            u.port_or_known_default().unwrap_or(6379)
        )
    };
    if config.cluster_nodes().is_empty() {
        let url = config.client_url();
        let db = url.path().trim_start_matches('/');
        let db = if db.is_empty() { "0" } else { db };
        format!("{}/{db}", node(url))
    } else {
        let mut nodes: Vec<String> = config.cluster_nodes().iter().map(|u| node(u)).collect();
        nodes.sort();
        nodes.dedup();
        format!("cluster:{}", nodes.join(","))
    }
}
