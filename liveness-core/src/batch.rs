//! Coalesced round trips: one call for the renewals (or the acquires) of many leases
//! that one process holds on one store.
//!
//! A [`Batcher`] is shared by every member (or leadership) of a process that talks to
//! the same store. Each heartbeat hands it a renewal and waits for that lease's own
//! answer; the batcher sends every renewal handed to it within a short window in one
//! [`LeaseStore::renew_many`](crate::LeaseStore::renew_many) call. Joins and re-joins
//! hand it their acquire the same way, sent in one
//! [`LeaseStore::acquire_many`](crate::LeaseStore::acquire_many): a process starting
//! 100,000 members sends a hundred calls, not 100,000.
//!
//! Safety is per lease and unchanged: each heartbeat takes its send time when it hands
//! its renewal over, which is no later than the moment the batch leaves, so the local
//! deadline it computes from it (`send time + ttl − margin`) comes no later than with
//! a renewal of its own. The window only spends a few milliseconds of the margin.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::error::{Error, Result};
use crate::lease::{Acquire, Lease};
use crate::store::Store;
use crate::traced::traced;
use crate::types::{HolderId, Key, Ttl};

/// The longest a request waits for others to join its batch, by default.
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(2);

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
    /// A batcher talking to `store`, gathering each batch for up to `window` after
    /// its first request ([`DEFAULT_WINDOW`] is a good start). Spawns its tasks on the
    /// current tokio runtime: call it inside one.
    pub fn new(store: Arc<dyn Store>, window: Duration) -> Batcher {
        let store: Arc<dyn Store> = traced(store);
        let (renewals, rx) = mpsc::unbounded_channel();
        tokio::spawn(run::<Lease>(store.clone(), window, rx));
        let (acquires, rx) = mpsc::unbounded_channel();
        tokio::spawn(run::<Acquire>(store, window, rx));
        Batcher { renewals, acquires }
    }

    /// Renews `lease` in the next batch and answers what the store answered for it.
    /// Fails with [`Error::Unavailable`] when the batcher's task is gone.
    pub async fn renew(&self, lease: &Lease) -> Result<Lease> {
        ask(&self.renewals, lease.clone()).await
    }

    /// Acquires `key` for `holder` in the next batch and answers what the store
    /// answered for it (exactly [`LeaseStore::acquire`](crate::LeaseStore::acquire)'s
    /// contract). Fails with [`Error::Unavailable`] when the batcher's task is gone.
    pub async fn acquire(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Result<Lease> {
        ask(
            &self.acquires,
            Acquire::new(key.clone(), holder.clone(), ttl),
        )
        .await
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

struct Ask<R> {
    request: R,
    answer: oneshot::Sender<Result<Lease>>,
}

async fn ask<R>(queue: &mpsc::UnboundedSender<Ask<R>>, request: R) -> Result<Lease> {
    let (answer, rx) = oneshot::channel();
    if queue.send(Ask { request, answer }).is_err() {
        return Err(gone());
    }
    rx.await.unwrap_or_else(|_| Err(gone()))
}

fn gone() -> Error {
    Error::unavailable("batch", "the batcher stopped")
}

/// A request the batcher gathers: how a batch of them is sent, and how one is sent
/// alone when the batch was refused as a whole.
#[async_trait]
trait Request: Clone + Send + Sync + 'static {
    async fn many(store: &dyn Store, batch: &[Self]) -> Result<Vec<Result<Lease>>>;
    async fn one(store: &dyn Store, request: &Self) -> Result<Lease>;
}

#[async_trait]
impl Request for Lease {
    async fn many(store: &dyn Store, batch: &[Self]) -> Result<Vec<Result<Lease>>> {
        store.renew_many(batch).await
    }
    async fn one(store: &dyn Store, lease: &Self) -> Result<Lease> {
        store.renew(lease).await
    }
}

#[async_trait]
impl Request for Acquire {
    async fn many(store: &dyn Store, batch: &[Self]) -> Result<Vec<Result<Lease>>> {
        store.acquire_many(batch).await
    }
    async fn one(store: &dyn Store, a: &Self) -> Result<Lease> {
        store.acquire(&a.key, &a.holder, a.ttl).await
    }
}

async fn run<R: Request>(
    store: Arc<dyn Store>,
    window: Duration,
    mut rx: mpsc::UnboundedReceiver<Ask<R>>,
) {
    let max = store.capabilities().max_batch.max(1);
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    // Sized by what arrives, not by `max`: a buffer for a thousand requests on every
    // batch is a large allocation each time (and large frees make the allocator
    // consolidate its free lists), while batches are usually far smaller.
    let mut batch = Vec::new();
    loop {
        // Take everything queued at once (one wake-up for many requests, not one per
        // request: on a busy runtime each wake-up waits its turn behind every other
        // task), then gather more until the window closes or the batch is full.
        if rx.recv_many(&mut batch, max).await == 0 {
            return;
        }
        let until = tokio::time::Instant::now() + window;
        while batch.len() < max {
            let room = max - batch.len();
            tokio::select! {
                biased;
                got = rx.recv_many(&mut batch, room) => if got == 0 { break },
                _ = tokio::time::sleep_until(until) => break,
            }
        }
        let room = batch.len();
        let mut batch = std::mem::replace(&mut batch, Vec::with_capacity(room));
        // Requests whose caller gave up meanwhile (a heartbeat whose deadline passed)
        // are not sent.
        batch.retain(|a| !a.answer.is_closed());
        if batch.is_empty() {
            continue;
        }
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let store = store.clone();
        tokio::spawn(async move {
            send(&*store, batch).await;
            drop(slot);
        });
    }
}

/// Sends one batch and hands each caller its own answer.
async fn send<R: Request>(store: &dyn Store, batch: Vec<Ask<R>>) {
    let (requests, callers): (Vec<R>, Vec<_>) =
        batch.into_iter().map(|a| (a.request, a.answer)).unzip();
    match R::many(store, &requests).await {
        Ok(answers) => {
            let mut answers = answers.into_iter();
            for caller in callers {
                let answer = answers.next().unwrap_or_else(|| {
                    Err(Error::backend("batch", "a batch answered too few requests"))
                });
                let _ = caller.send(answer);
            }
        }
        Err(e) => {
            // The whole call failed: every request gets a retryable fault (each caller
            // retries with its own backoff) unless the call was refused as invalid,
            // which one request alone would not be: then each is sent alone.
            let retryable = e.is_retryable();
            for (request, caller) in requests.iter().zip(callers) {
                let answer = if retryable {
                    Err(Error::unavailable("batch", e.to_string()))
                } else {
                    R::one(store, request).await
                };
                let _ = caller.send(answer);
            }
        }
    }
}
