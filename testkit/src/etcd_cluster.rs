//! A real three-member etcd cluster for tests: every member in its own temporary
//! folder, on free client and peer ports of 127.0.0.1, with etcd's default election
//! settings (heartbeat 100 ms, election timeout 1 s).
//!
//! - [`shared`]: the cluster the tests of one test binary share (each test works in its
//!   own random namespace).
//! - [`EtcdCluster::start`]: a dedicated cluster, for fault tests that kill, restart or
//!   freeze (SIGSTOP) one member, typically the leader ([`EtcdCluster::leader`]).
//!
//! The binaries are the ones of [`crate::etcd`] (Debian's `etcd-server` and
//! `etcd-client`); when they are missing, [`missing`] fails the test, or skips it with
//! a SKIP line when `LIVENESS_ALLOW_SKIP=1` is set outside CI.

use std::path::Path;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::{find_binary, free_port, missing, ServerProcess};

const HINT: &str = "apt-get install etcd-server etcd-client";

/// How long a starting cluster gets to elect a leader and answer health checks.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// The number of members [`EtcdCluster::start`] starts.
pub const MEMBERS: usize = 3;

/// A three-member etcd cluster this process started; dropping it stops every member
/// and removes their folders.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<ServerProcess>,
}

/// The cluster the tests of this process share, started on first use. `None` (after a
/// skip line) when etcd is missing and [`missing`] allows a skip.
///
/// It lives until the process exits; the test kit's watchdogs then stop its members
/// and remove their folders.
pub fn shared() -> Option<&'static EtcdCluster> {
    static SHARED: OnceLock<Option<EtcdCluster>> = OnceLock::new();
    SHARED.get_or_init(EtcdCluster::start).as_ref()
}

impl EtcdCluster {
    /// Starts a dedicated cluster of [`MEMBERS`] members and waits until every member
    /// answers health checks (the cluster has a leader). `None` (after a skip line)
    /// when etcd is missing and [`missing`] allows a skip; panics when it is present
    /// but does not start.
    pub fn start() -> Option<EtcdCluster> {
        let Some(etcd) = find_binary("etcd", &[]) else {
            return missing("etcd", HINT);
        };
        if find_binary("etcdctl", &[]).is_none() {
            return missing("etcdctl", HINT);
        }
        let mut last = None;
        // A free port can be taken by someone else between the probe and etcd's bind:
        // retry with fresh ports.
        for _ in 0..3 {
            match try_start(&etcd) {
                Ok(cluster) => return Some(cluster),
                Err(e) => last = Some(e),
            }
        }
        panic!(
            "the etcd cluster did not start: {}",
            last.map(|e| e.to_string()).unwrap_or_default()
        );
    }

    /// The liveness URL naming every member:
    /// `etcd://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.port()))
            .collect();
        format!("etcd://{}", hosts.join(","))
    }

    /// The gRPC endpoint of member `i`: `http://127.0.0.1:PORT`.
    pub fn endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].port())
    }

    /// The member processes, in start order.
    pub fn members(&self) -> &[ServerProcess] {
        &self.members
    }

    /// Runs `etcdctl` against member `i` alone and returns its standard output.
    pub fn etcdctl(&self, i: usize, args: &[&str]) -> std::io::Result<String> {
        let cmd = crate::etcd::etcdctl_command(&self.endpoint(i), "1s", "2s")?;
        crate::etcd::run_etcdctl(cmd, args)
    }

    /// Asks member `i` who leads: `(its own member id, the leader's member id, raft
    /// term)`, `Err` when it does not answer or knows no leader.
    pub fn status(&self, i: usize) -> std::io::Result<(u64, u64, u64)> {
        let out = self.etcdctl(i, &["endpoint", "status", "-w", "json"])?;
        let field = |name: &str| -> std::io::Result<u64> {
            let pattern = format!("\"{name}\":");
            let at = out
                .find(&pattern)
                .ok_or_else(|| std::io::Error::other(format!("no {name} in {out}")))?;
            let digits: String = out[at + pattern.len()..]
                .chars()
                .skip_while(|c| c.is_whitespace())
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().map_err(std::io::Error::other)
        };
        let (me, leader, term) = (field("member_id")?, field("leader")?, field("raft_term")?);
        if leader == 0 {
            return Err(std::io::Error::other("no leader"));
        }
        Ok((me, leader, term))
    }

    /// The index of the member that currently leads, as the running members agree;
    /// waits up to `within` for them to agree on one, skipping the members in
    /// `down` (killed or frozen). Returns `(index, raft term)`.
    pub fn leader(&self, down: &[usize], within: Duration) -> std::io::Result<(usize, u64)> {
        let until = Instant::now() + within;
        let mut last = String::from("no member answered");
        loop {
            let mut ids = Vec::new();
            let mut views = Vec::new();
            for i in (0..self.members.len()).filter(|i| !down.contains(i)) {
                match self.status(i) {
                    Ok((me, leader, term)) => {
                        ids.push((i, me));
                        views.push((leader, term));
                    }
                    Err(e) => last = e.to_string(),
                }
            }
            let agreed = views.len() + down.len() == self.members.len()
                && views.windows(2).all(|w| w[0] == w[1]);
            if agreed {
                if let Some((leader, term)) = views.first() {
                    if let Some((i, _)) = ids.iter().find(|(_, me)| me == leader) {
                        return Ok((*i, *term));
                    }
                    last = format!("the leader {leader:x} is not among the running members");
                }
            }
            if Instant::now() >= until {
                return Err(std::io::Error::other(format!(
                    "no agreed leader within {within:?}: {last}"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills member `i` (SIGKILL), keeping its data folder.
    pub fn kill(&mut self, i: usize) {
        self.members[i].kill();
    }

    /// Starts member `i` again on its ports and data (it re-joins the cluster from its
    /// write-ahead log) and waits until it answers health checks.
    pub fn restart(&mut self, i: usize) -> std::io::Result<()> {
        self.members[i].restart(READY_WITHIN)?;
        self.wait_healthy(i, READY_WITHIN)
    }

    /// Freezes member `i` (SIGSTOP): it keeps its sockets and answers nothing, to its
    /// clients and its peers alike — a partition that leaves connections open.
    pub fn pause(&self, i: usize) -> std::io::Result<()> {
        self.members[i].pause()
    }

    /// Resumes a frozen member (SIGCONT).
    pub fn resume(&self, i: usize) -> std::io::Result<()> {
        self.members[i].resume()
    }

    /// Waits until `etcdctl endpoint health` succeeds on member `i`.
    pub fn wait_healthy(&self, i: usize, within: Duration) -> std::io::Result<()> {
        crate::etcd::poll_healthy(within, || self.etcdctl(i, &["endpoint", "health"])).map_err(
            |last| {
                std::io::Error::other(format!(
                    "etcd member {i} not healthy within {within:?}: {last}"
                ))
            },
        )
    }
}

fn try_start(etcd: &Path) -> std::io::Result<EtcdCluster> {
    let mut client_ports = Vec::new();
    let mut peer_ports = Vec::new();
    for _ in 0..MEMBERS {
        client_ports.push(free_port()?);
        peer_ports.push(free_port()?);
    }
    let initial: Vec<String> = peer_ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("m{i}=http://127.0.0.1:{p}"))
        .collect();
    let initial = initial.join(",");
    let mut members = Vec::new();
    // etcd binds its listeners before it looks for its peers, so each member listens
    // (the start's readiness check) without waiting for the others.
    for (i, (&client_port, &peer_port)) in client_ports.iter().zip(&peer_ports).enumerate() {
        let dir = tempfile::Builder::new()
            .prefix("liveness-etcd-cluster-")
            .tempdir()?;
        let etcd = etcd.to_path_buf();
        let initial = initial.clone();
        let launcher: crate::Launcher = Box::new(move |dir: &Path, port: u16| {
            let name = format!("m{i}");
            let client = ("http", port);
            let mut cmd =
                crate::etcd::member_command(&etcd, dir, &name, client, peer_port, &initial);
            cmd.arg("--initial-cluster-token=liveness-test");
            cmd
        });
        members.push(ServerProcess::start(
            &format!("etcd m{i}"),
            dir,
            client_port,
            launcher,
            READY_WITHIN,
        )?);
    }
    let cluster = EtcdCluster { members };
    for i in 0..MEMBERS {
        cluster.wait_healthy(i, READY_WITHIN)?;
    }
    Ok(cluster)
}
