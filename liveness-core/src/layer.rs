//! Store middleware, as tower does it: an [`Intercept`] sees every call a store gets
//! as an owned [`Request`], decides what to do with it, hands it on through [`Next`]
//! (or not) and sees the [`Reply`] — it may change either. A [`Layer`] is the factory
//! that puts one in front of a store, and [`StoreBuilder`] stacks layers.
//!
//! Every call of every [`LeaseStore`] and [`ItemStore`] method, the `*_many` batches
//! included, passes through the intercept as one request, so a new store operation
//! reaches every layer in the tree (input checks, tracing, metrics, timing, fault
//! injection) through one edit in this file.
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use liveness_core::layer::{Intercept, Next, Reply, Request, StoreBuilder};
//! use liveness_core::{async_trait, Error, MemoryStore, Result, Store};
//!
//! /// Counts round trips, and the renewals that came back `Lost`.
//! #[derive(Debug, Default)]
//! struct Counted { calls: AtomicU64, lost: AtomicU64 }
//!
//! #[async_trait]
//! impl Intercept for Counted {
//!     async fn call(&self, req: Request, next: Next) -> Result<Reply> {
//!         self.calls.fetch_add(1, Ordering::Relaxed);
//!         let reply = next.run(req).await;
//!         if let Ok(Reply::RenewMany(answers)) = &reply {
//!             let lost = answers.iter().filter(|a| matches!(a, Err(Error::Lost { .. }))).count();
//!             self.lost.fetch_add(lost as u64, Ordering::Relaxed);
//!         }
//!         reply
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let counted = Arc::new(Counted::default());
//! let store: Arc<dyn Store> = StoreBuilder::new(Arc::new(MemoryStore::new()))
//!     .layer(counted.clone())
//!     .build();
//! store.store_time().await.unwrap();
//! assert_eq!(store.backend(), "memory");
//! assert_eq!(counted.calls.load(Ordering::Relaxed), 1);
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::error::{BatchResult, Error, JoinAsk, Result};
use crate::item::{
    EnqueueOptions, Item, ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind, RequestId,
    Requeued,
};
use crate::lease::{Acquire, DeadToken, DeathRecord, ExpiredLease, Lease, LeaseInfo};
use crate::store::{ItemStore, LeaseStore, Page, Store, StoreInfo};

pub use crate::request::{dispatch, Op, Reply, Request, WrongReply};
use crate::types::{FencingToken, HolderId, Key, Space, StoreTime, Ttl};
/// A boxed, owned future: what [`Next::run`] returns, free to be spawned.
pub type BoxReply = Pin<Box<dyn Future<Output = Result<Reply>> + Send + 'static>>;

/// The rest of the stack below an [`Intercept`]: the store (or the next layer) a
/// request goes on to. Cheap to clone; [`Next::run`] owns everything it needs, so its
/// future may be spawned, delayed or dropped.
#[derive(Clone, Debug)]
pub struct Next {
    inner: Arc<dyn Store>,
}

impl Next {
    /// The next step for requests to `inner`.
    pub fn new(inner: Arc<dyn Store>) -> Next {
        Next { inner }
    }

    /// Sends `req` on: the inner store's answer.
    pub fn run(self, req: Request) -> BoxReply {
        Box::pin(async move { dispatch(&*self.inner, req).await })
    }

    /// The store below (for its [`StoreInfo`]).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner
    }
}

/// Middleware in front of a store: sees each call as a [`Request`] and answers it,
/// usually by sending it on through [`Next::run`] and returning (or changing) the
/// reply.
///
/// # Guarantees
/// - Every round-trip method of the wrapped store, the `*_many` batches included, is
///   one call of [`Intercept::call`] (unless [`Intercept::split_batches`]); a request
///   reaches the inner store only through `next`, at most as often as the intercept
///   sends it.
/// - `info`, `capabilities`, `issuer` and `wakeups` are the inner store's.
#[async_trait]
pub trait Intercept: Send + Sync + std::fmt::Debug + 'static {
    /// Answers one request. The default sends it on unchanged.
    async fn call(&self, req: Request, next: Next) -> Result<Reply> {
        next.run(req).await
    }

    /// False (the default): a `*_many` call is one request. True: it is split into
    /// one single-entry request per entry ([`Request::split`]), each through
    /// [`Intercept::call`], and the answers are joined in order (for an intercept that
    /// acts per lease or per token, as the trait's default loops do).
    fn split_batches(&self) -> bool {
        false
    }

    /// True for an intercept that makes every check of
    /// [`CheckInput`](crate::CheckInput) before sending a call on (that layer alone
    /// says so): [`checked`](crate::checked()) then adds no second one.
    fn checks_input(&self) -> bool {
        false
    }
}

/// Puts something in front of a store: tower's `Layer`, for stores. Every
/// `Arc<I>` of an [`Intercept`] is one (the stack shares the `Arc`, so its owner can
/// read counters or turn knobs while the store is in use).
pub trait Layer: Send + Sync {
    /// `inner` behind this layer.
    fn layer(&self, inner: Arc<dyn Store>) -> Arc<dyn Store>;
}

impl<I: Intercept> Layer for Arc<I> {
    fn layer(&self, inner: Arc<dyn Store>) -> Arc<dyn Store> {
        Arc::new(Intercepted::new(inner, self.clone()))
    }
}

/// Stacks layers in front of a store, as tower's `ServiceBuilder`: the first layer
/// added is the outermost (it sees a call first and its reply last).
///
/// ```
/// use std::sync::Arc;
/// use liveness_core::layer::StoreBuilder;
/// use liveness_core::{CheckInput, MemoryStore, Store};
///
/// let store: Arc<dyn Store> = StoreBuilder::new(Arc::new(MemoryStore::new()))
///     .layer(Arc::new(CheckInput))
///     .build();
/// assert_eq!(store.backend(), "memory");
/// ```
pub struct StoreBuilder {
    store: Arc<dyn Store>,
    layers: Vec<Box<dyn Layer>>,
}

impl std::fmt::Debug for StoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreBuilder")
            .field("store", &self.store)
            .field("layers", &self.layers.len())
            .finish()
    }
}

impl StoreBuilder {
    /// A stack with `store` at the bottom and no layer yet.
    pub fn new(store: Arc<dyn Store>) -> StoreBuilder {
        StoreBuilder {
            store,
            layers: Vec::new(),
        }
    }

    /// Adds `layer` below the layers added before.
    pub fn layer(mut self, layer: impl Layer + 'static) -> StoreBuilder {
        self.layers.push(Box::new(layer));
        self
    }

    /// The store with every layer in front of it.
    pub fn build(self) -> Arc<dyn Store> {
        self.layers
            .iter()
            .rev()
            .fold(self.store, |inner, layer| layer.layer(inner))
    }
}

/// A store behind an [`Intercept`]: what [`Layer::layer`] makes of an `Arc<I>`. It
/// dereferences to the intercept, so the intercept's own methods (counters, knobs)
/// are called on the store directly.
#[derive(Debug)]
pub struct Intercepted<I> {
    inner: Arc<dyn Store>,
    hook: Arc<I>,
}

impl<I> std::ops::Deref for Intercepted<I> {
    type Target = I;
    fn deref(&self) -> &I {
        &self.hook
    }
}

impl<I: Intercept> Intercepted<I> {
    /// `inner` behind `hook`.
    pub fn new(inner: Arc<dyn Store>, hook: Arc<I>) -> Self {
        Intercepted { inner, hook }
    }

    /// The intercept.
    pub fn hook(&self) -> &Arc<I> {
        &self.hook
    }

    /// The store behind it.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    async fn send(&self, req: Request) -> Result<Reply> {
        if self.hook.split_batches() {
            let op = req.op();
            match req.split() {
                Ok(parts) => return self.send_split(op, parts).await,
                Err(req) => return self.hook.call(*req, Next::new(self.inner.clone())).await,
            }
        }
        self.hook.call(req, Next::new(self.inner.clone())).await
    }

    /// One call per entry, joined as the `*_many` answer of `op`.
    async fn send_split(&self, op: Op, parts: Vec<Request>) -> Result<Reply> {
        let mut replies = Vec::with_capacity(parts.len());
        for part in parts {
            replies.push(self.hook.call(part, Next::new(self.inner.clone())).await);
        }
        let backend = self.inner.backend();
        Ok(match op {
            Op::AcquireMany => {
                Reply::AcquireMany(join(backend, Op::Acquire, replies, |r| match r {
                    Reply::Acquire(v) => Ok(v),
                    other => Err(other),
                }))
            }
            Op::JoinSessionMany => {
                Reply::JoinSessionMany(join(backend, Op::JoinSession, replies, |r| match r {
                    Reply::JoinSession(v) => Ok(v),
                    other => Err(other),
                }))
            }
            Op::RenewMany => Reply::RenewMany(join(backend, Op::Renew, replies, |r| match r {
                Reply::Renew(v) => Ok(v),
                other => Err(other),
            })),
            Op::ReapMany => Reply::ReapMany(join(backend, Op::Reap, replies, |r| match r {
                Reply::Reap(v) => Ok(v),
                other => Err(other),
            })),
            _ => {
                Reply::RequeueOrphansMany(join(backend, Op::RequeueOrphans, replies, |r| match r {
                    Reply::RequeueOrphans(v) => Ok(v),
                    other => Err(other),
                }))
            }
        })
    }
}

/// The per-entry answers of a split batch.
fn join<T>(
    backend: &'static str,
    asked: Op,
    replies: Vec<Result<Reply>>,
    take: impl Fn(Reply) -> std::result::Result<T, Reply>,
) -> Vec<Result<T>> {
    replies
        .into_iter()
        .map(|r| r.and_then(|r| take(r).map_err(|other| wrong(backend, asked, other))))
        .collect()
}

fn wrong(backend: &'static str, asked: Op, got: Reply) -> Error {
    Error::backend(
        backend,
        WrongReply {
            asked: asked.name(),
            got: got.op().name(),
        },
    )
}

/// Sends a request through the intercept and takes the reply of the right variant.
macro_rules! ask {
    ($self:ident, $op:ident, $req:expr) => {
        match $self.send($req).await? {
            Reply::$op(v) => Ok(v),
            other => Err(wrong($self.inner.backend(), Op::$op, other)),
        }
    };
}

#[async_trait]
impl<I: Intercept> LeaseStore for Intercepted<I> {
    fn info(&self) -> &StoreInfo {
        self.inner.info()
    }
    async fn acquire(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Result<Lease> {
        let (key, holder) = (key.clone(), holder.clone());
        ask!(self, Acquire, Request::Acquire { key, holder, ttl })
    }
    async fn acquire_many(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        ask!(self, AcquireMany, Request::AcquireMany(asks.to_vec()))
    }
    async fn join_session(&self, session: &Lease, key: &Key, holder: &HolderId) -> Result<Lease> {
        let (session, key, holder) = (session.clone(), key.clone(), holder.clone());
        ask!(
            self,
            JoinSession,
            Request::JoinSession {
                session,
                key,
                holder
            }
        )
    }
    async fn join_session_many(&self, session: &Lease, asks: &[JoinAsk]) -> BatchResult<Lease> {
        let (session, asks) = (session.clone(), asks.to_vec());
        ask!(
            self,
            JoinSessionMany,
            Request::JoinSessionMany { session, asks }
        )
    }
    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        ask!(self, Renew, Request::Renew(lease.clone()))
    }
    async fn renew_many(&self, leases: &[Lease]) -> BatchResult<Lease> {
        ask!(self, RenewMany, Request::RenewMany(leases.to_vec()))
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        ask!(self, Release, Request::Release(lease.clone()))
    }
    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        ask!(self, Inspect, Request::Inspect(key.clone()))
    }
    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        let space = space.clone();
        ask!(self, Expired, Request::Expired { space, limit })
    }
    async fn reap(&self, key: &Key, token: FencingToken) -> Result<bool> {
        let key = key.clone();
        ask!(self, Reap, Request::Reap { key, token })
    }
    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
        ask!(self, ReapMany, Request::ReapMany(expired.to_vec()))
    }
    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        ask!(self, DeadTokens, Request::DeadTokens { limit })
    }
    async fn store_time(&self) -> Result<StoreTime> {
        ask!(self, StoreTime, Request::StoreTime)
    }
    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        ask!(self, NextExpiry, Request::NextExpiry(space.clone()))
    }
    async fn members(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let page = Page {
            after: page.after.cloned(),
            limit: page.limit,
        };
        let space = space.clone();
        ask!(self, Members, Request::Members { space, page })
    }
    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        ask!(self, Deaths, Request::Deaths { before, limit })
    }
    fn wakeups(&self) -> Option<watch::Receiver<u64>> {
        self.inner.wakeups()
    }
    fn checks_input(&self) -> bool {
        self.hook.checks_input() || self.inner.checks_input()
    }
}

#[async_trait]
impl<I: Intercept> ItemStore for Intercepted<I> {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        let payload = payload.to_vec();
        ask!(self, Enqueue, Request::Enqueue { payload, options })
    }
    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        let lease = lease.clone();
        ask!(self, Claim, Request::Claim { lease, n, req })
    }
    async fn complete(&self, lease: &Lease, id: ItemId) -> Result<()> {
        let lease = lease.clone();
        ask!(self, Complete, Request::Complete { lease, id })
    }
    async fn fail(&self, lease: &Lease, id: ItemId, retry: bool) -> Result<ItemState> {
        let lease = lease.clone();
        ask!(self, Fail, Request::Fail { lease, id, retry })
    }
    async fn requeue_orphans(&self, token: FencingToken) -> Result<Requeued> {
        ask!(self, RequeueOrphans, Request::RequeueOrphans(token))
    }
    async fn requeue_orphans_many(&self, tokens: &[FencingToken]) -> BatchResult<Requeued> {
        ask!(
            self,
            RequeueOrphansMany,
            Request::RequeueOrphansMany(tokens.to_vec())
        )
    }
    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        ask!(self, Item, Request::Item(id))
    }
    async fn item_counts(&self) -> Result<ItemCounts> {
        ask!(self, ItemCounts, Request::ItemCounts)
    }
    async fn dead_letters(&self, limit: usize) -> Result<Vec<ItemRecord>> {
        ask!(self, DeadLetters, Request::DeadLetters { limit })
    }
    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        ask!(self, Items, Request::Items { state, page })
    }
    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        ask!(self, RetryDeadLetter, Request::RetryDeadLetter(id))
    }
    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        ask!(self, RetryDeadLetters, Request::RetryDeadLetters { limit })
    }
}
