//! The in-memory store: the reference model of the contract.
//!
//! Every backend is compared with this model by the conformance property test, so it
//! is written for obviousness, not speed: one mutex over plain ordered maps. It still
//! keeps an expiry index, so `expired` costs O(log n + k) like the real backends.
//!
//! Its clock is injectable ([`MemoryServer::with_clock`]): [`TokioClock`] by default
//! (which follows tokio's paused time in tests), or a [`ManualClock`](crate::ManualClock)
//! moved by hand.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::clock::{Clock, TokioClock};
use crate::error::{BatchResult, JoinAsk, LostCause, Result};
use crate::item::{
    EnqueueOptions, Item, ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind, ItemTimes,
    Outcome, QueueCounts, RequestId, Sweep,
};
use crate::lease::{
    Acquire, DeadToken, DeathCause, DeathRecord, ExpiredLease, Issuer, Lease, LeaseInfo,
};
use crate::queue_name::QueueName;
use crate::store::{
    check_batch, Capabilities, ItemStore, LeaseStore, OperatorStore, Page, StoreInfo,
};
use crate::sync::lock;
use crate::types::{FencingToken, Key, Namespace, Space, StoreTime};

mod state;
use state::{requeue_locked, ItemRec, LeaseRec, NsState};

const BACKEND: &str = "memory";

/// A shared in-memory "server": the namespaces that [`MemoryStore`] handles see.
/// Handles made from the same server (or its clones) on the same namespace share state
/// and accept each other's leases; different namespaces, or the same namespace of
/// another server, never see each other and refuse each other's leases (each server
/// draws a random store identity for its [`Issuer`]s).
#[derive(Debug, Clone)]
pub struct MemoryServer {
    /// The random store identity of this server's issuers.
    id: u64,
    clock: Arc<dyn Clock>,
    spaces: Arc<Mutex<HashMap<Namespace, Arc<Mutex<NsState>>>>>,
    caps: Capabilities,
}

impl Default for MemoryServer {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryServer {
    /// A server on tokio's monotonic clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(TokioClock::new()))
    }

    /// A server on the given clock (a [`ManualClock`](crate::ManualClock) in tests).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        MemoryServer {
            id: fastrand::u64(..),
            clock,
            spaces: Arc::default(),
            caps: Capabilities::default()
                .sessions(true)
                .delays(true)
                .error_text(true)
                .key_retention(Some(crate::item::DEFAULT_KEY_RETENTION))
                .dead_letter_retention(Some(crate::item::DEFAULT_DEAD_LETTER_RETENTION))
                .queues(true)
                .item_times(true),
        }
    }

    /// The same server declaring other capabilities (to test the state machines
    /// against a store with, say, a larger minimum ttl).
    pub fn with_capabilities(mut self, caps: Capabilities) -> Self {
        self.caps = caps;
        self
    }

    /// A store handle on `namespace`.
    pub fn store(&self, namespace: &Namespace) -> MemoryStore {
        let state = lock(&self.spaces)
            .entry(namespace.clone())
            .or_insert_with(|| Arc::new(Mutex::new(NsState::new())))
            .clone();
        MemoryStore {
            clock: self.clock.clone(),
            state,
            info: StoreInfo {
                backend: BACKEND,
                caps: self.caps,
                issuer: Issuer::new(namespace.clone(), self.id),
            },
        }
    }
}

/// A store handle on one namespace of a [`MemoryServer`]: the reference model.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    clock: Arc<dyn Clock>,
    state: Arc<Mutex<NsState>>,
    info: StoreInfo,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A store on its own server, namespace `default`, on tokio's clock.
    pub fn new() -> Self {
        let ns = Namespace::new("default").unwrap_or_else(|_| unreachable!("valid literal"));
        MemoryServer::new().store(&ns)
    }

    /// The namespace this handle is scoped to.
    pub fn namespace(&self) -> &Namespace {
        self.info.issuer.namespace()
    }

    /// `record` as this store answers it: without times unless it declares
    /// [`Capabilities::item_times`].
    fn shown(&self, record: ItemRecord) -> ItemRecord {
        match self.info.caps.item_times {
            true => record,
            false => record.with_times(ItemTimes::default()),
        }
    }

    fn now(&self) -> Duration {
        self.clock.now()
    }

    /// The due time, by the model's clock, of an item held back `delay` from now
    /// (`None`: due at once).
    fn due(&self, delay: Duration) -> Option<Duration> {
        (!delay.is_zero()).then(|| self.now() + delay)
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    fn info(&self) -> &StoreInfo {
        &self.info
    }

    async fn acquire_many(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        let now = self.now();
        let mut st = lock(&self.state);
        let retention = self.info.caps.death_retention;
        let issuer = &self.info.issuer;
        let mut take = |ask: &Acquire| {
            let token = st.take(&ask.key, now, retention)?;
            let expires_at = now + ask.ttl.duration();
            st.put(
                &ask.key,
                LeaseRec::new(&ask.holder, token, ask.ttl, expires_at, None),
            );
            let (key, holder) = (ask.key.clone(), ask.holder.clone());
            Ok(Lease::granted(issuer, key, holder, token, ask.ttl))
        };
        Ok(asks.iter().map(&mut take).collect())
    }

    async fn join_session_many(&self, session: &Lease, asks: &[JoinAsk]) -> BatchResult<Lease> {
        check_batch(self.info.caps, "joins", asks.len())?;
        let now = self.now();
        let mut st = lock(&self.state);
        // One step: the session is judged once, and every entry joins under it.
        let until = match st.check_current(session, now) {
            Ok(rec) if rec.session.is_none() => rec.expires_at,
            _ => {
                let lost = |_| match st.check_current(session, now) {
                    Err(e) => Err(e),
                    Ok(_) => Err(session.lost(LostCause::Superseded)),
                };
                return Ok(asks.iter().map(lost).collect());
            }
        };
        let issuer = &self.info.issuer;
        let ridden = Some((session.key.clone(), session.token));
        let mut out = Vec::with_capacity(asks.len());
        for (key, holder) in asks {
            let token = match st.take(key, now, self.info.caps.death_retention) {
                Ok(token) => token,
                Err(e) => {
                    out.push(Err(e));
                    continue;
                }
            };
            let rec = LeaseRec::new(holder, token, session.ttl, Duration::ZERO, ridden.clone());
            st.put(key, rec);
            let mut lease = Lease::granted(issuer, key.clone(), holder.clone(), token, session.ttl);
            lease.expires_in = until.saturating_sub(now);
            out.push(Ok(lease));
        }
        Ok(out)
    }

    async fn renew_many(&self, leases: &[Lease]) -> BatchResult<Lease> {
        let now = self.now();
        let mut st = lock(&self.state);
        Ok(leases
            .iter()
            .map(|lease| self.renew_locked(&mut st, lease, now))
            .collect())
    }

    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
        let now = self.now();
        let mut st = lock(&self.state);
        Ok(expired
            .iter()
            .map(|(key, token)| Ok(self.reap_locked(&mut st, key, *token, now)))
            .collect())
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let now = self.now();
        let mut st = lock(&self.state);
        match st.leases.get(&lease.key) {
            Some(rec) if rec.token == lease.token => {
                st.declare_dead(
                    &lease.key,
                    DeathCause::Released,
                    now,
                    self.info.caps.death_retention,
                );
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        let now = self.now();
        let st = lock(&self.state);
        Ok(st.leases.get(key).map(|rec| st.info(key, rec, now)))
    }

    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        let now = self.now();
        let st = lock(&self.state);
        let Some(index) = st.expiry.get(space) else {
            return Ok(Vec::new());
        };
        Ok(index
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(limit)
            .filter_map(|(_, name)| {
                let key = Key::new(space.clone(), name.clone());
                st.leases.get(&key).map(|rec| ExpiredLease {
                    holder: rec.holder.clone(),
                    token: rec.token,
                    key,
                })
            })
            .collect())
    }

    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        let now = self.now();
        let st = lock(&self.state);
        Ok(st
            .expiry
            .get(space)
            .and_then(|set| set.first())
            .map(|(at, _)| at.saturating_sub(now)))
    }

    fn wakeups(&self) -> Option<watch::Receiver<u64>> {
        Some(lock(&self.state).wake.subscribe())
    }
}

#[async_trait]
impl ItemStore for MemoryStore {
    fn pending(&self) -> Option<watch::Receiver<u64>> {
        Some(lock(&self.state).pending_wake.subscribe())
    }

    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        let due = self.due(options.delay);
        let now = self.now();
        let mut st = lock(&self.state);
        st.forget_keys(now, self.info.caps.key_retention);
        if let Some(id) = options.key.and_then(|k| st.keys.get(&k)) {
            return Ok(*id);
        }
        st.next_item += 1;
        let id = ItemId(st.next_item);
        let mut record = ItemRecord::pending(id, payload, options.max_attempts)
            .with_times(ItemTimes::enqueued(StoreTime::from_epoch(now)));
        record.item.queue = options.queue;
        st.items.insert(
            id,
            ItemRec {
                record,
                claimed_by: None,
                ready_at: now,
            },
        );
        st.make_pending(id, due, now);
        if let Some(key) = options.key {
            st.remember_key(key, id, now);
        }
        Ok(id)
    }

    async fn enqueue_many(
        &self,
        payloads: &[Vec<u8>],
        options: EnqueueOptions,
    ) -> Result<Vec<ItemId>> {
        // All under one lock: the batch is added whole.
        let due = self.due(options.delay);
        let now = self.now();
        let mut st = lock(&self.state);
        let mut ids = Vec::with_capacity(payloads.len());
        for payload in payloads {
            st.next_item += 1;
            let id = ItemId(st.next_item);
            let mut record = ItemRecord::pending(id, payload, options.max_attempts)
                .with_times(ItemTimes::enqueued(StoreTime::from_epoch(now)));
            record.item.queue = options.queue;
            let rec = ItemRec {
                record,
                claimed_by: None,
                ready_at: now,
            };
            st.items.insert(id, rec);
            st.make_pending(id, due, now);
            ids.push(id);
        }
        Ok(ids)
    }

    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        self.claim_from(lease, &[QueueName::DEFAULT], n, req).await
    }

    async fn claim_from(
        &self,
        lease: &Lease,
        queues: &[QueueName],
        n: usize,
        req: RequestId,
    ) -> Result<Vec<Item>> {
        let now = self.now();
        let mut st = lock(&self.state);
        let last_claim = st.check_current(lease, now)?.last_claim;
        // A repeat of this request: answer what it assigned, assign nothing new.
        let earlier: Vec<Item> = st
            .owned
            .get(&lease.token)
            .into_iter()
            .flatten()
            .filter_map(|id| st.items.get(id))
            .filter(|rec| rec.claimed_by == Some(req))
            .map(|rec| rec.record.item.clone())
            .collect();
        if !earlier.is_empty() {
            return Ok(earlier);
        }
        // A late or repeated copy, or an older id after a newer one: nothing.
        if last_claim.is_some_and(|last| req <= last) {
            return Ok(Vec::new());
        }
        if let Some(rec) = st.leases.get_mut(&lease.key) {
            rec.last_claim = Some(req);
        }
        st.promote_due(now);
        // The queues in the order given, each lowest id first.
        let ids: Vec<(QueueName, ItemId)> = queues
            .iter()
            .flat_map(|q| {
                let first = (*q, ItemId(0));
                st.pending.range(first..).take_while(move |(at, _)| at == q)
            })
            .take(n)
            .copied()
            .collect();
        let mut out = Vec::with_capacity(ids.len());
        for key in ids {
            let id = key.1;
            st.pending.remove(&key);
            st.owned.entry(lease.token).or_default().insert(id);
            if let Some(rec) = st.items.get_mut(&id) {
                rec.claimed_by = Some(req);
                rec.record.times.attempted = Some(StoreTime::from_epoch(now));
                let waited = now.saturating_sub(rec.ready_at);
                out.push(rec.record.claim(lease.token).with_waited(Some(waited)));
            }
        }
        Ok(out)
    }

    async fn finish(
        &self,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
    ) -> Result<Option<ItemState>> {
        self.finish_with_error(lease, id, outcome, "").await
    }

    async fn finish_with_error(
        &self,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
        error: &str,
    ) -> Result<Option<ItemState>> {
        let due = self.due(outcome.delay());
        let mut st = lock(&self.state);
        st.owned_by(id, lease.token)?;
        let now = self.now();
        let state = outcome
            .retry()
            .map(|retry| st.hand_back(id, retry, due, now));
        if state == Some(ItemState::DeadLettered) {
            st.forget_dead_letters(now, self.info.caps.dead_letter_retention);
        }
        match state {
            None => st.complete(id, lease.token),
            Some(_) if self.info.caps.error_text && !error.is_empty() => {
                if let Some(rec) = st.items.get_mut(&id) {
                    rec.record.last_error = Some(error.to_owned());
                }
            }
            Some(_) => {}
        }
        Ok(state)
    }

    async fn sweep_many(&self, tokens: &[FencingToken]) -> BatchResult<Sweep> {
        let now = self.now();
        let mut st = lock(&self.state);
        let swept: Vec<Sweep> = tokens
            .iter()
            .map(|token| requeue_locked(&mut st, *token, self.info.caps.max_batch, now))
            .collect();
        if swept.iter().any(|s| !s.dead_lettered.is_empty()) {
            st.forget_dead_letters(now, self.info.caps.dead_letter_retention);
        }
        Ok(swept.into_iter().map(Ok).collect())
    }

    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        let st = lock(&self.state);
        Ok(st
            .dead
            .iter()
            .take(limit)
            .map(|(token, key)| DeadToken {
                key: key.clone(),
                token: *token,
            })
            .collect())
    }

    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        let st = lock(&self.state);
        Ok(st.record(id).map(|r| self.shown(r)))
    }

    async fn next_due(&self) -> Result<Option<Duration>> {
        let now = self.now();
        let mut st = lock(&self.state);
        st.promote_due(now);
        Ok(st.scheduled.first().map(|(at, _)| at.saturating_sub(now)))
    }
}

#[async_trait]
impl OperatorStore for MemoryStore {
    async fn store_time(&self) -> Result<StoreTime> {
        Ok(StoreTime::from_epoch(self.now()))
    }

    async fn leases(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let Page { after, limit } = page;
        let now = self.now();
        let st = lock(&self.state);
        let Some(names) = st.names.get(space) else {
            return Ok(Vec::new());
        };
        let from = match after {
            Some(k) => Bound::Excluded(k.name().clone()),
            None => Bound::Unbounded,
        };
        Ok(names
            .range((from, Bound::Unbounded))
            .take(limit)
            .filter_map(|name| {
                let key = Key::new(space.clone(), name.clone());
                st.leases.get(&key).map(|rec| st.info(&key, rec, now))
            })
            .collect())
    }

    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        let st = lock(&self.state);
        let until = before.map_or(Bound::Unbounded, Bound::Excluded);
        Ok(st
            .deaths
            .range((Bound::Unbounded, until))
            .rev()
            .take(limit)
            .map(|(_, rec)| rec.clone())
            .collect())
    }

    async fn item_counts(&self) -> Result<ItemCounts> {
        let st = lock(&self.state);
        Ok(ItemCounts {
            pending: (st.pending.len() + st.scheduled.len()) as u64,
            owned: st.owned.values().map(|s| s.len() as u64).sum(),
            dead_lettered: st.dead_letters.len() as u64,
        })
    }

    async fn queue_counts(&self) -> Result<Vec<QueueCounts>> {
        let st = lock(&self.state);
        // The model scans: it is written for obviousness.
        let mut by_queue: BTreeMap<QueueName, Vec<ItemStateKind>> = BTreeMap::new();
        for rec in st.items.values() {
            let queue = rec.record.item.queue;
            by_queue
                .entry(queue)
                .or_default()
                .push(rec.record.state.kind());
        }
        Ok(by_queue
            .into_iter()
            .map(|(queue, states)| QueueCounts::new(queue, states.into_iter().collect()))
            .collect())
    }

    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        let Page { after, limit } = page;
        let st = lock(&self.state);
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let ids: Vec<ItemId> = match state {
            // Due and scheduled alike; the model scans: it is written for obviousness.
            ItemStateKind::Pending => st
                .items
                .range((from, Bound::Unbounded))
                .filter(|(_, rec)| rec.record.state == ItemState::Pending)
                .take(limit)
                .map(|(id, _)| *id)
                .collect(),
            ItemStateKind::DeadLettered => st
                .dead_letters
                .range((from, Bound::Unbounded))
                .take(limit)
                .map(|(id, _)| *id)
                .collect(),
            // The model scans: it is written for obviousness.
            ItemStateKind::Owned => st
                .items
                .range((from, Bound::Unbounded))
                .filter(|(_, rec)| rec.record.state.kind() == ItemStateKind::Owned)
                .take(limit)
                .map(|(id, _)| *id)
                .collect(),
        };
        Ok(ids
            .into_iter()
            .filter_map(|id| st.record(id))
            .map(|r| self.shown(r))
            .collect())
    }

    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        let now = self.now();
        lock(&self.state).revive(id, now)
    }

    async fn cancel(&self, id: ItemId) -> Result<Option<ItemState>> {
        Ok(lock(&self.state).cancel(id))
    }

    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        let now = self.now();
        let mut st = lock(&self.state);
        let ids: Vec<ItemId> = st.dead_letters.keys().take(limit).copied().collect();
        for id in &ids {
            st.revive(*id, now)?;
        }
        Ok(ids)
    }
}

/// The batch operations' shared steps, under the namespace's lock: one atomic step
/// for a whole batch.
impl MemoryStore {
    fn renew_locked(&self, st: &mut NsState, lease: &Lease, now: Duration) -> Result<Lease> {
        let rec = st.check_current(lease, now)?;
        if rec.session.is_some() {
            // A riding member renews nothing: it lives as long as its session does.
            let mut renewed = lease.renewed();
            renewed.expires_in = st.expiry_of(rec).saturating_sub(now);
            return Ok(renewed);
        }
        let old = rec.expires_at;
        let ttl = lease.ttl;
        let expires_at = now + ttl.duration();
        st.unindex(&lease.key, old);
        st.index(&lease.key, expires_at);
        if let Some(rec) = st.leases.get_mut(&lease.key) {
            rec.expires_at = expires_at;
            rec.ttl = ttl;
        }
        Ok(lease.renewed())
    }

    fn reap_locked(&self, st: &mut NsState, key: &Key, token: FencingToken, now: Duration) -> bool {
        match st.leases.get(key) {
            Some(rec) if rec.token == token && now >= st.expiry_of(rec) => {
                st.declare_dead(key, DeathCause::Reaped, now, self.info.caps.death_retention);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod key_retention_tests {
    use super::*;
    use crate::clock::ManualClock;

    /// A key is kept for the store's retention by its clock, then forgotten: a repeat
    /// within it answers the first id, a repeat after it adds a new item; every key
    /// forgotten is gone from the index too.
    #[tokio::test]
    async fn a_key_is_kept_for_the_retention_then_forgotten() {
        let clock = ManualClock::new();
        let caps = Capabilities::default().key_retention(Some(Duration::from_secs(60)));
        let store = MemoryServer::with_clock(Arc::new(clock.clone()))
            .with_capabilities(caps)
            .store(&Namespace::new("keys").unwrap());
        let (a, b) = (RequestId::random(), RequestId::random());
        let first = store.enqueue(b"x", EnqueueOptions::keyed(a)).await.unwrap();
        clock.advance(Duration::from_secs(30));
        store.enqueue(b"y", EnqueueOptions::keyed(b)).await.unwrap();
        clock.advance(Duration::from_secs(29));
        let again = store.enqueue(b"x", EnqueueOptions::keyed(a)).await.unwrap();
        assert_eq!(again, first, "within the retention");
        clock.advance(Duration::from_secs(1));
        let later = store.enqueue(b"x", EnqueueOptions::keyed(a)).await.unwrap();
        assert_ne!(later, first, "after the retention: a new item");
        let st = lock(&store.state);
        assert_eq!(
            st.keys.len(),
            st.key_times.len(),
            "the index and the keys agree"
        );
        assert_eq!(
            st.keys.len(),
            2,
            "b and a's new record: a's first is forgotten"
        );
    }
}

#[cfg(test)]
mod dead_letter_retention_tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::types::{Name, Ttl};
    use crate::{Store, DEAD_LETTER_TRIM};

    /// Expired dead letters go at most [`DEAD_LETTER_TRIM`] per dead-lettering call,
    /// the oldest first, and both indexes agree after each.
    #[tokio::test]
    async fn a_dead_lettering_removes_at_most_a_trim_of_expired_ones() {
        let clock = ManualClock::new();
        let caps = Capabilities::default()
            .dead_letter_retention(Some(Duration::from_secs(60)))
            .item_times(true);
        let store = MemoryServer::with_clock(Arc::new(clock.clone()))
            .with_capabilities(caps)
            .store(&Namespace::new("dead").unwrap());
        let holder = crate::HolderId::new("w").unwrap();
        let key = Key::new(Space::new("m").unwrap(), Name::new("w").unwrap());
        let lease = store
            .acquire(&key, &holder, Ttl::from_secs(3600).unwrap())
            .await
            .unwrap();
        let once = EnqueueOptions::default().max_attempts(1);
        let fail_one = async |payload: &[u8]| {
            let id = store.enqueue(payload, once).await.unwrap();
            let got = store.claim(&lease, 1).await.unwrap();
            assert_eq!(got[0].id, id);
            let state = store.finish(&lease, id, Outcome::DeadLetter).await;
            assert_eq!(state.unwrap(), Some(ItemState::DeadLettered));
            id
        };
        let mut old = Vec::new();
        for _ in 0..DEAD_LETTER_TRIM + 50 {
            old.push(fail_one(b"old").await);
        }
        clock.advance(Duration::from_secs(60));
        let first = fail_one(b"new").await;
        let kept = |st: &NsState| {
            assert_eq!(st.dead_letters.len(), st.dead_times.len());
            st.dead_letters.len()
        };
        assert_eq!(kept(&lock(&store.state)), 50 + 1, "a trim of the oldest");
        assert!(lock(&store.state)
            .items
            .contains_key(&old[DEAD_LETTER_TRIM]));
        assert!(!lock(&store.state)
            .items
            .contains_key(&old[DEAD_LETTER_TRIM - 1]));
        fail_one(b"new").await;
        assert_eq!(kept(&lock(&store.state)), 2, "the rest of the expired");
        assert!(lock(&store.state).items.contains_key(&first));
    }
}
