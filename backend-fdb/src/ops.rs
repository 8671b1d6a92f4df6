//! The transaction bodies of [`FdbStore`]'s operations: each `*_once` is one attempt,
//! run by `transact!` inside FoundationDB's retry loop (so it may run several times and
//! must decide from what it reads, never from an earlier attempt's answer). The trait
//! impls in `store.rs` call them.

use std::collections::HashMap;
use std::time::Duration;

use liveness_core::sync::lock;
use liveness_core::{
    Acquire, DeadToken, DeathCause, Error, ExpiredLease, FencingToken, HolderId, Item, ItemCounts,
    ItemId, ItemRecord, ItemState, Key, Lease, LeaseInfo, LeaseStatus, LostReason, Name, RequestId,
    Requeued, Space, Ttl,
};
use tokio::time::Instant;

use crate::error::corrupt;
use crate::keys::{
    decode_count, decode_dead, decode_index_value, decode_u64, encode_dead, encode_index_value,
    Count, ItemMeta, LeaseRec,
};
use crate::kv::{Attempt, Fail, RangeRead, Stamp, Transaction};
use crate::store::{FdbStore, MAX_BATCH};

pub(crate) fn ttl_of(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

pub(crate) fn lost(lease: &Lease, reason: LostReason) -> Fail {
    Fail::Stop(lease.lost(reason))
}

/// What one release or reap attempt did.
pub(crate) enum Retire {
    /// It removed the lease (`None`: an earlier attempt of this call did, unknown result).
    Done(Option<LeaseRec>),
    /// The lease was not there as required: nothing changed.
    No,
}

/// What one acquire attempt did.
pub(crate) enum Acquired {
    New {
        token: FencingToken,
        retired: Option<LeaseRec>,
    },
    /// An earlier attempt of this call committed (unknown result); this is its record.
    Already(LeaseRec),
}

impl FdbStore {
    /// Reads the read version and checkpoints it: returns this handle's "now" for
    /// every expiry decision of the attempt.
    pub(crate) async fn observe(&self, tx: &mut dyn Transaction) -> Result<Instant, Fail> {
        let rv = tx.read_version().await?;
        let now = Instant::now();
        lock(&self.obs).checkpoint(now, rv);
        Ok(now)
    }

    pub(crate) fn is_expired(&self, key: &Key, rec: &LeaseRec, now: Instant) -> bool {
        lock(&self.obs).is_expired(key, &rec.stamp, ttl_of(rec.ttl_ms), now)
    }

    pub(crate) async fn read_lease(
        &self,
        tx: &mut dyn Transaction,
        key: &Key,
        snapshot: bool,
    ) -> Result<Option<LeaseRec>, Fail> {
        match tx.get(&self.layout.lease(key), snapshot).await? {
            Some(raw) => {
                let rec = LeaseRec::decode(&raw)?;
                // Sizes how much observation history this handle keeps.
                lock(&self.obs).note_ttl(ttl_of(rec.ttl_ms));
                Ok(Some(rec))
            }
            None => Ok(None),
        }
    }

    /// Removes the lease record and its index entry and puts the token in the dead set.
    pub(crate) fn retire(&self, tx: &mut dyn Transaction, key: &Key, rec: &LeaseRec, nonce: u64) {
        tx.clear(&self.layout.lease(key));
        tx.clear(&self.layout.index(key, rec.ttl_ms, &rec.stamp));
        tx.set(&self.layout.dead(rec.token), &encode_dead(nonce, key));
    }

    /// Writes the lease record and index entry under the commit's stamp.
    pub(crate) fn write_lease(
        &self,
        tx: &mut dyn Transaction,
        key: &Key,
        token: FencingToken,
        ttl_ms: u64,
        nonce: u64,
        holder: &HolderId,
    ) {
        tx.set_versionstamped_value(
            &self.layout.lease(key),
            &LeaseRec::encode_stamped(token, ttl_ms, nonce, holder),
        );
        tx.set_versionstamped_key(
            &self.layout.index_stamped(key, ttl_ms),
            &encode_index_value(token, holder),
        );
    }

    /// True when an earlier attempt of this call (same nonce) retired `token`.
    pub(crate) async fn we_retired(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        token: FencingToken,
        nonce: u64,
    ) -> Result<bool, Fail> {
        if !at.maybe_committed {
            return Ok(false);
        }
        match tx.get(&self.layout.dead(token), false).await? {
            Some(raw) => Ok(decode_dead(&raw)?.0 == nonce),
            None => Ok(false),
        }
    }

    pub(crate) async fn next_counter(
        &self,
        tx: &mut dyn Transaction,
        which: &str,
    ) -> Result<u64, Fail> {
        let key = self.layout.counter(which);
        let n = match tx.get(&key, false).await? {
            Some(raw) => decode_u64(&raw)?,
            None => 0,
        };
        let next = n + 1;
        tx.set(&key, &next.to_be_bytes());
        Ok(next)
    }

    pub(crate) async fn acquire_once(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        key: &Key,
        holder: &HolderId,
        ttl: Ttl,
        nonce: u64,
    ) -> Result<Acquired, Fail> {
        let now = self.observe(tx).await?;
        self.acquire_at(tx, at, now, key, holder, ttl, nonce).await
    }

    /// One attempt of `acquire_many`: every entry in order in this one transaction,
    /// each as [`FdbStore::acquire_once`] would take it alone, judged at one `now`.
    /// An entry's answer (`Held`, an invalid ttl) fails only that entry; a database
    /// failure fails the attempt. All the leases written carry `nonce` (the call's),
    /// so a retry after an unknown result finds each of them (`Already`).
    ///
    /// A later entry on a key an earlier entry took answers `Held` from what this
    /// attempt wrote, without reading the key again: its lease record is
    /// versionstamped, which FoundationDB does not let the writing transaction read.
    pub(crate) async fn acquire_many_once(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        asks: &[Acquire],
        nonce: u64,
    ) -> Result<Vec<Result<Acquired, Error>>, Fail> {
        let now = self.observe(tx).await?;
        let mut taken: HashMap<&Key, (HolderId, FencingToken)> = HashMap::new();
        let mut out = Vec::with_capacity(asks.len());
        for ask in asks {
            if let Err(e) = self.info.caps.check_ttl(ask.ttl) {
                out.push(Err(e));
                continue;
            }
            if let Some((holder, token)) = taken.get(&ask.key) {
                out.push(Err(Error::Held {
                    key: ask.key.clone(),
                    holder: holder.clone(),
                    token: *token,
                }));
                continue;
            }
            let entry = match self
                .acquire_at(tx, at, now, &ask.key, &ask.holder, ask.ttl, nonce)
                .await
            {
                Ok(acquired) => acquired,
                Err(Fail::Stop(e)) => {
                    out.push(Err(e));
                    continue;
                }
                Err(e @ Fail::Db(_)) => return Err(e),
            };
            let owner = match &entry {
                Acquired::New { token, .. } => (ask.holder.clone(), *token),
                Acquired::Already(rec) => (rec.holder.clone(), rec.token),
            };
            taken.insert(&ask.key, owner);
            out.push(Ok(entry));
        }
        Ok(out)
    }

    /// Acquires `key` at `now` (this attempt's observation) in the open transaction:
    /// the one step of [`FdbStore::acquire_once`] and of each entry of
    /// [`FdbStore::acquire_many_once`]. A live lease answers `Held` (`Fail::Stop`,
    /// nothing written); an expired one is retired (dead set, death record) first.
    #[allow(clippy::too_many_arguments)]
    async fn acquire_at(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        now: Instant,
        key: &Key,
        holder: &HolderId,
        ttl: Ttl,
        nonce: u64,
    ) -> Result<Acquired, Fail> {
        let mut retired = None;
        if let Some(rec) = self.read_lease(tx, key, false).await? {
            if at.maybe_committed && rec.nonce == nonce {
                return Ok(Acquired::Already(rec));
            }
            if !self.is_expired(key, &rec, now) {
                return Err(Fail::Stop(Error::Held {
                    key: key.clone(),
                    holder: rec.holder,
                    token: rec.token,
                }));
            }
            self.retire(tx, key, &rec, nonce);
            self.record_death(tx, key, &rec, DeathCause::Superseded)
                .await?;
            retired = Some(rec);
        }
        let token = FencingToken(self.next_counter(tx, "token").await?);
        self.write_lease(tx, key, token, ttl.as_millis(), nonce, holder);
        Ok(Acquired::New { token, retired })
    }

    /// Checks that `lease` is current and live for this handle.
    pub(crate) async fn check_current(
        &self,
        tx: &mut dyn Transaction,
        lease: &Lease,
    ) -> Result<LeaseRec, Fail> {
        let now = self.observe(tx).await?;
        let Some(rec) = self.read_lease(tx, &lease.key, false).await? else {
            return Err(lost(lease, LostReason::Released));
        };
        if rec.token != lease.token {
            return Err(lost(lease, LostReason::Superseded));
        }
        if self.is_expired(&lease.key, &rec, now) {
            return Err(lost(lease, LostReason::Expired));
        }
        Ok(rec)
    }

    pub(crate) async fn renew_once(
        &self,
        tx: &mut dyn Transaction,
        lease: &Lease,
    ) -> Result<LeaseRec, Fail> {
        let rec = self.check_current(tx, lease).await?;
        self.info.caps.check_ttl(lease.ttl)?;
        tx.clear(&self.layout.index(&lease.key, rec.ttl_ms, &rec.stamp));
        self.write_lease(
            tx,
            &lease.key,
            rec.token,
            lease.ttl.as_millis(),
            rec.nonce,
            &rec.holder,
        );
        Ok(rec)
    }

    pub(crate) async fn release_once(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        lease: &Lease,
        nonce: u64,
    ) -> Result<Retire, Fail> {
        if self.we_retired(tx, at, lease.token, nonce).await? {
            return Ok(Retire::Done(None));
        }
        match self.read_lease(tx, &lease.key, false).await? {
            Some(rec) if rec.token == lease.token => {
                self.retire(tx, &lease.key, &rec, nonce);
                self.record_death(tx, &lease.key, &rec, DeathCause::Released)
                    .await?;
                Ok(Retire::Done(Some(rec)))
            }
            _ => Ok(Retire::No),
        }
    }

    pub(crate) async fn inspect_once(
        &self,
        tx: &mut dyn Transaction,
        key: &Key,
    ) -> Result<Option<LeaseInfo>, Fail> {
        let now = self.observe(tx).await?;
        let Some(rec) = self.read_lease(tx, key, true).await? else {
            return Ok(None);
        };
        let ttl = ttl_of(rec.ttl_ms);
        let deadline = lock(&self.obs)
            .deadline(key, &rec.stamp, ttl)
            .unwrap_or(now + ttl);
        let status = if now < deadline {
            LeaseStatus::Live {
                remaining: deadline - now,
            }
        } else {
            LeaseStatus::Expired
        };
        let ttl = Ttl::new(ttl).map_err(|_| corrupt("lease ttl"))?;
        Ok(Some(LeaseInfo {
            key: key.clone(),
            holder: rec.holder,
            token: rec.token,
            ttl,
            status,
        }))
    }

    /// The distinct ttls of the index of `space`, each with its oldest entry (one
    /// single-row read per ttl group: a skip scan).
    pub(crate) async fn ttl_groups(
        &self,
        tx: &mut dyn Transaction,
        space: &Space,
    ) -> Result<Vec<(u64, Key, Stamp)>, Fail> {
        let (mut cursor, end) = self.layout.index_space(space);
        let mut groups = Vec::new();
        loop {
            let row = tx
                .range(RangeRead::new(&cursor, &end, 1).snapshot())
                .await?;
            let Some((k, _)) = row.first() else {
                break;
            };
            let (ttl_ms, stamp, name) = self.layout.parse_index(k)?;
            let key = Key::new(
                space.clone(),
                Name::new(name).map_err(|_| corrupt("index"))?,
            );
            groups.push((ttl_ms, key, stamp));
            cursor = self.layout.index_after_group(space, ttl_ms);
        }
        Ok(groups)
    }

    pub(crate) async fn expired_once(
        &self,
        tx: &mut dyn Transaction,
        space: &Space,
        limit: usize,
    ) -> Result<Vec<ExpiredLease>, Fail> {
        let now = self.observe(tx).await?;
        let mut found: Vec<(Instant, ExpiredLease)> = Vec::new();
        for (ttl_ms, _, _) in self.ttl_groups(tx, space).await? {
            let ttl = ttl_of(ttl_ms);
            let mark = {
                let mut obs = lock(&self.obs);
                obs.note_ttl(ttl);
                obs.watermark(now, ttl)
            };
            let Some(mark) = mark else {
                continue; // not watched for a whole ttl yet: nothing of this ttl is expired
            };
            let (b, e) = self
                .layout
                .index_group(space, ttl_ms, mark.saturating_add(1));
            for (k, v) in tx.range(RangeRead::new(&b, &e, limit).snapshot()).await? {
                let (_, stamp, name) = self.layout.parse_index(&k)?;
                let key = Key::new(
                    space.clone(),
                    Name::new(name).map_err(|_| corrupt("index"))?,
                );
                let (token, holder) = decode_index_value(&v)?;
                let deadline = lock(&self.obs).deadline(&key, &stamp, ttl).unwrap_or(now);
                found.push((deadline, ExpiredLease { key, holder, token }));
            }
        }
        // Leases this handle wrote itself count from their send time.
        let due = lock(&self.obs).own_due(space, now, limit);
        for (key, w) in due {
            match self.read_lease(tx, &key, true).await? {
                Some(rec) if rec.stamp == w.stamp => {
                    if !found.iter().any(|(_, e)| e.key == key) {
                        found.push((
                            w.sent + w.ttl,
                            ExpiredLease {
                                key,
                                holder: rec.holder,
                                token: rec.token,
                            },
                        ));
                    }
                }
                _ => lock(&self.obs).forget_stamp(&key, &w.stamp),
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.token.cmp(&b.1.token)));
        found.truncate(limit);
        Ok(found.into_iter().map(|(_, e)| e).collect())
    }

    pub(crate) async fn reap_once(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        key: &Key,
        token: FencingToken,
        nonce: u64,
    ) -> Result<Retire, Fail> {
        if self.we_retired(tx, at, token, nonce).await? {
            return Ok(Retire::Done(None));
        }
        let now = self.observe(tx).await?;
        match self.read_lease(tx, key, false).await? {
            Some(rec) if rec.token == token && self.is_expired(key, &rec, now) => {
                self.retire(tx, key, &rec, nonce);
                self.record_death(tx, key, &rec, DeathCause::Reaped).await?;
                Ok(Retire::Done(Some(rec)))
            }
            _ => Ok(Retire::No),
        }
    }

    pub(crate) async fn dead_once(
        &self,
        tx: &mut dyn Transaction,
        limit: usize,
    ) -> Result<Vec<DeadToken>, Fail> {
        let (b, e) = self.layout.dead_all();
        let mut out = Vec::new();
        for (k, v) in tx.range(RangeRead::new(&b, &e, limit).snapshot()).await? {
            let token = self.layout.parse_dead(&k)?;
            let (_, key) = decode_dead(&v)?;
            out.push(DeadToken { key, token });
        }
        Ok(out)
    }

    pub(crate) async fn next_expiry_once(
        &self,
        tx: &mut dyn Transaction,
        space: &Space,
    ) -> Result<Option<Duration>, Fail> {
        let now = self.observe(tx).await?;
        let mut earliest: Option<Instant> = None;
        let mut any = false;
        for (ttl_ms, key, stamp) in self.ttl_groups(tx, space).await? {
            any = true;
            let ttl = ttl_of(ttl_ms);
            let d = {
                let mut obs = lock(&self.obs);
                obs.note_ttl(ttl);
                obs.deadline(&key, &stamp, ttl).unwrap_or(now + ttl)
            };
            earliest = Some(earliest.map_or(d, |e| e.min(d)));
        }
        // Own writes may be known from an earlier instant than the oldest stamp.
        loop {
            let next = lock(&self.obs).own_next(space);
            let Some((key, w)) = next else {
                break;
            };
            match self.read_lease(tx, &key, true).await? {
                Some(rec) if rec.stamp == w.stamp => {
                    any = true;
                    let d = w.sent + w.ttl;
                    earliest = Some(earliest.map_or(d, |e| e.min(d)));
                    break;
                }
                _ => lock(&self.obs).forget_stamp(&key, &w.stamp),
            }
        }
        Ok(if any {
            earliest.map(|d| d.saturating_duration_since(now))
        } else {
            None
        })
    }

    // ----- items -----

    pub(crate) async fn read_meta(
        &self,
        tx: &mut dyn Transaction,
        id: u64,
        snapshot: bool,
    ) -> Result<Option<ItemMeta>, Fail> {
        match tx.get(&self.layout.item(id), snapshot).await? {
            Some(raw) => Ok(Some(ItemMeta::decode(&raw)?)),
            None => Ok(None),
        }
    }

    pub(crate) async fn read_record(
        &self,
        tx: &mut dyn Transaction,
        id: u64,
    ) -> Result<Option<ItemRecord>, Fail> {
        let Some(meta) = self.read_meta(tx, id, true).await? else {
            return Ok(None);
        };
        let payload = tx
            .get(&self.layout.payload(id), true)
            .await?
            .unwrap_or_default();
        Ok(Some(ItemRecord {
            item: Item {
                id: ItemId(id),
                payload,
                attempts: meta.attempts,
                max_attempts: meta.max_attempts,
            },
            state: meta.state,
        }))
    }

    /// Moves an item between states, keeping the indexes and counters in step.
    pub(crate) fn move_item(
        &self,
        tx: &mut dyn Transaction,
        id: u64,
        meta: &mut ItemMeta,
        to: ItemState,
        request: &[u8],
    ) {
        match meta.state {
            ItemState::Pending => tx.clear(&self.layout.pending(id)),
            ItemState::Owned(t) => tx.clear(&self.layout.owned(t, id)),
            ItemState::DeadLettered => tx.clear(&self.layout.dead_letter(id)),
        }
        match to {
            ItemState::Pending => tx.set(&self.layout.pending(id), b""),
            ItemState::Owned(t) => tx.set(&self.layout.owned(t, id), request),
            ItemState::DeadLettered => tx.set(&self.layout.dead_letter(id), b""),
        }
        tx.add(&self.layout.count(Count::of(meta.state)), -1);
        tx.add(&self.layout.count(Count::of(to)), 1);
        meta.state = to;
        tx.set(&self.layout.item(id), &meta.encode());
    }

    /// Gives an owned item back: pending, or dead-lettered when out of attempts or
    /// `retry` is false.
    pub(crate) fn hand_back(
        &self,
        tx: &mut dyn Transaction,
        id: u64,
        meta: &mut ItemMeta,
        retry: bool,
    ) -> ItemState {
        let to = if retry && meta.attempts < meta.max_attempts {
            ItemState::Pending
        } else {
            ItemState::DeadLettered
        };
        self.move_item(tx, id, meta, to, &[]);
        to
    }

    pub(crate) async fn enqueue_once(
        &self,
        tx: &mut dyn Transaction,
        payload: &[u8],
        max_attempts: u32,
        key: Option<RequestId>,
    ) -> Result<u64, Fail> {
        let key = key.map(|k| self.layout.enqueue_key(k.to_bytes()));
        if let Some(key) = &key {
            // Also how a retry after an unknown commit result finds its own enqueue.
            if let Some(raw) = tx.get(key, false).await? {
                return Ok(decode_u64(&raw)?);
            }
        }
        let id = self.next_counter(tx, "item").await?;
        if let Some(key) = &key {
            tx.set(key, &id.to_be_bytes());
        }
        let meta = ItemMeta {
            attempts: 0,
            max_attempts,
            state: ItemState::Pending,
        };
        tx.set(&self.layout.item(id), &meta.encode());
        tx.set(&self.layout.payload(id), payload);
        tx.set(&self.layout.pending(id), b"");
        tx.add(&self.layout.count(Count::Pending), 1);
        Ok(id)
    }

    pub(crate) async fn claim_once(
        &self,
        tx: &mut dyn Transaction,
        lease: &Lease,
        n: usize,
        request: RequestId,
    ) -> Result<Vec<Item>, Fail> {
        self.check_current(tx, lease).await?;
        // A repeat of this request (by the caller, or by the retry loop after an
        // unknown commit result): hand back exactly what it took, take nothing new.
        let request_id = request;
        let request = request.to_bytes();
        let (b, e) = self.layout.owned_by(lease.token);
        let mut ours = Vec::new();
        for (k, v) in tx.range(RangeRead::new(&b, &e, usize::MAX)).await? {
            if v.as_slice() == request {
                ours.push(self.layout.parse_id(&k)?);
            }
        }
        if !ours.is_empty() {
            let mut items = Vec::with_capacity(ours.len());
            for id in ours {
                if let Some(rec) = self.read_record(tx, id).await? {
                    items.push(rec.item);
                }
            }
            return Ok(items);
        }
        // Else admitted only above the token's high-water mark, which it raises (also
        // when nothing is pending): a late or repeated copy, or an older id after a
        // newer one, takes nothing. Read for conflicts: concurrent claims of one
        // token serialize on it.
        let mark = self.layout.claim_mark(lease.token);
        if let Some(raw) = tx.get(&mark, false).await? {
            let last = <[u8; 16]>::try_from(raw.as_slice())
                .map_err(|_| Fail::Stop(corrupt("claim high-water mark")))?;
            if request_id <= RequestId(u128::from_be_bytes(last)) {
                return Ok(Vec::new());
            }
        }
        tx.set(&mark, &request);
        let (b, e) = self.layout.pending_all();
        let rows = tx.range(RangeRead::new(&b, &e, n)).await?;
        let mut items = Vec::with_capacity(rows.len());
        for (k, _) in rows {
            let id = self.layout.parse_id(&k)?;
            let Some(mut meta) = self.read_meta(tx, id, false).await? else {
                return Err(Fail::Stop(corrupt("pending index")));
            };
            meta.attempts += 1;
            self.move_item(tx, id, &mut meta, ItemState::Owned(lease.token), &request);
            let payload = tx
                .get(&self.layout.payload(id), true)
                .await?
                .unwrap_or_default();
            items.push(Item {
                id: ItemId(id),
                payload,
                attempts: meta.attempts,
                max_attempts: meta.max_attempts,
            });
        }
        Ok(items)
    }

    /// After an unknown commit result: true when the lease is still current, so that an
    /// item it no longer owns was moved by an earlier attempt of this very call (a
    /// live token's items move only through its own `complete` and `fail`).
    async fn ours_before(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        lease: &Lease,
    ) -> Result<bool, Fail> {
        if !at.maybe_committed {
            return Ok(false);
        }
        match self.check_current(tx, lease).await {
            Ok(_) => Ok(true),
            Err(Fail::Stop(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub(crate) async fn complete_once(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        lease: &Lease,
        id: ItemId,
    ) -> Result<(), Fail> {
        match self.read_meta(tx, id.0, false).await? {
            Some(meta) if meta.state == ItemState::Owned(lease.token) => {}
            // Gone while our lease is current: our earlier attempt completed it.
            None if self.ours_before(tx, at, lease).await? => return Ok(()),
            _ => return Err(Fail::Stop(lease.fenced(id))),
        }
        tx.clear(&self.layout.item(id.0));
        tx.clear(&self.layout.payload(id.0));
        tx.clear(&self.layout.owned(lease.token, id.0));
        tx.add(&self.layout.count(Count::Owned), -1);
        Ok(())
    }

    pub(crate) async fn fail_once(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        lease: &Lease,
        id: ItemId,
        retry: bool,
    ) -> Result<ItemState, Fail> {
        match self.read_meta(tx, id.0, false).await? {
            Some(mut meta) if meta.state == ItemState::Owned(lease.token) => {
                Ok(self.hand_back(tx, id.0, &mut meta, retry))
            }
            // No longer ours while our lease is current: our earlier attempt handed it
            // back (and somebody may have taken it since).
            other if self.ours_before(tx, at, lease).await? => Ok(match other {
                Some(meta) if meta.state == ItemState::DeadLettered => ItemState::DeadLettered,
                _ if retry => ItemState::Pending,
                _ => ItemState::DeadLettered,
            }),
            _ => Err(Fail::Stop(lease.fenced(id))),
        }
    }

    /// One batch of `requeue_orphans`: `None` when the token is not in the dead set.
    pub(crate) async fn requeue_once(
        &self,
        tx: &mut dyn Transaction,
        token: FencingToken,
    ) -> Result<Option<(Requeued, bool)>, Fail> {
        if tx.get(&self.layout.dead(token), false).await?.is_none() {
            return Ok(None);
        }
        let (b, e) = self.layout.owned_by(token);
        let rows = tx.range(RangeRead::new(&b, &e, MAX_BATCH)).await?;
        let done = rows.len() < MAX_BATCH;
        let mut out = Requeued::default();
        for (k, _) in rows {
            let id = self.layout.parse_id(&k)?;
            match self.read_meta(tx, id, false).await? {
                Some(mut meta) if meta.state == ItemState::Owned(token) => {
                    match self.hand_back(tx, id, &mut meta, true) {
                        ItemState::Pending => out.requeued.push(ItemId(id)),
                        _ => out.dead_lettered.push(ItemId(id)),
                    }
                }
                _ => tx.clear(&k), // a stray index entry
            }
        }
        // The sweep's tally (every batch, whichever sweeper ran it) goes into the
        // token's death record with the last batch.
        self.tally_sweep(tx, token, &out, done).await?;
        if done {
            // The token is forgotten, its claim high-water mark with it.
            tx.clear(&self.layout.dead(token));
            tx.clear(&self.layout.claim_mark(token));
        }
        Ok(Some((out, done)))
    }

    pub(crate) async fn counts_once(&self, tx: &mut dyn Transaction) -> Result<ItemCounts, Fail> {
        let mut c = [0u64; 3];
        for (i, which) in [Count::Pending, Count::Owned, Count::Dead]
            .into_iter()
            .enumerate()
        {
            if let Some(raw) = tx.get(&self.layout.count(which), false).await? {
                c[i] = decode_count(&raw);
            }
        }
        Ok(ItemCounts {
            pending: c[0],
            owned: c[1],
            dead_lettered: c[2],
        })
    }

    pub(crate) async fn dead_letters_once(
        &self,
        tx: &mut dyn Transaction,
        limit: usize,
    ) -> Result<Vec<ItemRecord>, Fail> {
        let (b, e) = self.layout.dead_letters_all();
        let mut out = Vec::new();
        for (k, _) in tx.range(RangeRead::new(&b, &e, limit)).await? {
            if let Some(rec) = self.read_record(tx, self.layout.parse_id(&k)?).await? {
                out.push(rec);
            }
        }
        Ok(out)
    }
}
