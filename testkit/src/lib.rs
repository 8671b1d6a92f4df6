//! Real servers for the liveness tests: each test binary starts its own server process
//! on a free loopback port in a temporary folder, and stops it when the handle drops
//! (or, should the test process die, a watchdog stops it).
//!
//! An environment URL (`LIVENESS_REDIS_URL`, `LIVENESS_POSTGRES_URL`,
//! `LIVENESS_ETCD_URL`) makes the tests use an existing server instead.
//!
//! A missing server binary is a loud failure when `CI` is set, and one clear skip line
//! per test elsewhere ([`missing`]).

use std::net::TcpListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// True when running under CI (`CI` set to anything but `false` or empty).
pub fn in_ci() -> bool {
    matches!(std::env::var("CI"), Ok(v) if !v.is_empty() && v != "false" && v != "0")
}

/// Reports a server that cannot be had: panics (fails the test) under CI, prints one
/// skip line otherwise. Returns `None` so callers can write `return missing(..)`.
pub fn missing<T>(what: &str, install_hint: &str) -> Option<T> {
    if in_ci() {
        panic!("{what} is required in CI but missing: {install_hint}");
    }
    eprintln!("SKIP: {what} not available ({install_hint}); set CI=1 to make this a failure");
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
