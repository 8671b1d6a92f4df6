//! Real servers for the liveness tests: each test binary starts its own server process
//! on a free loopback port in a temporary folder, and stops it when the handle drops
//! (or, should the test process die, a watchdog stops it).
//!
//! An environment URL (`LIVENESS_REDIS_URL`, `LIVENESS_POSTGRES_URL`,
//! `LIVENESS_ETCD_URL`) makes the tests use an existing server instead.
//!
//! A missing server binary fails the test, as a factory without a store fails the
//! conformance suite ([`missing`]): outside CI, `LIVENESS_ALLOW_SKIP=1` turns that into
//! one `SKIP` line per test that cargo's capture does not hide.

pub mod chromium;
pub mod durability;
pub mod etcd;
pub mod etcd_cluster;
pub mod fixtures;
pub mod open_existing;
pub mod postgres;
pub mod postgres_standby;
pub mod proxy;
pub mod redis;
pub mod redis_failover;
pub mod tls;

use std::net::TcpListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// True when running under CI (`CI` set to anything but empty, `0` or `false`).
pub fn in_ci() -> bool {
    liveness_bench::skip::in_ci()
}

/// Reports a server that cannot be had, by the suite's rule
/// ([`liveness_bench::skip`]): panics (fails the test) under CI, and outside CI
/// unless `LIVENESS_ALLOW_SKIP=1` is set; then prints one `SKIP` line past the test
/// harness's capture and returns `None`, so callers can write `return missing(..)`.
pub fn missing<T>(what: &str, install_hint: &str) -> Option<T> {
    liveness_bench::skip::no_store(what, &format!("not available: {install_hint}"));
    None
}

/// Finds an executable on PATH or in the given extra directories.
pub fn find_binary(name: &str, extra_dirs: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(extra_dirs.iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `url` with `query` appended after `?`, or after `&` when it has a query already.
pub fn with_query(url: &str, query: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{query}")
}

/// The names of the files in `dir`, sorted: what a test that must create nothing
/// compares before and after.
///
/// # Panics
///
/// When `dir` cannot be read or holds a name that is not UTF-8.
pub fn files_in(dir: &std::path::Path) -> Vec<String> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut names: Vec<String> = entries
        .map(|e| {
            let name = e
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .file_name();
            name.into_string()
                .unwrap_or_else(|n| panic!("not UTF-8: {n:?}"))
        })
        .collect();
    names.sort();
    names
}

/// A free TCP port on 127.0.0.1 (bound, then released: a tiny race with other
/// processes is possible, and servers that fail to bind are retried by the callers).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits until something accepts TCP connections on `127.0.0.1:port`.
pub fn wait_for_port(port: u16, timeout: Duration) -> bool {
    let until = Instant::now() + timeout;
    while Instant::now() < until {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Builds the command that starts a server, given its data folder and port.
pub type Launcher = Box<dyn Fn(&std::path::Path, u16) -> std::process::Command + Send + Sync>;

/// A server process in a temporary folder, on a fixed loopback port.
///
/// Dropping it kills the server and removes the folder. Should the test process end
/// without dropping it (a server kept in a static, a crash), a watchdog process kills
/// the server and removes the folder within about a second.
pub struct ServerProcess {
    name: String,
    port: u16,
    dir: tempfile::TempDir,
    launcher: Launcher,
    child: Option<std::process::Child>,
    watchdog: Option<std::process::Child>,
}

impl std::fmt::Debug for ServerProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerProcess")
            .field("name", &self.name)
            .field("port", &self.port)
            .field("dir", &self.dir.path())
            .finish()
    }
}

impl ServerProcess {
    /// Starts `launcher(dir, port)` in `dir` and waits up to `ready_within` for the
    /// port to accept connections.
    pub fn start(
        name: &str,
        dir: tempfile::TempDir,
        port: u16,
        launcher: Launcher,
        ready_within: Duration,
    ) -> std::io::Result<Self> {
        let mut server = ServerProcess {
            name: name.to_owned(),
            port,
            dir,
            launcher,
            child: None,
            watchdog: None,
        };
        server.spawn(ready_within)?;
        Ok(server)
    }

    fn spawn(&mut self, ready_within: Duration) -> std::io::Result<()> {
        let mut cmd = (self.launcher)(self.dir.path(), self.port);
        cmd.stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(self.dir.path().join("server.log"))?);
        let child = cmd.spawn()?;
        let watchdog = std::process::Command::new("sh")
            .arg("-c")
            .arg(
                "while kill -0 \"$1\" 2>/dev/null; do sleep 1; done; \
                 kill -9 \"$2\" 2>/dev/null; sleep 0.2; rm -rf \"$3\"",
            )
            .arg("watchdog")
            .arg(std::process::id().to_string())
            .arg(child.id().to_string())
            .arg(self.dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        self.child = Some(child);
        self.watchdog = Some(watchdog);
        if !wait_for_port(self.port, ready_within) {
            let log =
                std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
            self.stop();
            return Err(std::io::Error::other(format!(
                "{} did not listen on port {} within {:?}; its log:\n{}",
                self.name, self.port, ready_within, log
            )));
        }
        Ok(())
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its data folder.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    fn signal(&self, sig: &str) -> std::io::Result<()> {
        let Some(pid) = self.pid() else {
            return Err(std::io::Error::other("server is not running"));
        };
        let status = std::process::Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!("kill -{sig} {pid} failed")))
        }
    }

    /// Freezes the server (SIGSTOP): it keeps its sockets but answers nothing.
    pub fn pause(&self) -> std::io::Result<()> {
        self.signal("STOP")
    }

    /// Resumes a paused server (SIGCONT).
    pub fn resume(&self) -> std::io::Result<()> {
        self.signal("CONT")
    }

    /// Kills the server at once (SIGKILL), keeping its data folder.
    pub fn kill(&mut self) {
        self.stop();
    }

    /// Starts the server again on the same port and data folder (after `kill`, or
    /// killing it first when it runs).
    pub fn restart(&mut self, ready_within: Duration) -> std::io::Result<()> {
        self.stop();
        // The port may linger briefly; retry the start a few times.
        let mut last = None;
        for _ in 0..5 {
            match self.spawn(ready_within) {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("restart failed")))
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = self.signal_child(&child, "CONT");
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
    }

    fn signal_child(&self, child: &std::process::Child, sig: &str) -> std::io::Result<()> {
        std::process::Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(child.id().to_string())
            .status()
            .map(|_| ())
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}
