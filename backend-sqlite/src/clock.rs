//! The store clock: the host's boot clock, and the id of the boot it counts in.
//!
//! Every process that opens a database file runs on one host, so they can all read one
//! clock. The wall clock is the wrong one: an NTP step or a `date -s` moves it, and
//! with it every expiry (+1 h expires every live lease at once, −1 h hides a dead
//! holder for an hour). `CLOCK_BOOTTIME` never steps, is the same for every process of
//! the host, and keeps counting while the host is suspended (a lease must expire
//! during a suspend: its holder is not renewing). It restarts at each boot, so the file
//! records the boot id beside it (`liveness_boot`), and a file last opened under
//! another boot has all its leases expired on open (see `core.rs`).
//!
//! The store reads this clock in Rust, once per operation, after taking the write
//! lock when it writes, and binds the reading into its statements; SQLite's own
//! `'now'` (the wall clock) is never used.

use std::fmt::Debug;
use std::time::Duration;

use liveness_core::{Error, Result};

use crate::BACKEND;

/// Where a store handle reads its clock. Crate-internal so tests can drive it.
pub(crate) trait StoreClock: Send + Sync + Debug {
    /// The time since the host booted, counting the time it spent suspended. Never
    /// decreases within one boot, and reads the same in every process of the host.
    fn now(&self) -> Result<Duration>;

    /// The id of the boot [`StoreClock::now`] counts in: different after every
    /// reboot, the same in every process of one boot.
    fn boot_id(&self) -> &str;
}

/// The real clock: `CLOCK_BOOTTIME` and `/proc/sys/kernel/random/boot_id` on Linux
/// and Android. Elsewhere there is no such pair, and the store falls back to the wall
/// clock (milliseconds since the Unix epoch) under a fixed boot id: a wall clock goes
/// on across reboots, but a step of it moves every expiry, as it did before.
#[derive(Debug)]
pub(crate) struct HostBootClock {
    boot_id: String,
}

/// Where Linux publishes the id of the running boot (a random UUID per boot).
#[cfg(any(target_os = "linux", target_os = "android"))]
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// Why the boot id could not be read.
#[derive(Debug)]
struct NoBootId(std::io::Error);

impl std::fmt::Display for NoBootId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot read the host's boot id, which the SQLite store clock needs: {}",
            self.0
        )
    }
}

impl std::error::Error for NoBootId {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl HostBootClock {
    /// Reads the boot id once; the handle keeps it (a process never outlives its
    /// boot). Fails with [`Error::Backend`] when it cannot be read: without it a
    /// reboot could not be told from a long run, and leases of dead holders would
    /// look live for as long as the last boot had been up.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(crate) fn new() -> Result<HostBootClock> {
        let id =
            std::fs::read_to_string(BOOT_ID).map_err(|e| Error::backend(BACKEND, NoBootId(e)))?;
        let id = id.trim();
        if id.is_empty() {
            let empty = std::io::Error::new(std::io::ErrorKind::InvalidData, "empty");
            return Err(Error::backend(BACKEND, NoBootId(empty)));
        }
        Ok(HostBootClock {
            boot_id: id.to_owned(),
        })
    }

    /// The wall-clock fallback: one fixed boot id, since the wall clock does not
    /// restart at boot.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub(crate) fn new() -> Result<HostBootClock> {
        Ok(HostBootClock {
            boot_id: "wall-clock".to_owned(),
        })
    }
}

impl StoreClock for HostBootClock {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn now(&self) -> Result<Duration> {
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
            .map(Duration::from)
            .map_err(|e| Error::backend(BACKEND, e))
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn now(&self) -> Result<Duration> {
        // No boot clock here: the wall clock is the store clock (see the type's docs).
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|e| Error::backend(BACKEND, e))
    }

    fn boot_id(&self) -> &str {
        &self.boot_id
    }
}

/// A clock tests move by hand, in a boot they name. Clones share the time.
#[cfg(test)]
#[derive(Debug, Clone)]
pub(crate) struct ManualBootClock {
    millis: std::sync::Arc<std::sync::atomic::AtomicU64>,
    boot_id: String,
}

#[cfg(test)]
impl ManualBootClock {
    /// A clock `at` after the boot named `boot_id` began.
    pub(crate) fn new(boot_id: &str, at: Duration) -> ManualBootClock {
        ManualBootClock {
            millis: std::sync::Arc::new(std::sync::atomic::AtomicU64::new(
                u64::try_from(at.as_millis()).unwrap_or(u64::MAX),
            )),
            boot_id: boot_id.to_owned(),
        }
    }

    /// Moves the clock forward by `d` (time running, or the host suspended).
    pub(crate) fn advance(&self, d: Duration) {
        let d = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.millis
            .fetch_add(d, std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
impl StoreClock for ManualBootClock {
    fn now(&self) -> Result<Duration> {
        Ok(Duration::from_millis(
            self.millis.load(std::sync::atomic::Ordering::SeqCst),
        ))
    }

    fn boot_id(&self) -> &str {
        &self.boot_id
    }
}
