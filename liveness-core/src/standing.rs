//! The local safety deadline of one held lease or role, for holders that keep it
//! alive themselves: the core heartbeat ([`Member`](crate::Member),
//! [`Leadership`](crate::Leadership)) and backend-specific elections (PostgreSQL's
//! advisory lock).
//!
//! A holder may act only while it is sure it still holds: until its local deadline
//! on the boot clock ([`Clock::boot`]), measured from the send time of the last
//! request the store answered in time. Every "may I still act?" check compares the
//! clock with the deadline itself instead of trusting that the task which extends it
//! has already run: after a freeze, the tasks woken on the same tick run in any order.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::error::{Error, LostCause, Result};
use crate::sync::lock;
use crate::types::{FencingToken, Key};

/// What the work done under one held lease (or role) may still do: the local
/// deadline, the reason it was lost once it is, and the cancellation signal.
///
/// Once lost, always lost: an extension that comes after the deadline passed does
/// not bring the lease back (the holder acquires again, with a new token).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use liveness_core::standing::LocalDeadline;
/// use liveness_core::{FencingToken, Key, LostCause, ManualClock, Name, Space};
///
/// let clock = ManualClock::new();
/// let key = Key::new(Space::leaders(), Name::new("cron")?);
/// let secs = Duration::from_secs;
/// let held = LocalDeadline::new(Arc::new(clock.clone()), key, FencingToken(7), secs(10));
/// assert_eq!(held.check()?, FencingToken(7));
/// clock.advance(secs(10));
/// assert_eq!(held.lost(), Some(LostCause::GaveUp));
/// assert!(held.cancel().is_cancelled());
/// # Ok::<(), liveness_core::Error>(())
/// ```
#[derive(Debug)]
pub struct LocalDeadline {
    clock: Arc<dyn Clock>,
    key: Key,
    token: FencingToken,
    cancel: CancellationToken,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The local deadline on the clock's [`Clock::boot`].
    deadline: Duration,
    /// Set once the lease is lost (or given up); never cleared.
    lost: Option<LostCause>,
    /// Set once the work was told to stop while the lease is still held.
    stopped: Option<LostCause>,
}

impl LocalDeadline {
    /// The standing of the lease on `key` with `token`, which may be acted on until
    /// `deadline` on `clock`'s [`Clock::boot`].
    pub fn new(clock: Arc<dyn Clock>, key: Key, token: FencingToken, deadline: Duration) -> Self {
        LocalDeadline {
            clock,
            key,
            token,
            cancel: CancellationToken::new(),
            state: Mutex::new(State {
                deadline,
                lost: None,
                stopped: None,
            }),
        }
    }

    /// The key held.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The fencing token held.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The clock the deadline is measured on (its [`Clock::boot`]).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The cancellation signal of the work done under the lease: fires once the lease
    /// is lost or the work told to stop.
    pub fn cancel(&self) -> &CancellationToken {
        &self.cancel
    }

    /// The local deadline as it stands, on [`LocalDeadline::clock`].
    pub fn deadline(&self) -> Duration {
        lock(&self.state).deadline
    }

    /// One reading of the clock against the deadline: the time left, or the reason
    /// the lease is lost (a recorded loss, or the deadline passed: then recorded as
    /// [`LostCause::GaveUp`], and the cancellation fires).
    pub fn remaining(&self) -> Result<Duration, LostCause> {
        self.update(|deadline| deadline).map(|(left, _)| left)
    }

    /// The reason the lease is lost, if it is (see [`LocalDeadline::remaining`]).
    /// Unlike [`LocalDeadline::check`], work told to stop while the lease is still
    /// held (a graceful leave) is not lost: what it finishes may still be reported.
    pub fn lost(&self) -> Option<LostCause> {
        self.remaining().err()
    }

    /// The token, while the lease may still be acted on: not lost, its deadline not
    /// passed by the clock right now, its work not told to stop and its cancellation
    /// not fired. Otherwise [`Error::Lost`], and the cancellation fires.
    pub fn check(&self) -> Result<FencingToken> {
        let reason = self.lost().or_else(|| {
            let stopped = lock(&self.state).stopped;
            stopped.or(self.cancel.is_cancelled().then_some(LostCause::GaveUp))
        });
        match reason {
            None => Ok(self.token),
            Some(reason) => {
                self.cancel.cancel();
                Err(Error::Lost {
                    key: self.key.clone(),
                    token: self.token,
                    reason,
                })
            }
        }
    }

    /// Moves the deadline to `deadline` (never earlier) after a request answered in
    /// time, unless the lease was lost meanwhile or the deadline already passed by the
    /// clock right now: then `Err` with the reason (recorded, and the cancellation
    /// fires). `Ok` with the deadline that stands.
    pub fn extend(&self, deadline: Duration) -> Result<Duration, LostCause> {
        self.update(|old| old.max(deadline)).map(|(_, now)| now)
    }

    /// Marks the lease lost for `reason` (unless it already was, for another) and
    /// fires the cancellation. Returns the reason that stands.
    pub fn lose(&self, reason: LostCause) -> LostCause {
        let reason = *lock(&self.state).lost.get_or_insert(reason);
        self.cancel.cancel();
        reason
    }

    /// Tells the work to stop (fires the cancellation; [`LocalDeadline::check`]
    /// answers `Lost` with `reason`) while the holder goes on keeping the lease
    /// alive: a graceful leave, a drop.
    pub fn stop_work(&self, reason: LostCause) {
        lock(&self.state).stopped.get_or_insert(reason);
        self.cancel.cancel();
    }

    /// Reads the clock, records a loss when the deadline passed, and otherwise sets
    /// the deadline to `next(old)`: the time left before the deadline as it was and
    /// the deadline as it now stands, or the reason the lease is lost (then the
    /// cancellation fires).
    fn update(
        &self,
        next: impl FnOnce(Duration) -> Duration,
    ) -> Result<(Duration, Duration), LostCause> {
        let now = self.clock.boot();
        let judged = {
            let mut st = lock(&self.state);
            if st.lost.is_none() && now >= st.deadline {
                st.lost = Some(LostCause::GaveUp);
            }
            match st.lost {
                Some(reason) => Err(reason),
                None => {
                    let left = st.deadline - now;
                    st.deadline = next(st.deadline);
                    Ok((left, st.deadline))
                }
            }
        };
        if judged.is_err() {
            self.cancel.cancel();
        }
        judged
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::types::{Name, Space};

    const SEC: Duration = Duration::from_secs(1);

    fn held(clock: &ManualClock, deadline: Duration) -> LocalDeadline {
        let key = Key::new(Space::leaders(), Name::new("role").unwrap());
        LocalDeadline::new(Arc::new(clock.clone()), key, FencingToken(3), deadline)
    }

    #[test]
    fn the_clock_reaching_the_deadline_loses_the_lease_for_good() {
        let clock = ManualClock::new();
        let standing = held(&clock, 10 * SEC);
        clock.advance(4 * SEC);
        assert_eq!(standing.remaining(), Ok(6 * SEC));
        assert_eq!(standing.check().unwrap(), FencingToken(3));
        clock.advance(6 * SEC);
        assert!(matches!(
            standing.check(),
            Err(Error::Lost {
                reason: LostCause::GaveUp,
                ..
            })
        ));
        assert!(standing.cancel().is_cancelled());
        // An extension that comes too late does not bring it back.
        assert_eq!(standing.extend(30 * SEC), Err(LostCause::GaveUp));
        assert_eq!(standing.deadline(), 10 * SEC);
    }

    #[test]
    fn an_extension_in_time_moves_the_deadline_later_only() {
        let clock = ManualClock::new();
        let standing = held(&clock, 10 * SEC);
        assert_eq!(standing.extend(15 * SEC), Ok(15 * SEC));
        assert_eq!(standing.extend(12 * SEC), Ok(15 * SEC));
        clock.advance(12 * SEC);
        assert_eq!(standing.lost(), None);
        assert!(!standing.cancel().is_cancelled());
    }

    #[test]
    fn the_first_loss_reason_stands() {
        let clock = ManualClock::new();
        let standing = held(&clock, 10 * SEC);
        assert_eq!(standing.lose(LostCause::Released), LostCause::Released);
        assert_eq!(standing.lose(LostCause::GaveUp), LostCause::Released);
        assert_eq!(standing.lost(), Some(LostCause::Released));
        assert!(standing.cancel().is_cancelled());
    }

    #[test]
    fn stopped_work_fails_the_check_but_is_not_lost() {
        let clock = ManualClock::new();
        let standing = held(&clock, 10 * SEC);
        standing.stop_work(LostCause::Released);
        assert!(standing.cancel().is_cancelled());
        assert_eq!(standing.lost(), None);
        assert!(matches!(
            standing.check(),
            Err(Error::Lost {
                reason: LostCause::Released,
                ..
            })
        ));
        // Still held: the deadline is extended as before.
        assert_eq!(standing.extend(20 * SEC), Ok(20 * SEC));
    }

    #[test]
    fn a_cancellation_fired_from_outside_fails_the_check() {
        let clock = ManualClock::new();
        let standing = held(&clock, 10 * SEC);
        standing.cancel().clone().cancel();
        assert!(matches!(
            standing.check(),
            Err(Error::Lost {
                reason: LostCause::GaveUp,
                ..
            })
        ));
    }
}
