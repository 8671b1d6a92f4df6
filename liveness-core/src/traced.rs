//! A store wrapper that gives every store call a `tracing` span, counts the calls and
//! records the failed ones in [`STORE_ERRORS_TOTAL`](crate::metrics::STORE_ERRORS_TOTAL).
//! The state machines wrap the store they are given with it, so every call they make
//! is traced and counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tracing::Instrument;

use crate::error::Result;
use crate::item::{
    EnqueueOptions, Item, ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind, RequestId,
    Requeued,
};
use crate::lease::{DeadToken, DeathRecord, ExpiredLease, Issuer, Lease, LeaseInfo};
use crate::metrics::{error_kind, Labels, STORE_ERRORS_TOTAL};
use crate::store::{Capabilities, ItemStore, LeaseStore, Store};
use crate::types::{FencingToken, HolderId, Key, Space, StoreTime, Ttl};

/// Wraps `store` in a [`Traced`].
pub(crate) fn traced(store: Arc<dyn Store>) -> Arc<Traced> {
    Arc::new(Traced {
        labels: Labels::of(&*store),
        inner: store,
        calls: AtomicU64::new(0),
    })
}

/// A store whose every call runs inside a `liveness.store` span carrying the
/// operation, the backend and the key or token, and whose failed calls are counted
/// in [`STORE_ERRORS_TOTAL`](crate::metrics::STORE_ERRORS_TOTAL).
#[derive(Debug)]
pub struct Traced {
    inner: Arc<dyn Store>,
    labels: Labels,
    calls: AtomicU64,
}

impl Traced {
    /// How many store calls went through this wrapper so far.
    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Counts a call of `op` and, when it failed with a store error, that error.
    fn count<T>(&self, op: &'static str, result: &Result<T>) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = result {
            if let Some(kind) = error_kind(e) {
                self.labels
                    .counter(STORE_ERRORS_TOTAL, &[("op", op), ("kind", kind)])
                    .increment(1);
            }
        }
    }
}

macro_rules! span {
    ($self:ident, $op:literal $(, $k:ident = $v:expr)*) => {
        tracing::debug_span!("liveness.store", op = $op, backend = $self.inner.backend() $(, $k = %$v)*)
    };
}

#[async_trait]
impl LeaseStore for Traced {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn issuer(&self) -> &Issuer {
        self.inner.issuer()
    }
    async fn acquire(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Result<Lease> {
        let span = span!(self, "acquire", key = key);
        let r = self.inner.acquire(key, holder, ttl).instrument(span).await;
        self.count("acquire", &r);
        r
    }
    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let span = span!(self, "renew", key = lease.key, token = lease.token);
        let r = self.inner.renew(lease).instrument(span).await;
        self.count("renew", &r);
        r
    }
    async fn renew_many(&self, leases: &[Lease]) -> Result<Vec<Result<Lease>>> {
        let span = span!(self, "renew_many", n = leases.len());
        let r = self.inner.renew_many(leases).instrument(span).await;
        self.count("renew_many", &r);
        r
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        let span = span!(self, "release", key = lease.key, token = lease.token);
        let r = self.inner.release(lease).instrument(span).await;
        self.count("release", &r);
        r
    }
    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        let span = span!(self, "inspect", key = key);
        let r = self.inner.inspect(key).instrument(span).await;
        self.count("inspect", &r);
        r
    }
    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        let span = span!(self, "expired", space = space);
        let r = self.inner.expired(space, limit).instrument(span).await;
        self.count("expired", &r);
        r
    }
    async fn reap(&self, key: &Key, token: FencingToken) -> Result<bool> {
        let span = span!(self, "reap", key = key, token = token);
        let r = self.inner.reap(key, token).instrument(span).await;
        self.count("reap", &r);
        r
    }
    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> Result<Vec<Result<bool>>> {
        let span = span!(self, "reap_many", n = expired.len());
        let r = self.inner.reap_many(expired).instrument(span).await;
        self.count("reap_many", &r);
        r
    }
    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        let span = span!(self, "dead_tokens");
        let r = self.inner.dead_tokens(limit).instrument(span).await;
        self.count("dead_tokens", &r);
        r
    }
    async fn members(
        &self,
        space: &Space,
        after: Option<&Key>,
        limit: usize,
    ) -> Result<Vec<LeaseInfo>> {
        let span = span!(self, "members", space = space);
        let r = self
            .inner
            .members(space, after, limit)
            .instrument(span)
            .await;
        self.count("members", &r);
        r
    }
    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        let span = span!(self, "deaths");
        let r = self.inner.deaths(before, limit).instrument(span).await;
        self.count("deaths", &r);
        r
    }
    async fn store_time(&self) -> Result<StoreTime> {
        let span = span!(self, "store_time");
        let r = self.inner.store_time().instrument(span).await;
        self.count("store_time", &r);
        r
    }
    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        let span = span!(self, "next_expiry", space = space);
        let r = self.inner.next_expiry(space).instrument(span).await;
        self.count("next_expiry", &r);
        r
    }
    fn wakeups(&self) -> Option<watch::Receiver<u64>> {
        self.inner.wakeups()
    }
}

#[async_trait]
impl ItemStore for Traced {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        let span = span!(self, "enqueue");
        let r = self.inner.enqueue(payload, options).instrument(span).await;
        self.count("enqueue", &r);
        r
    }
    async fn claim_request(
        &self,
        lease: &Lease,
        n: usize,
        request: RequestId,
    ) -> Result<Vec<Item>> {
        let span = span!(self, "claim", token = lease.token);
        let r = self
            .inner
            .claim_request(lease, n, request)
            .instrument(span)
            .await;
        self.count("claim", &r);
        r
    }
    async fn complete(&self, lease: &Lease, id: ItemId) -> Result<()> {
        let span = span!(self, "complete", token = lease.token, item = id);
        let r = self.inner.complete(lease, id).instrument(span).await;
        self.count("complete", &r);
        r
    }
    async fn fail(&self, lease: &Lease, id: ItemId, retry: bool) -> Result<ItemState> {
        let span = span!(self, "fail", token = lease.token, item = id);
        let r = self.inner.fail(lease, id, retry).instrument(span).await;
        self.count("fail", &r);
        r
    }
    async fn requeue_orphans(&self, token: FencingToken) -> Result<Requeued> {
        let span = span!(self, "requeue_orphans", token = token);
        let r = self.inner.requeue_orphans(token).instrument(span).await;
        self.count("requeue_orphans", &r);
        r
    }
    async fn requeue_orphans_many(&self, tokens: &[FencingToken]) -> Result<Vec<Result<Requeued>>> {
        let span = span!(self, "requeue_orphans_many", n = tokens.len());
        let r = self
            .inner
            .requeue_orphans_many(tokens)
            .instrument(span)
            .await;
        self.count("requeue_orphans_many", &r);
        r
    }
    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        let span = span!(self, "item", item = id);
        let r = self.inner.item(id).instrument(span).await;
        self.count("item", &r);
        r
    }
    async fn item_counts(&self) -> Result<ItemCounts> {
        let span = span!(self, "item_counts");
        let r = self.inner.item_counts().instrument(span).await;
        self.count("item_counts", &r);
        r
    }
    async fn dead_letters(&self, limit: usize) -> Result<Vec<ItemRecord>> {
        let span = span!(self, "dead_letters");
        let r = self.inner.dead_letters(limit).instrument(span).await;
        self.count("dead_letters", &r);
        r
    }
    async fn items(
        &self,
        state: ItemStateKind,
        after: Option<ItemId>,
        limit: usize,
    ) -> Result<Vec<ItemRecord>> {
        let span = span!(self, "items", state = state);
        let r = self.inner.items(state, after, limit).instrument(span).await;
        self.count("items", &r);
        r
    }
    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        let span = span!(self, "retry_dead_letter", item = id);
        let r = self.inner.retry_dead_letter(id).instrument(span).await;
        self.count("retry_dead_letter", &r);
        r
    }
    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        let span = span!(self, "retry_dead_letters");
        let r = self.inner.retry_dead_letters(limit).instrument(span).await;
        self.count("retry_dead_letters", &r);
        r
    }
}
