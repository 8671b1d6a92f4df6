//! Clocks for the in-memory store. The real backends read their server's clock; the
//! memory store reads one of these, so tests can run it on tokio's paused time or move
//! it by hand to simulate a store clock that jumps or drifts. [`HighWater`] keeps a
//! server clock's readings non-decreasing per store handle.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::types::StoreTime;

/// A monotonic clock: the time since the clock's own epoch.
pub trait Clock: Send + Sync + Debug {
    /// The time since this clock's epoch. Never decreases.
    fn now(&self) -> Duration;
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
/// [`LeaseStore::store_time`](crate::LeaseStore::store_time) never goes back on one
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
