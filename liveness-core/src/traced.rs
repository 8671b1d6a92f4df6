//! A store wrapper that gives every store call a `tracing` span. The state machines
//! wrap the store they are given with it, so every call they make is traced.

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
use crate::store::{Capabilities, ItemStore, LeaseStore, Store};
use crate::types::{FencingToken, HolderId, Key, Space, StoreTime, Ttl};

/// Wraps `store` in a [`Traced`].
pub(crate) fn traced(store: Arc<dyn Store>) -> Arc<dyn Store> {
    Arc::new(Traced { inner: store })
}

/// A store whose every call runs inside a `liveness.store` span carrying the
/// operation, the backend and the key or token.
#[derive(Debug)]
pub struct Traced {
    inner: Arc<dyn Store>,
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
        self.inner.acquire(key, holder, ttl).instrument(span).await
    }
    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let span = span!(self, "renew", key = lease.key, token = lease.token);
        self.inner.renew(lease).instrument(span).await
    }
    async fn renew_many(&self, leases: &[Lease]) -> Result<Vec<Result<Lease>>> {
        let span = span!(self, "renew_many", n = leases.len());
        self.inner.renew_many(leases).instrument(span).await
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        let span = span!(self, "release", key = lease.key, token = lease.token);
        self.inner.release(lease).instrument(span).await
    }
    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        let span = span!(self, "inspect", key = key);
        self.inner.inspect(key).instrument(span).await
    }
    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        let span = span!(self, "expired", space = space);
        self.inner.expired(space, limit).instrument(span).await
    }
    async fn reap(&self, key: &Key, token: FencingToken) -> Result<bool> {
        let span = span!(self, "reap", key = key, token = token);
        self.inner.reap(key, token).instrument(span).await
    }
    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> Result<Vec<Result<bool>>> {
        let span = span!(self, "reap_many", n = expired.len());
        self.inner.reap_many(expired).instrument(span).await
    }
    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        let span = span!(self, "dead_tokens");
        self.inner.dead_tokens(limit).instrument(span).await
    }
    async fn members(
        &self,
        space: &Space,
        after: Option<&Key>,
        limit: usize,
    ) -> Result<Vec<LeaseInfo>> {
        let span = span!(self, "members", space = space);
        self.inner
            .members(space, after, limit)
            .instrument(span)
            .await
    }
    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        let span = span!(self, "deaths");
        self.inner.deaths(before, limit).instrument(span).await
    }
    async fn store_time(&self) -> Result<StoreTime> {
        let span = span!(self, "store_time");
        self.inner.store_time().instrument(span).await
    }
    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        let span = span!(self, "next_expiry", space = space);
        self.inner.next_expiry(space).instrument(span).await
    }
    fn wakeups(&self) -> Option<watch::Receiver<u64>> {
        self.inner.wakeups()
    }
}

#[async_trait]
impl ItemStore for Traced {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        let span = span!(self, "enqueue");
        self.inner.enqueue(payload, options).instrument(span).await
    }
    async fn claim_request(
        &self,
        lease: &Lease,
        n: usize,
        request: RequestId,
    ) -> Result<Vec<Item>> {
        let span = span!(self, "claim", token = lease.token);
        self.inner
            .claim_request(lease, n, request)
            .instrument(span)
            .await
    }
    async fn complete(&self, lease: &Lease, id: ItemId) -> Result<()> {
        let span = span!(self, "complete", token = lease.token, item = id);
        self.inner.complete(lease, id).instrument(span).await
    }
    async fn fail(&self, lease: &Lease, id: ItemId, retry: bool) -> Result<ItemState> {
        let span = span!(self, "fail", token = lease.token, item = id);
        self.inner.fail(lease, id, retry).instrument(span).await
    }
    async fn requeue_orphans(&self, token: FencingToken) -> Result<Requeued> {
        let span = span!(self, "requeue_orphans", token = token);
        self.inner.requeue_orphans(token).instrument(span).await
    }
    async fn requeue_orphans_many(&self, tokens: &[FencingToken]) -> Result<Vec<Result<Requeued>>> {
        let span = span!(self, "requeue_orphans_many", n = tokens.len());
        self.inner
            .requeue_orphans_many(tokens)
            .instrument(span)
            .await
    }
    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        let span = span!(self, "item", item = id);
        self.inner.item(id).instrument(span).await
    }
    async fn item_counts(&self) -> Result<ItemCounts> {
        let span = span!(self, "item_counts");
        self.inner.item_counts().instrument(span).await
    }
    async fn dead_letters(&self, limit: usize) -> Result<Vec<ItemRecord>> {
        let span = span!(self, "dead_letters");
        self.inner.dead_letters(limit).instrument(span).await
    }
    async fn items(
        &self,
        state: ItemStateKind,
        after: Option<ItemId>,
        limit: usize,
    ) -> Result<Vec<ItemRecord>> {
        let span = span!(self, "items", state = state);
        self.inner.items(state, after, limit).instrument(span).await
    }
    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        let span = span!(self, "retry_dead_letter", item = id);
        self.inner.retry_dead_letter(id).instrument(span).await
    }
    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        let span = span!(self, "retry_dead_letters");
        self.inner.retry_dead_letters(limit).instrument(span).await
    }
}
