//! Store middleware: a [`Layer`] sits in front of a store and sees every call, and the
//! blanket implementations here forward each call to the inner store through
//! [`Layer::call`]. A layer writes only what it changes (a span, a counter, an injected
//! delay or a lost reply), never the forwarding of the whole contract, so a new store
//! operation reaches every layer by one edit in this file.
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use liveness_core::{async_trait, Call, Layer, Result, Store, MemoryStore};
//! use liveness_core::layer::BoxCall;
//!
//! /// Counts round trips.
//! #[derive(Debug)]
//! struct Counted { inner: Arc<dyn Store>, calls: AtomicU64 }
//!
//! #[async_trait]
//! impl Layer for Counted {
//!     fn inner(&self) -> &Arc<dyn Store> { &self.inner }
//!     async fn call<'a, T: Send + 'a>(&'a self, _call: Call<'a>, run: BoxCall<'a, T>) -> Result<T> {
//!         self.calls.fetch_add(1, Ordering::Relaxed);
//!         run.await
//!     }
//! }
//!
//! let inner: Arc<dyn Store> = Arc::new(MemoryStore::new());
//! let counted: Arc<dyn Store> = Arc::new(Counted { inner, calls: AtomicU64::new(0) });
//! assert_eq!(counted.backend(), "memory");
//! ```

use crate::store::Page;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::error::Result;
use crate::item::{
    EnqueueOptions, Item, ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind, RequestId,
    Requeued,
};
use crate::lease::{Acquire, DeadToken, DeathRecord, ExpiredLease, Lease, LeaseInfo};
use crate::store::{
    acquire_each, reap_each, renew_each, requeue_each, ItemStore, LeaseStore, Store, StoreInfo,
};
use crate::types::{FencingToken, HolderId, Key, Space, StoreTime, Ttl};

/// The inner store's answer to one call, not yet awaited.
pub type BoxCall<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// A store operation, as a [`Layer`] sees it: one variant per round-trip method of
/// [`LeaseStore`] and [`ItemStore`] (the provided `claim` is [`Op::Claim`]).
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

/// One call as a [`Layer`] sees it: the operation and what it is about. Fields that do
/// not apply to the operation are `None` or empty.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Call<'a> {
    /// Which operation.
    pub op: Op,
    /// The key it acts on (acquire, renew, release, inspect, reap; the lease's key for
    /// item calls made under a lease; the page's `after` of `members`).
    pub key: Option<&'a Key>,
    /// The space it scans (expired, next_expiry, members).
    pub space: Option<&'a Space>,
    /// The token it acts on (a lease's token, a reaped or swept token).
    pub token: Option<FencingToken>,
    /// The item it acts on (complete, fail, item, retry_dead_letter; the page's
    /// `after` of `items`).
    pub item: Option<ItemId>,
    /// The leases of a `renew` (one) or `renew_many` (all), empty otherwise.
    pub leases: &'a [Lease],
    /// How many entries a batch carries, or the `n` / `limit` asked for; 1 otherwise.
    pub n: usize,
}

impl<'a> Call<'a> {
    /// A call of `op` about nothing in particular.
    pub fn new(op: Op) -> Self {
        Call {
            op,
            key: None,
            space: None,
            token: None,
            item: None,
            leases: &[],
            n: 1,
        }
    }

    fn key(mut self, key: &'a Key) -> Self {
        self.key = Some(key);
        self
    }

    fn space(mut self, space: &'a Space) -> Self {
        self.space = Some(space);
        self
    }

    fn token(mut self, token: FencingToken) -> Self {
        self.token = Some(token);
        self
    }

    fn item(mut self, item: ItemId) -> Self {
        self.item = Some(item);
        self
    }

    fn n(mut self, n: usize) -> Self {
        self.n = n;
        self
    }

    fn lease(self, lease: &'a Lease) -> Self {
        self.key(&lease.key).token(lease.token)
    }

    fn leases(mut self, leases: &'a [Lease]) -> Self {
        self.leases = leases;
        self.n(leases.len())
    }
}

/// Middleware in front of a store. Implement [`Layer::inner`] and, for what the layer
/// does, [`Layer::call`]; every type that implements `Layer` is a [`Store`] whose calls
/// all pass through `call` and then reach the inner store. `backend`, `capabilities`,
/// `issuer` and `wakeups` are the inner store's.
///
/// # Guarantees
/// - Each round-trip method reaches the inner store's method of the same name (with
///   the same arguments) at most once per call, and only through `run`: a layer that
///   never awaits `run` sends nothing.
/// - The provided `claim` goes through `claim_request`. A `*_many` call reaches the
///   inner store's own `*_many` (natively batched or not), unless
///   [`Layer::split_batches`] says otherwise.
#[async_trait]
pub trait Layer: Send + Sync + std::fmt::Debug {
    /// The store this layer forwards to.
    fn inner(&self) -> &Arc<dyn Store>;

    /// Runs one call: `run` is the inner store's answer, not yet sent. The default
    /// awaits it. A layer may act before (delay, count, refuse with an error: then
    /// the inner store sees nothing), instrument `run`, or look at the answer and
    /// replace it (a lost reply).
    async fn call<'a, T: Send + 'a>(&'a self, call: Call<'a>, run: BoxCall<'a, T>) -> Result<T> {
        let _ = call;
        run.await
    }

    /// False (the default): a `*_many` call reaches [`Layer::call`] once, as one
    /// batch, and the inner store's own `*_many` answers it. True: it is split, as the
    /// trait's defaults do, into one `acquire` / `renew` / `reap` / `requeue_orphans` per entry,
    /// each through `call` (for a layer that acts per lease or per token).
    fn split_batches(&self) -> bool {
        false
    }
}

#[async_trait]
impl<L: Layer> LeaseStore for L {
    fn info(&self) -> &StoreInfo {
        self.inner().info()
    }
    async fn acquire(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Result<Lease> {
        let run = self.inner().acquire(key, holder, ttl);
        self.call(Call::new(Op::Acquire).key(key), run).await
    }
    async fn acquire_many(&self, asks: &[Acquire]) -> Result<Vec<Result<Lease>>> {
        if self.split_batches() {
            return acquire_each(self, asks).await;
        }
        let call = Call::new(Op::AcquireMany).n(asks.len());
        self.call(call, self.inner().acquire_many(asks)).await
    }
    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let call = Call::new(Op::Renew)
            .lease(lease)
            .leases(std::slice::from_ref(lease));
        self.call(call, self.inner().renew(lease)).await
    }
    async fn renew_many(&self, leases: &[Lease]) -> Result<Vec<Result<Lease>>> {
        if self.split_batches() {
            return renew_each(self, leases).await;
        }
        let call = Call::new(Op::RenewMany).leases(leases);
        self.call(call, self.inner().renew_many(leases)).await
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        let call = Call::new(Op::Release).lease(lease);
        self.call(call, self.inner().release(lease)).await
    }
    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        let call = Call::new(Op::Inspect).key(key);
        self.call(call, self.inner().inspect(key)).await
    }
    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        let call = Call::new(Op::Expired).space(space).n(limit);
        self.call(call, self.inner().expired(space, limit)).await
    }
    async fn reap(&self, key: &Key, token: FencingToken) -> Result<bool> {
        let call = Call::new(Op::Reap).key(key).token(token);
        self.call(call, self.inner().reap(key, token)).await
    }
    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> Result<Vec<Result<bool>>> {
        if self.split_batches() {
            return reap_each(self, expired).await;
        }
        let call = Call::new(Op::ReapMany).n(expired.len());
        self.call(call, self.inner().reap_many(expired)).await
    }
    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        let call = Call::new(Op::DeadTokens).n(limit);
        self.call(call, self.inner().dead_tokens(limit)).await
    }
    async fn store_time(&self) -> Result<StoreTime> {
        let call = Call::new(Op::StoreTime);
        self.call(call, self.inner().store_time()).await
    }
    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        let call = Call::new(Op::NextExpiry).space(space);
        self.call(call, self.inner().next_expiry(space)).await
    }
    async fn members(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let mut call = Call::new(Op::Members).space(space).n(page.limit);
        call.key = page.after;
        self.call(call, self.inner().members(space, page)).await
    }
    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        let call = Call::new(Op::Deaths).n(limit);
        self.call(call, self.inner().deaths(before, limit)).await
    }
    fn wakeups(&self) -> Option<watch::Receiver<u64>> {
        self.inner().wakeups()
    }
}

#[async_trait]
impl<L: Layer> ItemStore for L {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        let call = Call::new(Op::Enqueue);
        self.call(call, self.inner().enqueue(payload, options))
            .await
    }
    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        let call = Call::new(Op::Claim).lease(lease).n(n);
        let run = self.inner().claim_request(lease, n, req);
        self.call(call, run).await
    }
    async fn complete(&self, lease: &Lease, id: ItemId) -> Result<()> {
        let call = Call::new(Op::Complete).lease(lease).item(id);
        self.call(call, self.inner().complete(lease, id)).await
    }
    async fn fail(&self, lease: &Lease, id: ItemId, retry: bool) -> Result<ItemState> {
        let call = Call::new(Op::Fail).lease(lease).item(id);
        self.call(call, self.inner().fail(lease, id, retry)).await
    }
    async fn requeue_orphans(&self, token: FencingToken) -> Result<Requeued> {
        let call = Call::new(Op::RequeueOrphans).token(token);
        self.call(call, self.inner().requeue_orphans(token)).await
    }
    async fn requeue_orphans_many(&self, tokens: &[FencingToken]) -> Result<Vec<Result<Requeued>>> {
        if self.split_batches() {
            return requeue_each(self, tokens).await;
        }
        let call = Call::new(Op::RequeueOrphansMany).n(tokens.len());
        self.call(call, self.inner().requeue_orphans_many(tokens))
            .await
    }
    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        let call = Call::new(Op::Item).item(id);
        self.call(call, self.inner().item(id)).await
    }
    async fn item_counts(&self) -> Result<ItemCounts> {
        let call = Call::new(Op::ItemCounts);
        self.call(call, self.inner().item_counts()).await
    }
    async fn dead_letters(&self, limit: usize) -> Result<Vec<ItemRecord>> {
        let call = Call::new(Op::DeadLetters).n(limit);
        self.call(call, self.inner().dead_letters(limit)).await
    }
    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        let mut call = Call::new(Op::Items).n(page.limit);
        call.item = page.after;
        self.call(call, self.inner().items(state, page)).await
    }
    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        let call = Call::new(Op::RetryDeadLetter).item(id);
        self.call(call, self.inner().retry_dead_letter(id)).await
    }
    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        let call = Call::new(Op::RetryDeadLetters).n(limit);
        self.call(call, self.inner().retry_dead_letters(limit))
            .await
    }
}
