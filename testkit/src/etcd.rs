//! A real etcd member for tests: one node, a temporary data folder, free client and
//! peer ports on 127.0.0.1.
//!
//! - [`shared`]: the server the tests of one test binary share (each test works in
//!   its own random namespace). `LIVENESS_ETCD_URL` (a liveness URL such as
//!   `etcd://127.0.0.1:2379`) makes it an existing server instead.
//! - [`start`]: a dedicated member, for fault tests that pause, kill or restart it.
//! - [`start_tls`]: a dedicated member serving HTTPS with a self-signed CA made by
//!   `openssl` in its folder ([`TlsFiles`]).
//! - [`start_with_auth`]: a dedicated member with authentication enabled and one root
//!   user.
//!
//! The binaries come from Debian's `etcd-server` (etcd 3.4) and `etcd-client`
//! (`etcdctl`, used to wait for health and to set users up). When they are missing,
//! [`missing`] fails the test, or skips it with a SKIP line when
//! `LIVENESS_ALLOW_SKIP=1` is set outside CI.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::{find_binary, free_port, missing, with_query, ServerProcess};

/// The environment variable naming an existing etcd (a liveness URL).
pub const URL_ENV: &str = "LIVENESS_ETCD_URL";

const HINT: &str = "apt-get install etcd-server etcd-client";

/// How long a starting member gets to elect itself and answer health checks.
const READY_WITHIN: Duration = Duration::from_secs(20);

pub use crate::tls::TlsFiles;

/// An etcd member the tests talk to: one this process started, or the one named by
/// `LIVENESS_ETCD_URL`.
#[derive(Debug)]
pub struct EtcdServer {
    process: Option<ServerProcess>,
    url: String,
    endpoint: String,
    tls: Option<TlsFiles>,
    user: Option<(String, String)>,
}

impl EtcdServer {
    /// The liveness URL of the member: `etcd://127.0.0.1:PORT` (or `etcds://` for a
    /// TLS member, without the CA parameter: see [`EtcdServer::tls`]), or the
    /// environment URL as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL with more query parameters (`ns=...&timeout_ms=...`).
    pub fn url_with(&self, query: &str) -> String {
        with_query(&self.url, query)
    }

    /// The gRPC endpoint: `http://127.0.0.1:PORT` or `https://...`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The certificate files, for a TLS member.
    pub fn tls(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// The root user and password, for a member with authentication enabled.
    pub fn user(&self) -> Option<(&str, &str)> {
        self.user.as_ref().map(|(u, p)| (u.as_str(), p.as_str()))
    }

    /// The server process, when this process started it (not for an environment URL).
    pub fn process(&self) -> Option<&ServerProcess> {
        self.process.as_ref()
    }

    /// Freezes the member (SIGSTOP). Fails for an environment URL.
    pub fn pause(&self) -> std::io::Result<()> {
        self.own()?.pause()
    }

    /// Resumes a paused member (SIGCONT). Fails for an environment URL.
    pub fn resume(&self) -> std::io::Result<()> {
        self.own()?.resume()
    }

    /// Kills the member (SIGKILL), keeping its data folder.
    pub fn kill(&mut self) -> std::io::Result<()> {
        self.own_mut()?.kill();
        Ok(())
    }

    /// Starts the member again on the same ports and data (it re-joins its one-node
    /// cluster from its write-ahead log), and waits until it answers health checks.
    pub fn restart(&mut self) -> std::io::Result<()> {
        self.own_mut()?.restart(READY_WITHIN)?;
        self.wait_healthy(READY_WITHIN)
    }

    fn own(&self) -> std::io::Result<&ServerProcess> {
        self.process
            .as_ref()
            .ok_or_else(|| std::io::Error::other("this etcd was not started by the test kit"))
    }

    fn own_mut(&mut self) -> std::io::Result<&mut ServerProcess> {
        self.process
            .as_mut()
            .ok_or_else(|| std::io::Error::other("this etcd was not started by the test kit"))
    }

    /// Waits until `etcdctl endpoint health` succeeds (the member has a leader).
    pub fn wait_healthy(&self, within: Duration) -> std::io::Result<()> {
        poll_healthy(within, || self.etcdctl(&["endpoint", "health"])).map_err(|last| {
            std::io::Error::other(format!(
                "etcd at {} not healthy within {within:?}: {last}",
                self.endpoint
            ))
        })
    }

    /// Runs `etcdctl` against this member (with its CA and user, if any) and returns
    /// its standard output.
    pub fn etcdctl(&self, args: &[&str]) -> std::io::Result<String> {
        let mut cmd = etcdctl_command(&self.endpoint, "2s", "3s")?;
        if let Some(tls) = &self.tls {
            cmd.arg(format!("--cacert={}", tls.ca.display()));
        }
        if let Some((u, p)) = &self.user {
            cmd.arg(format!("--user={u}:{p}"));
        }
        run_etcdctl(cmd, args)
    }
}

/// The member the tests of this process share, started on first use (or the one at
/// `LIVENESS_ETCD_URL`). `None` (after a skip line) when etcd is missing and [`missing`] allows a skip.
///
/// It lives until the process exits; the test kit's watchdog then stops it and
/// removes its folder.
pub fn shared() -> Option<&'static EtcdServer> {
    static SHARED: OnceLock<Option<EtcdServer>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            if let Ok(url) = std::env::var(URL_ENV) {
                if !url.is_empty() {
                    return Some(from_env(url));
                }
            }
            start()
        })
        .as_ref()
}

fn from_env(url: String) -> EtcdServer {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(&url);
    let host = rest.split(['/', '?']).next().unwrap_or(rest);
    let host = host.rsplit('@').next().unwrap_or(host);
    let first = host.split(',').next().unwrap_or(host);
    let scheme = if url.starts_with("etcds") {
        "https"
    } else {
        "http"
    };
    EtcdServer {
        process: None,
        endpoint: format!("{scheme}://{first}"),
        url,
        tls: None,
        user: None,
    }
}

/// Starts a dedicated plain-HTTP member. `None` (after a skip line) when etcd is
/// missing and [`missing`] allows a skip; panics when it is present but does not start.
pub fn start() -> Option<EtcdServer> {
    launch(false, None)
}

/// Starts a dedicated member serving HTTPS with a fresh self-signed CA.
pub fn start_tls() -> Option<EtcdServer> {
    launch(true, None)
}

/// Starts a dedicated member, adds the user `root` with `password`, and enables
/// authentication. [`EtcdServer::user`] then gives the credentials.
pub fn start_with_auth(password: &str) -> Option<EtcdServer> {
    launch(false, Some(password))
}

fn launch(tls: bool, password: Option<&str>) -> Option<EtcdServer> {
    let Some(etcd) = find_binary("etcd", &[]) else {
        return missing("etcd", HINT);
    };
    if find_binary("etcdctl", &[]).is_none() {
        return missing("etcdctl", HINT);
    }
    if tls && find_binary("openssl", &[]).is_none() {
        return missing("openssl", "apt-get install openssl");
    }
    let mut last = None;
    // A free port can be taken by someone else between the probe and etcd's bind:
    // retry with fresh ports.
    for _ in 0..3 {
        match try_launch(&etcd, tls, password) {
            Ok(server) => return Some(server),
            Err(e) => last = Some(e),
        }
    }
    panic!(
        "etcd did not start: {}",
        last.map(|e| e.to_string()).unwrap_or_default()
    );
}

fn try_launch(etcd: &Path, tls: bool, password: Option<&str>) -> std::io::Result<EtcdServer> {
    let dir = tempfile::Builder::new()
        .prefix("liveness-etcd-")
        .tempdir()?;
    let files = if tls {
        Some(crate::tls::make_certificates(dir.path())?)
    } else {
        None
    };
    let client_port = free_port()?;
    let peer_port = free_port()?;
    let scheme = if tls { "https" } else { "http" };
    let etcd = etcd.to_path_buf();
    let launch_files = files.clone();
    let launcher: crate::Launcher = Box::new(move |dir: &Path, port: u16| {
        let initial = format!("default=http://127.0.0.1:{peer_port}");
        let mut cmd = member_command(&etcd, dir, "default", (scheme, port), peer_port, &initial);
        if let Some(f) = &launch_files {
            cmd.arg(format!("--cert-file={}", f.cert.display()))
                .arg(format!("--key-file={}", f.key.display()));
        }
        cmd
    });
    let process = ServerProcess::start("etcd", dir, client_port, launcher, READY_WITHIN)?;
    let url_scheme = if tls { "etcds" } else { "etcd" };
    let mut server = EtcdServer {
        process: Some(process),
        url: format!("{url_scheme}://127.0.0.1:{client_port}"),
        endpoint: format!("{scheme}://127.0.0.1:{client_port}"),
        tls: files,
        user: None,
    };
    server.wait_healthy(READY_WITHIN)?;
    if let Some(pw) = password {
        server
            .etcdctl(&["user", "add", &format!("root:{pw}"), "--interactive=false"])
            .or_else(|_| server.etcdctl(&["user", "add", &format!("root:{pw}")]))?;
        server.etcdctl(&["auth", "enable"])?;
        server.user = Some(("root".to_owned(), pw.to_owned()));
        server.wait_healthy(READY_WITHIN)?;
    }
    Ok(server)
}

/// `etcdctl` (API v3) against `endpoint` alone, with the given dial and command
/// timeouts (etcd duration text such as `2s`); the caller adds further flags.
pub(crate) fn etcdctl_command(
    endpoint: &str,
    dial_timeout: &str,
    command_timeout: &str,
) -> std::io::Result<Command> {
    let bin =
        find_binary("etcdctl", &[]).ok_or_else(|| std::io::Error::other("etcdctl not found"))?;
    let mut cmd = Command::new(bin);
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .arg(format!("--dial-timeout={dial_timeout}"))
        .arg(format!("--command-timeout={command_timeout}"));
    Ok(cmd)
}

/// Runs `cmd ARGS...` (an [`etcdctl_command`]) and returns its standard output, or an
/// error with everything it printed when it fails.
pub(crate) fn run_etcdctl(mut cmd: Command, args: &[&str]) -> std::io::Result<String> {
    let out = cmd.args(args).stdin(Stdio::null()).output()?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(std::io::Error::other(format!(
            "etcdctl {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

/// Calls `probe` every 50 ms until it succeeds (`Ok`) or `within` has passed (`Err`
/// with the last failure's text).
pub(crate) fn poll_healthy(
    within: Duration,
    probe: impl Fn() -> std::io::Result<String>,
) -> Result<(), String> {
    let until = Instant::now() + within;
    let mut last = String::new();
    while Instant::now() < until {
        match probe() {
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(last)
}

/// The command that starts one etcd member named `name` in `dir` (data in
/// `dir/data`), serving clients at `client_scheme://127.0.0.1:client_port` and peers
/// at `http://127.0.0.1:peer_port`, in a new cluster of the members `initial_cluster`
/// lists (`name=peer-url,...`); logs warnings to stderr.
pub(crate) fn member_command(
    etcd: &Path,
    dir: &Path,
    name: &str,
    (client_scheme, client_port): (&str, u16),
    peer_port: u16,
    initial_cluster: &str,
) -> Command {
    let client = format!("{client_scheme}://127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    let mut cmd = Command::new(etcd);
    cmd.current_dir(dir)
        .arg(format!("--name={name}"))
        .arg(format!("--data-dir={}", dir.join("data").display()))
        .arg(format!("--listen-client-urls={client}"))
        .arg(format!("--advertise-client-urls={client}"))
        .arg(format!("--listen-peer-urls={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .arg(format!("--initial-cluster={initial_cluster}"))
        .arg("--initial-cluster-state=new")
        .arg("--logger=zap")
        .arg("--log-outputs=stderr")
        .arg("--log-level=warn");
    if let Some(arch) = unsupported_arch() {
        cmd.env("ETCD_UNSUPPORTED_ARCH", arch);
    }
    cmd
}

/// etcd 3.4 refuses to run on architectures other than amd64 and ppc64le unless
/// `ETCD_UNSUPPORTED_ARCH` names the architecture.
pub(crate) fn unsupported_arch() -> Option<&'static str> {
    match std::env::consts::ARCH {
        "x86_64" | "powerpc64" => None,
        "aarch64" => Some("arm64"),
        "arm" => Some("arm"),
        "x86" => Some("386"),
        "s390x" => Some("s390x"),
        other => Some(other),
    }
}
