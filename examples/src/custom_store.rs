//! A custom store written from scratch, as a user of the library would: the walk-through
//! in `docs/custom-store.md` builds exactly this file, and `tests/custom_store.rs` runs
//! the whole conformance suite against it.
//!
//! `TableStore` keeps its state the way a small SQL database would: a `leases` table and
//! an `items` table of rows, a counter row, and an expiry index. Every operation takes
//! one async lock (its "transaction"), reads the store clock once inside it, and changes
//! rows only after every check has passed — the three habits that make a store meet the
//! contract.
//!
//! It also counts the rows it reads ([`TableStore::rows_visited`]), so that a test can
//! check deterministically that a checker round's cost does not grow with the number of
//! live leases (`liveness_conformance::bench::check_round_cost`), and it can be built
//! without its expiry index ([`TableStore::without_expiry_index`]) to show that check
//! catching a store that scans every lease — which the conformance scenarios alone
//! cannot see.

use liveness_core::Page;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use liveness_core::{
    async_trait, Capabilities, DeadToken, DeathCause, DeathRecord, EnqueueOptions, Error,
    ExpiredLease, FencingToken, HolderId, InputProblem, Issuer, Item, ItemCounts, ItemId,
    ItemRecord, ItemState, ItemStateKind, ItemStore, Key, Lease, LeaseInfo, LeaseStatus,
    LeaseStore, LostReason, Namespace, RequestId, Requeued, Result, Space, StoreInfo, StoreTime,
    Swept, Ttl,
};
use tokio::sync::Mutex;
use tokio::time::Instant;

/// One row of the `leases` table.
#[derive(Clone, Debug)]
struct LeaseRow {
    holder: HolderId,
    token: u64,
    ttl: Ttl,
    /// Store-clock milliseconds since the store's epoch.
    expires_at_ms: u64,
    /// The greatest claim request id admitted under `token` (its high-water mark):
    /// claim ids are single-use per token. A new token gets a new row, without one.
    last_claim: Option<RequestId>,
}

impl LeaseRow {
    /// What `inspect` and `list` show of this row, the lease on `key`, at store-clock
    /// milliseconds `now`.
    fn info(&self, key: &Key, now: u64) -> LeaseInfo {
        LeaseInfo {
            key: key.clone(),
            holder: self.holder.clone(),
            token: FencingToken(self.token),
            ttl: self.ttl,
            status: if now < self.expires_at_ms {
                LeaseStatus::Live {
                    remaining: Duration::from_millis(self.expires_at_ms - now),
                }
            } else {
                LeaseStatus::Expired
            },
        }
    }
}

/// One row of the `items` table.
#[derive(Clone, Debug)]
struct ItemRow {
    payload: Vec<u8>,
    attempts: u32,
    max_attempts: u32,
    /// `None` pending, `Some(token)` owned, and `dead` marks the dead-letter set.
    owner: Option<u64>,
    dead: bool,
    /// The request id of the claim that made `owner` its owner: a repeat of that
    /// claim answers the rows that carry it.
    claimed_by: Option<RequestId>,
}

#[derive(Debug, Default)]
struct Tables {
    last_token: u64,
    last_item: u64,
    leases: BTreeMap<Key, LeaseRow>,
    /// (space, expires_at_ms, key): the expiry index that keeps `expired` O(expired).
    by_expiry: BTreeSet<(Space, u64, Key)>,
    /// token -> key: the dead set.
    dead: BTreeMap<u64, Key>,
    items: BTreeMap<u64, ItemRow>,
    /// Enqueue idempotency keys and the ids they answered, kept for good.
    enqueue_keys: BTreeMap<RequestId, u64>,
    /// The death history by seq: the newest `death_retention` rows.
    deaths: BTreeMap<u64, DeathRecord>,
    last_death: u64,
    /// token -> seq of its death row, until its sweep fills the row in.
    death_of: BTreeMap<u64, u64>,
}

/// A store kept in process memory as tables of rows, with its own clock.
#[derive(Debug, Clone)]
pub struct TableStore {
    epoch: Instant,
    tables: Arc<Mutex<Tables>>,
    /// Rows and index entries read by `expired`, `next_expiry`, `reap`, `dead_tokens`
    /// and `requeue_orphans`.
    visited: Arc<AtomicU64>,
    /// Answer `expired` and `next_expiry` by scanning every lease row (the mistake the
    /// expiry index avoids).
    scan: bool,
    /// What the store is: its name, its capabilities ([`TableStore::caps`]) and who
    /// issues its leases (a random identity drawn by `new`: one store, one namespace;
    /// every operation that takes a lease refuses another's).
    info: StoreInfo,
}

impl Default for TableStore {
    fn default() -> Self {
        Self::new()
    }
}

impl TableStore {
    /// An empty store whose clock starts now.
    pub fn new() -> Self {
        TableStore {
            epoch: Instant::now(),
            tables: Arc::default(),
            visited: Arc::default(),
            scan: false,
            info: StoreInfo {
                backend: "table-example",
                caps: Self::caps(),
                issuer: Issuer::new(
                    Namespace::new("default").unwrap_or_else(|_| unreachable!("valid literal")),
                    fastrand::u64(..),
                ),
            },
        }
    }

    /// The same store, except that `expired` and `next_expiry` scan every lease row
    /// instead of reading the expiry index: correct (it passes every conformance
    /// scenario) but O(leases) per checker round. It exists to show that
    /// `liveness_conformance::bench::check_round_cost` catches such a store; never
    /// build a store this way.
    pub fn without_expiry_index() -> Self {
        TableStore {
            scan: true,
            ..Self::new()
        }
    }

    /// How many rows and index entries this store (and its clones) read so far in
    /// `expired`, `next_expiry`, `reap`, `dead_tokens` and `requeue_orphans`: a
    /// deterministic measure of the work behind a checker round.
    pub fn rows_visited(&self) -> u64 {
        self.visited.load(Ordering::Relaxed)
    }

    fn visit(&self, rows: usize) {
        self.visited.fetch_add(rows as u64, Ordering::Relaxed);
    }

    /// The store clock: milliseconds since this store was made, on the store's own
    /// monotonic clock. Callers' clocks are never consulted.
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn caps() -> Capabilities {
        Capabilities {
            max_batch: 500,
            max_payload: 256 * 1024,
            // Small enough that the conformance suite fills it and checks the bound.
            death_retention: 100,
            ..Capabilities::default()
        }
    }
}

impl Tables {
    /// Removes the lease row on `key`, puts its token in the dead set and writes its
    /// death row, all under the one lock; drops the death row that fell out of the
    /// retention (one per death).
    fn retire(&mut self, key: &Key, cause: DeathCause, now_ms: u64) {
        if let Some(row) = self.leases.remove(key) {
            self.by_expiry
                .remove(&(key.space().clone(), row.expires_at_ms, key.clone()));
            self.dead.insert(row.token, key.clone());
            self.last_death += 1;
            let seq = self.last_death;
            self.deaths.insert(
                seq,
                DeathRecord {
                    seq,
                    key: key.clone(),
                    holder: row.holder,
                    token: FencingToken(row.token),
                    at: StoreTime::from_epoch(Duration::from_millis(now_ms)),
                    cause,
                    swept: None,
                },
            );
            self.death_of.insert(row.token, seq);
            let keep = TableStore::caps().death_retention as u64;
            if seq > keep {
                if let Some(old) = self.deaths.remove(&(seq - keep)) {
                    if self.death_of.get(&old.token.0) == Some(&old.seq) {
                        self.death_of.remove(&old.token.0);
                    }
                }
            }
        }
    }

    /// Moves a dead-lettered row back to pending with no attempts counted.
    fn revive(&mut self, id: u64) -> Result<()> {
        match self.items.get_mut(&id) {
            None => Err(Error::invalid("item", InputProblem::NoSuchItem)),
            Some(row) if !row.dead => Err(Error::invalid("item", InputProblem::NotDeadLettered)),
            Some(row) => {
                row.dead = false;
                row.owner = None;
                row.attempts = 0;
                Ok(())
            }
        }
    }

    fn current(&self, lease: &Lease, now: u64) -> Result<&LeaseRow> {
        let lost = |reason| Error::Lost {
            key: lease.key.clone(),
            token: lease.token,
            reason,
        };
        let row = self
            .leases
            .get(&lease.key)
            .ok_or(lost(LostReason::Released))?;
        if row.token != lease.token.0 {
            return Err(lost(LostReason::Superseded));
        }
        if now >= row.expires_at_ms {
            return Err(lost(LostReason::Expired));
        }
        Ok(row)
    }

    fn owned(&mut self, id: ItemId, token: FencingToken) -> Result<&mut ItemRow> {
        match self.items.get_mut(&id.0) {
            Some(row) if row.owner == Some(token.0) && !row.dead => Ok(row),
            _ => Err(Error::Fenced { item: id, token }),
        }
    }
}

fn give_back(row: &mut ItemRow, retry: bool) -> ItemState {
    row.owner = None;
    if retry && row.attempts < row.max_attempts {
        ItemState::Pending
    } else {
        row.dead = true;
        ItemState::DeadLettered
    }
}

fn record(id: u64, row: &ItemRow) -> ItemRecord {
    ItemRecord {
        item: Item {
            id: ItemId(id),
            payload: row.payload.clone(),
            attempts: row.attempts,
            max_attempts: row.max_attempts,
        },
        state: match (row.dead, row.owner) {
            (true, _) => ItemState::DeadLettered,
            (false, Some(t)) => ItemState::Owned(FencingToken(t)),
            (false, None) => ItemState::Pending,
        },
    }
}

#[async_trait]
impl LeaseStore for TableStore {
    fn info(&self) -> &StoreInfo {
        &self.info
    }

    async fn acquire(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Result<Lease> {
        Self::caps().check_ttl(ttl)?;
        let mut t = self.tables.lock().await;
        let now = self.now_ms();
        if let Some(row) = t.leases.get(key) {
            if now < row.expires_at_ms {
                return Err(Error::Held {
                    key: key.clone(),
                    holder: row.holder.clone(),
                    token: FencingToken(row.token),
                });
            }
            t.retire(key, DeathCause::Superseded, now);
        }
        t.last_token += 1;
        let token = t.last_token;
        let expires_at_ms = now + ttl.as_millis();
        t.leases.insert(
            key.clone(),
            LeaseRow {
                holder: holder.clone(),
                token,
                ttl,
                expires_at_ms,
                last_claim: None,
            },
        );
        t.by_expiry
            .insert((key.space().clone(), expires_at_ms, key.clone()));
        Ok(Lease::granted(
            &self.info.issuer,
            key.clone(),
            holder.clone(),
            FencingToken(token),
            ttl,
        ))
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        lease.check_issuer(&self.info.issuer)?;
        let mut t = self.tables.lock().await;
        let now = self.now_ms();
        let old = t.current(lease, now)?.expires_at_ms;
        // The ttl carried by the lease value: it may differ from the acquired one, and
        // becomes the lease's ttl from now on.
        Self::caps().check_ttl(lease.ttl)?;
        let new = now + lease.ttl.as_millis();
        let space = lease.key.space().clone();
        t.by_expiry.remove(&(space.clone(), old, lease.key.clone()));
        t.by_expiry.insert((space, new, lease.key.clone()));
        if let Some(row) = t.leases.get_mut(&lease.key) {
            row.expires_at_ms = new;
            row.ttl = lease.ttl;
        }
        Ok(Lease {
            expires_in: lease.ttl.duration(),
            ..lease.clone()
        })
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        lease.check_issuer(&self.info.issuer)?;
        let mut t = self.tables.lock().await;
        let current = t.leases.get(&lease.key).map(|r| r.token) == Some(lease.token.0);
        if current {
            t.retire(&lease.key, DeathCause::Released, self.now_ms());
        }
        Ok(current)
    }

    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        let t = self.tables.lock().await;
        let now = self.now_ms();
        Ok(t.leases.get(key).map(|row| row.info(key, now)))
    }

    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        let limit = Self::caps().clamp_limit("limit", limit)?;
        let t = self.tables.lock().await;
        let now = self.now_ms();
        if self.scan {
            return Ok(self.scan_by_expiry(&t, space, now, limit));
        }
        let from = (space.clone(), 0, Key::new(space.clone(), min_name()));
        let mut visited = 0;
        let out = t
            .by_expiry
            .range(from..)
            .inspect(|_| visited += 1)
            .take_while(|(s, at, _)| s == space && *at <= now)
            .take(limit)
            .filter_map(|(_, _, key)| {
                t.leases.get(key).map(|row| ExpiredLease {
                    key: key.clone(),
                    holder: row.holder.clone(),
                    token: FencingToken(row.token),
                })
            })
            .collect();
        self.visit(visited);
        Ok(out)
    }

    async fn reap(&self, key: &Key, token: FencingToken) -> Result<bool> {
        let mut t = self.tables.lock().await;
        let now = self.now_ms();
        self.visit(1);
        let expired =
            matches!(t.leases.get(key), Some(r) if r.token == token.0 && now >= r.expires_at_ms);
        if expired {
            t.retire(key, DeathCause::Reaped, now);
        }
        Ok(expired)
    }

    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        let limit = Self::caps().clamp_limit("limit", limit)?;
        let t = self.tables.lock().await;
        let out: Vec<_> = t
            .dead
            .iter()
            .take(limit)
            .map(|(token, key)| DeadToken {
                key: key.clone(),
                token: FencingToken(*token),
            })
            .collect();
        self.visit(out.len());
        Ok(out)
    }

    async fn store_time(&self) -> Result<StoreTime> {
        Ok(StoreTime::from_epoch(Duration::from_millis(self.now_ms())))
    }

    async fn members(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let Page { after, limit } = page;
        let limit = Self::caps().clamp_limit("limit", limit)?;
        if after.is_some_and(|k| k.space() != space) {
            return Err(Error::invalid("after", InputProblem::OtherSpace));
        }
        let t = self.tables.lock().await;
        let now = self.now_ms();
        // Keys sort by space, then name: a range of the leases table, O(page).
        let from = match after {
            Some(k) => std::ops::Bound::Excluded(k.clone()),
            None => std::ops::Bound::Included(Key::new(space.clone(), min_name())),
        };
        Ok(t.leases
            .range((from, std::ops::Bound::Unbounded))
            .take_while(|(key, _)| key.space() == space)
            .take(limit)
            .map(|(key, row)| row.info(key, now))
            .collect())
    }

    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        let limit = Self::caps().clamp_limit("limit", limit)?;
        let t = self.tables.lock().await;
        Ok(t.deaths
            .range(..before.unwrap_or(u64::MAX))
            .rev()
            .take(limit)
            .map(|(_, d)| d.clone())
            .collect())
    }

    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        let t = self.tables.lock().await;
        let now = self.now_ms();
        let earliest = if self.scan {
            self.visit(t.leases.len());
            t.leases
                .iter()
                .filter(|(key, _)| key.space() == space)
                .map(|(_, row)| row.expires_at_ms)
                .min()
        } else {
            self.visit(1);
            let from = (space.clone(), 0, Key::new(space.clone(), min_name()));
            t.by_expiry
                .range(from..)
                .next()
                .filter(|(s, _, _)| s == space)
                .map(|(_, at, _)| *at)
        };
        // Zero while the earliest lease is expired and not yet reaped.
        Ok(earliest.map(|at| Duration::from_millis(at.saturating_sub(now))))
    }
}

impl TableStore {
    /// `expired` without the index: every lease row is read (see
    /// [`TableStore::without_expiry_index`]).
    fn scan_by_expiry(
        &self,
        t: &Tables,
        space: &Space,
        now: u64,
        limit: usize,
    ) -> Vec<ExpiredLease> {
        self.visit(t.leases.len());
        let mut found: Vec<_> = t
            .leases
            .iter()
            .filter(|(key, row)| key.space() == space && row.expires_at_ms <= now)
            .collect();
        found.sort_by_key(|(key, row)| (row.expires_at_ms, (*key).clone()));
        found
            .into_iter()
            .take(limit)
            .map(|(key, row)| ExpiredLease {
                key: key.clone(),
                holder: row.holder.clone(),
                token: FencingToken(row.token),
            })
            .collect()
    }
}

fn min_name() -> liveness_core::Name {
    // The smallest valid name: sorts before every other name of the space.
    liveness_core::Name::new("\u{20}").unwrap_or_else(|_| unreachable!("a space is a valid name"))
}

#[async_trait]
impl ItemStore for TableStore {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        options.validate(payload, Self::caps().max_payload)?;
        let mut t = self.tables.lock().await;
        if let Some(id) = options.key.and_then(|k| t.enqueue_keys.get(&k)) {
            return Ok(ItemId(*id));
        }
        t.last_item += 1;
        let id = t.last_item;
        t.items.insert(
            id,
            ItemRow {
                payload: payload.to_vec(),
                attempts: 0,
                max_attempts: options.max_attempts,
                owner: None,
                dead: false,
                claimed_by: None,
            },
        );
        if let Some(key) = options.key {
            t.enqueue_keys.insert(key, id);
        }
        Ok(ItemId(id))
    }

    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        lease.check_issuer(&self.info.issuer)?;
        let n = Self::caps().clamp_limit("n", n)?;
        let mut t = self.tables.lock().await;
        let last_claim = t.current(lease, self.now_ms())?.last_claim;
        // A repeat of this request answers the rows it assigned, and assigns nothing.
        let earlier: Vec<Item> = t
            .items
            .iter()
            .filter(|(_, row)| row.owner == Some(lease.token.0) && row.claimed_by == Some(req))
            .map(|(id, row)| record(*id, row).item)
            .collect();
        if !earlier.is_empty() {
            return Ok(earlier);
        }
        // Else admitted only above the token's high-water mark, which it raises (also
        // when nothing is pending): a late or repeated copy, or an older id after a
        // newer one, assigns nothing.
        if last_claim.is_some_and(|last| req <= last) {
            return Ok(Vec::new());
        }
        if let Some(row) = t.leases.get_mut(&lease.key) {
            row.last_claim = Some(req);
        }
        // A linear scan for pending rows: fine for an example; a real store keeps a
        // pending index (a sorted set, a partial SQL index).
        let mut out = Vec::new();
        for (id, row) in t.items.iter_mut() {
            if out.len() == n {
                break;
            }
            if row.owner.is_none() && !row.dead {
                row.owner = Some(lease.token.0);
                row.claimed_by = Some(req);
                row.attempts += 1;
                out.push(record(*id, row).item);
            }
        }
        Ok(out)
    }

    async fn complete(&self, lease: &Lease, id: ItemId) -> Result<()> {
        lease.check_issuer(&self.info.issuer)?;
        let mut t = self.tables.lock().await;
        t.owned(id, lease.token)?;
        t.items.remove(&id.0);
        Ok(())
    }

    async fn fail(&self, lease: &Lease, id: ItemId, retry: bool) -> Result<ItemState> {
        lease.check_issuer(&self.info.issuer)?;
        let mut t = self.tables.lock().await;
        Ok(give_back(t.owned(id, lease.token)?, retry))
    }

    async fn requeue_orphans(&self, token: FencingToken) -> Result<Requeued> {
        let mut t = self.tables.lock().await;
        let mut out = Requeued::default();
        if t.dead.remove(&token.0).is_none() {
            return Ok(out);
        }
        self.visit(t.items.len());
        for (id, row) in t.items.iter_mut() {
            if row.owner == Some(token.0) && !row.dead {
                match give_back(row, true) {
                    ItemState::Pending => out.requeued.push(ItemId(*id)),
                    _ => out.dead_lettered.push(ItemId(*id)),
                }
            }
        }
        // The death row learns what its sweep moved, under the same lock.
        if let Some(seq) = t.death_of.remove(&token.0) {
            if let Some(d) = t.deaths.get_mut(&seq) {
                d.swept = Some(Swept {
                    requeued: out.requeued.len() as u64,
                    dead_lettered: out.dead_lettered.len() as u64,
                });
            }
        }
        Ok(out)
    }

    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        let Page { after, limit } = page;
        let limit = Self::caps().clamp_limit("limit", limit)?;
        let t = self.tables.lock().await;
        // A scan from `after`: fine for an example; a real store keeps an index per
        // state.
        let from = after.map_or(0, |a| a.0.saturating_add(1));
        Ok(t.items
            .range(from..)
            .map(|(id, row)| record(*id, row))
            .filter(|r| r.state.kind() == state)
            .take(limit)
            .collect())
    }

    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        self.tables.lock().await.revive(id.0)
    }

    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        let limit = Self::caps().clamp_limit("limit", limit)?;
        let mut t = self.tables.lock().await;
        let ids: Vec<u64> = t
            .items
            .iter()
            .filter(|(_, row)| row.dead)
            .map(|(id, _)| *id)
            .take(limit)
            .collect();
        for id in &ids {
            t.revive(*id)?;
        }
        Ok(ids.into_iter().map(ItemId).collect())
    }

    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        let t = self.tables.lock().await;
        Ok(t.items.get(&id.0).map(|row| record(id.0, row)))
    }

    async fn item_counts(&self) -> Result<ItemCounts> {
        let t = self.tables.lock().await;
        let mut c = ItemCounts::default();
        for row in t.items.values() {
            match (row.dead, row.owner) {
                (true, _) => c.dead_lettered += 1,
                (false, Some(_)) => c.owned += 1,
                (false, None) => c.pending += 1,
            }
        }
        Ok(c)
    }

    async fn dead_letters(&self, limit: usize) -> Result<Vec<ItemRecord>> {
        let limit = Self::caps().clamp_limit("limit", limit)?;
        let t = self.tables.lock().await;
        Ok(t.items
            .iter()
            .filter(|(_, row)| row.dead)
            .take(limit)
            .map(|(id, row)| record(*id, row))
            .collect())
    }
}
