//! A forwarding store wrapper for tests and benches: counts store round trips, can
//! stall renewals (a member that is partitioned from the store, or paused), and can
//! lose the replies of claims the store applied, without touching the store itself.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use liveness_core::{
    async_trait, Capabilities, DeadToken, DeathRecord, EnqueueOptions, Error, ExpiredLease,
    FencingToken, HolderId, Issuer, Item, ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind,
    ItemStore, Key, Lease, LeaseInfo, LeaseStore, RequestId, Requeued, Result, Space, Store,
    StoreTime, Ttl,
};
use tokio::sync::watch;

/// Forwards every call to an inner store, counting them (a `*_many` call counts once:
/// one round trip on a store that implements it natively, one per entry on a store
/// that uses the trait's default loop); while
/// [`Wrapped::stall_renewals`] is on, `renew` calls hang (as if the network to the
/// store were cut) until it is turned off; while [`Wrapped::lose_claim_replies`] has
/// replies left to lose, a `claim` reaches the store, which applies it, and its answer
/// is replaced by [`Error::Unavailable`] (a reply lost on the way back).
#[derive(Debug)]
pub struct Wrapped {
    inner: Arc<dyn Store>,
    calls: AtomicU64,
    stalled: AtomicBool,
    lose_claims: AtomicU64,
    lose_completes: AtomicU64,
}

impl Wrapped {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Wrapped {
            inner,
            calls: AtomicU64::new(0),
            stalled: AtomicBool::new(false),
            lose_claims: AtomicU64::new(0),
            lose_completes: AtomicU64::new(0),
        }
    }

    /// Loses the replies of the next `n` claims: the store applies each, and the
    /// caller gets [`Error::Unavailable`] instead of the items.
    pub fn lose_claim_replies(&self, n: u64) {
        self.lose_claims.store(n, Ordering::SeqCst);
    }

    /// Loses the replies of the next `n` completes, as
    /// [`Wrapped::lose_claim_replies`] does for claims.
    pub fn lose_complete_replies(&self, n: u64) {
        self.lose_completes.store(n, Ordering::SeqCst);
    }

    /// True (once per reply to lose) when this claim's reply is to be lost.
    fn lose_claim(&self) -> bool {
        take_one(&self.lose_claims)
    }
}

/// Takes one from a count of replies to lose; false when none is left.
fn take_one(count: &AtomicU64) -> bool {
    count
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

impl Wrapped {
    fn lost_reply(&self, op: &str) -> Error {
        Error::unavailable(
            self.inner.backend(),
            format!("the {op}'s reply was lost (injected)"),
        )
    }

    /// How many store calls went through so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Turns renewal stalling on or off.
    pub fn stall_renewals(&self, on: bool) {
        self.stalled.store(on, Ordering::SeqCst);
    }

    fn count(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl LeaseStore for Wrapped {
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
        self.count();
        self.inner.acquire(key, holder, ttl).await
    }
    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        while self.stalled.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.count();
        self.inner.renew(lease).await
    }
    async fn renew_many(&self, leases: &[Lease]) -> Result<Vec<Result<Lease>>> {
        while self.stalled.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.count();
        self.inner.renew_many(leases).await
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.count();
        self.inner.release(lease).await
    }
    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        self.count();
        self.inner.inspect(key).await
    }
    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        self.count();
        self.inner.expired(space, limit).await
    }
    async fn reap(&self, key: &Key, token: FencingToken) -> Result<bool> {
        self.count();
        self.inner.reap(key, token).await
    }
    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> Result<Vec<Result<bool>>> {
        self.count();
        self.inner.reap_many(expired).await
    }
    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        self.count();
        self.inner.dead_tokens(limit).await
    }
    async fn members(
        &self,
        space: &Space,
        after: Option<&Key>,
        limit: usize,
    ) -> Result<Vec<LeaseInfo>> {
        self.count();
        self.inner.members(space, after, limit).await
    }
    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        self.count();
        self.inner.deaths(before, limit).await
    }
    async fn store_time(&self) -> Result<StoreTime> {
        self.count();
        self.inner.store_time().await
    }
    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        self.count();
        self.inner.next_expiry(space).await
    }
    fn wakeups(&self) -> Option<watch::Receiver<u64>> {
        self.inner.wakeups()
    }
}

#[async_trait]
impl ItemStore for Wrapped {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        self.count();
        self.inner.enqueue(payload, options).await
    }
    async fn claim_request(
        &self,
        lease: &Lease,
        n: usize,
        request: RequestId,
    ) -> Result<Vec<Item>> {
        self.count();
        let items = self.inner.claim_request(lease, n, request).await?;
        if self.lose_claim() {
            return Err(self.lost_reply("claim"));
        }
        Ok(items)
    }
    async fn complete(&self, lease: &Lease, id: ItemId) -> Result<()> {
        self.count();
        self.inner.complete(lease, id).await?;
        if take_one(&self.lose_completes) {
            return Err(self.lost_reply("complete"));
        }
        Ok(())
    }
    async fn fail(&self, lease: &Lease, id: ItemId, retry: bool) -> Result<ItemState> {
        self.count();
        self.inner.fail(lease, id, retry).await
    }
    async fn requeue_orphans(&self, token: FencingToken) -> Result<Requeued> {
        self.count();
        self.inner.requeue_orphans(token).await
    }
    async fn requeue_orphans_many(&self, tokens: &[FencingToken]) -> Result<Vec<Result<Requeued>>> {
        self.count();
        self.inner.requeue_orphans_many(tokens).await
    }
    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        self.count();
        self.inner.item(id).await
    }
    async fn item_counts(&self) -> Result<ItemCounts> {
        self.count();
        self.inner.item_counts().await
    }
    async fn dead_letters(&self, limit: usize) -> Result<Vec<ItemRecord>> {
        self.count();
        self.inner.dead_letters(limit).await
    }
    async fn items(
        &self,
        state: ItemStateKind,
        after: Option<ItemId>,
        limit: usize,
    ) -> Result<Vec<ItemRecord>> {
        self.count();
        self.inner.items(state, after, limit).await
    }
    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        self.count();
        self.inner.retry_dead_letter(id).await
    }
    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        self.count();
        self.inner.retry_dead_letters(limit).await
    }
}
