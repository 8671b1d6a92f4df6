//! A fault-injecting store wrapper: per call, a seeded decision to let the call
//! through, fail it before it reaches the store, apply it and lose the reply, or
//! deliver it late, after the caller's timeout gave up on it. Every fault answers
//! [`Error::Unavailable`], exactly what a real transport fault answers.
//!
//! The decisions come from a random generator seeded by the caller: the same seed
//! gives the same sequence of decisions (which call of a handle fails, and how). Give
//! each simulated process its own [`Faulty`] (its own seed): its decisions then do not
//! depend on how the calls of other processes interleave with its own.
//!
//! An [`Observer`] sees every call the inner store applied, with where in a shared
//! order it was sent and answered: the simulation's oracle ([`crate::sim`]) judges
//! ownership from it.

use liveness_core::Page;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use liveness_core::{
    async_trait, DeadToken, DeathRecord, EnqueueOptions, Error, ExpiredLease, FencingToken,
    HolderId, Item, ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind, ItemStore, Key,
    Lease, LeaseInfo, LeaseStore, RequestId, Requeued, Result, Space, Store, StoreInfo, StoreTime,
    Ttl,
};
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::time::Instant;

/// The store operations, to choose which ones faults may hit: the core's [`Op`].
pub use liveness_core::Op;

/// True for the operations that act twice when repeated unless the caller gives
/// them a request id (`claim_request`, a keyed `enqueue`): their faults are
/// survived only through the store's request-id handling (a lost claim reply is
/// recovered by repeating its id; a copy delivered late, after that repeat, answers
/// nothing by the token's high-water mark). [`FaultPlan::default`] hits them like
/// every other operation; [`FaultPlan::sparing_request_ids`] spares them.
pub fn takes_request_id(op: Op) -> bool {
    matches!(op, Op::Claim | Op::Enqueue)
}

/// What one call suffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// None: the call goes through.
    Pass,
    /// Fails before it reaches the store: nothing changes.
    FailBefore,
    /// The store applies it; the reply is lost.
    LoseReply,
    /// It reaches the store only after the caller's timeout ([`FaultPlan::timeout`])
    /// answered `Unavailable`; then the store applies it.
    Delay,
}

/// How often each fault hits a call, and the timing of delays.
#[derive(Clone, Debug)]
pub struct FaultPlan {
    /// Probability that a call fails before reaching the store.
    pub fail_before: f64,
    /// Probability that a call is applied and its reply lost.
    pub lose_reply: f64,
    /// Probability that a call is delivered after the caller gave up on it.
    pub delay: f64,
    /// The caller's timeout: a delayed call answers `Unavailable` after this long.
    pub timeout: Duration,
    /// How long after the timeout a delayed call reaches the store.
    pub late_by: Duration,
    /// Whether faults may hit `op`. Default: every operation.
    pub hits: fn(Op) -> bool,
}

impl Default for FaultPlan {
    fn default() -> Self {
        FaultPlan {
            fail_before: 0.03,
            lose_reply: 0.03,
            delay: 0.02,
            timeout: Duration::from_millis(300),
            late_by: Duration::from_millis(300),
            hits: |_| true,
        }
    }
}

impl FaultPlan {
    /// This plan with its faults sparing the operations that rely on request ids
    /// ([`takes_request_id`]): to tell a fault in their id handling from any other
    /// when a run fails.
    pub fn sparing_request_ids(self) -> Self {
        FaultPlan {
            hits: |op| !takes_request_id(op),
            ..self
        }
    }

    /// No faults at all.
    pub fn none() -> Self {
        FaultPlan {
            fail_before: 0.0,
            lose_reply: 0.0,
            delay: 0.0,
            ..FaultPlan::default()
        }
    }
}

/// A call the inner store applied, as an [`Observer`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// `claim` assigned these items to the token.
    Claimed {
        /// The claiming token.
        token: FencingToken,
        /// The items it got.
        ids: Vec<ItemId>,
    },
    /// `complete` removed the item (it was owned by the token).
    Completed {
        /// The completing token.
        token: FencingToken,
        /// The item.
        id: ItemId,
    },
    /// `fail` moved the item away from the token.
    Failed {
        /// The token.
        token: FencingToken,
        /// The item.
        id: ItemId,
    },
    /// `reap` answered true: this caller declared the death.
    Reaped {
        /// The dead lease's key.
        key: Key,
        /// Its token.
        token: FencingToken,
    },
    /// `requeue_orphans` moved these items away from the dead token.
    Requeued {
        /// The dead token.
        token: FencingToken,
        /// What moved.
        moved: Requeued,
    },
}

/// Sees the calls a [`Faulty`] store's inner store applied, in one order shared with
/// whatever else the observer records.
pub trait Observer: Send + Sync + std::fmt::Debug {
    /// A position in the observer's order, taken when a call is sent.
    fn sent(&self) -> u64;
    /// The inner store applied a call sent at position `sent`; called when its answer
    /// arrives (also when the reply is then lost, or arrives after the caller gave up).
    fn applied(&self, sent: u64, call: Applied);
}

/// How many faults a [`Faulty`] store injected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Injected {
    /// Calls failed before reaching the store.
    pub failed_before: u64,
    /// Calls applied whose reply was lost.
    pub lost_replies: u64,
    /// Calls delivered after the caller's timeout.
    pub delayed: u64,
    /// How many of the faults above hit a `claim` (so a run shows that lost and late
    /// claims were exercised).
    pub claims: u64,
}

/// A store wrapper that injects [`Fault`]s, decided per call from a seed, into every
/// call while it is armed ([`Faulty::arm`]); disarmed, it only forwards.
///
/// With [`Faulty::on_runtime`], every inner call runs on that runtime (the store's
/// "server side"): a caller frozen or gone does not stop a call already sent, and the
/// store's connections stay on the runtime that made them.
#[derive(Debug)]
pub struct Faulty {
    inner: Arc<dyn Store>,
    plan: FaultPlan,
    rng: Mutex<fastrand::Rng>,
    armed: AtomicBool,
    observer: Option<Arc<dyn Observer>>,
    runtime: Option<Handle>,
    refused: Mutex<Vec<(Op, Instant)>>,
    failed_before: AtomicU64,
    lost_replies: AtomicU64,
    delayed: AtomicU64,
    claims: AtomicU64,
}

type Boxed<T> = std::pin::Pin<Box<dyn Future<Output = Result<T>> + Send>>;

impl Faulty {
    /// Wraps `inner`, disarmed, with decisions seeded by `seed`.
    pub fn new(inner: Arc<dyn Store>, plan: FaultPlan, seed: u64) -> Self {
        Faulty {
            inner,
            plan,
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            armed: AtomicBool::new(false),
            observer: None,
            runtime: None,
            refused: Mutex::new(Vec::new()),
            failed_before: AtomicU64::new(0),
            lost_replies: AtomicU64::new(0),
            delayed: AtomicU64::new(0),
            claims: AtomicU64::new(0),
        }
    }

    /// Reports every applied call to `observer`.
    pub fn observed(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Runs every inner call on `runtime`.
    pub fn on_runtime(mut self, runtime: Handle) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// Turns fault injection on or off.
    pub fn arm(&self, on: bool) {
        self.armed.store(on, Ordering::SeqCst);
    }

    /// Fails every call of `op` before it reaches the store for the next `d`, armed
    /// or not (an outage of one path: renewals that cannot get through, say).
    pub fn refuse(&self, op: Op, d: Duration) {
        lock(&self.refused).push((op, Instant::now() + d));
    }

    /// The faults injected so far.
    pub fn injected(&self) -> Injected {
        Injected {
            failed_before: self.failed_before.load(Ordering::SeqCst),
            lost_replies: self.lost_replies.load(Ordering::SeqCst),
            delayed: self.delayed.load(Ordering::SeqCst),
            claims: self.claims.load(Ordering::SeqCst),
        }
    }

    /// The fault for the next call of `op`: one draw from the seeded generator per
    /// call, armed or not and hit or not, so the sequence does not shift with either.
    fn decide(&self, op: Op) -> Fault {
        let draw = lock(&self.rng).f64();
        let now = Instant::now();
        let mut refused = lock(&self.refused);
        refused.retain(|(_, until)| *until > now);
        if refused.iter().any(|(o, _)| *o == op) {
            return Fault::FailBefore;
        }
        drop(refused);
        if !self.armed.load(Ordering::SeqCst) || !(self.plan.hits)(op) {
            return Fault::Pass;
        }
        let p = &self.plan;
        if draw < p.fail_before {
            Fault::FailBefore
        } else if draw < p.fail_before + p.lose_reply {
            Fault::LoseReply
        } else if draw < p.fail_before + p.lose_reply + p.delay {
            Fault::Delay
        } else {
            Fault::Pass
        }
    }

    fn injected_error(&self, what: &'static str) -> Error {
        Error::unavailable(self.inner.backend(), what)
    }

    /// Runs `call` (the inner store call, owning its arguments) under the next fault.
    /// [`Faulty::run`] of `call` on the wrapped store.
    async fn on_inner<T, F, Fut>(&self, op: Op, call: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<dyn Store>) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        self.run(op, Box::pin(call(self.inner.clone()))).await
    }

    async fn run<T: Send + 'static>(&self, op: Op, call: Boxed<T>) -> Result<T> {
        let fault = self.decide(op);
        if op == Op::Claim && fault != Fault::Pass {
            self.claims.fetch_add(1, Ordering::SeqCst);
        }
        match fault {
            Fault::Pass => self.forward(call).await,
            Fault::FailBefore => {
                self.failed_before.fetch_add(1, Ordering::SeqCst);
                Err(self.injected_error("injected: failed before reaching the store"))
            }
            Fault::LoseReply => {
                self.lost_replies.fetch_add(1, Ordering::SeqCst);
                let _ = self.forward(call).await;
                Err(self.injected_error("injected: the store applied it, the reply was lost"))
            }
            Fault::Delay => {
                self.delayed.fetch_add(1, Ordering::SeqCst);
                let late = self.plan.timeout + self.plan.late_by;
                let landing = async move {
                    tokio::time::sleep(late).await;
                    let _ = call.await;
                };
                match &self.runtime {
                    Some(rt) => drop(rt.spawn(landing)),
                    None => drop(tokio::spawn(landing)),
                }
                tokio::time::sleep(self.plan.timeout).await;
                Err(self.injected_error("injected: timed out; the call lands later"))
            }
        }
    }

    /// Runs `call` on the store's runtime (or here), to its end even when the caller
    /// stops waiting.
    async fn forward<T: Send + 'static>(&self, call: Boxed<T>) -> Result<T> {
        match &self.runtime {
            None => call.await,
            Some(rt) => match rt.spawn(call).await {
                Ok(r) => r,
                Err(e) => Err(Error::unavailable(self.inner.backend(), e)),
            },
        }
    }

    /// The observer and the send position for a mutating call, if observed.
    fn watch(&self) -> Option<(Arc<dyn Observer>, u64)> {
        self.observer.as_ref().map(|o| (o.clone(), o.sent()))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reports `applied` to the observer, if any.
fn report(watch: &Option<(Arc<dyn Observer>, u64)>, applied: Applied) {
    if let Some((observer, sent)) = watch {
        observer.applied(*sent, applied);
    }
}

#[async_trait]
impl LeaseStore for Faulty {
    fn info(&self) -> &StoreInfo {
        self.inner.info()
    }
    async fn acquire(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Result<Lease> {
        let (key, holder) = (key.clone(), holder.clone());
        self.on_inner(Op::Acquire, move |s| async move {
            s.acquire(&key, &holder, ttl).await
        })
        .await
    }
    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let lease = lease.clone();
        self.on_inner(Op::Renew, move |s| async move { s.renew(&lease).await })
            .await
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        let lease = lease.clone();
        self.on_inner(Op::Release, move |s| async move { s.release(&lease).await })
            .await
    }
    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        let key = key.clone();
        self.on_inner(Op::Inspect, move |s| async move { s.inspect(&key).await })
            .await
    }
    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        let space = space.clone();
        self.on_inner(Op::Expired, move |s| async move {
            s.expired(&space, limit).await
        })
        .await
    }
    async fn reap(&self, key: &Key, token: FencingToken) -> Result<bool> {
        let (key, watch) = (key.clone(), self.watch());
        self.on_inner(Op::Reap, move |s| async move {
            let r = s.reap(&key, token).await;
            if matches!(r, Ok(true)) {
                report(&watch, Applied::Reaped { key, token });
            }
            r
        })
        .await
    }
    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        self.on_inner(Op::DeadTokens, move |s| async move {
            s.dead_tokens(limit).await
        })
        .await
    }
    async fn members(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let (space, after, limit) = (space.clone(), page.after.cloned(), page.limit);
        self.on_inner(Op::Members, move |s| async move {
            let page = Page {
                after: after.as_ref(),
                limit,
            };
            s.members(&space, page).await
        })
        .await
    }
    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        self.on_inner(
            Op::Deaths,
            move |s| async move { s.deaths(before, limit).await },
        )
        .await
    }
    async fn store_time(&self) -> Result<StoreTime> {
        self.on_inner(Op::StoreTime, move |s| async move { s.store_time().await })
            .await
    }
    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        let space = space.clone();
        self.on_inner(Op::NextExpiry, move |s| async move {
            s.next_expiry(&space).await
        })
        .await
    }
    fn wakeups(&self) -> Option<watch::Receiver<u64>> {
        self.inner.wakeups()
    }
}

#[async_trait]
impl ItemStore for Faulty {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        let payload = payload.to_vec();
        self.on_inner(Op::Enqueue, move |s| async move {
            s.enqueue(&payload, options).await
        })
        .await
    }
    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        let (lease, watch) = (lease.clone(), self.watch());
        self.on_inner(Op::Claim, move |s| async move {
            let r = s.claim_request(&lease, n, req).await;
            if let Ok(items) = &r {
                let ids = items.iter().map(|i| i.id).collect();
                let token = lease.token;
                report(&watch, Applied::Claimed { token, ids });
            }
            r
        })
        .await
    }
    async fn complete(&self, lease: &Lease, id: ItemId) -> Result<()> {
        let (lease, watch) = (lease.clone(), self.watch());
        self.on_inner(Op::Complete, move |s| async move {
            let r = s.complete(&lease, id).await;
            if r.is_ok() {
                let token = lease.token;
                report(&watch, Applied::Completed { token, id });
            }
            r
        })
        .await
    }
    async fn fail(&self, lease: &Lease, id: ItemId, retry: bool) -> Result<ItemState> {
        let (lease, watch) = (lease.clone(), self.watch());
        self.on_inner(Op::Fail, move |s| async move {
            let r = s.fail(&lease, id, retry).await;
            if r.is_ok() {
                let token = lease.token;
                report(&watch, Applied::Failed { token, id });
            }
            r
        })
        .await
    }
    async fn requeue_orphans(&self, token: FencingToken) -> Result<Requeued> {
        let watch = self.watch();
        self.on_inner(Op::RequeueOrphans, move |s| async move {
            let r = s.requeue_orphans(token).await;
            if let Ok(moved) = &r {
                if !moved.is_empty() {
                    let moved = moved.clone();
                    report(&watch, Applied::Requeued { token, moved });
                }
            }
            r
        })
        .await
    }
    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        self.on_inner(Op::Item, move |s| async move { s.item(id).await })
            .await
    }
    async fn item_counts(&self) -> Result<ItemCounts> {
        self.on_inner(
            Op::ItemCounts,
            move |s| async move { s.item_counts().await },
        )
        .await
    }
    async fn dead_letters(&self, limit: usize) -> Result<Vec<ItemRecord>> {
        self.on_inner(Op::DeadLetters, move |s| async move {
            s.dead_letters(limit).await
        })
        .await
    }
    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        self.on_inner(
            Op::Items,
            move |s| async move { s.items(state, page).await },
        )
        .await
    }
    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        self.on_inner(Op::RetryDeadLetter, move |s| async move {
            s.retry_dead_letter(id).await
        })
        .await
    }
    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        self.on_inner(Op::RetryDeadLetters, move |s| async move {
            s.retry_dead_letters(limit).await
        })
        .await
    }
}
