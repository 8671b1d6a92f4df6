//! The worker runner: a member that claims items and runs an async handler on each,
//! so that a user writes the handler and nothing of the loop around it.
//!
//! [`Worker::start`] joins a member, then claims up to its free slots
//! ([`WorkerConfig::concurrency`]) and runs the handler on each item in a task of its
//! own: `Ok` completes the item, [`JobError::Retry`] hands it back to be tried again
//! after a backoff that doubles per attempt ([`WorkerConfig::retry_backoff`], by the
//! store's clock where the store keeps [`delays`](crate::Capabilities::delays), at once
//! where it does not; dead-lettered when out of attempts; [`JobError::RetryIn`] gives
//! a wait of its own instead), [`JobError::Fail`] dead-letters it. When the
//! member's lease is lost, every running handler is dropped at once (its future is
//! not polled again), before the store can give its item to anybody else: the item
//! goes back with the dead token. Idle, the worker waits for the store's signal that
//! items are pending ([`ItemStore::pending`](crate::ItemStore::pending)) where the
//! store gives one (the memory store; Redis for what any process makes pending; SQLite
//! for what its own process enqueues), and
//! polls with a backoff (up to [`WorkerConfig::poll`]) where it does not; it also
//! wakes when the store says the next held-back item is due
//! ([`ItemStore::next_due`](crate::ItemStore::next_due)), so a scheduled job starts on
//! time. [`WorkerHandle::shutdown`] stops claiming, lets the running jobs finish
//! within a grace, and leaves: the member hands back what is still running.
//!
//! By default the worker also runs a [`Checker`], elected so that one
//! worker of the fleet does the checking at a time: without one, nothing declares a
//! dead worker dead and its items are never requeued.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use liveness_core::{MemoryStore, Queue, Store, Ttl, Worker, WorkerConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> liveness_core::Result<()> {
//! let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
//! Queue::new(store.clone()).enqueue(b"resize photo 7").await?;
//!
//! let config = WorkerConfig::new("worker-1", Ttl::from_secs(10)?)?.concurrency(4);
//! let worker = Worker::start(store.clone(), config, |job| async move {
//!     println!("working on {}", String::from_utf8_lossy(job.payload()));
//!     Ok(())
//! })
//! .await?;
//! # while store.item_counts().await?.pending + store.item_counts().await?.owned > 0 {
//! #     tokio::time::sleep(Duration::from_millis(5)).await;
//! # }
//! let report = worker.shutdown(Duration::from_secs(5)).await?;
//! assert_eq!(report.completed, 1);
//! # Ok(()) }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::Instrument;

use crate::backoff::Backoff;
use crate::checker::{Checker, CheckerConfig, CheckerHandle};
use crate::election::ElectionConfig;
use crate::error::{BoxError, Error, InputProblem, Result};
use crate::events::{Event, EventBus};
use crate::item::{error_text, ItemId, ItemState, Outcome};
use crate::member::{Claimed, Member, MemberConfig};
use crate::metrics::{Labels, JOBS_TOTAL, JOB_SECONDS, JOB_WAIT_SECONDS};
use crate::queue_name::QueueName;
use crate::session::Session;
use crate::store::Store;
use crate::types::{FencingToken, Ttl};
use crate::wake::woken;
use metrics::{Counter, Histogram};

/// One claimed item, as a handler sees it.
#[derive(Debug)]
pub struct Job {
    claimed: Claimed,
}

impl Job {
    /// The item's id.
    pub fn id(&self) -> ItemId {
        self.claimed.item.id
    }

    /// The payload given at enqueue.
    pub fn payload(&self) -> &[u8] {
        &self.claimed.item.payload
    }

    /// The payload read as JSON into a `T` (feature `serde`): what
    /// [`Queue::enqueue_json`](crate::Queue::enqueue_json) wrote. A payload that is not
    /// a `T` is [`JobError::Fail`]: no retry can make it one, so `?` dead-letters the
    /// job at once.
    #[cfg(feature = "serde")]
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, JobError> {
        serde_json::from_slice(self.payload()).map_err(JobError::fail)
    }

    /// How many times the item has been claimed, this claim included.
    pub fn attempts(&self) -> u32 {
        self.claimed.item.attempts
    }

    /// The queue the item waited in.
    pub fn queue(&self) -> QueueName {
        self.claimed.item.queue
    }

    /// How many claims the item gets before it is dead-lettered.
    pub fn max_attempts(&self) -> u32 {
        self.claimed.item.max_attempts
    }

    /// May the job still act? The fencing token to pass with a side effect, or
    /// [`Error::Lost`] once the worker's lease is lost or its local deadline passed
    /// (read afresh: a process woken from a freeze answers `Lost` before any of its
    /// tasks ran). See [`Claimed::check`].
    pub fn check(&self) -> Result<FencingToken> {
        self.claimed.check()
    }

    /// Fires when the job must stop (the lease is lost, or the worker shuts down past
    /// its grace). The worker drops the handler's future then anyway; a handler that
    /// hands work to a thread of its own passes this on to it.
    pub fn cancelled(&self) -> &CancellationToken {
        &self.claimed.cancel
    }

    /// Tells the watchdog the job is moving (see [`Claimed::progress`]).
    pub fn progress(&self) {
        self.claimed.progress()
    }

    /// The claim itself: the item and the lease it was claimed under. For a handler
    /// that must reach the member's own calls; the worker completes or hands back the
    /// item from the handler's answer, and a completion the handler made itself makes
    /// the worker's own refused (counted as stopped).
    pub fn claimed(&self) -> &Claimed {
        &self.claimed
    }
}

/// Why a handler did not finish its job.
#[derive(Debug)]
#[non_exhaustive]
pub enum JobError {
    /// Try again: the item goes back to pending after the worker's backoff
    /// ([`WorkerConfig::retry_backoff`]), or to the dead-letter set when it is out of
    /// attempts. What `?` on any error gives.
    Retry(BoxError),
    /// Try again no sooner than this wait, by the store's clock, instead of the
    /// worker's backoff: what a rate-limited service's `Retry-After` says. On a store
    /// without [`Capabilities::delays`](crate::Capabilities::delays), at once.
    RetryIn(Duration, BoxError),
    /// Never try again: the item goes to the dead-letter set now.
    Fail(BoxError),
}

impl JobError {
    /// A failure to try again ([`JobError::Retry`]).
    pub fn retry(error: impl Into<BoxError>) -> JobError {
        JobError::Retry(error.into())
    }

    /// A failure to try again after `after` ([`JobError::RetryIn`]).
    pub fn retry_in(after: Duration, error: impl Into<BoxError>) -> JobError {
        JobError::RetryIn(after, error.into())
    }

    /// A failure never to try again ([`JobError::Fail`]).
    pub fn fail(error: impl Into<BoxError>) -> JobError {
        JobError::Fail(error.into())
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for JobError {
    /// Any error is worth another try: `?` in a handler gives [`JobError::Retry`].
    fn from(error: E) -> JobError {
        JobError::Retry(Box::new(error))
    }
}

/// How a [`Worker`] behaves.
#[derive(Clone, Debug)]
#[non_exhaustive]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(
        try_from = "crate::settings::WorkerForm",
        into = "crate::settings::WorkerForm"
    )
)]
pub struct WorkerConfig {
    /// The worker's member: its name, ttl and heartbeat.
    pub member: MemberConfig,
    /// How many jobs run at once at most; default 8.
    pub concurrency: usize,
    /// The longest pause between two claims of an idle worker on a store that does
    /// not signal pending items; default 1 s. The pauses start at a hundredth of it
    /// and double, with jitter, while claims find nothing.
    pub poll: Duration,
    /// Whether the worker runs a checker, elected among the workers of the store's
    /// namespace (one checks at a time); default true.
    pub checker: bool,
    /// The wait before a failed job's first retry; default 1 s. Each further attempt
    /// waits twice as long, up to [`WorkerConfig::retry_max`], each wait drawn at
    /// random between its half and itself so that jobs failed together spread. Zero:
    /// retried at once. Counted by the store's clock; a store without
    /// [`Capabilities::delays`](crate::Capabilities::delays) retries at once.
    pub retry_first: Duration,
    /// The longest wait before a retry; default 10 minutes, at most
    /// [`MAX_DELAY`](crate::MAX_DELAY).
    pub retry_max: Duration,
    /// The queues the worker claims from, in this order (strict priority: items of
    /// a later queue only while the earlier ones have none due;
    /// [`ItemStore::claim_from`](crate::ItemStore::claim_from)); 1 to
    /// [`MAX_CLAIM_QUEUES`](crate::MAX_CLAIM_QUEUES), each once. Default
    /// `[QueueName::DEFAULT]`; others need
    /// [`Capabilities::queues`](crate::Capabilities::queues).
    pub queues: Vec<QueueName>,
}

impl WorkerConfig {
    /// The defaults for a worker named `name` (its member's name) with `ttl`.
    pub fn new(name: &str, ttl: Ttl) -> Result<WorkerConfig> {
        Ok(WorkerConfig {
            member: MemberConfig::new(name, ttl)?,
            concurrency: 8,
            poll: Duration::from_secs(1),
            checker: true,
            retry_first: Duration::from_secs(1),
            retry_max: Duration::from_secs(600),
            queues: vec![QueueName::DEFAULT],
        })
    }

    /// The same, claiming from `queues` in this order ([`WorkerConfig::queues`]).
    ///
    /// ```
    /// use liveness_core::{QueueName, Ttl, WorkerConfig};
    /// let config = WorkerConfig::new("mailer-1", Ttl::from_secs(10)?)?
    ///     .queues([QueueName::new("urgent")?, QueueName::new("mail")?]);
    /// assert_eq!(config.queues.len(), 2);
    /// # Ok::<(), liveness_core::Error>(())
    /// ```
    pub fn queues(mut self, queues: impl IntoIterator<Item = QueueName>) -> Self {
        self.queues = queues.into_iter().collect();
        self
    }

    /// The same, waiting `first` before a failed job's first retry, doubling per
    /// attempt up to `max` ([`WorkerConfig::retry_first`]).
    pub fn retry_backoff(mut self, first: Duration, max: Duration) -> Self {
        self.retry_first = first;
        self.retry_max = max;
        self
    }

    /// The wait before the retry of a job that failed on its `attempts`-th claim:
    /// `retry_first` doubled per earlier attempt, at most `retry_max`, drawn between
    /// its half and itself.
    pub fn retry_wait(&self, attempts: u32) -> Duration {
        let doublings = attempts.saturating_sub(1).min(63);
        let step = self
            .retry_first
            .checked_mul(1u32 << doublings.min(31))
            .unwrap_or(self.retry_max)
            .min(self.retry_max);
        step.mul_f64(0.5 + fastrand::f64() * 0.5)
    }

    /// The same, with at most `n` jobs at once.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// The same, pausing at most `max` between the claims of an idle worker.
    pub fn poll(mut self, max: Duration) -> Self {
        self.poll = max;
        self
    }

    /// The same, with (true) or without a checker of its own.
    pub fn checker(mut self, run: bool) -> Self {
        self.checker = run;
        self
    }

    /// The same, sending the member's and the checker's events to `events`.
    pub fn events(mut self, events: EventBus) -> Self {
        self.member = self.member.events(events);
        self
    }

    /// Refuses a zero concurrency or poll, and a bad member configuration.
    pub fn validate(&self) -> Result<()> {
        if self.concurrency == 0 {
            return Err(Error::invalid("concurrency", InputProblem::Zero));
        }
        if self.poll.is_zero() {
            return Err(Error::invalid("poll", InputProblem::Zero));
        }
        if self.retry_max > crate::MAX_DELAY {
            return Err(Error::invalid(
                "retry_max",
                InputProblem::TooLongDuration {
                    max: crate::MAX_DELAY,
                    got: self.retry_max,
                },
            ));
        }
        crate::queue_name::check_claim_queues(&self.queues)?;
        if self.retry_first > self.retry_max {
            return Err(Error::invalid(
                "retry_first",
                InputProblem::TooLongDuration {
                    max: self.retry_max,
                    got: self.retry_first,
                },
            ));
        }
        self.member.validate()
    }
}

/// What a worker's jobs came to, counted by the worker that ran them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerReport {
    /// Jobs whose handler answered `Ok`, and whose item was completed.
    pub completed: u64,
    /// Jobs handed back to be tried again.
    pub retried: u64,
    /// Jobs whose item went to the dead-letter set (a [`JobError::Fail`], or out of
    /// attempts).
    pub dead_lettered: u64,
    /// Jobs stopped before their handler answered, or whose answer the store
    /// refused (the lease was lost, or the shutdown's grace ran out): their items go
    /// back with the lost token, or by the leave.
    pub stopped: u64,
}

impl WorkerReport {
    fn add(&mut self, end: End) {
        match end {
            End::Completed => self.completed += 1,
            End::Retried => self.retried += 1,
            End::DeadLettered => self.dead_lettered += 1,
            End::Stopped => self.stopped += 1,
        }
    }
}

/// How one job of a [`Worker`] ended: what [`Event::JobEnded`] says and
/// [`WorkerReport`] counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobEnd {
    /// The handler answered `Ok` and the store took the completion.
    Completed,
    /// The handler failed and the item went back to pending, to be tried again.
    Retried,
    /// The item went to the dead-letter set ([`JobError::Fail`], or out of attempts).
    DeadLettered,
    /// The job was stopped before its handler answered (the lease was lost, or the
    /// shutdown's grace ran out), or the store refused its answer: its item goes
    /// back with the lost token, or by the leave.
    Stopped,
}

use JobEnd as End;

/// A worker's metric handles ([`JOBS_TOTAL`], [`JOB_SECONDS`]), bound once.
#[derive(Clone, Debug)]
struct JobMetrics {
    /// One counter per [`End`], in its order.
    ended: [Counter; 4],
    seconds: Histogram,
    /// How long each claimed job waited in its queue, where the store says.
    waited: Histogram,
}

impl JobMetrics {
    /// The handles of the jobs of `queue` on `store`.
    fn of(store: &dyn Store, queue: QueueName) -> JobMetrics {
        let labels = Labels::of(store).queue(queue);
        let ended = ["completed", "retried", "dead_lettered", "stopped"]
            .map(|outcome| labels.counter(JOBS_TOTAL, &[("outcome", outcome)]));
        JobMetrics {
            ended,
            seconds: labels.histogram(JOB_SECONDS, &[]),
            waited: labels.histogram(JOB_WAIT_SECONDS, &[]),
        }
    }

    fn count(&self, end: End) -> End {
        self.ended[end as usize].increment(1);
        end
    }
}

/// The worker runner (see the module's docs).
#[derive(Debug)]
pub struct Worker;

impl Worker {
    /// Joins the worker's member on `store` and starts claiming and running `handler`
    /// on each item, in the background. Fails as [`Member::join`] does (a name held
    /// by a live member is `Held`), and with `InvalidInput` on a bad configuration.
    pub async fn start<F, Fut>(
        store: Arc<dyn Store>,
        config: WorkerConfig,
        handler: F,
    ) -> Result<WorkerHandle>
    where
        F: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), JobError>> + Send + 'static,
    {
        config.validate()?;
        let checker = checker(&store, &config)?;
        let member = Member::join(store.clone(), config.member.clone()).await?;
        Ok(run(store, member, checker, config, handler))
    }

    /// As [`Worker::start`], with the worker's member riding `session`
    /// ([`Session::join_with`]): it renews nothing of its own and lives and dies with
    /// the session's lease, so that one process can run many workers (one per queue,
    /// or one per slot of a shard) for the cost of one lease. When the session is
    /// lost (a freeze, a partition), every running handler of every worker riding it
    /// is dropped before the store can give its item to anybody else; a killed
    /// process's session dies once, its workers with it, and their items go back.
    /// The member's heartbeat timing is the session's (that of `config.member` is
    /// not used). Fails as [`Session::join_with`] does, and with `InvalidInput` on a
    /// bad configuration.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use liveness_core::{MemoryStore, Queue, Session, SessionConfig, Store, Ttl, Worker, WorkerConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> liveness_core::Result<()> {
    /// let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    /// let ttl = Ttl::from_secs(10)?;
    /// let session = Session::open(store.clone(), SessionConfig::new("host-1", ttl)?).await?;
    /// let mail = WorkerConfig::new("host-1-mail", ttl)?.checker(false);
    /// let worker = Worker::ride(&session, mail, |job| async move {
    ///     println!("sending {}", String::from_utf8_lossy(job.payload()));
    ///     Ok(())
    /// })
    /// .await?;
    /// Queue::new(store.clone()).enqueue(b"welcome mail").await?;
    /// # while store.item_counts().await?.pending + store.item_counts().await?.owned > 0 {
    /// #     tokio::time::sleep(Duration::from_millis(5)).await;
    /// # }
    /// assert_eq!(worker.shutdown(Duration::from_secs(5)).await?.completed, 1);
    /// session.close(Duration::from_secs(5)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn ride<F, Fut>(
        session: &Session,
        config: WorkerConfig,
        handler: F,
    ) -> Result<WorkerHandle>
    where
        F: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), JobError>> + Send + 'static,
    {
        config.validate()?;
        let store = session.store();
        let checker = checker(&store, &config)?;
        let member = session.join_with(config.member.clone()).await?;
        Ok(run(store, member, checker, config, handler))
    }
}

/// The worker's elected checker, when its configuration asks for one.
fn checker(store: &Arc<dyn Store>, config: &WorkerConfig) -> Result<Option<CheckerHandle>> {
    if !config.checker {
        return Ok(None);
    }
    let holder = config.member.holder.as_str();
    let elected = ElectionConfig::new("checker", holder, config.member.heartbeat.ttl)?
        .events(config.member.events.clone());
    let checking = CheckerConfig::default()
        .elected(elected)
        .events(config.member.events.clone());
    Ok(Some(Checker::new(store.clone(), checking).spawn()))
}

/// Starts the claiming loop of `member`, joined already.
fn run<F, Fut>(
    store: Arc<dyn Store>,
    member: Member,
    checker: Option<CheckerHandle>,
    config: WorkerConfig,
    handler: F,
) -> WorkerHandle
where
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<(), JobError>> + Send + 'static,
{
    let stop = CancellationToken::new();
    let metrics = config
        .queues
        .iter()
        .map(|q| (*q, JobMetrics::of(&*store, *q)))
        .collect();
    let delays = store.capabilities().delays;
    let run = Run {
        store,
        member: member.clone(),
        handler: Arc::new(handler),
        concurrency: config.concurrency,
        poll: config.poll,
        queues: config.queues.clone(),
        retries: delays.then(|| config.clone()),
        stop: stop.clone(),
        metrics,
    };
    WorkerHandle {
        member,
        stop: stop.drop_guard(),
        task: tokio::spawn(run.claim_and_run()),
        checker,
    }
}

/// A running worker: [`WorkerHandle::shutdown`] stops it. Dropped without a
/// shutdown, the worker stops claiming and its member is dropped, which hands its
/// items back after the stop margin.
#[derive(Debug)]
pub struct WorkerHandle {
    member: Member,
    /// Cancels the claiming loop when the handle is dropped.
    stop: DropGuard,
    task: JoinHandle<(JoinSet<End>, WorkerReport)>,
    checker: Option<CheckerHandle>,
}

impl WorkerHandle {
    /// The worker's member (its key, token, events and checks).
    pub fn member(&self) -> &Member {
        &self.member
    }

    /// Stops the worker: no claim from now on; the running jobs get up to `grace` to
    /// finish (their answers are applied); then the member leaves
    /// ([`Member::leave`]), which stops the jobs still running and hands their items
    /// back; then the checker stops. Answers what the jobs came to, or the leave's
    /// error.
    pub async fn shutdown(self, grace: Duration) -> Result<WorkerReport> {
        self.stop.disarm().cancel();
        let (mut running, mut report) = match self.task.await {
            Ok(ended) => ended,
            Err(e) => return Err(Error::backend("worker", e.to_string())),
        };
        let until = Instant::now() + grace;
        let left = loop {
            tokio::select! {
                done = running.join_next() => match done {
                    Some(Ok(end)) => report.add(end),
                    Some(Err(_)) => report.add(End::Stopped),
                    None => break Ok(()),
                },
                _ = tokio::time::sleep_until(until) => break Err(()),
            }
        };
        let leave = self.member.leave(Duration::ZERO);
        let answer = match left {
            Ok(()) => leave.await,
            // The leave fires the jobs' cancellation; they end, and it hands back.
            Err(()) => {
                let (answer, _) = tokio::join!(leave, async {
                    while let Some(done) = running.join_next().await {
                        report.add(done.unwrap_or(End::Stopped));
                    }
                });
                answer
            }
        };
        if let Some(checker) = self.checker {
            checker.stop().await;
        }
        answer.map(|()| report)
    }
}

/// The claiming loop's parts.
struct Run<F> {
    store: Arc<dyn Store>,
    member: Member,
    handler: Arc<F>,
    concurrency: usize,
    poll: Duration,
    /// The queues it claims from, in order.
    queues: Vec<QueueName>,
    /// The retry backoff, on a store that keeps delays (none: retried at once).
    retries: Option<WorkerConfig>,
    stop: CancellationToken,
    /// The job metrics of each of its queues.
    metrics: Vec<(QueueName, JobMetrics)>,
}

impl<F, Fut> Run<F>
where
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<(), JobError>> + Send + 'static,
{
    /// Claims while slots are free and runs each item, until told to stop; answers
    /// the jobs still running and what the finished ones came to.
    /// The job metrics of `queue` (one the worker claims from; the first queue's
    /// for an answer from elsewhere, which a store never gives).
    fn metrics_of(&self, queue: QueueName) -> JobMetrics {
        let found = self.metrics.iter().find(|(q, _)| *q == queue);
        match found.or(self.metrics.first()) {
            Some((_, metrics)) => metrics.clone(),
            None => JobMetrics::of(&*self.store, queue),
        }
    }

    async fn claim_and_run(self) -> (JoinSet<End>, WorkerReport) {
        let mut running = JoinSet::new();
        let mut report = WorkerReport::default();
        let mut pending = self.store.pending();
        let first = self.poll / 100;
        let mut idle = Backoff::new(first, self.poll);
        while !self.stop.is_cancelled() {
            // The jobs that ended while the last claim was out free their slots now:
            // the next claim asks for all of them in one round trip.
            while let Some(done) = running.try_join_next() {
                report.add(done.unwrap_or(End::Stopped));
            }
            let free = self.concurrency.saturating_sub(running.len());
            if free > 0 {
                match self.member.claim_from(&self.queues, free).await {
                    Ok(items) if !items.is_empty() => {
                        idle = Backoff::new(first, self.poll);
                        for claimed in items {
                            let metrics = self.metrics_of(claimed.item.queue);
                            if let Some(waited) = claimed.item.waited {
                                metrics.waited.record(waited);
                            }
                            let (member, handler) = (self.member.clone(), self.handler.clone());
                            // The backoff before a retry; none on a store without delays.
                            let wait = self
                                .retries
                                .as_ref()
                                .map(|c| c.retry_wait(claimed.item.attempts));
                            // One span per job: the handler's own logs and spans nest in it.
                            let span = tracing::info_span!(
                                "liveness.job",
                                item = %claimed.item.id,
                                queue = %claimed.item.queue,
                                attempt = claimed.item.attempts,
                                token = %claimed.lease.token,
                            );
                            let job = async move {
                                let (events, lease) =
                                    (member.events().clone(), claimed.lease.clone());
                                let (id, queue) = (claimed.item.id, claimed.item.queue);
                                let end = run_one(member, handler, claimed, wait, &metrics).await;
                                events.emit(Event::JobEnded {
                                    key: lease.key,
                                    token: lease.token,
                                    id,
                                    queue,
                                    end,
                                });
                                metrics.count(end)
                            };
                            running.spawn(job.instrument(span));
                        }
                        continue;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(error = %e, "a worker's claim failed: it tries again")
                    }
                }
            }
            let mut pause = idle.next();
            if free > 0 && self.retries.is_some() {
                // A held-back item (a scheduled job, a retry's backoff) due sooner
                // than the next poll: claim when it is due.
                match self.store.next_due().await {
                    Ok(Some(due)) => pause = pause.min(due),
                    Ok(None) => {}
                    Err(e) => tracing::debug!(error = %e, "a worker's look at due items failed"),
                }
            }
            tokio::select! {
                Some(done) = running.join_next() => report.add(done.unwrap_or(End::Stopped)),
                _ = tokio::time::sleep(pause), if free > 0 => {}
                _ = woken(&mut pending), if free > 0 => {}
                _ = self.stop.cancelled() => {}
            }
        }
        (running, report)
    }
}

/// Runs `handler` on `claimed` and applies its answer; stops it (dropping its future)
/// as soon as the job's cancellation fires.
async fn run_one<F, Fut>(
    member: Member,
    handler: Arc<F>,
    claimed: Claimed,
    backoff: Option<Duration>,
    metrics: &JobMetrics,
) -> End
where
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<(), JobError>> + Send + 'static,
{
    let cancel = claimed.cancel.clone();
    let job = Job {
        claimed: claimed.clone(),
    };
    let start = Instant::now();
    let answer = tokio::select! {
        biased;
        _ = cancel.cancelled() => return End::Stopped,
        answer = handler(job) => answer,
    };
    metrics.seconds.record(start.elapsed());
    let (outcome, error) = match answer {
        Ok(()) => {
            return match member.complete(&claimed).await {
                Ok(()) => End::Completed,
                Err(e) => {
                    tracing::debug!(item = %claimed.item.id, error = %e, "a job's completion was refused");
                    End::Stopped
                }
            };
        }
        Err(JobError::Retry(e)) => {
            tracing::info!(item = %claimed.item.id, error = %e, "a job failed: it is tried again");
            let after = backoff.unwrap_or_default();
            (Outcome::Retry { after }, e)
        }
        Err(JobError::RetryIn(after, e)) => {
            tracing::info!(item = %claimed.item.id, error = %e, ?after, "a job failed: it is tried again after its wait");
            // A store without delays cannot hold it back: at once.
            let after = backoff.map_or(Duration::ZERO, |_| after.min(crate::MAX_DELAY));
            (Outcome::Retry { after }, e)
        }
        Err(JobError::Fail(e)) => {
            tracing::warn!(item = %claimed.item.id, error = %e, "a job failed for good: dead-lettered");
            (Outcome::DeadLetter, e)
        }
    };
    let text = error_text(&*error);
    let handed_back = member.fail_with_error(&claimed, outcome, &text).await;
    match handed_back {
        Ok(ItemState::Pending) => End::Retried,
        Ok(_) => End::DeadLettered,
        Err(e) => {
            tracing::debug!(item = %claimed.item.id, error = %e, "a job's failure was refused");
            End::Stopped
        }
    }
}
