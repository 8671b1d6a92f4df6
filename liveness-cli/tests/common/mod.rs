//! What the `liveness` binary's test files share: running the binary within a
//! deadline, worker processes (the test binary re-executed as its `worker_process`
//! test), and a runtime for the tests' own store calls.
#![allow(dead_code)] // every test file uses only part of it

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use liveness::{Member, MemberConfig, Ttl};

/// The `liveness` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_liveness");
/// Set in a re-executed test binary: the store URL its worker joins.
const WORKER_URL: &str = "LIVENESS_CLI_TEST_WORKER_URL";
/// The worker's member name, how many items it claims and its ttl: `NAME:N:TTL_MS`.
const WORKER_ROLE: &str = "LIVENESS_CLI_TEST_WORKER_ROLE";
/// How long a worker holds its lease and items: a worker whose test died goes away
/// by itself after this.
const WORKER_LIFETIME: Duration = Duration::from_secs(120);
/// How long [`bounded`] lets the binary run.
const BOUND: Duration = Duration::from_secs(30);

/// A runtime for the test's own store calls.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Sends `signal` (`-INT`, `-TERM`, `-KILL`) to the process `pid`, one the test
/// started, with `kill`.
pub fn signal(signal: &str, pid: u32) -> Result<(), String> {
    let sent = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .map_err(|e| format!("run kill {signal} {pid}: {e}"))?;
    if sent.success() {
        Ok(())
    } else {
        Err(format!("kill {signal} {pid}: {sent}"))
    }
}

/// A fresh namespace per test on a shared server.
pub fn fresh_ns(prefix: &str) -> String {
    format!("{prefix}_{:08x}", fastrand::u32(..))
}

/// Runs `command` (the binary, with its arguments) to completion, its output
/// captured, killing it (and failing) when it has not ended within 30 s.
pub fn bounded(command: &mut Command) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + BOUND;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{command:?} still running after {BOUND:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// An HTTP GET of `path` on 127.0.0.1:`port`: the status line and the body.
pub fn http_get(port: u16, path: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_owned(), body.to_owned()))
}

/// The body of each test file's `worker_process` test, which is not a test of its
/// own: in a test binary re-executed by [`Worker::start`], joins as a member, claims
/// its items, prints `ready`, and holds them (renewing) until it is killed. Otherwise
/// it does nothing.
pub fn worker_process() {
    let Ok(url) = std::env::var(WORKER_URL) else {
        return;
    };
    let role = std::env::var(WORKER_ROLE).unwrap();
    let mut parts = role.split(':');
    let (name, n, ttl) = (
        parts.next().unwrap(),
        parts.next().unwrap().parse::<usize>().unwrap(),
        parts.next().unwrap().parse().unwrap(),
    );
    rt().block_on(async {
        let store = liveness::connect(&url).await.unwrap();
        let config = MemberConfig::new(name, Ttl::from_millis(ttl).unwrap()).unwrap();
        let member = Member::join(store, config).await.unwrap();
        let mut held = Vec::new();
        while held.len() < n {
            held.extend(member.claim(n - held.len()).await.unwrap());
        }
        println!("ready {}", member.token());
        std::io::stdout().flush().unwrap();
        tokio::time::sleep(WORKER_LIFETIME).await;
        drop(held);
    });
}

/// A worker process: a member on a store holding claimed items; killed on drop.
pub struct Worker(Child);

impl Worker {
    /// Starts a worker, member `name` on `url` with ttl `ttl_ms`, and waits until it
    /// holds `items` claimed items.
    pub fn start(url: &str, name: &str, items: usize, ttl_ms: u64) -> Worker {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "worker_process",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(WORKER_URL, url)
            .env(WORKER_ROLE, format!("{name}:{items}:{ttl_ms}"))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        loop {
            match lines.next() {
                Some(Ok(line)) if line.contains("ready ") => break,
                Some(_) => continue,
                None => panic!("worker {name} ended before it was ready"),
            }
        }
        Worker(child)
    }

    /// SIGKILL: the process dies holding its lease and items.
    pub fn kill(mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
