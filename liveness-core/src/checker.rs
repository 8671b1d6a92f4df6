//! The checker: finds expired member leases, declares each dead exactly once, and
//! requeues its items.
//!
//! A round is `expired → reap → sweep` for each expired lease, then a sweep
//! of the dead set (tokens released with items, or reaped by a checker that stopped
//! before requeueing: nothing is lost). Rounds are timed by the store's
//! [`next_expiry`](crate::LeaseStore::next_expiry) — a duration slept on the local
//! monotonic clock — capped by `check_every`, and woken early by the store's
//! [`wakeups`](crate::LeaseStore::wakeups). Any number of checkers may run at once:
//! the atomic `reap` makes exactly one of them declare each death.
//!
//! A store error on one entry skips that entry only (an event, a line in the round's
//! report); the rest of the round goes on.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::election::{Election, ElectionConfig};
use crate::error::{BatchResult, Error, InputProblem, Result};
use crate::events::{CheckStep, Event, EventBus};
use crate::item::Sweep;
use crate::layer::Intercepted;
use crate::lease::ExpiredLease;
use crate::metrics::CheckerMetrics;
use crate::store::{ItemStore, LeaseStore, Store};
use crate::traced::{traced, Traced};
use crate::types::{FencingToken, Key, Space};
use crate::unreaped::{self, Watching};

/// How a checker behaves.
#[derive(Clone, Debug)]
#[non_exhaustive]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(
        try_from = "crate::settings::CheckerForm",
        into = "crate::settings::CheckerForm"
    )
)]
pub struct CheckerConfig {
    /// The space it watches; default `members`.
    pub space: Space,
    /// Whether it also watches [`Space::sessions`] (default true): a session's death
    /// is what declares the members riding it
    /// ([`LeaseStore::join_session_many`]). One checker
    /// then serves a fleet of members and sessions; off, the sessions need a checker
    /// of their own (`space: Space::sessions()`).
    pub sessions: bool,
    /// The longest sleep between rounds; default 1 s. Zero, and anything over
    /// [`CheckerConfig::MAX_CHECK_EVERY`] (one day), are rejected
    /// ([`CheckerConfig::validate`]). Each such sleep is shortened by a random part
    /// of up to a fifth, so checkers started together do not run in lockstep.
    /// It also sets the shortest: two rounds are never closer than a fiftieth of it
    /// (20 ms by default; at least 1 ms), however close the expiries or wake-ups, so
    /// deaths that come in a burst are declared a batch per round, each at most that
    /// much after its expiry.
    pub check_every: Duration,
    /// How many expired leases and dead tokens one round handles at most; default 256.
    /// The store may clamp it further ([`Capabilities::max_batch`](crate::Capabilities::max_batch)).
    /// A round that hits the (clamped) limit is followed soon by another: after a
    /// pause as long as the round took (and never sooner than a fiftieth of
    /// `check_every`), so a backlog never keeps the store busy in a tight loop.
    pub batch: usize,
    /// When set, the checker runs rounds only while it holds this election's
    /// leadership (one active checker, the others standing by).
    pub elected: Option<ElectionConfig>,
    /// How often, while it runs rounds, the checker reads the namespace's item counts
    /// into the [`ITEMS`](crate::metrics::ITEMS) gauge (one
    /// [`item_counts`](crate::OperatorStore::item_counts) call each time, beside the
    /// rounds, each wait shortened by a random part of up to a fifth); default 15 s.
    /// Zero: never (the gauge is not set). A store without items or operator views
    /// is not asked. At most [`CheckerConfig::MAX_CHECK_EVERY`].
    pub depth_every: Duration,
    /// Where events go.
    pub events: EventBus,
}

impl Default for CheckerConfig {
    fn default() -> Self {
        CheckerConfig {
            space: Space::members(),
            sessions: true,
            check_every: Duration::from_secs(1),
            batch: 256,
            elected: None,
            depth_every: Duration::from_secs(15),
            events: EventBus::default(),
        }
    }
}

impl CheckerConfig {
    /// The longest `check_every` accepted: one day, as [`Ttl::MAX`](crate::Ttl::MAX)
    /// (no lease outlives it, so a longer sleep would only delay deaths).
    pub const MAX_CHECK_EVERY: Duration = crate::types::Ttl::MAX;

    /// Rejects a configuration that would busy-loop or never run again, with
    /// [`Error::InvalidInput`] naming the field: `check_every` of zero or over
    /// [`CheckerConfig::MAX_CHECK_EVERY`], and an `elected` configuration whose
    /// heartbeat [`HeartbeatConfig::validate`](crate::HeartbeatConfig::validate)
    /// refuses.
    pub fn validate(&self) -> Result<()> {
        if self.check_every.is_zero() {
            return Err(Error::invalid("check_every", InputProblem::Zero));
        }
        if self.check_every > Self::MAX_CHECK_EVERY {
            return Err(Error::invalid(
                "check_every",
                InputProblem::TooLongDuration {
                    max: Self::MAX_CHECK_EVERY,
                    got: self.check_every,
                },
            ));
        }
        if self.depth_every > Self::MAX_CHECK_EVERY {
            return Err(Error::invalid(
                "depth_every",
                InputProblem::TooLongDuration {
                    max: Self::MAX_CHECK_EVERY,
                    got: self.depth_every,
                },
            ));
        }
        if let Some(elected) = &self.elected {
            elected.heartbeat.validate()?;
        }
        Ok(())
    }

    /// Sleeps at most `every` between rounds (see [`CheckerConfig::check_every`]).
    pub fn check_every(mut self, every: Duration) -> Self {
        self.check_every = every;
        self
    }

    /// Watches [`Space::sessions`] as well as `space` (see [`CheckerConfig::sessions`]).
    pub fn sessions(mut self, watch: bool) -> Self {
        self.sessions = watch;
        self
    }

    /// The spaces a round lists: `space`, then the sessions' when watched.
    fn spaces(&self) -> Vec<Space> {
        let mut spaces = vec![self.space.clone()];
        if self.sessions && self.space != Space::sessions() {
            spaces.push(Space::sessions());
        }
        spaces
    }

    /// Sends events to this bus.
    pub fn events(mut self, events: EventBus) -> Self {
        self.events = events;
        self
    }

    /// Watches `space` (see [`CheckerConfig::space`]).
    pub fn space(mut self, space: Space) -> Self {
        self.space = space;
        self
    }

    /// Handles at most `batch` expired leases and dead tokens a round (see
    /// [`CheckerConfig::batch`]).
    pub fn batch(mut self, batch: usize) -> Self {
        self.batch = batch;
        self
    }

    /// Reads the item counts into the [`ITEMS`](crate::metrics::ITEMS) gauge every
    /// `every` (zero: never; see [`CheckerConfig::depth_every`]).
    pub fn depth_every(mut self, every: Duration) -> Self {
        self.depth_every = every;
        self
    }

    /// Runs rounds only while holding this election's leadership (see
    /// [`CheckerConfig::elected`]).
    pub fn elected(mut self, election: ElectionConfig) -> Self {
        self.elected = Some(election);
        self
    }
}

/// How much of `check_every` a capped pause between rounds may be shortened by.
const CHECK_JITTER: f64 = 0.2;

/// One death declared by a round.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Death {
    /// The expired lease that this checker reaped.
    pub lease: ExpiredLease,
    /// What its sweep moved.
    pub sweep: Sweep,
}

/// What one round did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RoundReport {
    /// Deaths this checker declared (it won the reap).
    pub deaths: Vec<Death>,
    /// Dead tokens swept outside of a reap by this round.
    pub swept: Vec<(FencingToken, Sweep)>,
    /// The store's `next_expiry` after the round.
    pub next_expiry: Option<Duration>,
    /// True when a batch limit was hit and another round should follow at once.
    pub more: bool,
    /// What the round skipped because the store answered an error; each also went
    /// out as an [`Event::CheckSkipped`].
    pub skipped: Vec<Skipped>,
}

/// One entry (or listing) a round skipped because the store answered an error.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Skipped {
    /// The step that failed.
    pub step: CheckStep,
    /// The lease's key, when the step was about one lease.
    pub key: Option<Key>,
    /// The token, when the step was about one token.
    pub token: Option<FencingToken>,
    /// Whether the error was a transient fault.
    pub retryable: bool,
}

impl RoundReport {
    /// True when one of the round's listings (`expired`, `dead_tokens`,
    /// `next_expiry`) failed: the round saw only part of the work.
    pub fn listing_failed(&self) -> bool {
        self.skipped.iter().any(|s| {
            matches!(
                s.step,
                CheckStep::Expired | CheckStep::DeadTokens | CheckStep::NextExpiry
            )
        })
    }
}

/// The checker. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Checker {
    raw: Arc<dyn Store>,
    store: Arc<Intercepted<Traced>>,
    config: CheckerConfig,
    metrics: CheckerMetrics,
    status: Arc<watch::Sender<CheckerStatus>>,
    /// Tells the holders of this process on the same store handle that a checker
    /// watches their spaces, so they do not look for unreaped leases themselves.
    _covers: Vec<Watching>,
}

/// What a running checker is doing, for health checks ([`Checker::status`]). Times are
/// tokio instants.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckerStatus {
    /// When the round in progress started, while one runs.
    pub running: Option<tokio::time::Instant>,
    /// When the last good round ended: one that completed with every listing
    /// answered. `None` before the first.
    pub last_ok: Option<tokio::time::Instant>,
    /// While rounds fail (an error, or a listing the store did not answer): since
    /// when, and the latest reason. `None` after a good round.
    pub failing: Option<(tokio::time::Instant, String)>,
    /// Set once [`Checker::run`] ended, for whatever reason: stopped on request, an
    /// invalid configuration, a panic, its task dropped. No round runs after it, so
    /// no death is declared: a health check must fail on it.
    pub stopped: Option<String>,
}

/// Records in the status why [`Checker::run`] ended, when dropped: the reason given,
/// or, when it ended without one, that it panicked or was dropped mid-way.
struct Ending<'a> {
    status: &'a watch::Sender<CheckerStatus>,
    why: Option<String>,
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        let why = self.why.take().unwrap_or_else(|| {
            if std::thread::panicking() {
                "the checker's task panicked".to_string()
            } else {
                "the checker's task was dropped before it ended".to_string()
            }
        });
        if std::thread::panicking() {
            tracing::error!(%why, "checker stopped");
        }
        self.status.send_modify(|s| {
            s.running = None;
            s.stopped.get_or_insert(why);
        });
    }
}

impl Checker {
    /// A checker over `store`.
    pub fn new(store: Arc<dyn Store>, config: CheckerConfig) -> Self {
        let mut spaces = vec![config.space.clone()];
        if config.sessions {
            spaces.push(Space::sessions());
        }
        let covers = spaces
            .iter()
            .map(|s| unreaped::checked(&store, s))
            .collect();
        Checker {
            _covers: covers,
            metrics: CheckerMetrics::new(&*store),
            raw: store.clone(),
            store: traced(store),
            config,
            status: Arc::new(watch::channel(CheckerStatus::default()).0),
        }
    }

    /// Follows what [`Checker::run`] does: each round's start and outcome. Take it
    /// before [`Checker::spawn`]; every receiver sees the latest status.
    pub fn status(&self) -> watch::Receiver<CheckerStatus> {
        self.status.subscribe()
    }

    /// The bus this checker sends its events to.
    pub fn events(&self) -> &EventBus {
        &self.config.events
    }

    /// Runs one round: reaps every expired lease it can (up to the batch), requeues
    /// the items of each death it won, sweeps the dead set, and reads `next_expiry`.
    ///
    /// A store error on one entry (a reap, a requeue) or one listing skips just that:
    /// the round emits [`Event::CheckSkipped`], records it in
    /// [`RoundReport::skipped`], and goes on, so one unreadable record never stops the
    /// detection of every other death, the sweep or `next_expiry`. The round fails
    /// only on an invalid configuration ([`CheckerConfig::validate`]), or when the
    /// store answered none of its three listings (`expired`, `dead_tokens`,
    /// `next_expiry`): then with the first of those errors.
    pub async fn round(&self) -> Result<RoundReport> {
        self.config.validate()?;
        let started = tokio::time::Instant::now();
        let calls = self.store.hook().calls();
        let report = self.round_inner().await;
        let m = &self.metrics;
        m.rounds.increment(1);
        m.round_seconds.record(started.elapsed().as_secs_f64());
        m.round_trips
            .record(self.store.hook().calls().saturating_sub(calls) as f64);
        if let Ok(report) = &report {
            m.deaths.increment(report.deaths.len() as u64);
            let moved = report
                .deaths
                .iter()
                .map(|d| &d.sweep)
                .chain(report.swept.iter().map(|(_, r)| r));
            let (mut requeued, mut dead_lettered) = (0, 0);
            for r in moved {
                requeued += r.requeued.len() as u64;
                dead_lettered += r.dead_lettered.len() as u64;
            }
            m.requeued.increment(requeued);
            m.dead_lettered.increment(dead_lettered);
        }
        report
    }

    /// The work of [`Checker::round`], which counts it.
    async fn round_inner(&self) -> Result<RoundReport> {
        let store = &self.store;
        let batch = self.config.batch.max(1);
        // The store clamps every limit to its own `max_batch`: a full answer is one
        // of that size, not of the configured batch (etcd clamps to 32).
        let full_at = batch.min(store.capabilities().max_batch.max(1));
        let mut report = RoundReport::default();
        let mut first_error = None;
        let mut listed = false;
        let spaces = self.config.spaces();
        for space in &spaces {
            match store.expired(space, batch).await {
                Ok(expired) => {
                    listed = true;
                    let full = expired.len() >= full_at;
                    let skipped = self.declare(expired, &mut report).await;
                    // Another round soon only when this one made progress: a batch of
                    // entries that all fail would otherwise loop.
                    report.more |= full && skipped < full_at;
                }
                Err(e) => {
                    self.skip(&mut report, CheckStep::Expired, None, None, &e);
                    first_error.get_or_insert(e);
                }
            }
        }
        // A store without items (elections alone) keeps no dead set to sweep.
        let sweep = match store.capabilities().items {
            true => store.dead_tokens(batch).await,
            false => Ok(Vec::new()),
        };
        match sweep {
            Ok(dead) => {
                listed = true;
                let full = dead.len() >= full_at;
                let tokens: Vec<FencingToken> = dead.iter().map(|d| d.token).collect();
                let results = if tokens.is_empty() {
                    Vec::new()
                } else {
                    per_entry(dead.len(), store.sweep_many(&tokens).await)
                };
                let mut skipped = 0;
                for (entry, result) in dead.into_iter().zip(results) {
                    match result {
                        Ok(requeued) => {
                            report_members_dead(&self.config.events, &mut report, &requeued);
                            if !requeued.requeued.is_empty() || !requeued.dead_lettered.is_empty() {
                                emit_dead_letters(&self.config.events, entry.token, &requeued);
                                self.config.events.emit(Event::Swept {
                                    token: entry.token,
                                    requeued: requeued.requeued.len(),
                                    dead_lettered: requeued.dead_lettered.len(),
                                });
                            }
                            report.swept.push((entry.token, requeued));
                        }
                        Err(e) => {
                            skipped += 1;
                            let (key, token) = (Some(entry.key), Some(entry.token));
                            self.skip(&mut report, CheckStep::Sweep, key, token, e.as_ref());
                        }
                    }
                }
                report.more |= full && skipped < full_at;
            }
            Err(e) => {
                self.skip(&mut report, CheckStep::DeadTokens, None, None, &e);
                first_error.get_or_insert(e);
            }
        }
        for space in &spaces {
            match store.next_expiry(space).await {
                Ok(next) => {
                    listed = true;
                    report.next_expiry = match (report.next_expiry, next) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                Err(e) => {
                    self.skip(&mut report, CheckStep::NextExpiry, None, None, &e);
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if !listed => Err(e),
            _ => Ok(report),
        }
    }

    /// Reaps a round's expired leases in one call and requeues the items of every
    /// death this checker won in another (two round trips on a store with native
    /// batches, not two per death). Returns how many entries a store error made it
    /// skip.
    async fn declare(&self, expired: Vec<ExpiredLease>, report: &mut RoundReport) -> usize {
        if expired.is_empty() {
            return 0;
        }
        let store = &self.store;
        let events = &self.config.events;
        let pairs: Vec<(Key, FencingToken)> =
            expired.iter().map(|l| (l.key.clone(), l.token)).collect();
        let reaped = per_entry(expired.len(), store.reap_many(&pairs).await);
        let mut skipped = 0;
        let mut won = Vec::new();
        for (lease, result) in expired.into_iter().zip(reaped) {
            match result {
                Ok(true) => won.push(lease),
                Ok(false) => {}
                Err(e) => {
                    skipped += 1;
                    let (key, token) = (Some(lease.key), Some(lease.token));
                    self.skip(report, CheckStep::Reap, key, token, e.as_ref());
                }
            }
        }
        if won.is_empty() {
            return skipped;
        }
        // Reaped: the tokens are in the dead set, so a requeue that fails now is
        // retried by the sweep of a later round.
        // A store without items (elections alone) has nothing to requeue.
        let tokens: Vec<FencingToken> = won.iter().map(|l| l.token).collect();
        let requeues = match store.capabilities().items {
            true => per_entry(won.len(), store.sweep_many(&tokens).await),
            false => won.iter().map(|_| Ok(Sweep::default())).collect(),
        };
        for (lease, result) in won.into_iter().zip(requeues) {
            let requeued = match result {
                Ok(requeued) => requeued,
                Err(e) => {
                    let (key, token) = (Some(lease.key.clone()), Some(lease.token));
                    self.skip(report, CheckStep::Sweep, key, token, e.as_ref());
                    Sweep::default()
                }
            };
            emit_dead_letters(events, lease.token, &requeued);
            events.emit(Event::Died {
                key: lease.key.clone(),
                holder: lease.holder.clone(),
                token: lease.token,
                requeued: requeued.requeued.len(),
                dead_lettered: requeued.dead_lettered.len(),
            });
            report_members_dead(events, report, &requeued);
            report.deaths.push(Death {
                lease,
                sweep: requeued,
            });
        }
        skipped
    }

    fn skip(
        &self,
        report: &mut RoundReport,
        step: CheckStep,
        key: Option<Key>,
        token: Option<FencingToken>,
        error: &Error,
    ) {
        tracing::warn!(?step, ?key, ?token, %error, "checker skipped an entry");
        let retryable = error.is_retryable();
        self.config.events.emit(Event::CheckSkipped {
            step,
            key: key.clone(),
            token,
            retryable,
        });
        report.skipped.push(Skipped {
            step,
            key,
            token,
            retryable,
        });
    }

    /// Runs rounds until `stop` fires. Store faults are logged and retried with
    /// backoff; they never end the loop. An invalid configuration
    /// ([`CheckerConfig::validate`]) ends it at once, with the error logged: it never
    /// runs rounds in a busy loop. However it ends (also by a panic, or the future
    /// dropped), [`CheckerStatus::stopped`] says why.
    pub async fn run(&self, stop: CancellationToken) {
        self.status.send_modify(|s| s.stopped = None);
        let mut ending = Ending {
            status: &self.status,
            why: None,
        };
        if let Err(e) = self.config.validate() {
            tracing::error!(error = %e, "checker not started");
            ending.why = Some(format!("not started: {e}"));
            return;
        }
        self.run_valid(&stop).await;
        ending.why = Some("stopped on request".to_string());
    }

    /// [`Checker::run`] of a valid configuration, until `stop` fires.
    async fn run_valid(&self, stop: &CancellationToken) {
        match self.config.elected.clone() {
            None => self.run_rounds(stop).await,
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

    /// Runs rounds, and beside them reads the item counts into the depth gauge,
    /// until `stop` fires (or the future is dropped: an elected checker's
    /// leadership lost); the gauge is then zero again.
    async fn run_rounds(&self, stop: &CancellationToken) {
        tokio::select! {
            _ = self.rounds(stop) => {}
            _ = self.report_depth() => {}
        }
    }

    /// Every [`CheckerConfig::depth_every`] (jittered), the store's item counts into
    /// the [`ITEMS`](crate::metrics::ITEMS) gauge; never returns. A failed read
    /// leaves the last counts (the rounds' status says the store fails).
    async fn report_depth(&self) {
        let caps = self.store.capabilities();
        let every = self.config.depth_every;
        if every.is_zero() || !caps.items || !caps.operator_views {
            return std::future::pending().await;
        }
        /// Zeroes the gauge when reporting ends, however it ends.
        struct Zero<'a>(&'a CheckerMetrics);
        impl Drop for Zero<'_> {
            fn drop(&mut self) {
                self.0.set_depth(None);
            }
        }
        let _zero = Zero(&self.metrics);
        loop {
            match crate::store::OperatorStore::queue_counts(&*self.store).await {
                Ok(counts) => self.metrics.set_depth(Some(&counts)),
                Err(e) => tracing::debug!(error = %e, "the checker could not read the item counts"),
            }
            tokio::time::sleep(crate::heartbeat::spread(every, CHECK_JITTER)).await;
        }
    }

    /// The rounds of [`Checker::run_rounds`].
    async fn rounds(&self, stop: &CancellationToken) {
        let mut wake = self.store.wakeups();
        let mut backoff = Backoff::new(Duration::from_millis(10), self.config.check_every);
        loop {
            let started = tokio::time::Instant::now();
            self.status.send_modify(|s| s.running = Some(started));
            let outcome = self.round().await;
            self.record(&outcome);
            let pause = match outcome {
                Ok(report) if report.listing_failed() => {
                    // Part of the store did not answer: retry soon, with backoff.
                    let next = report.next_expiry.unwrap_or(self.config.check_every);
                    backoff.next().min(next).min(self.config.check_every)
                }
                // Behind (a batch limit was hit): go on soon, but never in a tight
                // loop. The pause is as long as the round took, so a backlog (a mass
                // death, a dead set grown under overload) takes at most half of the
                // store's time this checker can claim: a slow store slows the checker
                // down instead of being kept busy by it (and never shorter than the
                // gap between rounds, below).
                Ok(report) if report.more => started.elapsed().min(self.config.check_every),
                Ok(report) => {
                    backoff = Backoff::new(Duration::from_millis(10), self.config.check_every);
                    // Wake just after the next expiry (store clocks tick in ms); the
                    // cap is jittered, so checkers started together drift apart.
                    report
                        .next_expiry
                        .map(|d| d.saturating_add(Duration::from_millis(1)))
                        .unwrap_or(self.config.check_every)
                        .min(crate::heartbeat::spread(
                            self.config.check_every,
                            CHECK_JITTER,
                        ))
                }
                Err(e) => {
                    tracing::warn!(error = %e, "checker round failed");
                    backoff.next().min(self.config.check_every)
                }
            };
            // Never two rounds closer than a fiftieth of `check_every` (20 ms by
            // default): what comes in a burst is served by one round, not one round
            // each: wake-ups (a mass loss, every release of a re-joining fleet) and
            // expiries alike (a mass death: leases that stopped renewing together
            // expire a few ms apart; each round reaps all that expired since the
            // last). A death is declared at most that gap later.
            let until = tokio::time::Instant::now() + pause;
            let gap = (self.config.check_every / 50).max(Duration::from_millis(1));
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(gap) => {}
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep_until(until) => {}
                _ = crate::wake::woken(&mut wake) => {}
            }
        }
    }

    /// Records a round's outcome in [`Checker::status`].
    fn record(&self, outcome: &Result<RoundReport>) {
        let now = tokio::time::Instant::now();
        let failure = match outcome {
            Ok(report) if report.listing_failed() => {
                let steps: Vec<String> = report
                    .skipped
                    .iter()
                    .map(|s| format!("{:?}", s.step))
                    .collect();
                Some(format!(
                    "the store did not answer every listing (skipped: {})",
                    steps.join(", ")
                ))
            }
            Ok(_) => None,
            Err(e) => Some(e.to_string()),
        };
        self.status.send_modify(|s| {
            s.running = None;
            match failure {
                None => {
                    s.last_ok = Some(now);
                    s.failing = None;
                }
                Some(why) => {
                    let since = s.failing.as_ref().map_or(now, |(since, _)| *since);
                    s.failing = Some((since, why));
                }
            }
        });
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

/// One answer per entry of a batch call of `n` entries: the call's own answers, or,
/// when the whole call failed, its error shared by every entry. A store that answered
/// the wrong number of entries counts as a fault for the missing ones.
fn per_entry<T>(n: usize, answer: BatchResult<T>) -> Vec<Result<T, Arc<Error>>> {
    match answer {
        Ok(answers) => {
            let mut out: Vec<Result<T, Arc<Error>>> = answers
                .into_iter()
                .take(n)
                .map(|r| r.map_err(Arc::new))
                .collect();
            if out.len() < n {
                let short = Arc::new(Error::backend(
                    "checker",
                    format!("a batch call answered {} of {n} entries", out.len()),
                ));
                out.extend((out.len()..n).map(|_| Err(short.clone())));
            }
            out
        }
        Err(e) => {
            let e = Arc::new(e);
            (0..n).map(|_| Err(e.clone())).collect()
        }
    }
}

/// The members of a dead session that a sweep of the session's token declared dead: each is
/// a death of this round (its own [`Event::Died`], its items swept with its token in a
/// later step), and another round follows at once while the session has more.
fn report_members_dead(events: &EventBus, report: &mut RoundReport, requeued: &Sweep) {
    for member in &requeued.members {
        events.emit(Event::Died {
            key: member.key.clone(),
            holder: member.holder.clone(),
            token: member.token,
            requeued: 0,
            dead_lettered: 0,
        });
        report.deaths.push(Death {
            lease: member.clone(),
            sweep: Sweep::default(),
        });
    }
    report.more |= !requeued.members.is_empty();
}

fn emit_dead_letters(events: &EventBus, token: FencingToken, requeued: &Sweep) {
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
