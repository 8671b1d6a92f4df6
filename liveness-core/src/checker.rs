//! The checker: finds expired member leases, declares each dead exactly once, and
//! requeues its items.
//!
//! A round is `expired → reap → requeue_orphans` for each expired lease, then a sweep
//! of the dead set (tokens released with items, or reaped by a checker that stopped
//! before requeueing: nothing is lost). Rounds are timed by the store's
//! [`next_expiry`](crate::LeaseStore::next_expiry) — a duration slept on the local
//! monotonic clock — capped by `check_every`, and woken early by the store's
//! [`wakeups`](crate::LeaseStore::wakeups). Any number of checkers may run at once:
//! the atomic `reap` makes exactly one of them declare each death.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::election::{Election, ElectionConfig};
use crate::error::Result;
use crate::events::{Event, EventBus};
use crate::item::Requeued;
use crate::lease::ExpiredLease;
use crate::store::Store;
use crate::traced::traced;
use crate::types::{FencingToken, Space};

/// How a checker behaves.
#[derive(Clone, Debug)]
pub struct CheckerConfig {
    /// The space it watches; default `members`.
    pub space: Space,
    /// The longest sleep between rounds; default 1 s.
    pub check_every: Duration,
    /// How many expired leases and dead tokens one round handles at most; default 256.
    /// A round that hits the limit is followed at once by another.
    pub batch: usize,
    /// When set, the checker runs rounds only while it holds this election's
    /// leadership (one active checker, the others standing by).
    pub elected: Option<ElectionConfig>,
    /// Where events go.
    pub events: EventBus,
}

impl Default for CheckerConfig {
    fn default() -> Self {
        CheckerConfig {
            space: Space::members(),
            check_every: Duration::from_secs(1),
            batch: 256,
            elected: None,
            events: EventBus::default(),
        }
    }
}

/// One death declared by a round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Death {
    /// The expired lease that this checker reaped.
    pub lease: ExpiredLease,
    /// What its requeue moved.
    pub requeued: Requeued,
}

/// What one round did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// Deaths this checker declared (it won the reap).
    pub deaths: Vec<Death>,
    /// Dead tokens swept: requeued outside of a reap by this round.
    pub swept: Vec<(FencingToken, Requeued)>,
    /// The store's `next_expiry` after the round.
    pub next_expiry: Option<Duration>,
    /// True when a batch limit was hit and another round should follow at once.
    pub more: bool,
}

/// The checker. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Checker {
    raw: Arc<dyn Store>,
    store: Arc<dyn Store>,
    config: CheckerConfig,
}

impl Checker {
    /// A checker over `store`.
    pub fn new(store: Arc<dyn Store>, config: CheckerConfig) -> Self {
        Checker {
            raw: store.clone(),
            store: traced(store),
            config,
        }
    }

    /// The bus this checker sends its events to.
    pub fn events(&self) -> &EventBus {
        &self.config.events
    }

    /// Runs one round: reaps every expired lease it can (up to the batch), requeues
    /// the items of each death it won, sweeps the dead set, and reads `next_expiry`.
    pub async fn round(&self) -> Result<RoundReport> {
        let store = &self.store;
        let events = &self.config.events;
        let batch = self.config.batch.max(1);
        let mut report = RoundReport::default();
        let expired = store.expired(&self.config.space, batch).await?;
        report.more |= expired.len() >= batch;
        for lease in expired {
            if !store.reap(&lease.key, lease.token).await? {
                continue;
            }
            let requeued = store.requeue_orphans(lease.token).await?;
            emit_dead_letters(events, lease.token, &requeued);
            events.emit(Event::Died {
                key: lease.key.clone(),
                holder: lease.holder.clone(),
                token: lease.token,
                requeued: requeued.requeued.len(),
                dead_lettered: requeued.dead_lettered.len(),
            });
            report.deaths.push(Death { lease, requeued });
        }
        let dead = store.dead_tokens(batch).await?;
        report.more |= dead.len() >= batch;
        for entry in dead {
            let requeued = store.requeue_orphans(entry.token).await?;
            if !requeued.is_empty() {
                emit_dead_letters(events, entry.token, &requeued);
                events.emit(Event::OrphansRequeued {
                    token: entry.token,
                    requeued: requeued.requeued.len(),
                    dead_lettered: requeued.dead_lettered.len(),
                });
            }
            report.swept.push((entry.token, requeued));
        }
        report.next_expiry = store.next_expiry(&self.config.space).await?;
        Ok(report)
    }

    /// Runs rounds until `stop` fires. Store faults are logged and retried with
    /// backoff; they never end the loop.
    pub async fn run(&self, stop: CancellationToken) {
        match self.config.elected.clone() {
            None => self.run_rounds(&stop).await,
            Some(cfg) => {
                let election = Election::new(self.raw.clone(), cfg);
                loop {
                    let leadership = tokio::select! {
                        _ = stop.cancelled() => return,
                        l = election.campaign() => l,
                    };
                    match leadership {
                        Ok(leadership) => {
                            let lost = leadership.cancelled();
                            let both = stop.child_token();
                            tokio::select! {
                                _ = lost.cancelled() => {}
                                _ = self.run_rounds(&both) => {}
                            }
                            both.cancel();
                            if stop.is_cancelled() {
                                let _ = leadership.resign().await;
                                return;
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "checker campaign failed");
                            tokio::select! {
                                _ = stop.cancelled() => return,
                                _ = tokio::time::sleep(self.config.check_every) => {}
                            }
                        }
                    }
                }
            }
        }
    }

    async fn run_rounds(&self, stop: &CancellationToken) {
        let mut wake = self.store.wakeups();
        let mut backoff = Backoff::new(Duration::from_millis(10), self.config.check_every);
        loop {
            let pause = match self.round().await {
                Ok(report) if report.more => Duration::ZERO,
                Ok(report) => {
                    backoff = Backoff::new(Duration::from_millis(10), self.config.check_every);
                    // Wake just after the next expiry (store clocks tick in ms).
                    report
                        .next_expiry
                        .map(|d| d + Duration::from_millis(1))
                        .unwrap_or(self.config.check_every)
                        .min(self.config.check_every)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "checker round failed");
                    backoff.next().min(self.config.check_every)
                }
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
                _ = crate::wake::woken(&mut wake) => {}
            }
        }
    }

    /// Spawns [`Checker::run`] on the current tokio runtime.
    pub fn spawn(self) -> CheckerHandle {
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move { self.run(stop).await }
        });
        CheckerHandle {
            stop,
            task: Some(task),
        }
    }
}

fn emit_dead_letters(events: &EventBus, token: FencingToken, requeued: &Requeued) {
    for id in &requeued.dead_lettered {
        events.emit(Event::ItemDeadLettered { id: *id, token });
    }
}

/// A running checker. Dropping it stops the checker.
#[derive(Debug)]
pub struct CheckerHandle {
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl CheckerHandle {
    /// Stops the checker and waits for its current round to end.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for CheckerHandle {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
