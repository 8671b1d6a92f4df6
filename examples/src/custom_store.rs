//! A liveness store kept in process memory: the shape every store has, small
//! enough to read in one sitting. `docs/custom-store.md` builds it block by block.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound::{Excluded, Included, Unbounded};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use liveness_core::prelude::*;
use liveness_core::sync::lock;
use liveness_core::ItemState::{Owned, Pending};

/// A lease on its key: the `Lease` as last granted or renewed, its expiry by the
/// store clock, and the greatest claim request admitted under its token.
#[derive(Debug)]
struct Held {
    lease: Lease,
    expires_at: Duration,
    last_claim: Option<RequestId>,
}

/// An item as `item` reports it, and the claim request that gave it to its owner.
#[derive(Debug)]
struct Queued {
    record: ItemRecord,
    req: Option<RequestId>,
}

/// The whole state of one namespace, behind one lock.
#[derive(Debug, Default)]
struct Tables {
    last_token: u64,
    last_item: u64,
    last_death: u64,
    /// Keys sort by space, then name: `leases` reads a range of this map.
    leases: BTreeMap<Key, Held>,
    /// The expiry index, (space, expiry, key): `expired` reads only its head.
    by_expiry: BTreeSet<(Space, Duration, Key)>,
    /// The dead set: token → its key and the seq of its death record.
    dead: BTreeMap<FencingToken, (Key, u64)>,
    /// The death history by seq: the newest `KEEP_DEATHS` records.
    deaths: BTreeMap<u64, DeathRecord>,
    items: BTreeMap<ItemId, Queued>,
    /// Enqueue idempotency keys and the ids they answered, kept for good.
    enqueue_keys: HashMap<RequestId, ItemId>,
}

/// The death records kept: few, so that the conformance suite fills the history.
const KEEP_DEATHS: usize = 100;

/// A store in process memory: one namespace per value.
#[derive(Debug)]
pub struct MapStore {
    info: StoreInfo,
    epoch: Instant,
    tables: Mutex<Tables>,
    /// Leases read in expiry order ([`MapStore::rows_visited`]).
    visited: AtomicU64,
}

impl MapStore {
    /// An empty store on `namespace`, its clock starting now.
    pub fn new(namespace: Namespace) -> MapStore {
        let caps = Capabilities::default().death_retention(KEEP_DEATHS);
        MapStore {
            info: StoreInfo::new("map", caps, Issuer::random(namespace)),
            epoch: Instant::now(),
            tables: Mutex::default(),
            visited: AtomicU64::default(),
        }
    }

    /// How many leases `expired` and `next_expiry` have read so far: the work of a
    /// checker round, counted deterministically for the cost check.
    pub fn rows_visited(&self) -> u64 {
        self.visited.load(Relaxed)
    }

    /// One atomic step: the lock, and the store clock read once, under it.
    fn step(&self) -> (MutexGuard<'_, Tables>, Duration) {
        (lock(&self.tables), self.epoch.elapsed())
    }

    /// The first `n` leases of `space` expiring by `by`: reads and counts the index head.
    fn due<'t>(&self, t: &'t Tables, space: &Space, by: Duration, n: usize) -> Vec<&'t Held> {
        let from = entry(&Key::first_in(space), Duration::ZERO);
        let index = t.by_expiry.range(from..);
        let head = index.take_while(|(s, at, _)| s == space && *at <= by);
        let due: Vec<_> = head.take(n).filter_map(|e| t.leases.get(&e.2)).collect();
        self.visited.fetch_add(due.len() as u64, Relaxed);
        due
    }
}

/// The expiry index's entry for the lease on `key` expiring at `at`.
fn entry(key: &Key, at: Duration) -> (Space, Duration, Key) {
    (key.space().clone(), at, key.clone())
}

impl Tables {
    /// Puts `lease` on its key until `now` + its ttl, with `last_claim` as its claim
    /// mark, in place of the key's row and index entry (a renewal's).
    fn put(&mut self, lease: Lease, now: Duration, last_claim: Option<RequestId>) -> Lease {
        let (key, expires_at) = (lease.key.clone(), now + lease.ttl.duration());
        let held = Held {
            lease: lease.clone(),
            expires_at,
            last_claim,
        };
        if let Some(old) = self.leases.insert(key.clone(), held) {
            self.by_expiry.remove(&entry(&key, old.expires_at));
        }
        self.by_expiry.insert(entry(&key, expires_at));
        lease
    }

    /// Declares the lease on `key` dead, if any: the row goes, its token joins the
    /// dead set and its death is recorded, in this one step (dropping the oldest
    /// record beyond `KEEP_DEATHS`). True iff a lease ended.
    fn declare_dead(&mut self, key: &Key, cause: DeathCause, now: Duration) -> bool {
        let Some(held) = self.leases.remove(key) else {
            return false;
        };
        self.by_expiry.remove(&entry(key, held.expires_at));
        self.last_death += 1;
        let (seq, lease, at) = (self.last_death, held.lease, StoreTime::from_epoch(now));
        self.dead.insert(lease.token, (key.clone(), seq));
        let record = DeathRecord::new(seq, lease.key, lease.holder, lease.token, at, cause, None);
        self.deaths.insert(seq, record);
        if self.deaths.len() > KEEP_DEATHS {
            self.deaths.pop_first();
        }
        true
    }

    /// The row of `lease` if it is current and live, else why it is lost.
    fn current(&mut self, lease: &Lease, now: Duration) -> Result<&mut Held> {
        match self.leases.get_mut(&lease.key) {
            None => Err(lease.lost(LostCause::Released)),
            Some(held) if held.lease.token != lease.token => Err(lease.lost(LostCause::Superseded)),
            Some(held) if now >= held.expires_at => Err(lease.lost(LostCause::Expired)),
            Some(held) => Ok(held),
        }
    }

    /// The item `id` if `lease`'s token owns it, else `Fenced`.
    fn owned(&mut self, lease: &Lease, id: ItemId) -> Result<&mut ItemRecord> {
        let row = self.items.get_mut(&id).map(|row| &mut row.record);
        let row = row.filter(|record| record.state == Owned(lease.token));
        row.ok_or_else(|| lease.fenced(id))
    }
}

/// What `inspect` and `leases` say of `held`: live while the store's now is before
/// its expiry, expired from that instant on.
fn info(held: &Held, now: Duration) -> LeaseInfo {
    LeaseInfo::new(&held.lease, held.expires_at.saturating_sub(now))
}

#[async_trait]
impl LeaseStore for MapStore {
    fn info(&self) -> &StoreInfo {
        &self.info
    }

    async fn acquire_many(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        let (mut t, now) = self.step();
        let mut take = |ask: &Acquire| {
            let key = &ask.key;
            if let Some(held) = t.leases.get(key).filter(|held| now < held.expires_at) {
                return Err(held.lease.held());
            }
            // An expired lease still on the key is reaped by this same step.
            t.declare_dead(key, DeathCause::Superseded, now);
            t.last_token += 1;
            let (issuer, token) = (&self.info.issuer, FencingToken(t.last_token));
            let lease = Lease::granted(issuer, key.clone(), ask.holder.clone(), token, ask.ttl);
            Ok(t.put(lease, now, None))
        };
        Ok(asks.iter().map(&mut take).collect())
    }

    async fn renew_many(&self, leases: &[Lease]) -> BatchResult<Lease> {
        let (mut t, now) = self.step();
        let mut renew = |lease: &Lease| {
            let mark = t.current(lease, now)?.last_claim;
            Ok(t.put(lease.renewed(), now, mark))
        };
        Ok(leases.iter().map(&mut renew).collect())
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let (mut t, now) = self.step();
        let held = t.leases.get(&lease.key);
        let current = held.is_some_and(|held| held.lease.token == lease.token);
        Ok(current && t.declare_dead(&lease.key, DeathCause::Released, now))
    }

    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        let (t, now) = self.step();
        Ok(t.leases.get(key).map(|held| info(held, now)))
    }

    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        let (t, now) = self.step();
        let due = self.due(&t, space, now, limit).into_iter();
        Ok(due.map(|held| ExpiredLease::from(&held.lease)).collect())
    }

    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
        let (mut t, now) = self.step();
        let mut reap = |(key, token): &(Key, FencingToken)| {
            let held = t.leases.get(key);
            let due = held.is_some_and(|held| held.lease.token == *token && now >= held.expires_at);
            Ok(due && t.declare_dead(key, DeathCause::Reaped, now))
        };
        Ok(expired.iter().map(&mut reap).collect())
    }

    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        let (t, now) = self.step();
        let earliest = self.due(&t, space, Duration::MAX, 1);
        // Zero while the earliest lease is expired and not yet reaped.
        Ok(earliest.first().map(|h| h.expires_at.saturating_sub(now)))
    }
}

#[async_trait]
impl OperatorStore for MapStore {
    async fn leases(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let (t, now) = self.step();
        let first = Included(Key::first_in(space));
        let from = page.after.map_or(first, |key| Excluded(key.clone()));
        let rows = t.leases.range((from, Unbounded)).take(page.limit);
        let rows = rows.take_while(|(key, _)| key.space() == space);
        Ok(rows.map(|(_, held)| info(held, now)).collect())
    }

    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        let (t, _) = self.step();
        let newest_first = t.deaths.range(..before.unwrap_or(u64::MAX)).rev();
        Ok(newest_first.take(limit).map(|(_, d)| d.clone()).collect())
    }

    async fn store_time(&self) -> Result<StoreTime> {
        Ok(StoreTime::from_epoch(self.epoch.elapsed()))
    }

    async fn item_counts(&self) -> Result<ItemCounts> {
        let (t, _) = self.step();
        let states = t.items.values().map(|row| row.record.state.kind());
        Ok(states.collect())
    }

    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        let (t, _) = self.step();
        let from = page.after.map_or(Unbounded, Excluded);
        let rows = t.items.range((from, Unbounded)).map(|(_, row)| &row.record);
        let rows = rows.filter(|record| record.state.kind() == state);
        Ok(rows.take(page.limit).cloned().collect())
    }

    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        let (mut t, _) = self.step();
        // Only the store knows its items: refusing an id is its own check.
        let row = t.items.get_mut(&id);
        let row = row.ok_or_else(|| Error::invalid("item", InputProblem::NoSuchItem))?;
        row.record.revive()
    }

    async fn cancel(&self, id: ItemId) -> Result<Option<ItemState>> {
        let (mut t, _) = self.step();
        let state = t.items.get(&id).map(|row| row.record.state);
        // An owned item is left to its owner; a pending or dead-lettered one goes.
        if matches!(state, Some(ItemState::Pending | ItemState::DeadLettered)) {
            t.items.remove(&id);
        }
        Ok(state)
    }
}

#[async_trait]
impl ItemStore for MapStore {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        let (mut t, _) = self.step();
        // A key used before answers the id it first answered; else a new item.
        let new = ItemId(t.last_item + 1);
        let id = options
            .key
            .map_or(new, |key| *t.enqueue_keys.entry(key).or_insert(new));
        if id == new {
            t.last_item += 1;
            let record = ItemRecord::pending(id, payload, options.max_attempts);
            t.items.insert(id, Queued { record, req: None });
        }
        Ok(id)
    }

    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        let (mut t, now) = self.step();
        let mark = t.current(lease, now)?.last_claim;
        // 1. A repeat of `req`: the items it assigned, nothing new.
        let mine = Owned(lease.token);
        let rows = t.items.values();
        let rows = rows.filter(|row| row.record.state == mine && row.req == Some(req));
        let earlier: Vec<Item> = rows.map(|row| row.record.item.clone()).collect();
        // 2. Not above the high-water mark: a late copy, or an older id. Nothing.
        if !earlier.is_empty() || mark.is_some_and(|last| req <= last) {
            return Ok(earlier);
        }
        // 3. Admitted: raise the mark, assign pending items, lowest id first.
        t.current(lease, now)?.last_claim = Some(req);
        let rows = t.items.values_mut();
        let rows = rows.filter(|row| row.record.state == Pending);
        let mut claimed = Vec::new();
        for row in rows.take(n) {
            row.req = Some(req);
            claimed.push(row.record.claim(lease.token));
        }
        Ok(claimed)
    }

    async fn finish(&self, lease: &Lease, id: ItemId, how: Outcome) -> Result<Option<ItemState>> {
        let (mut t, _) = self.step();
        let state = how.apply(t.owned(lease, id)?);
        if state.is_none() {
            t.items.remove(&id);
        }
        Ok(state)
    }

    async fn sweep_many(&self, tokens: &[FencingToken]) -> BatchResult<Sweep> {
        let (mut t, _) = self.step();
        let mut sweep = |token: &FencingToken| {
            let mut out = Sweep::default();
            let Some((_, seq)) = t.dead.remove(token) else {
                return Ok(out);
            };
            let rows = t.items.iter_mut();
            for (id, row) in rows.filter(|(_, row)| row.record.state == Owned(*token)) {
                out.add(*id, row.record.hand_back(true));
            }
            // Its death record, unless retention dropped it, learns what was moved.
            if let Some(record) = t.deaths.get_mut(&seq) {
                record.swept = Some(Swept::from(&out));
            }
            Ok(out)
        };
        Ok(tokens.iter().map(&mut sweep).collect())
    }

    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        let (t, _) = self.step();
        let dead = t.dead.iter().take(limit);
        Ok(dead
            .map(|(&token, (key, _))| DeadToken::new(key.clone(), token))
            .collect())
    }

    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        Ok(self.step().0.items.get(&id).map(|row| row.record.clone()))
    }
}
