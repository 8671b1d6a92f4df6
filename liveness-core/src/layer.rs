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

use crate::error::{Error, Result};
use crate::item::{
    EnqueueOptions, Item, ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind, RequestId,
    Requeued,
};
use crate::lease::{Acquire, DeadToken, DeathRecord, ExpiredLease, Lease, LeaseInfo};
use crate::store::{ItemStore, LeaseStore, Page, Store, StoreInfo};
use crate::types::{FencingToken, HolderId, Key, Space, StoreTime, Ttl};

/// A store operation: one variant per round-trip method of [`LeaseStore`] and
/// [`ItemStore`] (the provided `claim` is [`Op::Claim`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// [`LeaseStore::acquire`].
    Acquire,
    /// [`LeaseStore::acquire_many`].
    AcquireMany,
    /// [`LeaseStore::renew`].
    Renew,
    /// [`LeaseStore::renew_many`].
    RenewMany,
    /// [`LeaseStore::release`].
    Release,
    /// [`LeaseStore::inspect`].
    Inspect,
    /// [`LeaseStore::expired`].
    Expired,
    /// [`LeaseStore::reap`].
    Reap,
    /// [`LeaseStore::reap_many`].
    ReapMany,
    /// [`LeaseStore::dead_tokens`].
    DeadTokens,
    /// [`LeaseStore::store_time`].
    StoreTime,
    /// [`LeaseStore::next_expiry`].
    NextExpiry,
    /// [`LeaseStore::members`].
    Members,
    /// [`LeaseStore::deaths`].
    Deaths,
    /// [`ItemStore::enqueue`].
    Enqueue,
    /// [`ItemStore::claim_request`].
    Claim,
    /// [`ItemStore::complete`].
    Complete,
    /// [`ItemStore::fail`].
    Fail,
    /// [`ItemStore::requeue_orphans`].
    RequeueOrphans,
    /// [`ItemStore::requeue_orphans_many`].
    RequeueOrphansMany,
    /// [`ItemStore::item`].
    Item,
    /// [`ItemStore::item_counts`].
    ItemCounts,
    /// [`ItemStore::dead_letters`].
    DeadLetters,
    /// [`ItemStore::items`].
    Items,
    /// [`ItemStore::retry_dead_letter`].
    RetryDeadLetter,
    /// [`ItemStore::retry_dead_letters`].
    RetryDeadLetters,
}

impl Op {
    /// The method's name (`"renew_many"`), for spans, logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::AcquireMany => "acquire_many",
            Op::Renew => "renew",
            Op::RenewMany => "renew_many",
            Op::Release => "release",
            Op::Inspect => "inspect",
            Op::Expired => "expired",
            Op::Reap => "reap",
            Op::ReapMany => "reap_many",
            Op::DeadTokens => "dead_tokens",
            Op::StoreTime => "store_time",
            Op::NextExpiry => "next_expiry",
            Op::Members => "members",
            Op::Deaths => "deaths",
            Op::Enqueue => "enqueue",
            Op::Claim => "claim",
            Op::Complete => "complete",
            Op::Fail => "fail",
            Op::RequeueOrphans => "requeue_orphans",
            Op::RequeueOrphansMany => "requeue_orphans_many",
            Op::Item => "item",
            Op::ItemCounts => "item_counts",
            Op::DeadLetters => "dead_letters",
            Op::Items => "items",
            Op::RetryDeadLetter => "retry_dead_letter",
            Op::RetryDeadLetters => "retry_dead_letters",
        }
    }

    /// True for the calls a [`Checker`](crate::Checker) round makes (finding, reaping
    /// and sweeping the dead, and sleeping until the next expiry).
    pub fn is_checker_call(self) -> bool {
        matches!(
            self,
            Op::Expired
                | Op::Reap
                | Op::ReapMany
                | Op::DeadTokens
                | Op::NextExpiry
                | Op::RequeueOrphans
                | Op::RequeueOrphansMany
        )
    }
}

/// One store call with its arguments, owned: what an [`Intercept`] receives. One
/// variant per [`Op`], named alike, with the method's arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[allow(missing_docs)] // the fields are the trait methods' arguments, documented there
pub enum Request {
    /// [`LeaseStore::acquire`].
    Acquire {
        key: Key,
        holder: HolderId,
        ttl: Ttl,
    },
    /// [`LeaseStore::acquire_many`].
    AcquireMany(Vec<Acquire>),
    /// [`LeaseStore::renew`].
    Renew(Lease),
    /// [`LeaseStore::renew_many`].
    RenewMany(Vec<Lease>),
    /// [`LeaseStore::release`].
    Release(Lease),
    /// [`LeaseStore::inspect`].
    Inspect(Key),
    /// [`LeaseStore::expired`].
    Expired { space: Space, limit: usize },
    /// [`LeaseStore::reap`].
    Reap { key: Key, token: FencingToken },
    /// [`LeaseStore::reap_many`].
    ReapMany(Vec<(Key, FencingToken)>),
    /// [`LeaseStore::dead_tokens`].
    DeadTokens { limit: usize },
    /// [`LeaseStore::store_time`].
    StoreTime,
    /// [`LeaseStore::next_expiry`].
    NextExpiry(Space),
    /// [`LeaseStore::members`].
    Members { space: Space, page: Page<Key> },
    /// [`LeaseStore::deaths`].
    Deaths { before: Option<u64>, limit: usize },
    /// [`ItemStore::enqueue`].
    Enqueue {
        payload: Vec<u8>,
        options: EnqueueOptions,
    },
    /// [`ItemStore::claim_request`].
    Claim {
        lease: Lease,
        n: usize,
        req: RequestId,
    },
    /// [`ItemStore::complete`].
    Complete { lease: Lease, id: ItemId },
    /// [`ItemStore::fail`].
    Fail {
        lease: Lease,
        id: ItemId,
        retry: bool,
    },
    /// [`ItemStore::requeue_orphans`].
    RequeueOrphans(FencingToken),
    /// [`ItemStore::requeue_orphans_many`].
    RequeueOrphansMany(Vec<FencingToken>),
    /// [`ItemStore::item`].
    Item(ItemId),
    /// [`ItemStore::item_counts`].
    ItemCounts,
    /// [`ItemStore::dead_letters`].
    DeadLetters { limit: usize },
    /// [`ItemStore::items`].
    Items {
        state: ItemStateKind,
        page: Page<ItemId>,
    },
    /// [`ItemStore::retry_dead_letter`].
    RetryDeadLetter(ItemId),
    /// [`ItemStore::retry_dead_letters`].
    RetryDeadLetters { limit: usize },
}

impl Request {
    /// Which operation this is.
    pub fn op(&self) -> Op {
        match self {
            Request::Acquire { .. } => Op::Acquire,
            Request::AcquireMany(_) => Op::AcquireMany,
            Request::Renew(_) => Op::Renew,
            Request::RenewMany(_) => Op::RenewMany,
            Request::Release(_) => Op::Release,
            Request::Inspect(_) => Op::Inspect,
            Request::Expired { .. } => Op::Expired,
            Request::Reap { .. } => Op::Reap,
            Request::ReapMany(_) => Op::ReapMany,
            Request::DeadTokens { .. } => Op::DeadTokens,
            Request::StoreTime => Op::StoreTime,
            Request::NextExpiry(_) => Op::NextExpiry,
            Request::Members { .. } => Op::Members,
            Request::Deaths { .. } => Op::Deaths,
            Request::Enqueue { .. } => Op::Enqueue,
            Request::Claim { .. } => Op::Claim,
            Request::Complete { .. } => Op::Complete,
            Request::Fail { .. } => Op::Fail,
            Request::RequeueOrphans(_) => Op::RequeueOrphans,
            Request::RequeueOrphansMany(_) => Op::RequeueOrphansMany,
            Request::Item(_) => Op::Item,
            Request::ItemCounts => Op::ItemCounts,
            Request::DeadLetters { .. } => Op::DeadLetters,
            Request::Items { .. } => Op::Items,
            Request::RetryDeadLetter(_) => Op::RetryDeadLetter,
            Request::RetryDeadLetters { .. } => Op::RetryDeadLetters,
        }
    }

    /// The lease the call acts under (renew, release, claim, complete, fail).
    pub fn lease(&self) -> Option<&Lease> {
        match self {
            Request::Renew(lease)
            | Request::Release(lease)
            | Request::Claim { lease, .. }
            | Request::Complete { lease, .. }
            | Request::Fail { lease, .. } => Some(lease),
            _ => None,
        }
    }

    /// The key it acts on (acquire, inspect, reap; the lease's key for calls made
    /// under a lease; the page's `after` of `members`).
    pub fn key(&self) -> Option<&Key> {
        match self {
            Request::Acquire { key, .. } | Request::Inspect(key) | Request::Reap { key, .. } => {
                Some(key)
            }
            Request::Members { page, .. } => page.after.as_ref(),
            _ => self.lease().map(|l| &l.key),
        }
    }

    /// The space it scans (expired, next_expiry, members).
    pub fn space(&self) -> Option<&Space> {
        match self {
            Request::Expired { space, .. }
            | Request::NextExpiry(space)
            | Request::Members { space, .. } => Some(space),
            _ => None,
        }
    }

    /// The token it acts on (a lease's token, a reaped or swept token).
    pub fn token(&self) -> Option<FencingToken> {
        match self {
            Request::Reap { token, .. } | Request::RequeueOrphans(token) => Some(*token),
            _ => self.lease().map(|l| l.token),
        }
    }

    /// The item it acts on (complete, fail, item, retry_dead_letter; the page's
    /// `after` of `items`).
    pub fn item(&self) -> Option<ItemId> {
        match self {
            Request::Complete { id, .. }
            | Request::Fail { id, .. }
            | Request::Item(id)
            | Request::RetryDeadLetter(id) => Some(*id),
            Request::Items { page, .. } => page.after,
            _ => None,
        }
    }

    /// How many entries a batch carries, or the `n` / `limit` asked for; 1 otherwise.
    pub fn n(&self) -> usize {
        match self {
            Request::AcquireMany(v) => v.len(),
            Request::RenewMany(v) => v.len(),
            Request::ReapMany(v) => v.len(),
            Request::RequeueOrphansMany(v) => v.len(),
            Request::Expired { limit, .. }
            | Request::DeadTokens { limit }
            | Request::Deaths { limit, .. }
            | Request::DeadLetters { limit }
            | Request::RetryDeadLetters { limit } => *limit,
            Request::Members { page, .. } => page.limit,
            Request::Items { page, .. } => page.limit,
            Request::Claim { n, .. } => *n,
            _ => 1,
        }
    }

    /// A `*_many` request as one single-entry request per entry, in order (what the
    /// trait's default `*_many` methods send); `Err(self)` for any other request.
    pub fn split(self) -> std::result::Result<Vec<Request>, Box<Request>> {
        Ok(match self {
            Request::AcquireMany(asks) => asks
                .into_iter()
                .map(|a| Request::Acquire {
                    key: a.key,
                    holder: a.holder,
                    ttl: a.ttl,
                })
                .collect(),
            Request::RenewMany(leases) => leases.into_iter().map(Request::Renew).collect(),
            Request::ReapMany(pairs) => pairs
                .into_iter()
                .map(|(key, token)| Request::Reap { key, token })
                .collect(),
            Request::RequeueOrphansMany(tokens) => {
                tokens.into_iter().map(Request::RequeueOrphans).collect()
            }
            other => return Err(Box::new(other)),
        })
    }
}

/// A store's answer to one [`Request`]: the variant of the same name, holding what the
/// method returns.
#[derive(Debug)]
#[non_exhaustive]
#[allow(missing_docs)] // each holds the return value of the method of its name
pub enum Reply {
    Acquire(Lease),
    AcquireMany(Vec<Result<Lease>>),
    Renew(Lease),
    RenewMany(Vec<Result<Lease>>),
    Release(bool),
    Inspect(Option<LeaseInfo>),
    Expired(Vec<ExpiredLease>),
    Reap(bool),
    ReapMany(Vec<Result<bool>>),
    DeadTokens(Vec<DeadToken>),
    StoreTime(StoreTime),
    NextExpiry(Option<Duration>),
    Members(Vec<LeaseInfo>),
    Deaths(Vec<DeathRecord>),
    Enqueue(ItemId),
    Claim(Vec<Item>),
    Complete(()),
    Fail(ItemState),
    RequeueOrphans(Requeued),
    RequeueOrphansMany(Vec<Result<Requeued>>),
    Item(Option<ItemRecord>),
    ItemCounts(ItemCounts),
    DeadLetters(Vec<ItemRecord>),
    Items(Vec<ItemRecord>),
    RetryDeadLetter(()),
    RetryDeadLetters(Vec<ItemId>),
}

impl Reply {
    /// Which operation this answers.
    pub fn op(&self) -> Op {
        match self {
            Reply::Acquire(_) => Op::Acquire,
            Reply::AcquireMany(_) => Op::AcquireMany,
            Reply::Renew(_) => Op::Renew,
            Reply::RenewMany(_) => Op::RenewMany,
            Reply::Release(_) => Op::Release,
            Reply::Inspect(_) => Op::Inspect,
            Reply::Expired(_) => Op::Expired,
            Reply::Reap(_) => Op::Reap,
            Reply::ReapMany(_) => Op::ReapMany,
            Reply::DeadTokens(_) => Op::DeadTokens,
            Reply::StoreTime(_) => Op::StoreTime,
            Reply::NextExpiry(_) => Op::NextExpiry,
            Reply::Members(_) => Op::Members,
            Reply::Deaths(_) => Op::Deaths,
            Reply::Enqueue(_) => Op::Enqueue,
            Reply::Claim(_) => Op::Claim,
            Reply::Complete(_) => Op::Complete,
            Reply::Fail(_) => Op::Fail,
            Reply::RequeueOrphans(_) => Op::RequeueOrphans,
            Reply::RequeueOrphansMany(_) => Op::RequeueOrphansMany,
            Reply::Item(_) => Op::Item,
            Reply::ItemCounts(_) => Op::ItemCounts,
            Reply::DeadLetters(_) => Op::DeadLetters,
            Reply::Items(_) => Op::Items,
            Reply::RetryDeadLetter(_) => Op::RetryDeadLetter,
            Reply::RetryDeadLetters(_) => Op::RetryDeadLetters,
        }
    }
}

/// A layer answered a request with the reply of another operation: a bug in that
/// layer, reported as the source of an [`Error::Backend`] (never a panic).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a store layer answered {asked} with a reply to {got}")]
pub struct WrongReply {
    /// The operation asked.
    pub asked: &'static str,
    /// The operation the reply belongs to.
    pub got: &'static str,
}

/// Runs `req` on `store`: calls the method of the request's name with its arguments.
pub async fn dispatch(store: &dyn Store, req: Request) -> Result<Reply> {
    Ok(match req {
        Request::Acquire { key, holder, ttl } => {
            Reply::Acquire(store.acquire(&key, &holder, ttl).await?)
        }
        Request::AcquireMany(asks) => Reply::AcquireMany(store.acquire_many(&asks).await?),
        Request::Renew(lease) => Reply::Renew(store.renew(&lease).await?),
        Request::RenewMany(leases) => Reply::RenewMany(store.renew_many(&leases).await?),
        Request::Release(lease) => Reply::Release(store.release(&lease).await?),
        Request::Inspect(key) => Reply::Inspect(store.inspect(&key).await?),
        Request::Expired { space, limit } => Reply::Expired(store.expired(&space, limit).await?),
        Request::Reap { key, token } => Reply::Reap(store.reap(&key, token).await?),
        Request::ReapMany(pairs) => Reply::ReapMany(store.reap_many(&pairs).await?),
        Request::DeadTokens { limit } => Reply::DeadTokens(store.dead_tokens(limit).await?),
        Request::StoreTime => Reply::StoreTime(store.store_time().await?),
        Request::NextExpiry(space) => Reply::NextExpiry(store.next_expiry(&space).await?),
        Request::Members { space, page } => {
            let page = Page {
                after: page.after.as_ref(),
                limit: page.limit,
            };
            Reply::Members(store.members(&space, page).await?)
        }
        Request::Deaths { before, limit } => Reply::Deaths(store.deaths(before, limit).await?),
        Request::Enqueue { payload, options } => {
            Reply::Enqueue(store.enqueue(&payload, options).await?)
        }
        Request::Claim { lease, n, req } => {
            Reply::Claim(store.claim_request(&lease, n, req).await?)
        }
        Request::Complete { lease, id } => Reply::Complete(store.complete(&lease, id).await?),
        Request::Fail { lease, id, retry } => Reply::Fail(store.fail(&lease, id, retry).await?),
        Request::RequeueOrphans(token) => {
            Reply::RequeueOrphans(store.requeue_orphans(token).await?)
        }
        Request::RequeueOrphansMany(tokens) => {
            Reply::RequeueOrphansMany(store.requeue_orphans_many(&tokens).await?)
        }
        Request::Item(id) => Reply::Item(store.item(id).await?),
        Request::ItemCounts => Reply::ItemCounts(store.item_counts().await?),
        Request::DeadLetters { limit } => Reply::DeadLetters(store.dead_letters(limit).await?),
        Request::Items { state, page } => Reply::Items(store.items(state, page).await?),
        Request::RetryDeadLetter(id) => Reply::RetryDeadLetter(store.retry_dead_letter(id).await?),
        Request::RetryDeadLetters { limit } => {
            Reply::RetryDeadLetters(store.retry_dead_letters(limit).await?)
        }
    })
}

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
/// use liveness_core::layer::{CheckInput, StoreBuilder};
/// use liveness_core::{MemoryStore, Store};
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
    async fn acquire_many(&self, asks: &[Acquire]) -> Result<Vec<Result<Lease>>> {
        ask!(self, AcquireMany, Request::AcquireMany(asks.to_vec()))
    }
    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        ask!(self, Renew, Request::Renew(lease.clone()))
    }
    async fn renew_many(&self, leases: &[Lease]) -> Result<Vec<Result<Lease>>> {
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
    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> Result<Vec<Result<bool>>> {
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
    async fn requeue_orphans_many(&self, tokens: &[FencingToken]) -> Result<Vec<Result<Requeued>>> {
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

pub use crate::checked::CheckInput;
