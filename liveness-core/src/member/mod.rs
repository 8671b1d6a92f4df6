//! The member: a worker process registered as a lease in the `members` space.
//!
//! ```text
//! Live --store clock passes expiry--> Expired --reap--> Dead --sweep--> Swept
//! Live --leave--> Left
//! Lost (renew says Lost, or the local deadline passed) --rejoin--> Live, new token
//! ```
//!
//! Every lease the member holds is a *generation*: a lease plus its own cancellation
//! signal. Work claimed under a generation carries that generation's signal and lease,
//! so work claimed before a loss can never be completed under the new token: the
//! store answers [`Error::Fenced`].

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::departure::{left, retried, Departure};
use crate::error::{Error, LostCause, Result};
use crate::events::{Event, EventBus, HolderLoss};
use crate::heartbeat::{End, Heartbeat};
use crate::item::{Item, ItemId, ItemState, RequestId};
use crate::keeper::{
    first_join, rejoin, wait_to_hand_over, Footing, Joined, Riding, SessionGen, Take,
};
use crate::lease::Lease;
use crate::metrics::{HolderMetrics, Role, FENCED_TOTAL, ITEMS_DEAD_LETTERED_TOTAL, JOINS_TOTAL};
use crate::store::Store;
use crate::sync::lock;
use crate::traced::traced;
use crate::types::{FencingToken, Key};
use crate::unreaped;

pub(crate) mod config;
mod rejoin;
mod riders;
mod tended;
mod work;
pub use config::{MemberConfig, MAX_GRACE, MIN_PROGRESS_TIMEOUT};
use rejoin::{run, Background};
pub(crate) use riders::{Carrier, Riders};
pub(crate) use tended::holder_loss;
pub use work::Claimed;
use work::{boot_nanos, Hold};

/// One lease of a member, with the cancellation signal of the work done under it.
#[derive(Clone, Debug)]
pub struct Generation {
    /// The lease (its token fences this generation's work).
    pub lease: Lease,
    /// Fires when this lease is lost, or may be: stop the work at once.
    pub cancel: CancellationToken,
    footing: Arc<Footing>,
}

impl Generation {
    fn new(lease: Lease, footing: Footing) -> Self {
        Generation {
            lease,
            cancel: footing.cancel().clone(),
            footing: Arc::new(footing),
        }
    }

    /// The rider's part of this generation, when it rides a session.
    pub(crate) fn riding(&self) -> Option<&Riding> {
        self.footing.riding()
    }

    /// The generation of `lease`, just taken by a join of `kind` (`join` or `rejoin`)
    /// whose acquire was sent at `sent_on_clock` (riding `session` when given, on a
    /// store with native sessions when its flag is set): counted and announced.
    fn joined(
        config: &MemberConfig,
        metrics: &HolderMetrics,
        kind: &'static str,
        lease: Lease,
        sent_on_clock: Duration,
        session: Option<(&SessionGen, bool)>,
    ) -> Self {
        metrics
            .labels()
            .counter(JOINS_TOTAL, &[("kind", kind)])
            .increment(1);
        config.events.emit(Event::Joined {
            key: lease.key.clone(),
            holder: config.holder.clone(),
            token: lease.token,
        });
        let footing = Footing::of(config, &lease, sent_on_clock, session);
        Generation::new(lease, footing)
    }

    /// May work still act under this generation? Returns its token while the lease
    /// is held and its local safety deadline has not passed by the member's clock
    /// *right now*; otherwise [`Error::Lost`] (and the cancellation fires, if it had
    /// not yet). Cheap and synchronous: call it before every side effect. It does not
    /// depend on the heartbeat task having run, so a process woken from a freeze
    /// answers correctly before any of its tasks ran.
    ///
    /// For a member riding a session ([`Session::join`](crate::Session::join)) it
    /// reads the session's local deadline and the member's own released or stalled
    /// flag: every riding member's check fails at once when the session is lost.
    pub fn check(&self) -> Result<FencingToken> {
        self.footing.check()
    }

    /// True once [`Generation::check`] fails.
    pub fn is_lost(&self) -> bool {
        self.check().is_err()
    }
}

/// The shared state of a [`Member`] (what a session's registry of riders refers to).
#[derive(Debug)]
pub(crate) struct Inner {
    store: Arc<dyn Store>,
    config: MemberConfig,
    metrics: HolderMetrics,
    key: Key,
    /// The current generation.
    generation: Mutex<Generation>,
    /// The channel of [`Member::generations`], made on its first call (most members
    /// are never watched: a riding member costs its process little).
    watchers: OnceLock<watch::Sender<Generation>>,
    stop: CancellationToken,
    leaving: AtomicBool,
    /// Set by [`Member::orphan`] and [`Member::leave`]: a drop releases nothing.
    settled: AtomicBool,
    /// The caller's live handles: when the last one goes, the member departs, even
    /// while a task of the library holds the state for a moment.
    handles: AtomicUsize,
    /// Set once the member departed (see [`Inner::depart`]).
    pub(super) departed: AtomicBool,
    /// Claimed items not yet completed or failed: the token they were claimed under,
    /// and whether a worker still holds their `Claimed`.
    owned: Mutex<HashMap<ItemId, (FencingToken, Weak<Hold>)>>,
    /// Notified when a worker lets go of an item (complete, fail, or drop).
    let_go: Arc<Notify>,
    /// Claims that answered `Unavailable` (the store may have applied them): the
    /// token, the request id and `n`. The next claim under that token repeats one.
    unanswered: Mutex<Vec<(FencingToken, RequestId, usize)>>,
    /// Items whose `complete` or `fail` answered `Unavailable` (it may have applied).
    unsure: Mutex<HashSet<ItemId>>,
    /// When the member last vouched for all its jobs ([`Member::progress`], or a
    /// new generation), on the member's clock ([`Clock::boot`](crate::Clock::boot),
    /// in nanoseconds): no job counts as idle from before it.
    progress: AtomicU64,
    background: Mutex<Background>,
    /// The session the member rides, if it does: kept alive while the member is.
    session: Option<Arc<dyn Carrier>>,
}

/// A live worker: holds its member lease through a heartbeat task, claims and
/// completes items under it, and re-joins with a new token when it loses it.
///
/// Cloning shares the same member. Dropping the last clone is a release: the current
/// generation's cancellation signal fires at once (its checks answer `Lost`), the
/// heartbeat stops, and in the background, after the safety margin (the time the work
/// has to stop), the items still owned are handed back and the lease is released, for
/// a member riding a session as for one of its own. No checker is needed for that.
/// [`Member::leave`] is the graceful exit (it waits for the workers to let go first);
/// [`Member::orphan`] stops without releasing, as a killed process does.
#[derive(Debug)]
pub struct Member {
    inner: Arc<Inner>,
    /// A handle of the caller's (counted in [`Inner::handles`]), or a look the
    /// library's own tasks take for a moment (not counted: a task holding one when
    /// the caller drops the last handle must not delay the release).
    counted: bool,
}

impl Clone for Member {
    fn clone(&self) -> Self {
        self.inner.handles.fetch_add(1, Ordering::SeqCst);
        Member {
            inner: self.inner.clone(),
            counted: true,
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if self.counted && self.inner.handles.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.inner.depart();
        }
    }
}

impl Inner {
    /// Records that all the work made progress now (see [`Member::progress`]).
    fn note_progress(&self) {
        self.progress
            .store(boot_nanos(&*self.config.clock), Ordering::Relaxed);
    }

    /// How long the idlest job held under the current token has made no progress, by
    /// the member's clock right now; zero when the member holds no job (idle, not
    /// stalled).
    fn idle(&self) -> Duration {
        let floor = self.progress.load(Ordering::Relaxed);
        let token = self.current().lease.token;
        let oldest = lock(&self.owned)
            .values()
            .filter(|(t, _)| *t == token)
            .filter_map(|(_, hold)| hold.upgrade())
            .map(|hold| hold.progress.load(Ordering::Relaxed).max(floor))
            .min();
        let Some(last) = oldest else {
            return Duration::ZERO;
        };
        self.config
            .clock
            .boot()
            .saturating_sub(Duration::from_nanos(last))
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.depart();
    }
}

impl Inner {
    /// The caller dropped the last handle (or the state itself goes): the work stops
    /// at once and a [`Departure`] hands the items back after the margin. Once.
    fn depart(&self) {
        if self.departed.swap(true, Ordering::SeqCst) {
            return;
        }
        // Nobody renews the lease any more: the work done under it must stop too.
        self.stop.cancel();
        let gen = lock(&self.generation).clone();
        let held = gen.footing.lost().is_none();
        gen.footing.stop_work(LostCause::GaveUp);
        // Its session's task has nothing more to look at for it.
        if let Some(session) = &self.session {
            session.riders().dropped(&self.key, self);
        }
        // Dropping is a release: after the margin, the items still owned go back and
        // the lease is released (a rider's session is kept until then). Not for an
        // orphan, nor a lease already lost (its items are requeued with its token).
        if !held || self.settled.load(Ordering::SeqCst) {
            return;
        }
        let token = gen.lease.token;
        let items = lock(&self.owned)
            .drain()
            .filter(|(_, (t, _))| *t == token)
            .map(|(id, _)| id)
            .collect();
        Departure {
            store: self.store.clone(),
            announce: left(&self.config.events, &gen.lease),
            lease: gen.lease,
            items,
            margin: self.config.heartbeat.safety_margin,
            keep: self
                .session
                .clone()
                .map(|s| s as Arc<dyn Any + Send + Sync>),
        }
        .start();
    }
}

impl Member {
    /// The member whose state `inner` is, while it still lives.
    pub(crate) fn upgrade(inner: &Weak<Inner>) -> Option<Member> {
        inner.upgrade().map(|inner| Member {
            inner,
            counted: false,
        })
    }

    /// True when `self` is the member whose state `inner` is.
    pub(crate) fn is(&self, inner: &Weak<Inner>) -> bool {
        std::ptr::eq(Arc::as_ptr(&self.inner), inner.as_ptr())
    }

    /// Registers the member: acquires `members/NAME` and starts the heartbeat.
    ///
    /// Fails with [`Error::Held`] when a live member already has the name, with
    /// `InvalidInput` on a bad configuration, and retries retryable faults for up to
    /// one ttl before failing with the last one. A lease of this join's own holder id
    /// (the configured one and this join's nonce, [`MemberConfig::holder`]) that an
    /// earlier attempt of this call may have created (the store applied it, the reply
    /// was lost) is recognised as its own ghost and adopted. Another instance's lease
    /// is never taken for one, whatever its configured id: that is `Held`.
    pub async fn join(store: Arc<dyn Store>, mut config: MemberConfig) -> Result<Member> {
        config.validate()?;
        config.holder = config.holder.instance();
        store.capabilities().check_ttl(config.heartbeat.ttl)?;
        let metrics = HolderMetrics::new(&*store, Role::Member);
        if config.batcher.is_none() && config.shared_batcher {
            config.batcher = Some(crate::batch::Batcher::shared(&store));
        }
        let space = crate::types::Space::members();
        let watching = unreaped::watch(&store, &space, config.heartbeat.ttl, &config.events);
        let store: Arc<dyn Store> = traced(store);
        let key = Key::new(space, config.name.clone());
        let (lease, sent, sent_on_clock, _) = first_join(&store, &config, &key, Take::Own).await?;
        let first = Generation::joined(&config, &metrics, "join", lease, sent_on_clock, None);
        let member = Member::start(store, config, metrics, key, first, sent, None);
        lock(&member.inner.background).unreaped = Some(watching);
        Ok(member)
    }

    /// Joins `config`'s member into the session `session` (see
    /// [`Session::join_with`](crate::Session::join_with)): its heartbeat timing and
    /// clock are the session's, it has no batcher (it renews nothing of its own), and
    /// its checks read the session's standing.
    pub(crate) async fn ride(session: Arc<dyn Carrier>, config: MemberConfig) -> Result<Member> {
        let (config, key) = Member::riding(&*session, config)?;
        let take = Take::Ride(&*session);
        let joined = first_join(session.store(), &config, &key, take).await?;
        Ok(Member::ridden(session, config, key, joined))
    }

    /// `config` as a member riding `session` has it (the session's timing and clock,
    /// no batcher, validated, its instance holder id), and the member's key.
    pub(crate) fn riding(
        session: &dyn Carrier,
        mut config: MemberConfig,
    ) -> Result<(MemberConfig, Key)> {
        config.heartbeat = session.heartbeat();
        config.clock = session.clock().clone();
        config.batcher = None;
        config.validate()?;
        config.holder = config.holder.instance();
        let key = Key::new(crate::types::Space::members(), config.name.clone());
        Ok((config, key))
    }

    /// The member riding `session` whose first join answered `joined` (a
    /// [`Member::riding`] configuration and key): counted, announced, and tended by
    /// the session's task.
    pub(crate) fn ridden(
        session: Arc<dyn Carrier>,
        config: MemberConfig,
        key: Key,
        joined: Joined,
    ) -> Member {
        let (lease, sent, sent_on_clock, gen) = joined;
        let metrics = session.metrics().clone();
        let ride = gen.as_ref().map(|g| (g, session.native()));
        let first = Generation::joined(&config, &metrics, "join", lease, sent_on_clock, ride);
        let store = session.store().clone();
        let member = Member::start(store, config, metrics, key, first, sent, Some(session));
        // The reply may land after the session lease it rode was lost (and the
        // session's task took its riders' losses on before this member was one of
        // them): its loss is taken on here, and its re-join waits for the session's
        // next lease. Taken once, whoever comes first.
        member.take_loss(
            |gen| {
                let riding = gen.riding()?;
                match riding.session_lost() {
                    true => riding.lost().map(holder_loss),
                    false => None,
                }
            },
            true,
        );
        member
    }

    /// Starts the member whose first generation is `first`, taken by a request sent
    /// at `sent`: the heartbeat of a lease of its own; riding `session`, no task at
    /// all (the session's task tends its riders).
    fn start(
        store: Arc<dyn Store>,
        config: MemberConfig,
        metrics: HolderMetrics,
        key: Key,
        first: Generation,
        sent: Instant,
        session: Option<Arc<dyn Carrier>>,
    ) -> Member {
        let inner = Arc::new(Inner {
            store,
            config,
            metrics,
            key,
            generation: Mutex::new(first.clone()),
            watchers: OnceLock::new(),
            stop: CancellationToken::new(),
            leaving: AtomicBool::new(false),
            settled: AtomicBool::new(false),
            handles: AtomicUsize::new(1),
            departed: AtomicBool::new(false),
            owned: Mutex::new(HashMap::new()),
            let_go: Arc::new(Notify::new()),
            unanswered: Mutex::new(Vec::new()),
            unsure: Mutex::new(HashSet::new()),
            progress: AtomicU64::new(0),
            background: Mutex::new(Background::default()),
            session,
        });
        inner.note_progress();
        let member = Member {
            inner,
            counted: true,
        };
        match &member.inner.session {
            Some(session) => session.riders().insert(&member),
            None => {
                let task = tokio::spawn(run(Arc::downgrade(&member.inner), first, sent));
                lock(&member.inner.background).task = Some(task);
            }
        }
        member
    }

    /// The member's key, `members/NAME`.
    pub fn key(&self) -> &Key {
        &self.inner.key
    }

    /// The current generation: the lease and its cancellation signal.
    pub fn generation(&self) -> Generation {
        self.inner.current()
    }

    /// The current lease.
    pub fn lease(&self) -> Lease {
        self.generation().lease
    }

    /// May work still act under the current generation? See [`Generation::check`].
    pub fn check(&self) -> Result<FencingToken> {
        lock(&self.inner.generation).check()
    }

    /// The current token.
    pub fn token(&self) -> FencingToken {
        lock(&self.inner.generation).lease.token
    }

    /// The current generation's cancellation signal. It fires when that lease is lost
    /// (a renewal answered `Lost`, or the local safety deadline passed), before the
    /// store can expire the lease by its own clock.
    pub fn cancelled(&self) -> CancellationToken {
        lock(&self.inner.generation).cancel.clone()
    }

    /// A receiver that sees every new generation (each re-join).
    pub fn generations(&self) -> watch::Receiver<Generation> {
        let gen = lock(&self.inner.generation);
        self.inner
            .watchers
            .get_or_init(|| watch::channel(gen.clone()).0)
            .subscribe()
    }

    /// The bus this member sends its events to.
    pub fn events(&self) -> &EventBus {
        &self.inner.config.events
    }

    /// Tells the watchdog ([`MemberConfig::progress_timeout`]) that every job the
    /// member holds is moving. A job of its own says so with [`Claimed::progress`],
    /// which keeps a stuck sibling visible; this call vouches for all of them. Cheap:
    /// one clock read and one atomic store.
    pub fn progress(&self) {
        self.inner.note_progress();
    }

    /// Stops keeping the member without releasing anything, as a killed process does:
    /// the current generation's cancellation fires at once, the heartbeat stops, and
    /// its lease is left to expire by the store's clock; a checker then declares the
    /// death and requeues the items. A member riding a session has no expiry of its
    /// own: its lease dies with the session's. Every clone of the member is affected.
    ///
    /// For a process that must not touch the store any more (its connection's state
    /// is unknown), and for tests and demonstrations of a crash. Dropping a member
    /// instead releases it after the safety margin; [`Member::leave`] is the graceful
    /// exit.
    pub fn orphan(self) {
        let inner = &self.inner;
        inner.settled.store(true, Ordering::SeqCst);
        inner.stop.cancel();
        inner.current().footing.stop_work(LostCause::GaveUp);
    }

    /// Leaves gracefully. In this order:
    ///
    /// 1. stops claiming, and waits up to `grace` for the workers to let go of their
    ///    items by themselves (complete, fail, or drop every clone of the [`Claimed`]);
    /// 2. tells the work to stop: the current generation's cancellation fires, and its
    ///    checks answer `Lost { reason: Released }`;
    /// 3. waits up to the safety margin
    ///    ([`HeartbeatConfig::safety_margin`](crate::HeartbeatConfig::safety_margin), the
    ///    time the work has to stop) for the workers to let go;
    /// 4. hands the items still owned back (to pending, or dead-letter when out of
    ///    attempts);
    /// 5. stops the heartbeat and releases the lease.
    ///
    /// The heartbeat keeps the lease alive until step 5, so no item becomes claimable
    /// by another member before its worker was told to stop AND either let go of it or
    /// had the whole stop margin to do so.
    ///
    /// Each hand-back and the release is sent again with a backoff (about 10 s in
    /// all) while it fails with a retryable fault. Items that still could not be
    /// handed back (store unreachable) stay owned by the released token, which is in
    /// the dead set: a checker's sweep requeues them.
    ///
    /// A member riding a session ([`Session::join`](crate::Session::join)) leaves
    /// alone: the session keeps it alive until step 5, which releases this member's
    /// lease only; the session and its other members go on untouched.
    ///
    /// Any `grace` is accepted: one too long for the clock to represent
    /// (`Duration::MAX`) is capped at [`MAX_GRACE`], which in practice waits as long as
    /// the workers need.
    pub async fn leave(self, grace: Duration) -> Result<()> {
        let inner = &self.inner;
        inner.leaving.store(true, Ordering::SeqCst);
        self.wait_let_go(later_by(grace)).await;
        self.generation().footing.stop_work(LostCause::Released);
        self.wait_let_go(Instant::now() + inner.config.heartbeat.safety_margin)
            .await;
        let rest: Vec<(ItemId, FencingToken)> = lock(&inner.owned)
            .drain()
            .map(|(id, (token, _))| (id, token))
            .collect();
        let gen = self.generation();
        for (id, token) in rest {
            if token == gen.lease.token {
                if let Err(e) = retried(|| inner.store.fail(&gen.lease, id, true)).await {
                    tracing::warn!(item = %id, error = %e, "could not hand back item on leave");
                }
            }
        }
        inner.settled.store(true, Ordering::SeqCst);
        inner.stop.cancel();
        let task = lock(&inner.background).task.take();
        if let Some(task) = task {
            let _ = task.await;
        }
        let gen = self.generation();
        gen.footing.stop_work(LostCause::Released);
        if let Some(session) = &inner.session {
            session.riders().forget(&inner.key, &self);
        }
        // A riding lease has no expiry of its own, and the drop releases nothing once
        // the leave settled: a release that does not get through at first is sent again.
        retried(|| inner.store.release(&gen.lease)).await?;
        inner.config.events.emit(Event::Left {
            key: inner.key.clone(),
            token: gen.lease.token,
        });
        Ok(())
    }
}

/// The instant `d` from now, `d` capped at [`MAX_GRACE`]: never an overflow.
fn later_by(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d.min(MAX_GRACE)).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::{
        EnqueueOptions, Member, MemberConfig, MemoryStore, Session, SessionConfig, Store, Ttl,
    };

    /// Joins a member of its own lease, or riding a fresh session, on `store`.
    async fn joined(store: &Arc<dyn Store>, riding: bool) -> (Member, Option<Session>) {
        let ttl = Ttl::from_secs(3).unwrap();
        if riding {
            let session = Session::open(store.clone(), SessionConfig::new("p", ttl).unwrap())
                .await
                .unwrap();
            (session.join("m").await.unwrap(), Some(session))
        } else {
            let config = MemberConfig::new("m", ttl).unwrap();
            (Member::join(store.clone(), config).await.unwrap(), None)
        }
    }

    /// The caller's last handle dropped while a task of the library holds the
    /// member's state for a moment (its heartbeat, its session's task): the work is
    /// told to stop at once, not when that task lets go, and the item comes back.
    #[tokio::test(start_paused = true)]
    async fn the_last_handle_departs_even_while_a_task_looks() {
        for riding in [false, true] {
            let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
            let (member, _session) = joined(&store, riding).await;
            let id = store
                .enqueue(b"job", EnqueueOptions::default())
                .await
                .unwrap();
            let claimed = member.claim(1).await.unwrap().pop().unwrap();
            let look = Member::upgrade(&Arc::downgrade(&member.inner)).unwrap();
            drop(member);
            assert!(
                claimed.cancel.is_cancelled() && claimed.check().is_err(),
                "riding {riding}: the work must stop when the caller's last handle goes"
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
            let state = store.item(id).await.unwrap().unwrap().state;
            assert_eq!(state, crate::ItemState::Pending, "riding {riding}");
            drop(look);
        }
    }
}
