//! The session: one lease per process in the space `sessions`, which the process's
//! members ride (`docs/sessions.md`).
//!
//! ```text
//! Open --renewals--> Open
//! Open (renew says Lost, or the local deadline passed) --every rider cancelled--> Lost
//! Lost --reopen (new token), then each rider re-joins (new token)--> Open
//! Open --close: riders leave, then the session is released--> Closed
//! ```
//!
//! A member riding a session ([`Session::join`]) costs the store nothing while it
//! lives on a store with native sessions ([`Capabilities::sessions`]): its liveness is
//! the session's. On a store without them each renewal of the session hands its
//! members' renewals to the batcher, which sends them as `renew_many` calls.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::batch::{Batcher, Joins, DEFAULT_WINDOW};
use crate::clock::{Clock, HostClock};
use crate::departure::{left, Departure};
use crate::error::{Error, LostCause, Result};
use crate::events::{Event, EventBus, HolderLoss};
use crate::heartbeat::{lease_config_setters, Heartbeat, HeartbeatConfig, Standing};
use crate::keeper::{first_join, rejoin, wait_to_hand_over, Ridden, SessionGen, Take};
use crate::lease::Lease;
use crate::member::{
    holder_loss, Carrier, Generation, Inner, Member, MemberConfig, Riders, MAX_GRACE,
};
use crate::metrics::{HolderMetrics, Role};
use crate::store::Store;
use crate::sync::lock;
use crate::traced::traced;
use crate::types::{FencingToken, HolderId, Key, Name, Space, Ttl};
use crate::unreaped::{self, Watching};
#[cfg(doc)]
use crate::{store::Capabilities, store::LeaseStore};

mod many;
mod riding;
use riding::RiderRenewals;

/// How a session behaves.
#[derive(Clone, Debug)]
#[non_exhaustive]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(
        try_from = "crate::settings::SessionForm",
        into = "crate::settings::SessionForm"
    )
)]
pub struct SessionConfig {
    /// The process's name: the session's key is `sessions/NAME`. Two live sessions
    /// cannot share it.
    pub name: Name,
    /// Its holder id, as operators see it; default: the name. Each
    /// [`Session::open`] adds a nonce of its own ([`HolderId::instance`]), so two
    /// processes configured alike never hold one another's session, and a lease an
    /// earlier attempt of the same open left behind (its reply lost) is recognised as
    /// this open's own and adopted.
    pub holder: HolderId,
    /// Heartbeat timing of the session's lease: ttl, renew interval, safety margin.
    /// Every member riding the session shares it (its ttl is the members' ttl).
    pub heartbeat: HeartbeatConfig,
    /// Whether a lost session takes a new lease (new token) by itself, and its
    /// members re-join under it; default true.
    pub reopen: bool,
    /// Where the session's events go ([`Event::Joined`], [`Event::Lost`],
    /// [`Event::Left`] with the session's key); [`Session::join`] sends its
    /// members' events there too. Default a bus of its own.
    pub events: EventBus,
    /// The clock of the local safety deadline, which every riding member's checks
    /// read.
    pub clock: Arc<dyn Clock>,
}

impl SessionConfig {
    /// Defaults for a session `name` with `ttl`: renew every ttl/3, margin ttl/5,
    /// re-open on loss.
    pub fn new(name: &str, ttl: Ttl) -> Result<Self> {
        let name = Name::new(name)?;
        Ok(SessionConfig {
            holder: HolderId::new(name.as_str())?,
            name,
            heartbeat: HeartbeatConfig::new(ttl),
            reopen: true,
            events: EventBus::default(),
            clock: Arc::new(HostClock::new()),
        })
    }

    lease_config_setters! {
        /// Sets the holder id ([`SessionConfig::holder`]: each open adds a nonce to it).
    }

    /// Sets whether a lost session re-opens by itself ([`SessionConfig::reopen`]).
    pub fn reopen(mut self, reopen: bool) -> Self {
        self.reopen = reopen;
        self
    }
}

/// The state a session's handles and its riding members share.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The store, behind the input checks and tracing.
    store: Arc<dyn Store>,
    /// On a store with native sessions, the gatherer of the members' joins (a
    /// process's first joins, the re-joins after a loss: all at once) into
    /// `join_session_many` calls.
    joins: Option<Joins>,
    /// The session's lease is held exactly as a member's own lease (the same join,
    /// heartbeat and re-join, the same ghost rule): this is its configuration.
    lease: MemberConfig,
    key: Key,
    native: bool,
    generations: watch::Sender<SessionGen>,
    riders: Arc<Riders>,
    /// The session's metric handles, which its riders share.
    metrics: HolderMetrics,
    stop: CancellationToken,
    task: Mutex<Option<JoinHandle<()>>>,
    /// Set by [`Session::orphan`] and [`Session::close`]: a drop releases nothing.
    settled: AtomicBool,
    /// The session watches for leases nobody reaps.
    _unreaped: Watching,
}

impl Shared {
    /// The session's current lease and standing.
    pub(crate) fn current(&self) -> SessionGen {
        self.generations.borrow().clone()
    }

    /// A receiver that sees each new lease of the session (each re-open).
    pub(crate) fn generations(&self) -> watch::Receiver<SessionGen> {
        self.generations.subscribe()
    }
}

impl Carrier for Shared {
    fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    fn heartbeat(&self) -> HeartbeatConfig {
        self.lease.heartbeat
    }

    fn clock(&self) -> &Arc<dyn Clock> {
        &self.lease.clock
    }

    fn metrics(&self) -> &HolderMetrics {
        &self.metrics
    }

    fn native(&self) -> bool {
        self.native
    }

    fn riders(&self) -> &Riders {
        &self.riders
    }
}

impl Ridden for Shared {
    fn current(&self) -> SessionGen {
        Shared::current(self)
    }

    fn generations(&self) -> watch::Receiver<SessionGen> {
        Shared::generations(self)
    }

    fn joins(&self) -> Option<&Joins> {
        self.joins.as_ref()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Nobody renews the session any more: its riders' work must stop too.
        self.stop.cancel();
        let current = self.current();
        let held = current.standing.lost().is_none();
        current.standing.stop_work(LostCause::GaveUp);
        // Dropping is a release, after the margin (every rider, dropped before, has
        // released its own lease already: each kept the session until then).
        if held && !self.settled.load(Ordering::SeqCst) {
            Departure {
                store: self.store.clone(),
                announce: left(&self.lease.events, &current.lease),
                lease: current.lease,
                items: Vec::new(),
                margin: self.lease.heartbeat.safety_margin,
                keep: None,
            }
            .start();
        }
    }
}

/// One lease per process, which the process's members ride: on a store with native
/// sessions ([`Capabilities::sessions`]) a riding member costs the store nothing
/// while it lives (no renewal of its own); on one without, the session renews its
/// members with its own lease, one `renew_many` per batch.
///
/// # Guarantees
/// - The session's lease is held as a member's own is: renewed every
///   [`HeartbeatConfig::renew_every`] (jittered, early on retries), with a local
///   deadline on the boot clock ([`Clock::boot`]) counted from the send time of the
///   last renewal answered in time.
/// - A riding member's checks ([`Member::check`], [`Generation::check`](crate::Generation::check),
///   [`Claimed::check`](crate::Claimed::check)) read the session's deadline, by the
///   clock right now, plus the member's own released or stalled flag: when the
///   session is lost (its renewal refused, or its local deadline passed), every
///   riding member's check fails and its cancellation fires in the same instant,
///   before the store can hand the member's items to anybody.
/// - Then (unless [`SessionConfig::reopen`] is off) the session takes a new lease
///   (a new token), no earlier than the store may have expired the old one unless
///   the store answered `Lost`, and each member re-joins under a new token of its
///   own (unless its [`MemberConfig::rejoin`] is off), retrying with jittered
///   backoff. On a store with native sessions the re-joins waiting together (every
///   member's, after a loss) go as [`LeaseStore::join_session_many`] calls of
///   [`Capabilities::max_batch`] members each, one join at a time only when such a
///   call fails as a whole.
/// - [`Member::leave`] and a member's watchdog
///   ([`MemberConfig::progress_timeout`]) release that one member and touch nothing
///   else.
/// - A riding member has no task of its own: the session's one task tends its riders
///   (their losses with the session and their re-joins after it, their own losses,
///   the watchdog's stalls), and a re-join runs only until the member has its next
///   lease.
/// - Cloning shares the session. A riding member keeps its session alive: the
///   session stops (its riders' work told to stop) when the last handle and the last
///   riding member are dropped, and then releases its lease after the safety margin
///   (each riding member dropped before it released its own lease and handed its
///   items back, the same way). [`Session::close`] ends it gracefully;
///   [`Session::orphan`] stops it without releasing, as a killed process does.
///
/// ```
/// # async fn run() -> liveness_core::Result<()> {
/// use std::{sync::Arc, time::Duration};
/// use liveness_core::{MemoryStore, Session, SessionConfig, Store, Ttl};
///
/// let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
/// let config = SessionConfig::new("host-1", Ttl::from_secs(10)?)?;
/// let session = Session::open(store.clone(), config).await?;
/// let a = session.join("worker-a").await?;
/// let b = session.join("worker-b").await?;
/// // Both ride the session: the store keeps no expiry of theirs.
/// let info = store.inspect(a.key()).await?.expect("a joined");
/// assert_eq!(info.session.as_ref(), Some(session.key()));
/// assert!(a.check().is_ok() && b.check().is_ok());
/// // One member leaves alone; closing releases the others, then the session.
/// a.leave(Duration::from_secs(1)).await?;
/// assert!(b.check().is_ok());
/// session.close(Duration::from_secs(5)).await?;
/// assert!(b.check().is_err());
/// # Ok(())
/// # }
/// # tokio::runtime::Runtime::new().unwrap().block_on(run()).unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct Session {
    shared: Arc<Shared>,
}

impl Session {
    /// Opens the session: takes `sessions/NAME` and starts its heartbeat.
    ///
    /// Fails with [`Error::Held`] when another live session has the name, with
    /// `InvalidInput` naming the setting on a bad configuration (a ttl outside the
    /// store's range, a renew interval or safety margin that does not leave a renewal
    /// before the deadline, however large), and retries retryable faults for up to
    /// one ttl before failing with the last one, adopting a lease an earlier attempt
    /// of this open left behind (as [`Member::join`] does).
    pub async fn open(store: Arc<dyn Store>, config: SessionConfig) -> Result<Session> {
        config.heartbeat.validate()?;
        store.capabilities().check_ttl(config.heartbeat.ttl)?;
        let native = store.capabilities().sessions;
        let metrics = HolderMetrics::new(&*store, Role::Member);
        // Without native sessions the riders' own leases are renewed with each of
        // the session's renewals, through the batcher the handle's members share.
        let batcher = (!native).then(|| Batcher::shared(&store));
        let space = Space::sessions();
        let watching = unreaped::watch(&store, &space, config.heartbeat.ttl, &config.events);
        let store: Arc<dyn Store> = traced(store);
        let lease = MemberConfig {
            name: config.name.clone(),
            holder: config.holder.instance(),
            heartbeat: config.heartbeat,
            rejoin: config.reopen,
            events: config.events,
            clock: config.clock,
            batcher: None,
            shared_batcher: false,
            progress_timeout: None,
        };
        let key = Key::new(space, config.name);
        let (first, sent, sent_on_clock, _) = first_join(&store, &lease, &key, Take::Own).await?;
        let first = opened(&lease, first, sent_on_clock);
        let riders = Arc::new(Riders::default());
        let alongside = batcher.map(|batcher| RiderRenewals {
            riders: riders.clone(),
            batcher,
            clock: lease.clock.clone(),
            budget: lease.heartbeat.budget(),
            busy: Arc::default(),
        });
        let joins = native.then(|| Joins::new(store.clone(), DEFAULT_WINDOW));
        let shared = Arc::new(Shared {
            store,
            joins,
            lease,
            key,
            native,
            generations: watch::channel(first.clone()).0,
            riders,
            metrics: metrics.clone(),
            stop: CancellationToken::new(),
            task: Mutex::new(None),
            settled: AtomicBool::new(false),
            _unreaped: watching,
        });
        // The session's one task: its heartbeat and the tending of its riders (their
        // own losses and stalls), which have no task of their own. Ends when the
        // session stops or is gone.
        let keeping = keep(Arc::downgrade(&shared), alongside, metrics, first, sent);
        let (riders, clock) = (shared.riders.clone(), shared.lease.clock.clone());
        let stop = shared.stop.clone();
        let task = tokio::spawn(async move {
            tokio::select! {
                () = keeping => {}
                () = riders.tend(&*clock, &stop) => {}
            }
        });
        *lock(&shared.task) = Some(task);
        Ok(Session { shared })
    }

    /// Joins the member `name` into the session, with [`MemberConfig::new`]'s
    /// defaults and the session's event bus: see [`Session::join_with`].
    pub async fn join(&self, name: &str) -> Result<Member> {
        let lease = &self.shared.lease;
        let config = MemberConfig::new(name, lease.heartbeat.ttl)?.events(lease.events.clone());
        self.join_with(config).await
    }

    /// Joins a member riding the session
    /// ([`LeaseStore::join_session_many`]): its key `members/NAME`, its own token, its
    /// items, and no renewal of its own. Its heartbeat timing and clock are the
    /// session's (those of `config` are not used), and it has no batcher; its
    /// holder id, re-join, events and watchdog are `config`'s.
    ///
    /// Fails as [`Member::join`] does (`Held`, `InvalidInput` naming the setting,
    /// the last retryable fault after one ttl); while the session is lost and being
    /// re-opened it waits, up to one ttl, for the session's next lease. A join that
    /// does not hand its member over (its future dropped, or it gave up) leaves
    /// nothing behind: a call in flight is waited for in the background and what it
    /// joined leaves, and a lease an earlier attempt may have left (its reply lost)
    /// is released. A rider has no expiry of its own: it would otherwise hold its
    /// name until the session ends.
    pub async fn join_with(&self, config: MemberConfig) -> Result<Member> {
        Member::ride(self.shared.clone(), config).await
    }

    /// The store the session keeps its lease on (behind the input checks and
    /// tracing): what a worker riding it claims from.
    pub(crate) fn store(&self) -> Arc<dyn Store> {
        self.shared.store.clone()
    }

    /// Joins the members `names` into the session, with [`MemberConfig::new`]'s
    /// defaults and the session's event bus: see [`Session::join_many_with`].
    pub async fn join_many<I>(&self, names: I) -> Vec<Result<Member>>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let lease = &self.shared.lease;
        let configs = names.into_iter().map(|name| {
            MemberConfig::new(name.as_ref(), lease.heartbeat.ttl)
                .map(|c| c.events(lease.events.clone()))
        });
        many::join_many(&self.shared, configs.collect()).await
    }

    /// Joins many members riding the session, as [`Session::join_with`] joins each,
    /// in [`LeaseStore::join_session_many`] calls of [`Capabilities::max_batch`]
    /// members each instead of a round trip per member: a process starting 10,000
    /// members costs about `10,000 / max_batch` round trips.
    ///
    /// Answers one result per config, in their order; each is what `join_with` of
    /// that config alone would answer. A member it returns is exactly the one
    /// `join_with` builds (the session's timing, tended by the session's task, the
    /// same [`Event::Joined`] and join count, the same loss and re-join with the
    /// session). A refused entry fails alone and the others join: `Held` when a
    /// live member has its name (two configs with one name: the second is `Held`),
    /// `InvalidInput` naming the setting, the last retryable fault or `Lost` once
    /// one ttl passed since the entry's first attempt without a join.
    ///
    /// A batch that fails with a transport fault may have been applied in part: its
    /// entries are sent again, and an entry the store had applied is recognised by
    /// its instance holder id and adopted (as `join_with` adopts its own), so no
    /// member joined by this call is left without a handle. A batch refused as a
    /// whole, or an entry adopting its own leftover lease, goes one join at a time;
    /// while the session is lost and being re-opened the joins wait, up to one ttl,
    /// for its next lease. If the call's future is dropped before it answers, the
    /// members it joined so far leave in the background, and so do those of a batch
    /// in flight at that moment once its answer comes, and those an earlier batch
    /// may have left (its reply lost): no member rides the session without a
    /// handle.
    ///
    /// ```
    /// # async fn run() -> liveness_core::Result<()> {
    /// use std::sync::Arc;
    /// use liveness_core::{Error, Member, MemoryStore, Session, SessionConfig, Store, Ttl};
    ///
    /// let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    /// let ttl = Ttl::from_secs(10)?;
    /// let other = Session::open(store.clone(), SessionConfig::new("host-2", ttl)?).await?;
    /// let taken = other.join("worker-2").await?;
    ///
    /// let session = Session::open(store.clone(), SessionConfig::new("host-1", ttl)?).await?;
    /// let answers = session.join_many((0..5).map(|i| format!("worker-{i}"))).await;
    /// // worker-2 is another process's member: refused alone, the others joined.
    /// assert!(matches!(answers[2], Err(Error::Held { .. })));
    /// let members: Vec<Member> = answers.into_iter().filter_map(Result::ok).collect();
    /// assert_eq!(members.len(), 4);
    /// assert_eq!(members[2].key().name().as_str(), "worker-3");
    /// assert!(members.iter().all(|m| m.check().is_ok()));
    /// assert_eq!(session.members(), 4);
    /// # drop(taken);
    /// # Ok(())
    /// # }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn join_many_with<I>(&self, configs: I) -> Vec<Result<Member>>
    where
        I: IntoIterator<Item = MemberConfig>,
    {
        let configs = configs.into_iter().map(Ok).collect();
        many::join_many(&self.shared, configs).await
    }

    /// The session's key, `sessions/NAME`.
    pub fn key(&self) -> &Key {
        &self.shared.key
    }

    /// The session's current lease.
    pub fn lease(&self) -> Lease {
        self.shared.current().lease
    }

    /// The session's current token.
    pub fn token(&self) -> FencingToken {
        self.shared.current().lease.token
    }

    /// May the session's members still act? Its token while its lease is held and its
    /// local deadline has not passed by the clock right now; otherwise
    /// [`Error::Lost`] (and the cancellation fires, with every rider's). Cheap and
    /// synchronous.
    pub fn check(&self) -> Result<FencingToken> {
        self.shared.current().standing.check()
    }

    /// The current lease's cancellation signal: it fires when that lease is lost,
    /// and with it every riding member's.
    pub fn cancelled(&self) -> CancellationToken {
        self.shared.current().standing.cancel().clone()
    }

    /// True when the store serves sessions natively ([`Capabilities::sessions`]):
    /// riding members then cost the store nothing while they live. False: the
    /// session renews them with its own lease, one `renew_many` per batch.
    pub fn native(&self) -> bool {
        self.shared.native
    }

    /// How many members ride the session (those left or dropped are not counted).
    pub fn members(&self) -> usize {
        self.shared.riders.members().len()
    }

    /// The bus the session sends its events to.
    pub fn events(&self) -> &EventBus {
        &self.shared.lease.events
    }

    /// Stops the session without releasing anything, as a killed process does: its
    /// heartbeat stops and every riding member's work is told to stop at once; the
    /// session's lease expires by the store's clock, and a checker declares its death
    /// and its members' (once each) and requeues their items. Members still held keep
    /// their handles, lost. For a process that must not touch the store any more, and
    /// for tests and demonstrations of a crash.
    pub fn orphan(self) {
        let shared = &self.shared;
        shared.settled.store(true, Ordering::SeqCst);
        for member in shared.riders.members() {
            member.orphan();
        }
        shared.stop.cancel();
        shared.current().standing.stop_work(LostCause::GaveUp);
    }

    /// Closes the session gracefully: every riding member leaves
    /// ([`Member::leave`] with `grace`, all at once; the session keeps them alive
    /// meanwhile), then the session's heartbeat stops and its lease is released.
    /// Answers the first error of a member's leave or of the release, after doing
    /// all of them. Any `grace` is accepted: a longer one than [`MAX_GRACE`] is capped.
    ///
    /// A riding [`Member`] dropped before `close` released itself already (after the
    /// safety margin), and keeps the session until it did.
    pub async fn close(self, grace: Duration) -> Result<()> {
        let shared = &self.shared;
        let grace = grace.min(MAX_GRACE);
        let mut leaving = tokio::task::JoinSet::new();
        for member in shared.riders.members() {
            leaving.spawn(member.leave(grace));
        }
        let mut first_error: Option<Error> = None;
        while let Some(done) = leaving.join_next().await {
            match done {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => {
                    tracing::warn!(session = %shared.key, error = %e, "a member's leave did not finish")
                }
            }
        }
        shared.settled.store(true, Ordering::SeqCst);
        shared.stop.cancel();
        let task = lock(&shared.task).take();
        if let Some(task) = task {
            let _ = task.await;
        }
        let current = shared.current();
        current.standing.stop_work(LostCause::Released);
        match shared.store.release(&current.lease).await {
            Ok(_) => shared.lease.events.emit(Event::Left {
                key: shared.key.clone(),
                token: current.lease.token,
            }),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// The session generation of `lease`, taken by a request sent at `sent_on_clock`:
/// announced.
fn opened(config: &MemberConfig, lease: Lease, sent_on_clock: Duration) -> SessionGen {
    config.events.emit(Event::Joined {
        key: lease.key.clone(),
        holder: config.holder.clone(),
        token: lease.token,
    });
    let standing = Standing::new(
        config.clock.clone(),
        &lease,
        &config.heartbeat,
        sent_on_clock,
    );
    SessionGen {
        lease,
        standing: Arc::new(standing),
    }
}

/// The session's heartbeat: keeps each lease alive (with each renewal, the riders'
/// renewals `alongside` on a store without native sessions), and re-opens after a
/// loss, its riders' losses taken on with it and their re-joins started once it has
/// its next lease. Ends when the session stops or is gone.
async fn keep(
    shared: Weak<Shared>,
    alongside: Option<RiderRenewals>,
    metrics: HolderMetrics,
    first: SessionGen,
    sent: Instant,
) {
    let Some(strong) = shared.upgrade() else {
        return;
    };
    let store = strong.store.clone();
    let config = strong.lease.clone();
    let key = strong.key.clone();
    let stop = strong.stop.clone();
    let riders = strong.riders.clone();
    let native = strong.native;
    drop(strong);
    let riders_with = alongside
        .as_ref()
        .map(|r| move |lease: &Lease| r.send(lease.token));
    let heartbeat = Heartbeat {
        store: &store,
        batcher: None,
        alongside: riders_with.as_ref().map(|f| f as &(dyn Fn(&Lease) + Sync)),
        config: config.heartbeat,
        stop: &stop,
        events: &config.events,
        metrics: &metrics,
    };
    let (mut gen, mut sent) = (first, sent);
    loop {
        let end = heartbeat
            .keep_alive(gen.lease.clone(), sent, &gen.standing)
            .await;
        let stopped = |lease| {
            if let Some(shared) = shared.upgrade() {
                shared.generations.send_modify(|g| g.lease = lease);
            }
        };
        let Some((old, reason)) = end.lost(&key, &config.events, stopped) else {
            return;
        };
        // Every rider of the lost lease was told to stop already (its cancellation is
        // a child of the session's): its loss is announced now, its re-join started
        // once the session has its next lease.
        let lost = riders_lost(&riders, old.token);
        if !config.rejoin || stop.is_cancelled() {
            return;
        }
        // As a member's own lease: no new lease earlier than the store itself would
        // expire the old one, unless the store already answered `Lost`; after a
        // failover's `Lost`, the margin first (the time the riders' work has to stop).
        let margin = config.heartbeat.safety_margin;
        let expiry = gen
            .standing
            .wait_store_expiry(config.heartbeat.tick(), &stop);
        let waited = wait_to_hand_over(reason, false, margin, &stop, expiry).await;
        if !waited {
            return;
        }
        if native {
            sweep_old_session(&store, &old, config.heartbeat.ttl.duration(), &stop).await;
        }
        let Some((lease, at, at_on_clock, _)) =
            rejoin(&store, &config, &key, &old, &stop, Take::Own).await
        else {
            return;
        };
        gen = opened(&config, lease, at_on_clock);
        sent = at;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        shared.generations.send_replace(gen.clone());
        drop(shared);
        for (member, lost, reason) in lost {
            if let Some(member) = Member::upgrade(&member) {
                member.recover(lost, reason);
            }
        }
    }
}

/// How many times [`sweep_old_session`] tries a call that failed with a transient fault.
const SWEEP_TRIES: u32 = 4;

/// Declares dead the members that rode the lost session lease `old` (on a store with native
/// sessions), before the session takes its next lease and they re-join: the store's
/// sweep of the dead session declares each of them dead once, under the old lease's
/// one death record, which counts them. Without it each re-join would take its
/// member's record over, writing a death record of its own: a large process that
/// survives a short session loss would push every other death out of the history.
///
/// The old lease, expired and not reaped yet, is reaped first (its record written,
/// its token in the dead set); released or taken over, it is there already. The
/// sweep goes on for at most `budget` (one ttl) and a few transient faults: the
/// members it did not reach re-join over their records as before. It runs whether or
/// not the session still knows a member of the old lease: a member dropped while its
/// release could not get through is declared dead with the others, its name freed. Nothing
/// here hands work over earlier than the re-joins would: the old lease is dead by the
/// store's clock, or the store ended it.
async fn sweep_old_session(
    store: &Arc<dyn Store>,
    old: &Lease,
    budget: Duration,
    stop: &CancellationToken,
) {
    let until = Instant::now() + budget;
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
    let mut faults = 0;
    let mut reaped = false;
    while Instant::now() < until && !stop.is_cancelled() {
        // True once the sweep is over: a call that declared nobody dead has also taken the
        // token out of the dead set.
        let done = match reaped {
            false => store.reap(&old.key, old.token).await.map(|_| false),
            true => store
                .sweep(old.token)
                .await
                .map(|moved| moved.members.is_empty()),
        };
        match done {
            Ok(true) => return,
            Ok(false) => reaped = true,
            Err(e) if e.is_retryable() && faults + 1 < SWEEP_TRIES => {
                faults += 1;
                tokio::time::sleep(backoff.next()).await;
            }
            Err(e) => {
                tracing::warn!(session = %old.key, error = %e, "retiring the members of a lost session lease failed; they re-join over their records");
                return;
            }
        }
    }
}

/// Takes on the loss of every member riding the session lease `token` (announced,
/// counted), but those whose loss is handled already: each, weakly, with its lost
/// generation and the reason.
fn riders_lost(riders: &Riders, token: FencingToken) -> Vec<(Weak<Inner>, Generation, HolderLoss)> {
    let mut lost = Vec::new();
    for member in riders.members() {
        let took = member.take_loss(
            |gen| {
                let riding = gen.riding()?;
                if riding.session_token() != token {
                    return None;
                }
                riding.lost().map(holder_loss)
            },
            false,
        );
        if let Some((gen, reason)) = took {
            lost.push((member.downgrade(), gen, reason));
        }
    }
    lost
}
