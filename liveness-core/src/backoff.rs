//! [`Backoff`]: the retry pacing of the member, checker and election, and of the
//! backends' own retry and reconnect loops.

use std::time::Duration;

/// Exponential backoff with up to 25 % jitter, doubling from a base up to a cap.
///
/// ```
/// use std::time::Duration;
/// use liveness_core::Backoff;
///
/// let mut b = Backoff::new(Duration::from_millis(10), Duration::from_millis(40));
/// let first = b.next();
/// assert!(first >= Duration::from_millis(10) && first <= Duration::from_micros(12_500));
/// ```
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    /// Delays that start at `base` and double up to `max` (both at least 1 ms).
    pub fn new(base: Duration, max: Duration) -> Self {
        let base = base.max(Duration::from_millis(1));
        Backoff {
            next: base,
            max: max.max(base),
        }
    }

    /// The next delay: the current step plus up to 25 % jitter; the step then doubles,
    /// up to the cap.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        // Up to 25 % jitter, so that many holders do not retry in lockstep.
        let jitter = d.mul_f64(fastrand::f64() * 0.25);
        d + jitter
    }
}

#[cfg(test)]
mod tests {
    use super::Backoff;
    use std::time::Duration;

    #[test]
    fn backoff_doubles_then_stays_at_its_cap_plus_jitter() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(10), ms(40));
        let delays: Vec<Duration> = (0..8).map(|_| b.next()).collect();
        for (d, base) in delays.iter().zip([10, 20, 40, 40, 40, 40, 40, 40]) {
            assert!(*d >= ms(base) && *d <= ms(base) * 5 / 4, "{delays:?}");
        }
    }

    #[test]
    fn backoff_never_waits_zero() {
        let mut b = Backoff::new(Duration::ZERO, Duration::ZERO);
        assert!(b.next() >= Duration::from_millis(1));
    }
}
