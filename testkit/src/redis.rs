//! A real `redis-server` for tests: one shared per test binary ([`RedisServer::shared`]),
//! or a private one with its own settings (TLS, AUTH, AOF) for the tests that need
//! them or that stop, pause and restart it ([`RedisServer::spawn`]).
//!
//! `LIVENESS_REDIS_URL` makes [`RedisServer::shared`] use an existing server instead
//! (tests then must use fresh namespaces, which the conformance suite does).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::{find_binary, free_port, missing, with_query, ServerProcess};

/// The environment variable naming an existing server to use instead of starting one.
pub const ENV_URL: &str = "LIVENESS_REDIS_URL";

const INSTALL_HINT: &str = "apt-get install redis-server, or set LIVENESS_REDIS_URL";

/// How long a starting server may take to listen.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// Settings of a private server started by [`RedisServer::spawn`].
#[derive(Clone, Debug, Default)]
pub struct RedisOptions {
    /// Persist every write with `appendonly yes` + `appendfsync always`, so a killed and
    /// restarted server comes back with every acknowledged write (the settings the
    /// backend's README asks for). Default: no persistence at all — about ten times
    /// faster for writes on the development VM — and the server's URL then carries
    /// `durability=relaxed`, which the backend requires to accept such a server.
    pub durable: bool,
    /// Serve only TLS (`rediss://`), with a certificate for `127.0.0.1` and `localhost`
    /// signed by a throw-away CA made with `openssl` in the server's folder.
    pub tls: bool,
    /// Require this ACL user and password (`--user NAME on >PASSWORD ~* &* +@all`);
    /// the default user then needs the same password.
    pub user: Option<(String, String)>,
    /// More `redis-server` arguments, appended after the kit's own (e.g.
    /// `["--rename-command", "CONFIG", ""]` to start a server without `CONFIG`, as
    /// managed services run it).
    pub extra_args: Vec<String>,
}

/// A Redis server for tests: a process this test binary started, or the server named
/// by `LIVENESS_REDIS_URL`.
#[derive(Debug)]
pub struct RedisServer {
    process: Option<ServerProcess>,
    url: String,
    ca: Option<PathBuf>,
}

impl RedisServer {
    /// The server shared by every test of this binary, started on first use (no
    /// persistence, no TLS, no AUTH), or the one `LIVENESS_REDIS_URL` names.
    ///
    /// `None` (after one printed SKIP line per call) when `redis-server` is missing
    /// and [`missing`] allows a skip (`LIVENESS_ALLOW_SKIP=1` outside
    /// CI); otherwise a missing server panics, failing the test.
    pub fn shared() -> Option<&'static RedisServer> {
        static SHARED: OnceLock<Result<RedisServer, String>> = OnceLock::new();
        let got = SHARED.get_or_init(|| match std::env::var(ENV_URL) {
            Ok(url) if !url.is_empty() => Ok(RedisServer {
                process: None,
                url,
                ca: None,
            }),
            _ => Self::try_spawn(&RedisOptions::default()),
        });
        match got {
            Ok(server) => Some(server),
            Err(why) => missing(why, INSTALL_HINT),
        }
    }

    /// A new server of this test's own, or the one `LIVENESS_REDIS_URL` names
    /// (which tests must not stop or pause: [`RedisServer::process`] is then `None`).
    pub fn start() -> Option<RedisServer> {
        match std::env::var(ENV_URL) {
            Ok(url) if !url.is_empty() => Some(RedisServer {
                process: None,
                url,
                ca: None,
            }),
            _ => Self::spawn(RedisOptions::default()),
        }
    }

    /// Always starts a private server process with `options`, ignoring
    /// `LIVENESS_REDIS_URL`: for fault tests and for TLS / AUTH set-ups.
    ///
    /// `None` (after a SKIP line) when `redis-server` (or, for TLS, `openssl`) is
    /// missing and [`missing`] allows a skip; otherwise a panic.
    pub fn spawn(options: RedisOptions) -> Option<RedisServer> {
        match Self::try_spawn(&options) {
            Ok(server) => Some(server),
            Err(why) => missing(&why, INSTALL_HINT),
        }
    }

    fn try_spawn(options: &RedisOptions) -> Result<RedisServer, String> {
        let binary = find_binary("redis-server", &["/usr/local/bin", "/usr/bin", "/usr/sbin"])
            .ok_or_else(|| "redis-server".to_owned())?;
        if options.tls && find_binary("openssl", &["/usr/bin"]).is_none() {
            return Err("openssl (for the TLS test certificates)".to_owned());
        }
        let mut last = String::new();
        // A free port can be taken by someone else before the server binds it: retry.
        for _ in 0..4 {
            match Self::try_spawn_once(&binary, options) {
                Ok(server) => return Ok(server),
                Err(e) => last = e,
            }
        }
        panic!("redis-server is installed but did not start: {last}");
    }

    fn try_spawn_once(binary: &Path, options: &RedisOptions) -> Result<RedisServer, String> {
        let dir = tempfile::Builder::new()
            .prefix("liveness-redis-")
            .tempdir()
            .map_err(|e| format!("cannot make a temp dir: {e}"))?;
        if options.tls {
            crate::tls::make_certificates(dir.path()).map_err(|e| e.to_string())?;
        }
        let port = free_port().map_err(|e| format!("no free port: {e}"))?;
        let binary = binary.to_path_buf();
        let opts = options.clone();
        let launcher = Box::new(move |dir: &Path, port: u16| {
            let mut cmd = Command::new(&binary);
            cmd.current_dir(dir)
                .arg("--bind")
                .arg("127.0.0.1")
                .arg("--dir")
                .arg(dir)
                .arg("--save")
                .arg("")
                .arg("--protected-mode")
                .arg("no");
            if opts.tls {
                cmd.args(["--port", "0", "--tls-port"])
                    .arg(port.to_string())
                    .arg("--tls-cert-file")
                    .arg(dir.join("server.pem"))
                    .arg("--tls-key-file")
                    .arg(dir.join("server.key"))
                    .arg("--tls-ca-cert-file")
                    .arg(dir.join("ca.pem"))
                    .args(["--tls-auth-clients", "no"]);
            } else {
                cmd.arg("--port").arg(port.to_string());
            }
            if opts.durable {
                cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
            } else {
                cmd.args(["--appendonly", "no"]);
            }
            if let Some((user, password)) = &opts.user {
                cmd.arg("--requirepass")
                    .arg(password)
                    .arg("--user")
                    .arg(user)
                    .arg("on")
                    .arg(format!(">{password}"))
                    .args(["~*", "&*", "+@all"]);
            }
            cmd.args(&opts.extra_args);
            cmd
        });
        let process = ServerProcess::start("redis-server", dir, port, launcher, READY_WITHIN)
            .map_err(|e| e.to_string())?;
        let scheme = if options.tls { "rediss" } else { "redis" };
        let auth = match &options.user {
            Some((user, password)) => format!("{user}:{password}@"),
            None => String::new(),
        };
        let ca = options.tls.then(|| process.dir().join("ca.pem"));
        let mut url = format!("{scheme}://{auth}127.0.0.1:{port}");
        if let Some(ca) = &ca {
            url.push_str(&format!("?ca={}", ca.display()));
        }
        if !options.durable {
            // No persistence, deliberately (speed): the backend refuses such a
            // server unless told that this is accepted.
            url = with_query(&url, "durability=relaxed");
        }
        Ok(RedisServer {
            process: Some(process),
            url,
            ca,
        })
    }

    /// The server's URL: `redis://[user:password@]127.0.0.1:PORT`, or for TLS
    /// `rediss://127.0.0.1:PORT?ca=PATH` (the backend's `ca` parameter names the CA
    /// that signed the server's certificate), with `durability=relaxed` in the query
    /// unless the server was started [`RedisOptions::durable`]. Add parameters with
    /// [`RedisServer::url_with`], or set the namespace on the parsed config.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL with more query parameters (`ns=...&timeout_ms=...`).
    pub fn url_with(&self, query: &str) -> String {
        with_query(&self.url, query)
    }

    /// The PEM file of the CA that signed a TLS server's certificate.
    pub fn ca_pem(&self) -> Option<&Path> {
        self.ca.as_deref()
    }

    /// The server process, for fault tests (kill, pause, restart); `None` for a
    /// server named by `LIVENESS_REDIS_URL`.
    pub fn process(&self) -> Option<&ServerProcess> {
        self.process.as_ref()
    }

    /// The server process, mutably (to kill or restart it).
    pub fn process_mut(&mut self) -> Option<&mut ServerProcess> {
        self.process.as_mut()
    }
}

/// The environment variable naming an existing Redis Cluster (a `redis://` URL of one
/// node with `?cluster=true`) to use instead of starting one.
pub const ENV_CLUSTER_URL: &str = "LIVENESS_REDIS_CLUSTER_URL";

/// How many primaries [`RedisCluster::start`] starts.
pub const CLUSTER_NODES: usize = 3;

/// A Redis Cluster for tests: three primaries (no replicas), each a
/// `redis-server --cluster-enabled yes` on free loopback ports (client and bus) in its
/// own temporary folder, joined by `redis-cli --cluster create`; or the cluster named
/// by `LIVENESS_REDIS_CLUSTER_URL`.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<ServerProcess>,
    url: String,
}

impl RedisCluster {
    /// Starts a cluster and waits until every node reports `cluster_state:ok`.
    ///
    /// `None` (after a SKIP line) when `redis-server` or `redis-cli` is missing and
    /// [`missing`] allows a skip; otherwise a panic, and a panic when
    /// they are installed but the cluster does not form.
    pub fn start() -> Option<RedisCluster> {
        if let Ok(url) = std::env::var(ENV_CLUSTER_URL) {
            if !url.is_empty() {
                return Some(RedisCluster {
                    nodes: Vec::new(),
                    url,
                });
            }
        }
        let (server, cli) = server_and_cli(INSTALL_HINT)?;
        let mut last = String::new();
        for _ in 0..3 {
            match Self::try_start(&server, &cli) {
                Ok(cluster) => return Some(cluster),
                Err(e) => last = e,
            }
        }
        panic!("redis-server is installed but a cluster did not form: {last}");
    }

    fn try_start(server: &Path, cli: &Path) -> Result<RedisCluster, String> {
        let mut nodes = Vec::new();
        for _ in 0..CLUSTER_NODES {
            let (dir, port, bus) = node_place("liveness-redis-cluster-")?;
            let binary = server.to_path_buf();
            let launcher = Box::new(move |dir: &Path, port: u16| {
                let mut cmd = cluster_node_command(&binary, dir, port, bus, 2000);
                cmd.args(["--save", "", "--appendonly", "no"]);
                cmd
            });
            nodes.push(
                ServerProcess::start("redis-server (cluster)", dir, port, launcher, READY_WITHIN)
                    .map_err(|e| e.to_string())?,
            );
        }
        let addrs = node_addrs(&nodes);
        create_cluster(cli, &addrs)?;
        // Every node must agree that all slots are served before tests start.
        let until = std::time::Instant::now() + Duration::from_secs(30);
        for node in &nodes {
            loop {
                let info = Command::new(cli)
                    .args(["-h", "127.0.0.1", "-p"])
                    .arg(node.port().to_string())
                    .args(["cluster", "info"])
                    .output()
                    .map_err(|e| format!("redis-cli: {e}"))?;
                if String::from_utf8_lossy(&info.stdout).contains("cluster_state:ok") {
                    break;
                }
                if std::time::Instant::now() > until {
                    return Err(format!(
                        "node {} never reported cluster_state:ok",
                        node.port()
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        // The nodes run without persistence (speed): `durability=relaxed` says the
        // backend may accept them.
        let url = with_query(&cluster_url(&addrs), "durability=relaxed");
        Ok(RedisCluster { nodes, url })
    }

    /// The cluster's URL for the backend: the first node, `cluster=true`, the other
    /// nodes as `seeds`, and `durability=relaxed` (the nodes do not persist). Append
    /// `&ns=...` as needed.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Each node's own URL (`redis://127.0.0.1:PORT`), to look at one node directly;
    /// empty for a cluster named by `LIVENESS_REDIS_CLUSTER_URL`.
    pub fn node_urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port()))
            .collect()
    }

    /// The node processes, for fault tests; empty for a cluster named by
    /// `LIVENESS_REDIS_CLUSTER_URL`.
    pub fn nodes(&self) -> &[ServerProcess] {
        &self.nodes
    }

    /// Kills node `i` (SIGKILL): its slots are unserved until it comes back, since
    /// the test cluster has no replicas.
    pub fn kill_node(&mut self, i: usize) {
        self.nodes[i].kill();
    }
}

/// Finds `redis-server` and `redis-cli`; `None` (after [`missing`] allowed a skip,
/// naming `install_hint` for the server) when either is absent.
pub(crate) fn server_and_cli(install_hint: &str) -> Option<(PathBuf, PathBuf)> {
    let Some(server) = find_binary("redis-server", &BIN_DIRS) else {
        return missing("redis-server", install_hint);
    };
    let Some(cli) = find_binary("redis-cli", &BIN_DIRS) else {
        return missing("redis-cli", "apt-get install redis-tools");
    };
    Some((server, cli))
}

/// Where the test kit looks for the Redis binaries (and `cc`).
pub(crate) const BIN_DIRS: [&str; 3] = ["/usr/local/bin", "/usr/bin", "/usr/sbin"];

/// `redis-cli --cluster create ADDRS... --cluster-replicas 0`: joins the nodes at
/// `addrs` into one cluster with the slots spread over them.
///
/// Gives up after [`CLUSTER_CREATE_TIMEOUT`]: on a loaded machine `redis-cli` can wait
/// forever for the nodes to agree, and the caller then starts over with new nodes.
pub(crate) fn create_cluster(cli: &Path, addrs: &[String]) -> Result<(), String> {
    use std::io::{Read, Seek};
    let mut log = tempfile::tempfile().map_err(|e| format!("a temp file: {e}"))?;
    let err = log.try_clone().map_err(|e| format!("a temp file: {e}"))?;
    let out = log.try_clone().map_err(|e| format!("a temp file: {e}"))?;
    let mut child = Command::new(cli)
        .arg("--cluster")
        .arg("create")
        .args(addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("redis-cli: {e}"))?;
    let until = std::time::Instant::now() + CLUSTER_CREATE_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("redis-cli: {e}"))? {
            break Some(status);
        }
        if std::time::Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut text = String::new();
    let _ = log.rewind();
    let _ = log.read_to_string(&mut text);
    match status {
        Some(status) if status.success() => Ok(()),
        Some(_) => Err(format!("redis-cli --cluster create failed: {text}")),
        None => Err(format!(
            "redis-cli --cluster create did not finish within {CLUSTER_CREATE_TIMEOUT:?}: {text}"
        )),
    }
}

/// How long [`create_cluster`] waits for `redis-cli --cluster create`.
pub(crate) const CLUSTER_CREATE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The backend's URL for a cluster: the first node with `cluster=true`, every other
/// node as a seed.
pub(crate) fn cluster_url(addrs: &[String]) -> String {
    format!(
        "redis://{}/?cluster=true&seeds={}",
        addrs[0],
        addrs[1..].join(",")
    )
}

/// Where a new cluster node lives: a fresh temporary folder named with `prefix`, a
/// free port for its clients and one for its cluster bus.
pub(crate) fn node_place(prefix: &str) -> Result<(tempfile::TempDir, u16, u16), String> {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .map_err(|e| format!("cannot make a temp dir: {e}"))?;
    let port = free_port().map_err(|e| format!("no free port: {e}"))?;
    let bus = free_port().map_err(|e| format!("no free port: {e}"))?;
    Ok((dir, port, bus))
}

/// `redis-server` as a cluster node in `dir` (the working folder and the data
/// folder) on 127.0.0.1:`port`, its cluster bus on `bus`, marking an unreachable
/// peer failed after `node_timeout_ms`; the caller adds the persistence settings.
pub(crate) fn cluster_node_command(
    binary: &Path,
    dir: &Path,
    port: u16,
    bus: u16,
    node_timeout_ms: u32,
) -> Command {
    let mut cmd = Command::new(binary);
    cmd.current_dir(dir)
        .args(["--bind", "127.0.0.1", "--protected-mode", "no"])
        .arg("--port")
        .arg(port.to_string())
        .arg("--dir")
        .arg(dir)
        .args(["--cluster-enabled", "yes"])
        .args(["--cluster-config-file", "nodes.conf"])
        .arg("--cluster-port")
        .arg(bus.to_string())
        .arg("--cluster-node-timeout")
        .arg(node_timeout_ms.to_string());
    cmd
}

/// Each node's `127.0.0.1:PORT`, in node order.
pub(crate) fn node_addrs(nodes: &[ServerProcess]) -> Vec<String> {
    nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port()))
        .collect()
}
