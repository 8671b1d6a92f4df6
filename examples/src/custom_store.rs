//! A liveness store kept in process memory: the shape every store has, small
//! enough to read in one sitting. `docs/custom-store.md` builds it block by block.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use liveness_core::{
    async_trait, Capabilities, DeadToken, DeathCause, DeathRecord, EnqueueOptions, Error,
    ExpiredLease, FencingToken, HolderId, InputProblem, Issuer, Item, ItemCounts, ItemId,
    ItemRecord, ItemState, ItemStateKind, ItemStore, Key, Lease, LeaseInfo, LeaseStatus,
    LeaseStore, LostCause, Name, Namespace, Page, RequestId, Requeued, Result, Space, StoreInfo,
    StoreTime, Swept, Ttl,
};

/// The lease on one key.
#[derive(Debug)]
struct LeaseRow {
    holder: HolderId,
    token: FencingToken,
    ttl: Ttl,
    /// On the store clock.
    expires_at: Duration,
    /// The greatest claim request admitted under this token (its high-water mark).
    last_claim: Option<RequestId>,
}

/// One work item, and the claim request that gave it to its current owner.
#[derive(Debug)]
struct ItemRow {
    item: Item,
    state: ItemState,
    req: Option<RequestId>,
}

/// The whole state of one namespace, behind one lock.
#[derive(Debug, Default)]
struct Tables {
    last_token: u64,
    last_item: u64,
    last_death: u64,
    /// Keys sort by space, then name: `members` reads a range of this map.
    leases: BTreeMap<Key, LeaseRow>,
    /// The expiry index, (space, expiry, key): `expired` reads only its head.
    by_expiry: BTreeSet<(Space, Duration, Key)>,
    /// The dead set: token → its key and the seq of its death record.
    dead: BTreeMap<FencingToken, (Key, u64)>,
    /// The death history by seq: the newest `KEEP_DEATHS` records.
    deaths: BTreeMap<u64, DeathRecord>,
    items: BTreeMap<ItemId, ItemRow>,
    /// Enqueue idempotency keys and the ids they answered, kept for good.
    enqueue_keys: HashMap<RequestId, ItemId>,
}

/// The death records kept: few, so that the conformance suite fills the history.
const KEEP_DEATHS: u64 = 100;

/// A store in process memory: one namespace per value.
#[derive(Debug)]
pub struct MapStore {
    epoch: Instant,
    tables: Mutex<Tables>,
    info: StoreInfo,
    /// Leases read in expiry order ([`MapStore::rows_visited`]).
    visited: AtomicU64,
    /// Read every lease instead of the expiry index ([`MapStore::scanning`]).
    scan: bool,
}

/// Tells store instances apart, for their issuers.
static STORES: AtomicU64 = AtomicU64::new(1);

impl MapStore {
    /// An empty store on `namespace`, its clock starting now.
    pub fn new(namespace: Namespace) -> MapStore {
        let death_retention = KEEP_DEATHS as usize;
        let caps = Capabilities {
            death_retention,
            ..Capabilities::default()
        };
        let issuer = Issuer::new(namespace, STORES.fetch_add(1, Relaxed));
        MapStore {
            epoch: Instant::now(),
            tables: Mutex::default(),
            info: StoreInfo {
                backend: "map",
                caps,
                issuer,
            },
            visited: AtomicU64::new(0),
            scan: false,
        }
    }

    /// The same store without its expiry index: `expired` and `next_expiry` read
    /// every lease of the space. Every answer stays right, so every scenario passes
    /// it; the cost check fails it. Never build a store this way.
    pub fn scanning(namespace: Namespace) -> MapStore {
        let mut store = MapStore::new(namespace);
        store.scan = true;
        store
    }

    /// How many leases `expired` and `next_expiry` have read so far: the work of a
    /// checker round, counted deterministically for the cost check.
    pub fn rows_visited(&self) -> u64 {
        self.visited.load(Relaxed)
    }

    /// One atomic step: the lock, and the store clock read once, under it.
    fn step(&self) -> (MutexGuard<'_, Tables>, Duration) {
        let tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        (tables, self.epoch.elapsed())
    }

    /// The leases of `space` with their expiry, earliest first, each counted as it
    /// is read: the head of the expiry index, or (scanning) all of them, sorted.
    fn by_expiry<'a>(&'a self, t: &'a Tables, space: &'a Space) -> ExpiryOrder<'a> {
        let count = move |read| {
            self.visited.fetch_add(1, Relaxed);
            read
        };
        if self.scan {
            let leases = t.leases.range(first_key(space)..);
            let leases = leases.take_while(|(key, _)| key.space() == space);
            let mut all: Vec<_> = leases.map(|(k, row)| count((row.expires_at, k))).collect();
            all.sort();
            return Box::new(all.into_iter());
        }
        let from = entry(&first_key(space), Duration::ZERO);
        let index = t.by_expiry.range(from..);
        let index = index.take_while(move |(s, _, _)| s == space);
        Box::new(index.map(move |(_, at, key)| count((*at, key))))
    }
}

/// Leases with their expiry, earliest first.
type ExpiryOrder<'a> = Box<dyn Iterator<Item = (Duration, &'a Key)> + 'a>;

/// The first key of `space` in key order: no valid name sorts before " ".
fn first_key(space: &Space) -> Key {
    let name = Name::new(" ").unwrap_or_else(|_| unreachable!("\" \" is a valid name"));
    Key::new(space.clone(), name)
}

/// The expiry index's entry for the lease on `key` expiring at `at`.
fn entry(key: &Key, at: Duration) -> (Space, Duration, Key) {
    (key.space().clone(), at, key.clone())
}

impl Tables {
    /// Ends the lease on `key`, if any: the row goes, its token joins the dead set
    /// and its death is recorded, in this one step; the oldest record beyond
    /// `KEEP_DEATHS` is dropped.
    fn retire(&mut self, key: &Key, cause: DeathCause, now: Duration) {
        let Some(row) = self.leases.remove(key) else {
            return;
        };
        self.by_expiry.remove(&entry(key, row.expires_at));
        self.last_death += 1;
        let seq = self.last_death;
        self.dead.insert(row.token, (key.clone(), seq));
        let record = DeathRecord {
            seq,
            key: key.clone(),
            holder: row.holder,
            token: row.token,
            at: StoreTime::from_epoch(now),
            cause,
            swept: None,
        };
        self.deaths.insert(seq, record);
        if let Some(old) = seq.checked_sub(KEEP_DEATHS) {
            self.deaths.remove(&old);
        }
    }

    /// The row of `lease` if it is current and live, else why it is lost.
    fn current(&mut self, lease: &Lease, now: Duration) -> Result<&mut LeaseRow> {
        match self.leases.get_mut(&lease.key) {
            None => Err(lease.lost(LostCause::Released)),
            Some(row) if row.token != lease.token => Err(lease.lost(LostCause::Superseded)),
            Some(row) if now >= row.expires_at => Err(lease.lost(LostCause::Expired)),
            Some(row) => Ok(row),
        }
    }

    /// The item `id` if `lease`'s token owns it, else `Fenced`.
    fn owned(&mut self, lease: &Lease, id: ItemId) -> Result<&mut ItemRow> {
        match self.items.get_mut(&id) {
            Some(row) if row.state == ItemState::Owned(lease.token) => Ok(row),
            _ => Err(lease.fenced(id)),
        }
    }

    /// A dead-lettered item back to pending, no attempts counted. Only the store
    /// knows its items: refusing an id is its own check.
    fn revive(&mut self, id: ItemId) -> Result<()> {
        let Some(row) = self.items.get_mut(&id) else {
            return Err(Error::invalid("item", InputProblem::NoSuchItem));
        };
        if row.state != ItemState::DeadLettered {
            return Err(Error::invalid("item", InputProblem::NotDeadLettered));
        }
        row.state = ItemState::Pending;
        row.item.attempts = 0;
        Ok(())
    }
}

impl LeaseRow {
    fn info(&self, key: &Key, now: Duration) -> LeaseInfo {
        // Live while the store's now is before the expiry; expired from that instant.
        let remaining = self.expires_at.saturating_sub(now);
        let status = if remaining.is_zero() {
            LeaseStatus::Expired
        } else {
            LeaseStatus::Live { remaining }
        };
        LeaseInfo {
            key: key.clone(),
            holder: self.holder.clone(),
            token: self.token,
            ttl: self.ttl,
            status,
        }
    }
}

impl ItemRow {
    fn record(&self) -> ItemRecord {
        let (item, state) = (self.item.clone(), self.state);
        ItemRecord { item, state }
    }

    /// Gives the item back: pending again, or dead-lettered when `retry` is false
    /// or its attempts are used up.
    fn hand_back(&mut self, retry: bool) -> ItemState {
        let again = retry && self.item.attempts < self.item.max_attempts;
        self.req = None;
        self.state = if again {
            ItemState::Pending
        } else {
            ItemState::DeadLettered
        };
        self.state
    }
}

#[async_trait]
impl LeaseStore for MapStore {
    fn info(&self) -> &StoreInfo {
        &self.info
    }

    async fn acquire(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Result<Lease> {
        let (mut t, now) = self.step();
        if let Some(row) = t.leases.get(key).filter(|row| now < row.expires_at) {
            let (key, holder, token) = (key.clone(), row.holder.clone(), row.token);
            return Err(Error::Held { key, holder, token });
        }
        // An expired lease still on the key is reaped by this same step.
        t.retire(key, DeathCause::Superseded, now);
        t.last_token += 1;
        let (token, expires_at) = (FencingToken(t.last_token), now + ttl.duration());
        let holder = holder.clone();
        let row = LeaseRow {
            holder: holder.clone(),
            token,
            ttl,
            expires_at,
            last_claim: None,
        };
        t.leases.insert(key.clone(), row);
        t.by_expiry.insert(entry(key, expires_at));
        let issuer = &self.info.issuer;
        Ok(Lease::granted(issuer, key.clone(), holder, token, ttl))
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let (mut t, now) = self.step();
        let new = now + lease.ttl.duration();
        let row = t.current(lease, now)?;
        let old = std::mem::replace(&mut row.expires_at, new);
        row.ttl = lease.ttl;
        t.by_expiry.remove(&entry(&lease.key, old));
        t.by_expiry.insert(entry(&lease.key, new));
        Ok(lease.renewed())
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let (mut t, now) = self.step();
        let row = t.leases.get(&lease.key);
        let current = row.is_some_and(|row| row.token == lease.token);
        if current {
            t.retire(&lease.key, DeathCause::Released, now);
        }
        Ok(current)
    }

    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        let (t, now) = self.step();
        Ok(t.leases.get(key).map(|row| row.info(key, now)))
    }

    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        let (t, now) = self.step();
        let due = self.by_expiry(&t, space).take_while(|(at, _)| *at <= now);
        let due = due.take(limit).filter_map(|(_, key)| {
            let row = t.leases.get(key)?;
            let (key, holder, token) = (key.clone(), row.holder.clone(), row.token);
            Some(ExpiredLease { key, holder, token })
        });
        Ok(due.collect())
    }

    async fn reap(&self, key: &Key, token: FencingToken) -> Result<bool> {
        let (mut t, now) = self.step();
        let row = t.leases.get(key);
        let expired = row.is_some_and(|row| row.token == token && now >= row.expires_at);
        if expired {
            t.retire(key, DeathCause::Reaped, now);
        }
        Ok(expired)
    }

    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        let (t, _) = self.step();
        let dead = t.dead.iter().take(limit);
        let dead = dead.map(|(&token, (key, _))| (token, key.clone()));
        Ok(dead.map(|(token, key)| DeadToken { key, token }).collect())
    }

    async fn members(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let (t, now) = self.step();
        let from = match page.after {
            Some(key) => Bound::Excluded(key.clone()),
            None => Bound::Included(first_key(space)),
        };
        let rows = t.leases.range((from, Bound::Unbounded));
        let rows = rows
            .take_while(|(key, _)| key.space() == space)
            .take(page.limit);
        Ok(rows.map(|(key, row)| row.info(key, now)).collect())
    }

    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        let (t, _) = self.step();
        let newest_first = t.deaths.range(..before.unwrap_or(u64::MAX)).rev();
        Ok(newest_first.take(limit).map(|(_, d)| d.clone()).collect())
    }

    async fn store_time(&self) -> Result<StoreTime> {
        Ok(StoreTime::from_epoch(self.epoch.elapsed()))
    }

    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        let (t, now) = self.step();
        let earliest = self.by_expiry(&t, space).next();
        // Zero while the earliest lease is expired and not yet reaped.
        Ok(earliest.map(|(at, _)| at.saturating_sub(now)))
    }
}

#[async_trait]
impl ItemStore for MapStore {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        let (mut t, _) = self.step();
        if let Some(id) = options.key.and_then(|key| t.enqueue_keys.get(&key)) {
            return Ok(*id);
        }
        t.last_item += 1;
        let id = ItemId(t.last_item);
        let item = Item {
            id,
            payload: payload.to_vec(),
            attempts: 0,
            max_attempts: options.max_attempts,
        };
        let (state, req) = (ItemState::Pending, None);
        t.items.insert(id, ItemRow { item, state, req });
        if let Some(key) = options.key {
            t.enqueue_keys.insert(key, id);
        }
        Ok(id)
    }

    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        let (mut t, now) = self.step();
        let last_claim = t.current(lease, now)?.last_claim;
        // 1. A repeat of `req`: the items it assigned, nothing new.
        let mine = ItemState::Owned(lease.token);
        let rows = t.items.values();
        let earlier = rows.filter(|row| row.state == mine && row.req == Some(req));
        let earlier: Vec<Item> = earlier.map(|row| row.item.clone()).collect();
        if !earlier.is_empty() {
            return Ok(earlier);
        }
        // 2. Not above the high-water mark: a late copy, or an older id. Nothing.
        if last_claim.is_some_and(|last| req <= last) {
            return Ok(Vec::new());
        }
        // 3. Admitted: raise the mark, assign pending items, lowest id first.
        t.current(lease, now)?.last_claim = Some(req);
        let rows = t.items.values_mut();
        let mut claimed = Vec::new();
        for row in rows.filter(|row| row.state == ItemState::Pending).take(n) {
            row.state = mine;
            row.req = Some(req);
            row.item.attempts += 1;
            claimed.push(row.item.clone());
        }
        Ok(claimed)
    }

    async fn complete(&self, lease: &Lease, id: ItemId) -> Result<()> {
        let (mut t, _) = self.step();
        t.owned(lease, id)?;
        t.items.remove(&id);
        Ok(())
    }

    async fn fail(&self, lease: &Lease, id: ItemId, retry: bool) -> Result<ItemState> {
        let (mut t, _) = self.step();
        Ok(t.owned(lease, id)?.hand_back(retry))
    }

    async fn requeue_orphans(&self, token: FencingToken) -> Result<Requeued> {
        let (mut t, _) = self.step();
        let mut out = Requeued::default();
        let Some((_, seq)) = t.dead.remove(&token) else {
            return Ok(out);
        };
        let orphans = t
            .items
            .iter_mut()
            .filter(|(_, row)| row.state == ItemState::Owned(token));
        for (id, row) in orphans {
            match row.hand_back(true) {
                ItemState::Pending => out.requeued.push(*id),
                _ => out.dead_lettered.push(*id),
            }
        }
        // Its death record learns what the sweep moved, in this same step (unless
        // the retention dropped the record: then nothing is written).
        if let Some(record) = t.deaths.get_mut(&seq) {
            let requeued = out.requeued.len() as u64;
            let dead_lettered = out.dead_lettered.len() as u64;
            record.swept = Some(Swept {
                requeued,
                dead_lettered,
            });
        }
        Ok(out)
    }

    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        Ok(self.step().0.items.get(&id).map(ItemRow::record))
    }

    async fn item_counts(&self) -> Result<ItemCounts> {
        let (t, _) = self.step();
        let count = |kind| t.items.values().filter(|r| r.state.kind() == kind).count() as u64;
        Ok(ItemCounts {
            pending: count(ItemStateKind::Pending),
            owned: count(ItemStateKind::Owned),
            dead_lettered: count(ItemStateKind::DeadLettered),
        })
    }

    async fn dead_letters(&self, limit: usize) -> Result<Vec<ItemRecord>> {
        let first = Page::first(limit);
        self.items(ItemStateKind::DeadLettered, first).await
    }

    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        let (t, _) = self.step();
        let from = page.after.map_or(Bound::Unbounded, Bound::Excluded);
        let rows = t.items.range((from, Bound::Unbounded)).map(|(_, row)| row);
        let rows = rows
            .filter(|row| row.state.kind() == state)
            .take(page.limit);
        Ok(rows.map(ItemRow::record).collect())
    }

    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        self.step().0.revive(id)
    }

    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        let (mut t, _) = self.step();
        let dead = t
            .items
            .values()
            .filter(|row| row.state == ItemState::DeadLettered);
        let ids: Vec<ItemId> = dead.map(|row| row.item.id).take(limit).collect();
        for id in &ids {
            t.revive(*id)?;
        }
        Ok(ids)
    }
}
