//! Coalesced round trips: one call for the renewals (or the acquires) of many leases
//! that one process holds on one store.
//!
//! A [`Batcher`] is shared by every member (or leadership) of a process that talks to
//! the same store. Each heartbeat hands it its next renewal with the renewal's planned
//! time and waits for that lease's own answer; the batcher keeps the renewals in a
//! queue ordered by time and sends every renewal due within a short window in one
//! [`LeaseStore::renew_many`](crate::LeaseStore::renew_many) call (a heartbeat thus
//! needs no timer of its own for its planned time, and no wake-up until its answer).
//! Joins and re-joins hand it their acquire the same way, sent in one
//! [`LeaseStore::acquire_many`](crate::LeaseStore::acquire_many): a process starting
//! 100,000 members sends a hundred calls, not 100,000.
//!
//! Safety is per lease and unchanged: the batcher reads each heartbeat's clock just
//! before the batch leaves, and the heartbeat counts its local deadline
//! (`send time + ttl − margin`) from that reading, so the deadline comes no later than
//! with a renewal of its own. The window only spends a few milliseconds of the margin.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;

use crate::clock::Clock;
use crate::departure::retried;
use crate::error::{BatchResult, Error, Result};
use crate::lease::{Acquire, Lease};
use crate::store::Store;
use crate::sync::lock;
use crate::traced::traced;
use crate::types::{HolderId, Key, Ttl};

/// The longest a request waits for others to join its batch, by default.
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(2);

/// The shared batcher of each store handle ([`Batcher::shared`]), weakly: a store
/// handle's address (its batcher's tasks keep the handle, so the address is not
/// reused while they run) and the batcher's senders.
static SHARED: Mutex<Vec<Shared>> = Mutex::new(Vec::new());

/// One entry of [`SHARED`].
struct Shared {
    store: usize,
    renewals: mpsc::WeakUnboundedSender<Ask<Lease>>,
    acquires: mpsc::WeakUnboundedSender<Ask<Acquire>>,
}

impl Shared {
    /// The batcher, while somebody holds it and its tasks run (they end with the
    /// runtime that spawned them).
    fn batcher(&self) -> Option<Batcher> {
        let (renewals, acquires) = (self.renewals.upgrade()?, self.acquires.upgrade()?);
        (!renewals.is_closed() && !acquires.is_closed()).then_some(Batcher { renewals, acquires })
    }
}

/// How many batches of one kind a batcher keeps in flight at once.
const IN_FLIGHT: usize = 4;

/// A shared handle that coalesces renewals into
/// [`LeaseStore::renew_many`](crate::LeaseStore::renew_many) calls and acquires into
/// [`LeaseStore::acquire_many`](crate::LeaseStore::acquire_many) calls. Cheap to
/// clone: clones share the batches. Give it to members with
/// [`MemberConfig::batcher`](crate::MemberConfig::batcher).
///
/// Each batch holds at most the store's [`max_batch`](crate::Capabilities::max_batch)
/// requests; at most four batches of each kind are in flight at once, so a slow store
/// makes batches larger, not more numerous. Every answer is exactly what the store
/// answered for that request. The batcher's tasks end when the last clone is dropped.
///
/// A batch of acquires is sent in key order, whatever order they came in: batchers
/// of different processes that join overlapping keys (shards, say) then never wait on
/// each other in a cycle on a store that locks keys as it goes (PostgreSQL).
///
/// Use it with a store whose `renew_many` and `acquire_many` are native (every backend
/// of this project): with the trait's default loops a batch is sent one request after
/// the other, which is slower than the requests sent concurrently without a batcher.
///
/// ```
/// # async fn run() -> liveness_core::Result<()> {
/// use std::{sync::Arc, time::Duration};
/// use liveness_core::{Batcher, Member, MemberConfig, MemoryStore, Store, Ttl};
///
/// let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
/// let batcher = Batcher::new(store.clone(), liveness_core::batch::DEFAULT_WINDOW);
/// let ttl = Ttl::from_secs(10)?;
/// let mut joins = tokio::task::JoinSet::new();
/// for i in 0..100 {
///     let config = MemberConfig::new(&format!("worker-{i}"), ttl)?.batcher(batcher.clone());
///     joins.spawn(Member::join(store.clone(), config));
/// }
/// while let Some(joined) = joins.join_next().await {
///     joined.expect("join task")?.leave(Duration::from_secs(5)).await?;
/// }
/// # Ok(())
/// # }
/// # tokio::runtime::Runtime::new().unwrap().block_on(run()).unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct Batcher {
    renewals: mpsc::UnboundedSender<Ask<Lease>>,
    acquires: mpsc::UnboundedSender<Ask<Acquire>>,
}

impl Batcher {
    /// A batcher talking to `store` that gathers each batch for `window`: a batch
    /// leaves no earlier than one window after the one before, so a request waits
    /// for others about one window ([`DEFAULT_WINDOW`] is a good start), and never
    /// leaves before its planned time. Spawns its tasks on the current tokio
    /// runtime: call it inside one.
    pub fn new(store: Arc<dyn Store>, window: Duration) -> Batcher {
        let store: Arc<dyn Store> = traced(store);
        let (renewals, rx) = mpsc::unbounded_channel();
        tokio::spawn(run::<Lease>(store.clone(), window, rx));
        let (acquires, rx) = mpsc::unbounded_channel();
        tokio::spawn(run::<Acquire>(store, window, rx));
        Batcher { renewals, acquires }
    }

    /// The batcher that every member joined on this very `store` handle shares by
    /// default ([`MemberConfig::shared_batcher`](crate::MemberConfig::shared_batcher)),
    /// with [`DEFAULT_WINDOW`]: made by the first of them (on its tokio runtime) and
    /// gone with the last, as the registry holds it only weakly.
    pub(crate) fn shared(store: &Arc<dyn Store>) -> Batcher {
        let id = Arc::as_ptr(store).cast::<()>() as usize;
        let mut all = lock(&SHARED);
        if let Some(batcher) = all.iter().find(|s| s.store == id).and_then(Shared::batcher) {
            return batcher;
        }
        // Forget this handle's ended batcher and every other one nobody holds.
        all.retain(|s| s.store != id && s.renewals.strong_count() > 0);
        let batcher = Batcher::new(store.clone(), DEFAULT_WINDOW);
        all.push(Shared {
            store: id,
            renewals: batcher.renewals.downgrade(),
            acquires: batcher.acquires.downgrade(),
        });
        batcher
    }

    /// Renews `lease` in the next batch and answers what the store answered for it.
    /// Fails with [`Error::Unavailable`] when the batcher's task is gone.
    pub async fn renew(&self, lease: &Lease) -> Result<Lease> {
        ask(&self.renewals, lease.clone(), None, None).await.answer
    }

    /// Renews `lease` in the first batch that leaves at or after `at` (at once when
    /// `None`), reading `clock` ([`Clock::boot`]) just before that batch leaves: one
    /// wait for the planned time and the renewal, with no timer and no wake-up of the
    /// caller's own until the answer. Answers the store's answer, when the batch left
    /// (tokio's clock) and the reading of `clock` then.
    pub(crate) async fn renew_at(
        &self,
        lease: &Lease,
        at: Option<Instant>,
        clock: &Arc<dyn Clock>,
    ) -> Answered {
        ask(&self.renewals, lease.clone(), at, Some(clock.clone())).await
    }

    /// Queues the renewal of `lease` for the next batch at once, reading `clock` just
    /// before that batch leaves, and answers the future of its answer: for a caller
    /// that hands over many renewals before it waits for any.
    pub(crate) fn renewal(
        &self,
        lease: &Lease,
        clock: &Arc<dyn Clock>,
    ) -> impl std::future::Future<Output = Answered> + Send + 'static {
        ask(&self.renewals, lease.clone(), None, Some(clock.clone()))
    }

    /// Acquires `key` for `holder` in the next batch and answers what the store
    /// answered for it (exactly [`Store::acquire`]'s
    /// contract). Fails with [`Error::Unavailable`] when the batcher's task is gone.
    pub async fn acquire(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Result<Lease> {
        ask(
            &self.acquires,
            Acquire::new(key.clone(), holder.clone(), ttl),
            None,
            None,
        )
        .await
        .answer
    }
}

/// Renews `lease` through `batcher` when there is one, else by itself: the one place
/// a holder (heartbeat, join, re-join) chooses.
pub(crate) async fn renew_via(
    store: &Arc<dyn Store>,
    batcher: Option<&Batcher>,
    lease: &Lease,
) -> Result<Lease> {
    match batcher {
        Some(batcher) => batcher.renew(lease).await,
        None => store.renew(lease).await,
    }
}

/// Acquires `key` through `batcher` when there is one, else by itself.
pub(crate) async fn acquire_via(
    store: &Arc<dyn Store>,
    batcher: Option<&Batcher>,
    key: &Key,
    holder: &HolderId,
    ttl: Ttl,
) -> Result<Lease> {
    match batcher {
        Some(batcher) => batcher.acquire(key, holder, ttl).await,
        None => store.acquire(key, holder, ttl).await,
    }
}

/// The gatherer of one session's joins ([`LeaseStore::join_session_many`]
/// (crate::LeaseStore::join_session_many)) into
/// [`LeaseStore::join_session_many`](crate::LeaseStore::join_session_many) calls: the
/// batcher's third kind, which a session with native sessions gives its members (a
/// process's first joins and the re-joins after a session loss, all at once, cost
/// about `members / max_batch` round trips instead of one each). Its task ends when
/// the last clone is dropped.
#[derive(Clone, Debug)]
pub(crate) struct Joins {
    queue: mpsc::UnboundedSender<Ask<Join>>,
}

impl Joins {
    /// Gathers joins to `store` (already traced: the session's) for `window` each,
    /// on a task spawned on the current tokio runtime.
    pub(crate) fn new(store: Arc<dyn Store>, window: Duration) -> Joins {
        let (queue, rx) = mpsc::unbounded_channel();
        tokio::spawn(run::<Join>(store, window, rx));
        Joins { queue }
    }

    /// Joins `key` for `holder` into `session` in the next batch and answers what the
    /// store answered for it (exactly `join_session`'s contract). A lease the store
    /// answered after this call's future was dropped is released: a rider has no
    /// expiry of its own, and nobody would hold it.
    pub(crate) async fn join(
        &self,
        session: &Lease,
        key: &Key,
        holder: &HolderId,
    ) -> Result<Lease> {
        let join = Join {
            session: session.clone(),
            key: key.clone(),
            holder: holder.clone(),
        };
        ask(&self.queue, join, None, None).await.answer
    }
}

/// One join of a [`Joins`] batch: the arguments of one `join_session`.
#[derive(Clone, Debug)]
struct Join {
    session: Lease,
    key: Key,
    holder: HolderId,
}

impl Join {
    /// True when `self` and `other` ride the same session lease.
    fn same_session(&self, other: &Join) -> bool {
        self.session.token == other.session.token && self.session.key == other.session.key
    }
}

struct Ask<R> {
    request: R,
    answer: oneshot::Sender<Answered>,
    /// The earliest time it may leave; `None`: at once.
    at: Option<Instant>,
    /// The clock read when its batch leaves.
    clock: Option<Arc<dyn Clock>>,
}

/// The answer to one request, and when its batch left.
pub(crate) struct Answered {
    /// What the store answered for the request.
    pub(crate) answer: Result<Lease>,
    /// When the batch left, on tokio's clock (when the request was handed over, if it
    /// never left: the batcher is gone).
    pub(crate) sent: Instant,
    /// The request's clock ([`Clock::boot`]) read just before the batch left; `None`
    /// without a clock, or when it never left.
    pub(crate) sent_on_clock: Option<Duration>,
}

/// Queues `request` at once and answers the future of its answer (the batcher's
/// fault when it is gone).
fn ask<R>(
    queue: &mpsc::UnboundedSender<Ask<R>>,
    request: R,
    at: Option<Instant>,
    clock: Option<Arc<dyn Clock>>,
) -> impl std::future::Future<Output = Answered> + Send + 'static {
    let handed = Instant::now();
    let unsent = move || Answered {
        answer: Err(gone()),
        sent: handed,
        sent_on_clock: None,
    };
    let (answer, rx) = oneshot::channel();
    let ask = Ask {
        request,
        answer,
        at,
        clock,
    };
    let queued = queue.send(ask).is_ok();
    async move {
        match queued {
            true => rx.await.unwrap_or_else(|_| unsent()),
            false => unsent(),
        }
    }
}

fn gone() -> Error {
    Error::unavailable("batch", "the batcher stopped")
}

/// A request the batcher gathers: how a batch of them is sent, and how one is sent
/// alone when the batch was refused as a whole.
#[async_trait]
trait Request: Clone + Send + Sync + 'static {
    async fn many(store: &dyn Store, batch: &[Self]) -> BatchResult<Lease>;
    async fn one(store: &dyn Store, request: &Self) -> Result<Lease>;
    /// Puts a batch in the order it is sent in (as gathered: unchanged).
    fn arrange(_batch: &mut [Ask<Self>]) {}
    /// What becomes of a lease the store answered to a caller that is gone: nothing
    /// for a lease of its own, which expires by its ttl.
    fn unclaimed(_store: &Arc<dyn Store>, _lease: Lease) {}
}

#[async_trait]
impl Request for Lease {
    async fn many(store: &dyn Store, batch: &[Self]) -> BatchResult<Lease> {
        store.renew_many(batch).await
    }
    async fn one(store: &dyn Store, lease: &Self) -> Result<Lease> {
        store.renew(lease).await
    }
}

#[async_trait]
impl Request for Acquire {
    async fn many(store: &dyn Store, batch: &[Self]) -> BatchResult<Lease> {
        store.acquire_many(batch).await
    }
    async fn one(store: &dyn Store, a: &Self) -> Result<Lease> {
        store.acquire(&a.key, &a.holder, a.ttl).await
    }
    /// Key order (stable: acquires of one key keep their order). A store that locks
    /// keys entry by entry and holds the locks to the end of the call (PostgreSQL's
    /// `acquire_many`) makes two concurrent batches that meet in opposite orders wait
    /// on each other, and one of them fails as a deadlock; batchers that all send in
    /// key order only ever wait. The callers of one batch are unrelated, so the order
    /// their tokens come in means nothing to them.
    fn arrange(batch: &mut [Ask<Self>]) {
        batch.sort_by(|a, b| a.request.key.cmp(&b.request.key));
    }
}

#[async_trait]
impl Request for Join {
    /// One `join_session_many` per session lease of the batch (a lone join as a
    /// `join_session`), each answering its own entries: a call that fails with a
    /// transport fault answers that fault to each of its joins (any of them may have
    /// been applied: each join's own retry adopts what its holder id left), one
    /// refused as a whole is sent again one join at a time, and one answering another
    /// number of entries counts as a fault for each.
    async fn many(store: &dyn Store, batch: &[Self]) -> BatchResult<Lease> {
        let mut out = Vec::with_capacity(batch.len());
        for group in batch.chunk_by(Join::same_session) {
            let fault = |why: String| {
                (0..group.len()).map(move |_| Err(Error::unavailable("batch", why.clone())))
            };
            if group.len() == 1 {
                out.push(Self::one(store, &group[0]).await);
                continue;
            }
            let asks: Vec<(Key, HolderId)> = group
                .iter()
                .map(|j| (j.key.clone(), j.holder.clone()))
                .collect();
            match store.join_session_many(&group[0].session, &asks).await {
                Ok(answers) if answers.len() == group.len() => out.extend(answers),
                Ok(answers) => out.extend(fault(format!(
                    "join_session_many answered {} entries of {}",
                    answers.len(),
                    group.len()
                ))),
                Err(e) if e.is_retryable() => out.extend(fault(e.to_string())),
                Err(e) => {
                    tracing::warn!(session = %group[0].session.key, error = %e, "a batch of joins was refused, joining one at a time");
                    for join in group {
                        out.push(Self::one(store, join).await);
                    }
                }
            }
        }
        Ok(out)
    }
    async fn one(store: &dyn Store, j: &Self) -> Result<Lease> {
        store.join_session(&j.session, &j.key, &j.holder).await
    }
    /// By session lease, then in key order (for the same reason as acquires).
    fn arrange(batch: &mut [Ask<Self>]) {
        batch.sort_by(|a, b| {
            let (a, b) = (&a.request, &b.request);
            (a.session.token, &a.session.key, &a.key).cmp(&(
                b.session.token,
                &b.session.key,
                &b.key,
            ))
        });
    }
    /// A rider has no expiry of its own: released (retried), or it would hold its
    /// name until its session ends.
    fn unclaimed(store: &Arc<dyn Store>, lease: Lease) {
        let store = store.clone();
        tokio::spawn(async move {
            if let Err(e) = retried(|| store.release(&lease)).await {
                tracing::warn!(key = %lease.key, error = %e, "a member joined for a dropped call could not leave");
            }
        });
    }
}

async fn run<R: Request>(
    store: Arc<dyn Store>,
    window: Duration,
    mut rx: mpsc::UnboundedReceiver<Ask<R>>,
) {
    let max = store.capabilities().max_batch.max(1);
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    // Requests are queued by the first boundary of `window` since `origin` at or after
    // both their arrival and their planned time, and leave no earlier than that
    // boundary (never before they are due), and no earlier than one window after the
    // last batch left: as before, a batch gathers for a window, so that a steady
    // stream of requests makes one batch per window, not more.
    let origin = Instant::now();
    let step = window.as_nanos().max(1);
    let boundary = |t: Instant| -> u128 {
        t.saturating_duration_since(origin)
            .as_nanos()
            .div_ceil(step)
    };
    let at = |k: u128| -> Instant {
        let nanos = k.saturating_mul(step);
        origin
            + Duration::new(
                (nanos / 1_000_000_000) as u64,
                (nanos % 1_000_000_000) as u32,
            )
    };
    let mut due: BTreeMap<u128, Vec<Ask<R>>> = BTreeMap::new();
    // Emptied queues of past windows, reused for the next ones (no allocation and no
    // regrowth per window).
    let mut spare: Vec<Vec<Ask<R>>> = Vec::new();
    let mut incoming = Vec::new();
    let mut open = true;
    let wait = tokio::time::sleep_until(origin);
    tokio::pin!(wait);
    let mut armed = None;
    let mut last: Option<Instant> = None;
    loop {
        let next = due.keys().next().map(|&k| {
            let due = at(k);
            last.map_or(due, |last| due.max(last + window))
        });
        match next {
            None if !open => return,
            Some(t) if armed != Some(t) => {
                wait.as_mut().reset(t);
                armed = Some(t);
            }
            _ => {}
        }
        tokio::select! {
            biased;
            got = rx.recv_many(&mut incoming, RECEIVE), if open => {
                if got == 0 {
                    open = false;
                }
                // Take everything queued at once (one wake-up for many requests, not
                // one per request: on a busy runtime each wake-up waits its turn
                // behind every other task).
                let now = boundary(Instant::now());
                for ask in incoming.drain(..) {
                    let k = ask.at.map_or(now, |t| boundary(t).max(now));
                    due.entry(k)
                        .or_insert_with(|| spare.pop().unwrap_or_default())
                        .push(ask);
                }
                continue;
            }
            _ = &mut wait, if next.is_some() => armed = None,
        }
        let now = Instant::now();
        last = Some(now);
        let mut batch = Vec::new();
        while let Some(entry) = due.first_entry() {
            if at(*entry.key()) > now {
                break;
            }
            let mut asks = entry.remove();
            batch.reserve(asks.len().min(max - batch.len()));
            for ask in asks.drain(..) {
                // Requests whose caller gave up meanwhile (a heartbeat whose deadline
                // passed, a member that stopped) are not sent.
                if ask.answer.is_closed() {
                    continue;
                }
                batch.push(ask);
                if batch.len() == max {
                    let full = std::mem::take(&mut batch);
                    if !dispatch(&store, &slots, full).await {
                        return;
                    }
                }
            }
            if spare.len() < SPARE {
                spare.push(asks);
            }
        }
        if !batch.is_empty() && !dispatch(&store, &slots, batch).await {
            return;
        }
    }
}

/// How many requests the batcher takes from its queue at once.
const RECEIVE: usize = 1024;

/// How many emptied window queues the batcher keeps for reuse.
const SPARE: usize = 64;

/// Sends `batch` on a task of its own once one of the in-flight slots is free. False
/// when the slots are gone (never: the batcher holds them).
async fn dispatch<R: Request>(
    store: &Arc<dyn Store>,
    slots: &Arc<Semaphore>,
    batch: Vec<Ask<R>>,
) -> bool {
    let Ok(slot) = slots.clone().acquire_owned().await else {
        return false;
    };
    let store = store.clone();
    tokio::spawn(async move {
        send(&store, batch).await;
        drop(slot);
    });
    true
}

/// Sends one batch and hands each caller its own answer.
async fn send<R: Request>(store: &Arc<dyn Store>, mut batch: Vec<Ask<R>>) {
    R::arrange(&mut batch);
    let mut requests = Vec::with_capacity(batch.len());
    let mut callers = Vec::with_capacity(batch.len());
    for ask in batch {
        requests.push(ask.request);
        callers.push((ask.answer, ask.clock));
    }
    // The clocks are read just before the batch leaves, and no later: each caller's
    // deadline counts from a moment no later than the store saw its request.
    let sent = Instant::now();
    let readings: Vec<Option<Duration>> = callers
        .iter()
        .map(|(_, clock)| clock.as_ref().map(|c| c.boot()))
        .collect();
    let reply = |answer: Result<Lease>, sent_on_clock: Option<Duration>| Answered {
        answer,
        sent,
        sent_on_clock,
    };
    let hand = |caller: oneshot::Sender<Answered>, answered: Answered| {
        if let Err(Answered {
            answer: Ok(lease), ..
        }) = caller.send(answered)
        {
            R::unclaimed(store, lease);
        }
    };
    match R::many(&**store, &requests).await {
        Ok(answers) => {
            let mut answers = answers.into_iter();
            for ((caller, _), reading) in callers.into_iter().zip(readings) {
                let answer = answers.next().unwrap_or_else(|| {
                    Err(Error::backend("batch", "a batch answered too few requests"))
                });
                hand(caller, reply(answer, reading));
            }
        }
        Err(e) => {
            // The whole call failed: every request gets a retryable fault (each caller
            // retries with its own backoff) unless the call was refused as invalid,
            // which one request alone would not be: then each is sent alone.
            let retryable = e.is_retryable();
            for ((request, (caller, clock)), reading) in requests.iter().zip(callers).zip(readings)
            {
                let answered = if retryable {
                    reply(Err(Error::unavailable("batch", e.to_string())), reading)
                } else {
                    let sent = Instant::now();
                    let sent_on_clock = clock.as_ref().map(|c| c.boot());
                    Answered {
                        answer: R::one(&**store, request).await,
                        sent,
                        sent_on_clock,
                    }
                };
                hand(caller, answered);
            }
        }
    }
}
