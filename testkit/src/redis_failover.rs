//! A Redis Cluster with one replica per primary, for failover tests: three primaries
//! and three replicas, each a `redis-server --cluster-enabled yes` on free loopback
//! ports in its own temporary folder, with the settings the backend's README
//! recommends (`appendonly yes`, `appendfsync always`) and a short
//! `cluster-node-timeout` (1 s) so that a killed primary's replica takes over within
//! a few seconds.
//!
//! The backend speaks to a Redis Cluster (`cluster=true`) and follows a failover by
//! the cluster's own slot map: after a replica is promoted, the nodes answer `MOVED`
//! to it. (Sentinel is not supported by the backend's client, so Cluster is how a
//! replicated Redis is tested.)
//!
//! [`FailoverOptions::replica_clock_offset`] starts the replicas with their wall clock
//! shifted (a small preload library built with `cc`, since libfaketime cannot start
//! Debian's jemalloc-linked `redis-server`): after a failover the promoted replica's
//! `TIME` judges leases whose expiry the old primary wrote.
//!
//! Missing `redis-server`, `redis-cli` or (when a clock offset is asked for) `cc`
//! follow the test kit's rule ([`missing`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::redis::{
    cluster_node_command, cluster_url, create_cluster, node_addrs, node_place, server_and_cli,
    BIN_DIRS,
};
use crate::{find_binary, missing, ServerProcess};

const INSTALL_HINT: &str = "apt-get install redis-server redis-tools";
const READY_WITHIN: Duration = Duration::from_secs(10);
/// How long the cluster gets to form, and a failover to complete.
const FORM_WITHIN: Duration = Duration::from_secs(30);

/// How [`FailoverCluster::start`] sets the cluster up.
#[derive(Clone, Debug, Default)]
pub struct FailoverOptions {
    /// Shift every replica's wall clock by this many seconds (positive: ahead,
    /// negative: behind); the primaries keep the host's clock.
    pub replica_clock_offset: Option<i64>,
}

/// Three primaries, each with one replica. Dropping it stops every node and removes
/// the folders.
#[derive(Debug)]
pub struct FailoverCluster {
    /// Nodes 0..3 started as primaries, 3..6 as their replicas (3 + i replicates i).
    nodes: Vec<ServerProcess>,
    cli: PathBuf,
    url: String,
    /// The folder of the clock shim the replicas preload, removed on drop.
    _shim: Option<tempfile::TempDir>,
}

/// A preload library that shifts the wall clock (`CLOCK_REALTIME`, `gettimeofday`,
/// `time`) by `LIVENESS_CLOCK_OFFSET_S` seconds, reading the kernel clock by raw
/// system call. libfaketime cannot do it here: Debian's `redis-server` is linked with
/// jemalloc, whose start-up calls `clock_gettime` while libfaketime initialises
/// (wolfcw/libfaketime#130), and the server does not start.
const CLOCK_SHIM: &str = r#"
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
static long long shift(void) {
  static int ready = 0;
  static long long seconds = 0;
  if (!ready) {
    const char *s = getenv("LIVENESS_CLOCK_OFFSET_S");
    seconds = s ? atoll(s) : 0;
    ready = 1;
  }
  return seconds;
}
int clock_gettime(clockid_t clock, struct timespec *ts) {
  int r = (int)syscall(SYS_clock_gettime, clock, ts);
  if (r == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
    ts->tv_sec += shift();
  }
  return r;
}
int gettimeofday(struct timeval *tv, void *tz) {
  struct timespec ts;
  (void)tz;
  int r = (int)syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
  if (r != 0) return r;
  if (tv) {
    tv->tv_sec = ts.tv_sec + shift();
    tv->tv_usec = ts.tv_nsec / 1000;
  }
  return 0;
}
time_t time(time_t *t) {
  struct timeval tv;
  gettimeofday(&tv, 0);
  if (t) *t = tv.tv_sec;
  return tv.tv_sec;
}
"#;

/// Compiles [`CLOCK_SHIM`] with the C compiler (`cc`) into `dir`.
fn build_clock_shim(cc: &Path, dir: &Path) -> Result<PathBuf, String> {
    let source = dir.join("clock_shim.c");
    let lib = dir.join("clock_shim.so");
    std::fs::write(&source, CLOCK_SHIM).map_err(|e| e.to_string())?;
    let out = Command::new(cc)
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&lib)
        .arg(&source)
        .output()
        .map_err(|e| format!("cc: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cc could not build the clock shim: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(lib)
}

impl FailoverCluster {
    /// Starts the cluster and waits until every node reports `cluster_state:ok` and
    /// every replica is in sync with its primary.
    ///
    /// `None` (after a SKIP line) when a binary (or `cc`, when a clock offset is asked
    /// for) is missing and [`missing`] allows a skip; otherwise a panic, also
    /// when they are installed but the cluster does not form.
    pub fn start(options: FailoverOptions) -> Option<FailoverCluster> {
        let (server, cli) = server_and_cli(INSTALL_HINT)?;
        // The shim lives as long as the cluster's first node folder would; keep it in
        // a folder of its own that the cluster owns.
        let shim_dir = tempfile::Builder::new()
            .prefix("liveness-clock-shim-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot make a temp dir: {e}"));
        let faketime = match options.replica_clock_offset {
            None => None,
            Some(offset) => {
                let Some(cc) = find_binary("cc", &BIN_DIRS) else {
                    return missing("cc (to build the clock shim)", "apt-get install gcc");
                };
                match build_clock_shim(&cc, shim_dir.path()) {
                    Ok(lib) => Some((lib, offset)),
                    Err(e) => panic!("{e}"),
                }
            }
        };
        let mut last = String::new();
        for _ in 0..3 {
            match try_start(&server, &cli, faketime.as_ref()) {
                Ok(mut cluster) => {
                    cluster._shim = Some(shim_dir);
                    return Some(cluster);
                }
                Err(e) => last = e,
            }
        }
        panic!("redis-server is installed but a replicated cluster did not form: {last}");
    }

    /// The backend's URL: the first node with `cluster=true`, every other node as a
    /// seed. Append `&ns=...` as needed.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The node processes: 0..3 started as primaries, `3 + i` as the replica of `i`.
    pub fn nodes(&self) -> &[ServerProcess] {
        &self.nodes
    }

    /// Runs `redis-cli -p PORT ARGS...` against node `i` and returns its output.
    pub fn cli(&self, i: usize, args: &[&str]) -> std::io::Result<String> {
        cli(&self.cli, self.nodes[i].port(), args)
    }

    /// The node that serves the slot of namespace `ns` (its keys share the hash tag
    /// `{ns}`) as a primary, by node `ask`'s view of the cluster.
    pub fn primary_of(&self, ns: &str, ask: usize) -> std::io::Result<usize> {
        let slot: u32 = self
            .cli(ask, &["cluster", "keyslot", &format!("{{{ns}}}")])?
            .trim()
            .parse()
            .map_err(std::io::Error::other)?;
        let nodes = self.cli(ask, &["cluster", "nodes"])?;
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 || !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            let serves = fields[8..].iter().any(|range| {
                let mut ends = range.split('-');
                let lo = ends.next().and_then(|v| v.parse::<u32>().ok());
                let hi = ends.next().and_then(|v| v.parse::<u32>().ok()).or(lo);
                matches!((lo, hi), (Some(lo), Some(hi)) if lo <= slot && slot <= hi)
            });
            if serves {
                let port = fields[1]
                    .split(['@', ':'])
                    .nth(1)
                    .and_then(|p| p.parse::<u16>().ok());
                if let Some(i) = self.nodes.iter().position(|n| Some(n.port()) == port) {
                    return Ok(i);
                }
            }
        }
        Err(std::io::Error::other(format!(
            "no primary serves slot {slot}: {nodes}"
        )))
    }

    /// The replica of the primary that node `i` was started as (or the primary of a
    /// replica): the other node of its pair.
    pub fn partner(&self, i: usize) -> usize {
        (i + 3) % 6
    }

    /// Kills node `i` (SIGKILL), keeping its data folder.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Starts node `i` again on its port and data folder (it re-joins as a replica of
    /// the node that took its slots over).
    pub fn restart(&mut self, i: usize) -> std::io::Result<()> {
        self.nodes[i].restart(READY_WITHIN)
    }

    /// Waits until node `i` says it is a primary (`ROLE` answers `master`) and every
    /// running node reports `cluster_state:ok`, skipping the nodes in `down`.
    pub fn wait_primary(&self, i: usize, down: &[usize], within: Duration) -> std::io::Result<()> {
        let until = Instant::now() + within;
        loop {
            let is_primary = self
                .cli(i, &["role"])
                .map(|r| r.starts_with("master"))
                .unwrap_or(false);
            let all_ok = (0..self.nodes.len())
                .filter(|n| !down.contains(n))
                .all(|n| {
                    self.cli(n, &["cluster", "info"])
                        .map(|s| s.contains("cluster_state:ok"))
                        .unwrap_or(false)
                });
            if is_primary && all_ok {
                return Ok(());
            }
            if Instant::now() > until {
                return Err(std::io::Error::other(format!(
                    "node {i} did not become a primary of a healthy cluster within {within:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn cli(bin: &Path, port: u16, args: &[&str]) -> std::io::Result<String> {
    let out = Command::new(bin)
        .args(["-h", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(args)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() && !text.starts_with("ERR") {
        Ok(text)
    } else {
        Err(std::io::Error::other(format!(
            "redis-cli -p {port} {}: {text}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

fn try_start(
    server: &Path,
    cli_bin: &Path,
    faketime: Option<&(PathBuf, i64)>,
) -> Result<FailoverCluster, String> {
    let mut nodes = Vec::new();
    let mut buses = Vec::new();
    for i in 0..6 {
        let (dir, port, bus) = node_place("liveness-redis-failover-")?;
        buses.push(bus);
        let binary = server.to_path_buf();
        let shifted = faketime.filter(|_| i >= 3).cloned();
        let launcher = Box::new(move |dir: &Path, port: u16| {
            let mut cmd = cluster_node_command(&binary, dir, port, bus, 1000);
            cmd.args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ]);
            if let Some((lib, offset)) = &shifted {
                cmd.env("LD_PRELOAD", lib)
                    .env("LIVENESS_CLOCK_OFFSET_S", offset.to_string());
            }
            cmd
        });
        nodes.push(
            ServerProcess::start("redis-server (failover)", dir, port, launcher, READY_WITHIN)
                .map_err(|e| e.to_string())?,
        );
    }
    let addrs = node_addrs(&nodes);
    create_cluster(cli_bin, &addrs[..3])?;
    let run =
        |i: usize, args: &[&str]| cli(cli_bin, nodes[i].port(), args).map_err(|e| e.to_string());
    let ids: Vec<String> = (0..3)
        .map(|i| run(i, &["cluster", "myid"]).map(|s| s.trim().to_owned()))
        .collect::<Result<_, _>>()?;
    for r in 3..6 {
        run(
            r,
            &[
                "cluster",
                "meet",
                "127.0.0.1",
                &nodes[r - 3].port().to_string(),
                &buses[r - 3].to_string(),
            ],
        )?;
    }
    let until = Instant::now() + FORM_WITHIN;
    for r in 3..6 {
        // The replica must know its primary (gossip) before it can replicate it.
        loop {
            match run(r, &["cluster", "replicate", &ids[r - 3]]) {
                Ok(_) => break,
                Err(e) if Instant::now() > until => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
    for i in 0..6 {
        loop {
            let ok = run(i, &["cluster", "info"])
                .map(|s| s.contains("cluster_state:ok"))
                .unwrap_or(false)
                && (i < 3
                    || run(i, &["info", "replication"])
                        .map(|s| s.contains("master_link_status:up"))
                        .unwrap_or(false));
            if ok {
                break;
            }
            if Instant::now() > until {
                return Err(format!("node {i} never became ready"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let url = cluster_url(&addrs);
    Ok(FailoverCluster {
        nodes,
        cli: cli_bin.to_path_buf(),
        url,
        _shim: None,
    })
}
