//! The heartbeat: keeps one lease alive and fires its cancellation signal the moment
//! it can no longer be sure it holds it. Shared by [`Member`](crate::Member) and
//! [`Leadership`](crate::Leadership).
//!
//! The local safety deadline is `send time of the last successful renew + ttl − margin`
//! on tokio's MONOTONIC clock. The store started counting the ttl no earlier than the
//! request's send time, so as long as the local clock does not run slower than the
//! store's by more than the margin, the signal fires before the store can expire the
//! lease and hand its work to anybody else. Only clock RATE matters, never offset.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::error::{Error, InputProblem, Result};
use crate::events::{Event, EventBus, LossReason};
use crate::lease::Lease;
use crate::store::Store;
use crate::types::Ttl;

/// Timing of a heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeartbeatConfig {
    /// The lease's ttl.
    pub ttl: Ttl,
    /// How often to renew; default `ttl / 3`.
    pub renew_every: Duration,
    /// How long before `ttl` (counted from a renewal's send time) the holder gives up
    /// locally; default `ttl / 5`. It must cover the drift between the local clock's
    /// rate and the store's over one ttl, and the time the holder's work needs to stop.
    pub safety_margin: Duration,
}

impl HeartbeatConfig {
    /// The defaults for `ttl`: renew every `ttl / 3`, margin `ttl / 5`.
    pub fn new(ttl: Ttl) -> Self {
        HeartbeatConfig {
            ttl,
            renew_every: ttl.duration() / 3,
            safety_margin: ttl.duration() / 5,
        }
    }

    /// Checks that a renewal is planned before the local deadline.
    pub fn validate(&self) -> Result<()> {
        let budget = self.ttl.duration().saturating_sub(self.safety_margin);
        if self.safety_margin >= self.ttl.duration() {
            return Err(Error::invalid(
                "safety_margin",
                InputProblem::TooLongDuration {
                    max: self.ttl.duration(),
                    got: self.safety_margin,
                },
            ));
        }
        if self.renew_every.is_zero() {
            return Err(Error::invalid("renew_every", InputProblem::Zero));
        }
        if self.renew_every >= budget {
            return Err(Error::invalid(
                "renew_every",
                InputProblem::TooLongDuration {
                    max: budget,
                    got: self.renew_every,
                },
            ));
        }
        Ok(())
    }

    /// The local deadline for a lease whose last successful renewal was sent at `sent`.
    pub fn deadline(&self, sent: Instant) -> Instant {
        sent + self.ttl.duration() - self.safety_margin
    }
}

/// How a heartbeat ended.
#[derive(Debug)]
pub(crate) enum End {
    /// Stopped on request, still holding this lease (its cancellation has NOT fired).
    Stopped(Lease),
    /// The lease is lost (or may be): its cancellation signal has fired.
    Lost(Lease, LossReason),
}

/// Renews `lease` until `stop` fires or the lease is lost. `sent` is when the
/// request that produced `lease` (acquire or renew) was sent. Fires `cancel` on loss.
pub(crate) async fn keep_alive(
    store: &Arc<dyn Store>,
    mut lease: Lease,
    mut sent: Instant,
    config: HeartbeatConfig,
    cancel: &CancellationToken,
    stop: &CancellationToken,
    events: &EventBus,
) -> End {
    loop {
        let planned = sent + config.renew_every;
        tokio::select! {
            biased;
            _ = stop.cancelled() => return End::Stopped(lease),
            _ = tokio::time::sleep_until(planned) => {}
        }
        let mut backoff = Backoff::new(config.renew_every / 8, config.renew_every);
        loop {
            let deadline = config.deadline(sent);
            let now = Instant::now();
            if now >= deadline {
                cancel.cancel();
                return End::Lost(lease, LossReason::Deadline);
            }
            let attempt = tokio::select! {
                biased;
                _ = stop.cancelled() => return End::Stopped(lease),
                r = tokio::time::timeout_at(deadline, store.renew(&lease)) => r,
            };
            match attempt {
                Err(_elapsed) => {
                    cancel.cancel();
                    return End::Lost(lease, LossReason::Deadline);
                }
                Ok(Ok(renewed)) => {
                    let late_by = now.saturating_duration_since(planned);
                    if late_by > config.renew_every / 2 {
                        events.emit(Event::RenewedLate {
                            key: lease.key.clone(),
                            token: lease.token,
                            late_by,
                        });
                    }
                    lease = renewed;
                    sent = now;
                    break;
                }
                Ok(Err(Error::Lost { reason, .. })) => {
                    cancel.cancel();
                    return End::Lost(lease, LossReason::Store(reason));
                }
                Ok(Err(e)) if e.is_retryable() => {
                    tracing::warn!(key = %lease.key, error = %e, "renew failed, retrying");
                    let pause = backoff.next().min(deadline.saturating_duration_since(now));
                    tokio::select! {
                        biased;
                        _ = stop.cancelled() => return End::Stopped(lease),
                        _ = tokio::time::sleep(pause) => {}
                    }
                }
                Ok(Err(e)) => {
                    tracing::error!(key = %lease.key, error = %e, "renew failed permanently");
                    cancel.cancel();
                    return End::Lost(lease, LossReason::Fault);
                }
            }
        }
    }
}
