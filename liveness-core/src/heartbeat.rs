//! The heartbeat: keeps one lease alive and fires its cancellation signal the moment
//! it can no longer be sure it holds it. Shared by [`Member`](crate::Member) and
//! [`Leadership`](crate::Leadership).
//!
//! The local safety deadline is `send time of the last successful renew + ttl − margin`
//! on the holder's boot clock ([`Clock::boot`]: it keeps counting
//! while the host is suspended). The store started counting the ttl no earlier than the
//! request's send time, so as long as the local clock does not run slower than the
//! store's by more than the margin, the signal fires before the store can expire the
//! lease and hand its work to anybody else. Only clock RATE matters, never offset.
//!
//! Which clock each timer uses: renewals are planned and slept on tokio's monotonic
//! clock (through a [`Batcher`], in the batcher's queue), and on every wake the
//! heartbeat compares the boot clock with the deadline.
//! Only a host suspend moves the boot clock ahead of tokio's. The default
//! [`HostClock`](crate::HostClock) signals resumes (one watcher thread per process,
//! [`Clock::resumes`]): the heartbeat sleeps until its next
//! renewal or its deadline and wakes on the signal, so a resumed host fires the
//! cancellation within [`RESUME_POLL`](crate::clock::RESUME_POLL). A clock without
//! the signal caps every sleep at [`HeartbeatConfig::tick`] instead (within one tick).
//! Either way every synchronous check (`Claimed::check`, `Leadership::check`, ...)
//! reads the boot clock itself and answers `Lost` at once.

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::backoff::Backoff;
use crate::batch::Batcher;
use crate::clock::Clock;
use crate::durability::StoreLostState;
use crate::error::{Error, InputProblem, LostCause, Result};
use crate::events::{Event, EventBus, HolderLoss};
use crate::lease::Lease;
use crate::metrics::HolderMetrics;
use crate::standing::LocalDeadline;
use crate::store::Store;
use crate::sync::lock;
use crate::types::{Key, Ttl};

/// Timing of a heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(
        try_from = "crate::settings::HeartbeatForm",
        into = "crate::settings::HeartbeatForm"
    )
)]
pub struct HeartbeatConfig {
    /// The lease's ttl.
    pub ttl: Ttl,
    /// How often to renew at most: default `ttl / 3`. Each renewal comes up to a
    /// fifth of it early (random jitter, never late), and the first renewal of a lease
    /// anywhere within its first interval, so holders that started together spread
    /// out within one interval and stay spread.
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

    /// The same timing, renewing at most every `every`.
    pub fn renew_every(mut self, every: Duration) -> Self {
        self.renew_every = every;
        self
    }

    /// The same timing, giving up `margin` before the ttl.
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = margin;
        self
    }

    /// Checks that a renewal is planned before the local deadline.
    pub fn validate(&self) -> Result<()> {
        let budget = self.budget();
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

    /// The local deadline for a lease whose last successful renewal was sent at `sent`,
    /// on tokio's clock. The heartbeat itself measures it on the boot clock
    /// ([`Clock::boot`]), which also counts the time the host spent suspended.
    pub fn deadline(&self, sent: Instant) -> Instant {
        sent + self.budget()
    }

    /// How long after a successful request's send time the holder may still act:
    /// `ttl − safety_margin` (zero for a margin not below the ttl, which
    /// [`HeartbeatConfig::validate`] refuses).
    pub fn budget(&self) -> Duration {
        self.ttl.duration().saturating_sub(self.safety_margin)
    }

    /// The client timeout a store handle serving this heartbeat should use for one
    /// call: half of `ttl − safety_margin − renew_every`, the time between the latest
    /// planned renewal and the local deadline (at the defaults `0.23 × ttl`: 2.3 s at
    /// a ttl of 10 s).
    ///
    /// Why: a renewal that timed out is retried (with backoff) until the deadline, so
    /// this leaves room for at least one retry after a lost request. A shorter timeout
    /// buys nothing on a store that is merely slow: the server still does the work of
    /// every request the client gave up on, so each timeout followed by a retry adds
    /// load exactly when the store is overloaded. Wait for a slow answer; retry only
    /// what may really have been lost. The heartbeat itself never cancels a renewal
    /// before the deadline, and keeps at most one renewal in flight per lease.
    pub fn client_timeout(&self) -> Duration {
        self.ttl
            .duration()
            .saturating_sub(self.safety_margin)
            .saturating_sub(self.renew_every)
            / 2
    }

    /// The longest the heartbeat sleeps before it compares its clock with the local
    /// deadline again, when the clock does not signal resumes
    /// ([`Clock::resumes`]): a quarter of the safety margin,
    /// between 1 ms and 1 s. It bounds how late the cancellation fires when the clock
    /// jumps (a host suspend); every synchronous check sees the jump at once.
    pub fn tick(&self) -> Duration {
        (self.safety_margin / 4).clamp(Duration::from_millis(1), Duration::from_secs(1))
    }
}

/// The builder setters a configuration holding a lease of its own shares
/// ([`crate::member::MemberConfig`], [`crate::session::SessionConfig`]): holder id,
/// heartbeat timing, events and clock. The holder setter's doc comment is given.
macro_rules! lease_config_setters {
    ($(#[$holder_doc:meta])*) => {
        $(#[$holder_doc])*
        pub fn holder(mut self, holder: $crate::types::HolderId) -> Self {
            self.holder = holder;
            self
        }

        /// Sets how often to renew.
        pub fn renew_every(mut self, every: ::std::time::Duration) -> Self {
            self.heartbeat.renew_every = every;
            self
        }

        /// Sets the local safety margin.
        pub fn safety_margin(mut self, margin: ::std::time::Duration) -> Self {
            self.heartbeat.safety_margin = margin;
            self
        }

        /// Sends events to this bus.
        pub fn events(mut self, events: $crate::events::EventBus) -> Self {
            self.events = events;
            self
        }

        /// Measures the safety deadline on this clock.
        pub fn clock(mut self, clock: ::std::sync::Arc<dyn $crate::clock::Clock>) -> Self {
            self.clock = clock;
            self
        }
    };
}
pub(crate) use lease_config_setters;

/// How a heartbeat ended.
#[derive(Debug)]
pub(crate) enum End {
    /// Stopped on request, still holding this lease (its cancellation has NOT fired).
    Stopped(Lease),
    /// The lease is lost (or may be): its cancellation signal has fired.
    Lost(Lease, HolderLoss),
}

impl End {
    /// The lost lease and why, announced on `events` ([`Event::Lost`] on `key`); for
    /// a stopped heartbeat none, its last lease handed to `stopped`.
    pub(crate) fn lost(
        self,
        key: &Key,
        events: &EventBus,
        stopped: impl FnOnce(Lease),
    ) -> Option<(Lease, HolderLoss)> {
        match self {
            End::Stopped(lease) => {
                stopped(lease);
                None
            }
            End::Lost(lease, reason) => {
                events.emit(Event::Lost {
                    key: key.clone(),
                    token: lease.token,
                    reason,
                });
                Some((lease, reason))
            }
        }
    }
}

/// What one held lease's work may still do: its [`LocalDeadline`] (extended by the
/// heartbeat, compared with the clock by every "may I still act?" check) and the
/// earliest moment the store itself can expire the lease, as this holder can tell.
/// Every method of [`LocalDeadline`] is reached through it.
#[derive(Debug)]
pub(crate) struct Standing {
    local: LocalDeadline,
    /// `ttl − (ttl − safety_margin)`: how long after the local deadline the store
    /// itself may expire the lease (the send time of the last successful acquire or
    /// renew + ttl).
    margin: Duration,
}

impl Deref for Standing {
    type Target = LocalDeadline;

    fn deref(&self) -> &LocalDeadline {
        &self.local
    }
}

impl Standing {
    /// The standing of `lease`, acquired or renewed by a request sent at `sent` (read
    /// from `clock`).
    pub(crate) fn new(
        clock: Arc<dyn Clock>,
        lease: &Lease,
        config: &HeartbeatConfig,
        sent: Duration,
    ) -> Self {
        let budget = config.budget();
        Standing {
            local: LocalDeadline::new(clock, lease.key.clone(), lease.token, sent + budget),
            margin: config.ttl.duration() - budget,
        }
    }

    /// Extends the deadlines after a renewal sent at `sent` succeeded, unless the lease
    /// was lost meanwhile or its deadline already passed: then `Err` with the reason.
    fn extend_from(&self, sent: Duration, config: &HeartbeatConfig) -> Result<(), LostCause> {
        self.local
            .extend(sent + config.budget())
            .map(|_deadline| ())
    }

    /// The earliest moment the store itself can expire the lease, on
    /// [`LocalDeadline::clock`]: the send time of the last successful renewal + ttl.
    pub(crate) fn store_expiry(&self) -> Duration {
        self.local.deadline() + self.margin
    }

    /// Waits until the store itself may have expired the lease
    /// ([`Standing::store_expiry`] passed by this standing's clock, read at least every
    /// `tick`). False when `stop` fired first.
    pub(crate) async fn wait_store_expiry(&self, tick: Duration, stop: &CancellationToken) -> bool {
        wait_boot_until(&**self.clock(), || self.store_expiry(), tick, stop).await
    }
}

/// Waits until `clock`'s boot time reaches `at()` (read again after each sleep, each
/// sleep at most `tick`). False when `stop` fired first.
pub(crate) async fn wait_boot_until(
    clock: &dyn Clock,
    at: impl Fn() -> Duration,
    tick: Duration,
    stop: &CancellationToken,
) -> bool {
    loop {
        let left = at().saturating_sub(clock.boot());
        if left.is_zero() {
            return true;
        }
        tokio::select! {
            biased;
            _ = stop.cancelled() => return false,
            _ = tokio::time::sleep(left.min(tick)) => {}
        }
    }
}

/// How the heartbeat ended a wait.
enum Woke<T> {
    /// The awaited thing happened.
    Done(T),
    /// `stop` fired.
    Stopped,
    /// The lease is lost (its local deadline passed, or a check found it lost).
    Lost,
}

/// The resume signal's next change: the receiver back, or `None` once its sender is
/// gone (which the process-wide one never is).
type NextResume<'a> = Pin<Box<dyn Future<Output = Option<watch::Receiver<u64>>> + Send + 'a>>;

fn next_resume<'a>(mut rx: watch::Receiver<u64>) -> NextResume<'a> {
    Box::pin(async move { rx.changed().await.ok().map(|()| rx) })
}

/// The waker a heartbeat polls its rare waits with (`stop`, the resume signal): it
/// marks that one of them may be ready and wakes the heartbeat's task. The other
/// wake-ups (the planned time, a renewal's answer) then leave those waits alone: each
/// poll of them takes a lock. Alone on its cache line: it is read on every wake-up,
/// and a line shared with another task's busy state would bounce between cores.
#[derive(Default)]
#[repr(align(64))]
struct Flag {
    set: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.set.store(true, Ordering::Release);
        if let Some(task) = lock(&self.task).as_ref() {
            task.wake_by_ref();
        }
    }
}

/// What one heartbeat waits on, made once for the life of a lease instead of anew for
/// every wait: each renewal then sets one timer (its planned time) and moves the
/// deadline timer's expiry (tokio extends a pending timer lazily, without touching
/// the timer wheel), instead of registering and cancelling a timer, a stop waiter and
/// a resume waiter for every wait.
///
/// Every wait watches `stop` and the local deadline. With a clock that signals resumes
/// ([`Clock::resumes`], the default [`HostClock`](crate::HostClock) does), the
/// deadline timer sleeps until the deadline itself and the signal wakes it early: only
/// a suspend moves the boot clock ahead of tokio's. Otherwise the deadline is read on
/// the standing's clock at least every `tick` of tokio time, so a clock that jumps (a
/// host suspend, a manual test clock) is noticed within one tick.
struct Waits<'a, 'p> {
    standing: &'a Standing,
    tick: Duration,
    stop: Pin<&'p mut WaitForCancellationFuture<'a>>,
    /// Whether the clock signals resumes (then the deadline timer is not capped by
    /// `tick`), and the signal's next change while its sender lives.
    signalled: bool,
    resumed: Option<NextResume<'a>>,
    /// `stop` and `resumed` are polled with `flag`'s waker, and only when it was woken
    /// or `rare` is set (not polled since made, or the task's waker changed).
    flag: Arc<Flag>,
    flag_waker: Waker,
    task: Option<Waker>,
    rare: bool,
    /// Wakes the waiter to compare the clock with the deadline again, at `armed`
    /// (`None` once it fired: it must be set again before it is awaited).
    guard: Pin<&'p mut Sleep>,
    armed: Option<Instant>,
}

impl<'a, 'p> Waits<'a, 'p> {
    fn new(
        standing: &'a Standing,
        tick: Duration,
        stop: Pin<&'p mut WaitForCancellationFuture<'a>>,
        guard: Pin<&'p mut Sleep>,
    ) -> Self {
        let resumes = standing.clock().resumes();
        let flag = Arc::new(Flag::default());
        Waits {
            standing,
            tick,
            stop,
            signalled: resumes.is_some(),
            resumed: resumes.map(next_resume),
            flag_waker: Waker::from(flag.clone()),
            flag,
            task: None,
            rare: true,
            guard,
            armed: None,
        }
    }

    /// Sleeps until `at` (tokio's clock) on `timer`, watching `stop` and the deadline.
    async fn sleep_until(&mut self, mut timer: Pin<&mut Sleep>, at: Instant) -> Woke<()> {
        timer.as_mut().reset(at);
        self.watch(timer).await
    }

    /// Awaits `fut` while watching `stop` and the local deadline. Each comparison with
    /// the deadline reads the clock afresh, right before the wake-up time is derived
    /// from it: a reading taken earlier (and a thread descheduled in between) would
    /// set the deadline timer late by the time in between.
    async fn watch<F: Future>(&mut self, fut: F) -> Woke<F::Output> {
        tokio::pin!(fut);
        loop {
            let Ok(left) = self.standing.remaining() else {
                return Woke::Lost;
            };
            let nap = if self.signalled {
                left
            } else {
                left.min(self.tick)
            };
            let wake = Instant::now() + nap;
            // Set again when it fired, must fire earlier, or would fire well before
            // it must (a timer that fires up to a millisecond early only costs a
            // wake-up that compares the clock again).
            let stale = self
                .armed
                .is_none_or(|armed| wake < armed || wake > armed + Duration::from_millis(1));
            if stale {
                self.guard.as_mut().reset(wake);
                self.armed = Some(wake);
            }
            let woke = std::future::poll_fn(|cx| self.poll_once(cx, fut.as_mut())).await;
            if let Some(woke) = woke {
                return woke;
            }
        }
    }

    /// One poll of a wait, in this order: `stop`, `fut`, the deadline timer, the
    /// resume signal (`stop` and the signal only when they may be ready). `None` when
    /// the clock must be compared with the deadline again.
    fn poll_once<F: Future>(
        &mut self,
        cx: &mut Context<'_>,
        fut: Pin<&mut F>,
    ) -> Poll<Option<Woke<F::Output>>> {
        if !self.task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
            *lock(&self.flag.task) = Some(cx.waker().clone());
            self.task = Some(cx.waker().clone());
            self.rare = true;
        }
        // Read before written: the flag is rarely set, and a read leaves the line shared.
        let flagged =
            self.flag.set.load(Ordering::Acquire) && self.flag.set.swap(false, Ordering::AcqRel);
        let rare = std::mem::take(&mut self.rare) | flagged;
        if rare {
            let mut flagged = Context::from_waker(&self.flag_waker);
            if self.stop.as_mut().poll(&mut flagged).is_ready() {
                return Poll::Ready(Some(Woke::Stopped));
            }
            if let Some(resumed) = self.resumed.as_mut() {
                if let Poll::Ready(rx) = resumed.as_mut().poll(&mut flagged) {
                    self.resumed = rx.map(next_resume);
                    self.rare = true;
                    return Poll::Ready(None);
                }
            }
        }
        if let Poll::Ready(out) = fut.poll(cx) {
            return Poll::Ready(Some(Woke::Done(out)));
        }
        if self.guard.as_mut().poll(cx).is_ready() {
            self.armed = None;
            return Poll::Ready(None);
        }
        Poll::Pending
    }
}

/// What a holder's heartbeat renews through and reports to: the same for every lease
/// it keeps alive.
pub(crate) struct Heartbeat<'a> {
    /// The store renewals go to.
    pub(crate) store: &'a Arc<dyn Store>,
    /// When given, renewals go through it, coalesced into batches.
    pub(crate) batcher: Option<&'a Batcher>,
    /// Called with the lease as each renewal of it is sent (without a batcher): a
    /// session on a store without native sessions renews its riders with it.
    pub(crate) alongside: Option<&'a (dyn Fn(&Lease) + Sync)>,
    /// When to renew and how long a lease may go unrenewed.
    pub(crate) config: HeartbeatConfig,
    /// Ends the heartbeat (with [`End::Stopped`]) when fired.
    pub(crate) stop: &'a CancellationToken,
    /// Where late renewals are reported.
    pub(crate) events: &'a EventBus,
    /// Counts renewals and losses.
    pub(crate) metrics: &'a HolderMetrics,
}

impl Heartbeat<'_> {
    /// Renews `lease` until `stop` fires or the lease is lost. `sent` is when the
    /// request that produced `lease` (acquire or renew) was sent, on tokio's clock (it
    /// plans the renewals; the deadline lives in `standing`). Fires the standing's
    /// cancellation on loss. Through a batcher, each renewal waits for its planned time
    /// in the batcher's queue, and the batcher reads the clock for its send time just
    /// before the batch leaves: the deadline never comes later than with a renewal of
    /// its own.
    ///
    /// However the heartbeat ends, its standing knows: a panic (in a store layer, a
    /// client library) or the future dropped mid-way (its task aborted, the runtime
    /// shut down) marks the lease lost and fires the cancellation at once, instead of
    /// leaving the work to find out at its next check.
    pub(crate) async fn keep_alive(&self, lease: Lease, sent: Instant, standing: &Standing) -> End {
        let mut unfinished = Unfinished(Some(standing));
        let end = self.renew_until_end(lease, sent, standing).await;
        unfinished.0 = None;
        if let End::Lost(_, reason) = &end {
            self.metrics.lost(*reason);
        }
        end
    }

    /// The loop of [`Heartbeat::keep_alive`], which counts how it ended.
    async fn renew_until_end(
        &self,
        mut lease: Lease,
        mut sent: Instant,
        standing: &Standing,
    ) -> End {
        let Heartbeat {
            store,
            batcher,
            alongside,
            config,
            stop,
            events,
            metrics,
        } = *self;
        let stop_wait = stop.cancelled();
        let guard = tokio::time::sleep_until(Instant::now());
        let timer = tokio::time::sleep_until(Instant::now());
        tokio::pin!(stop_wait, guard, timer);
        let mut waits = Waits::new(standing, config.tick(), stop_wait, guard);
        // The first renewal of a lease comes anywhere in its first interval: a fleet that
        // joined together (a deploy, a restart) is spread over one interval at once.
        let mut interval = spread(config.renew_every, 1.0);
        loop {
            let planned = sent + interval;
            // Later renewals come up to a fifth of the interval early, never late: the
            // spread never closes again, and no renewal is planned nearer the deadline
            // than configured.
            interval = spread(config.renew_every, RENEW_JITTER);
            // Through a batcher, the first attempt waits for its planned time in the
            // batcher's queue (no timer and no wake-up of this task until the answer);
            // without one, this task sleeps until then.
            let mut first = Some(planned);
            if batcher.is_none() {
                first = None;
                match waits.sleep_until(timer.as_mut(), planned).await {
                    Woke::Done(()) => {}
                    Woke::Stopped => return End::Stopped(lease),
                    Woke::Lost => return End::Lost(lease, HolderLoss::Deadline),
                }
            }
            let mut backoff = Backoff::new(config.renew_every / 8, config.renew_every);
            loop {
                let (attempt, now, sent_on_clock) = match batcher {
                    Some(batcher) => {
                        let handed = Instant::now();
                        let at = first.take();
                        let reading = standing.clock().boot();
                        let renewal = batcher.renew_at(&lease, at, standing.clock());
                        match waits.watch(renewal).await {
                            Woke::Done(answered) => {
                                // Timed like a renewal of its own: from the later of
                                // its hand-over and its planned time.
                                let from = at.map_or(handed, |at| at.max(handed));
                                metrics.renewal(from.elapsed(), answered.answer.is_ok());
                                // The batcher reads the clock just before the batch
                                // leaves; `reading` (earlier) only if it could not.
                                let sent_on_clock = answered.sent_on_clock.unwrap_or(reading);
                                (answered.answer, answered.sent, sent_on_clock)
                            }
                            Woke::Stopped => return End::Stopped(lease),
                            Woke::Lost => return End::Lost(lease, HolderLoss::Deadline),
                        }
                    }
                    None => {
                        let now = Instant::now();
                        let sent_on_clock = standing.clock().boot();
                        if let Some(alongside) = alongside {
                            alongside(&lease);
                        }
                        let renewal = store.renew(&lease);
                        match waits.watch(renewal).await {
                            Woke::Done(r) => {
                                metrics.renewal(now.elapsed(), r.is_ok());
                                (r, now, sent_on_clock)
                            }
                            Woke::Stopped => return End::Stopped(lease),
                            Woke::Lost => return End::Lost(lease, HolderLoss::Deadline),
                        }
                    }
                };
                match attempt {
                    Ok(renewed) => {
                        match standing.extend_from(sent_on_clock, &config) {
                            Ok(()) => {}
                            Err(reason) => return End::Lost(lease, loss_of(reason)),
                        }
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
                    Err(Error::Lost { reason, .. }) => {
                        let reason = standing.lose(reason);
                        return End::Lost(lease, loss_of(reason));
                    }
                    Err(e) if e.is_retryable() => {
                        tracing::warn!(key = %lease.key, error = %e, "renew failed, retrying");
                        let pause = backoff.next();
                        match waits
                            .sleep_until(timer.as_mut(), Instant::now() + pause)
                            .await
                        {
                            Woke::Done(()) => {}
                            Woke::Stopped => return End::Stopped(lease),
                            Woke::Lost => return End::Lost(lease, HolderLoss::Deadline),
                        }
                    }
                    Err(e) => {
                        tracing::error!(key = %lease.key, error = %e, "renew failed permanently");
                        standing.lose(LostCause::GaveUp);
                        let reason = if StoreLostState::is_source_of(&e) {
                            HolderLoss::StoreLostState
                        } else {
                            HolderLoss::Fault
                        };
                        return End::Lost(lease, reason);
                    }
                }
            }
        }
    }
}

/// Marks its standing lost when dropped while still set: a heartbeat that ended
/// without an [`End`] (a panic, or its future dropped).
struct Unfinished<'a>(Option<&'a Standing>);

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if let Some(standing) = self.0 {
            // Dropped after the holder itself gave the lease up (a stalled member's
            // watchdog): nothing unexpected.
            if standing.lost().is_none() {
                tracing::error!(
                    key = %standing.key(),
                    token = %standing.token(),
                    panicked = std::thread::panicking(),
                    "the heartbeat ended without an answer: the lease counts as lost"
                );
            }
            standing.lose(LostCause::GaveUp);
        }
    }
}

/// How much of the renew interval a renewal may come early, drawn afresh each time.
pub(crate) const RENEW_JITTER: f64 = 0.2;

/// `every` shortened by a random part of up to `fraction` of it (`0.0 ..= 1.0`),
/// never to zero: `every × (1 − fraction × u)` with `u` uniform in `[0, 1)`, at least
/// 1 ms. Periodic timers use it so that holders started together drift apart.
pub(crate) fn spread(every: Duration, fraction: f64) -> Duration {
    let fraction = fraction.clamp(0.0, 1.0);
    every
        .mul_f64(1.0 - fraction * fastrand::f64())
        .max(Duration::from_millis(1).min(every))
}

/// The event's reason for a loss whose error reason is `reason`.
fn loss_of(reason: LostCause) -> HolderLoss {
    match reason {
        LostCause::GaveUp => HolderLoss::Deadline,
        r => HolderLoss::Store(r),
    }
}
