//! Clocks: the store clock of the in-memory store, and the local clock of the holders'
//! safety deadlines.
//!
//! The real backends read their server's clock; the memory store reads one of these,
//! so tests can run it on tokio's paused time or move it by hand to simulate a store
//! clock that jumps or drifts.
//!
//! A member or leader measures its local safety deadline with [`Clock::boot`]: a clock
//! that keeps counting while the host is suspended. The default, [`HostClock`], is
//! tokio's clock plus the time the host spent suspended (Linux: `CLOCK_BOOTTIME`), so
//! a host that resumes from suspend finds the deadline passed at once, while tests on
//! tokio's paused time stay deterministic.
//!
//! [`HighWater`] keeps a server clock's readings non-decreasing per store handle.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::watch;

use crate::types::StoreTime;

/// A monotonic clock: the time since the clock's own epoch.
pub trait Clock: Send + Sync + Debug {
    /// The time since this clock's epoch. Never decreases.
    fn now(&self) -> Duration;

    /// The time since this clock's epoch, counting the time the host spent suspended
    /// (a boot clock, like Linux `CLOCK_BOOTTIME`). Never decreases, and advances at
    /// least as much as [`Clock::now`]. Safety deadlines are measured on it. The
    /// default is [`Clock::now`]: a clock that knows nothing of suspend.
    fn boot(&self) -> Duration {
        self.now()
    }

    /// A signal that changes whenever [`Clock::boot`] may have jumped ahead of tokio's
    /// clock (a host suspend ended), soon after it did. Holders waiting for a deadline
    /// on this clock then sleep until the deadline itself and wake early only on the
    /// signal. `None` (the default): the clock cannot tell, so waiters read it again
    /// every [`HeartbeatConfig::tick`](crate::HeartbeatConfig::tick) of tokio time,
    /// which costs one wake-up per tick per held lease.
    fn resumes(&self) -> Option<watch::Receiver<u64>> {
        None
    }
}

/// The default local clock of members and leaders: [`Clock::now`] is tokio's
/// monotonic clock (`CLOCK_MONOTONIC` on Linux, which stops while the host is
/// suspended), and [`Clock::boot`] adds the time the host spent suspended. On Linux and
/// Android that is the growth of `CLOCK_BOOTTIME − CLOCK_MONOTONIC`, which changes
/// only during a suspend; elsewhere it is zero (`boot` then equals `now`).
///
/// Every `HostClock` of the process reads the same time: both readings count from one
/// process-wide epoch (well before the first reading), so a clock holds no state of
/// its own, costs nothing to make, and a reading touches no memory of the instance
/// (a process holding 100,000 leases reads it on every renewal). Readings of any two
/// instances, taken one after the other, never go back.
///
/// Under `tokio::time::pause` both follow tokio's paused time, plus any real suspend.
#[derive(Debug, Default, Clone, Copy)]
pub struct HostClock {
    _private: (),
}

impl HostClock {
    /// The host's clock (all instances read the same time).
    pub fn new() -> Self {
        HostClock { _private: () }
    }
}

/// The process-wide epoch of every [`HostClock`] (on tokio's clock), and the host's
/// suspended time then.
struct Epoch {
    at: tokio::time::Instant,
    suspended: Duration,
}

fn epoch() -> &'static Epoch {
    static EPOCH: OnceLock<Epoch> = OnceLock::new();
    EPOCH.get_or_init(|| {
        // A day before the first reading, so that tokio's time in every runtime of
        // the process reads past it, paused test runtimes whose time lags the real one
        // included. Where the platform's instants do not reach back that far (a host
        // booted less than a day ago: Linux counts them from boot), as far back as they
        // reach, to the second.
        let now = std::time::Instant::now();
        let at = [86_400, 3_600, 60, 1]
            .into_iter()
            .find_map(|secs| now.checked_sub(Duration::from_secs(secs)))
            .unwrap_or(now);
        let suspended = suspended_high();
        Epoch {
            at: tokio::time::Instant::from_std(at),
            suspended,
        }
    })
}

/// The highest suspended time of the host read so far in this process, in
/// nanoseconds: two clock reads are not atomic, so one reading of the suspended time
/// may come out a little higher than the next; readings through this mark never go
/// back. Written only when a reading exceeds it (a suspend ended, or a larger read
/// jitter than any before), so it stays in every core's cache.
static SUSPENDED_HIGH: AtomicU64 = AtomicU64::new(0);

/// The host's suspended time, never lower than any reading before.
fn suspended_high() -> Duration {
    let nanos = u64::try_from(suspended().as_nanos()).unwrap_or(u64::MAX);
    let high = SUSPENDED_HIGH.load(Ordering::Acquire);
    if nanos <= high {
        return Duration::from_nanos(high);
    }
    let prev = SUSPENDED_HIGH.fetch_max(nanos, Ordering::AcqRel);
    Duration::from_nanos(prev.max(nanos))
}

impl Clock for HostClock {
    fn now(&self) -> Duration {
        tokio::time::Instant::now().saturating_duration_since(epoch().at)
    }

    fn boot(&self) -> Duration {
        let epoch = epoch();
        let now = tokio::time::Instant::now().saturating_duration_since(epoch.at);
        now + suspended_high().saturating_sub(epoch.suspended)
    }

    /// The process's resume signal: one thread per process reads the suspended time
    /// every [`RESUME_POLL`] (jittered) and bumps the signal when it grew, so a holder
    /// wakes within about that long after a resume, and a process holding 100,000
    /// leases pays one wake-up per poll instead of one per lease per tick.
    fn resumes(&self) -> Option<watch::Receiver<u64>> {
        resume_signal()
    }
}

/// How often the process's resume watcher reads the host's suspended time: a holder
/// whose deadline passed during a suspend is cancelled at most about this long after
/// the host resumes.
pub const RESUME_POLL: Duration = Duration::from_millis(50);

/// The process-wide resume signal of [`HostClock`], its watcher thread started on first
/// use. `None` if the thread could not be started (holders then poll every tick).
fn resume_signal() -> Option<watch::Receiver<u64>> {
    static SIGNAL: OnceLock<Option<watch::Sender<u64>>> = OnceLock::new();
    SIGNAL
        .get_or_init(|| {
            let (tx, _) = watch::channel(0);
            let watcher = tx.clone();
            // A thread, not a task: it outlives every tokio runtime of the process,
            // and its sleep counts on the monotonic clock, so it runs within one
            // poll of a resume.
            std::thread::Builder::new()
                .name("liveness-resume".into())
                .spawn(move || watch_suspends(&watcher))
                .ok()
                .map(|_| tx)
        })
        .as_ref()
        .map(watch::Sender::subscribe)
}

/// Bumps `signal` each time the host's suspended time grew (by more than the jitter of
/// two clock reads) since the last poll. Runs for the life of the process.
fn watch_suspends(signal: &watch::Sender<u64>) {
    let mut last = suspended();
    loop {
        let jitter = 1.0 - 0.2 * fastrand::f64();
        std::thread::sleep(RESUME_POLL.mul_f64(jitter));
        let now = suspended();
        if now > last + Duration::from_millis(1) {
            last = now;
            signal.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// The time the host spent suspended since it booted: `CLOCK_BOOTTIME` minus
/// `CLOCK_MONOTONIC` (both count the same running time; only the boot clock counts
/// suspend). Zero when the clocks cannot be read.
///
/// The boot clock is read between two reads of the monotonic clock, and the reading
/// kept only when those two are at most [`READ_WINDOW`] apart (a few tries; the thread
/// may be preempted in between): it then exceeds the true value by at most that
/// window, never falls below it, and a suspend is always counted in full.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn suspended() -> Duration {
    use nix::time::{clock_gettime, ClockId};
    let read = |id| clock_gettime(id).map(Duration::from);
    let mut tries = 0;
    loop {
        let (Ok(mono), Ok(boot), Ok(after)) = (
            read(ClockId::CLOCK_MONOTONIC),
            read(ClockId::CLOCK_BOOTTIME),
            read(ClockId::CLOCK_MONOTONIC),
        ) else {
            return Duration::ZERO;
        };
        tries += 1;
        if after.saturating_sub(mono) <= READ_WINDOW || tries == 4 {
            // After the last try, the lower bound: a suspend still counts (less the
            // time the thread was preempted), and no large error is kept for good.
            let base = if tries == 4 { after } else { mono };
            return boot.saturating_sub(base);
        }
    }
}

/// How far apart two reads of the monotonic clock around a read of the boot clock may
/// be for [`suspended`] to keep the reading.
#[cfg(any(target_os = "linux", target_os = "android"))]
const READ_WINDOW: Duration = Duration::from_micros(20);

/// No portable boot clock here: suspend is not counted.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn suspended() -> Duration {
    Duration::ZERO
}

/// Tokio's monotonic clock, measured from when this value was made. Under
/// `tokio::time::pause` it follows tokio's paused, auto-advancing time, which makes
/// state-machine tests fast and deterministic.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose epoch is now.
    pub fn new() -> Self {
        TokioClock {
            start: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Duration {
        tokio::time::Instant::now().saturating_duration_since(self.start)
    }
}

/// A clock that moves only when told to. Clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at its epoch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        let add = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(add, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }
}

/// The highest store time a handle has reported, so that
/// [`OperatorStore::store_time`](crate::OperatorStore::store_time) never goes back on one
/// handle even when the server's clock is stepped backwards (NTP). Clones share the
/// same mark.
///
/// ```
/// use std::time::Duration;
/// use liveness_core::HighWater;
///
/// let mark = HighWater::default();
/// let ms = Duration::from_millis;
/// assert_eq!(mark.observe(ms(20)).since_epoch(), ms(20));
/// // The server clock stepped back: the handle keeps reporting its highest reading.
/// assert_eq!(mark.observe(ms(5)).since_epoch(), ms(20));
/// assert_eq!(mark.observe(ms(30)).since_epoch(), ms(30));
/// ```
#[derive(Debug, Clone, Default)]
pub struct HighWater {
    nanos: Arc<AtomicU64>,
}

impl HighWater {
    /// Records one reading of the store's clock (time since its epoch) and returns
    /// the store time to report: the reading, or the highest one recorded before
    /// when that is later. Readings past year 2554 of the Unix epoch saturate.
    pub fn observe(&self, reading: Duration) -> StoreTime {
        let now = u64::try_from(reading.as_nanos()).unwrap_or(u64::MAX);
        let prev = self.nanos.fetch_max(now, Ordering::AcqRel);
        StoreTime::from_epoch(Duration::from_nanos(prev.max(now)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Clock, HostClock};

    #[test]
    fn host_clocks_made_at_different_times_read_the_same_time() {
        let first = HostClock::new();
        std::thread::sleep(Duration::from_millis(5));
        let later = HostClock::new();
        let (a, b, c) = (first.boot(), later.boot(), first.boot());
        assert!(
            a <= b && b <= c,
            "boot readings {a:?} {b:?} {c:?} went back"
        );
        let (a, b, c) = (first.now(), later.now(), first.now());
        assert!(
            a <= b && b <= c,
            "monotonic readings {a:?} {b:?} {c:?} went back"
        );
    }

    #[test]
    fn host_clock_boot_time_never_runs_behind_its_monotonic_time_nor_back() {
        let clock = HostClock::new();
        let mut last = clock.boot();
        for _ in 0..1000 {
            let now = clock.now();
            let boot = clock.boot();
            assert!(boot >= now, "boot {boot:?} behind monotonic {now:?}");
            assert!(boot >= last, "boot went back from {last:?} to {boot:?}");
            last = boot;
        }
    }
}
