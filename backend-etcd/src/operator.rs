//! `impl OperatorStore for EtcdStore`: the operator's views, on input that
//! `liveness_core::CheckInput` already checked: the store time, the lease listing,
//! the death history (`deaths.rs`), the item counts and listings by state, and the
//! dead-letter retries.

use std::time::Duration;

use etcd_client::{GetOptions, KeyValue, Txn, TxnOp};
use liveness_core::{
    async_trait, DeathRecord, Error, InputProblem, Item, ItemCounts, ItemId, ItemRecord, ItemState,
    ItemStateKind, Key, LeaseInfo, LeaseStatus, Name, OperatorStore, Page, Result, Space,
    StoreTime,
};

use crate::core::{
    del, first, get, mod_rev, put, ranges, secs, to_prefix_end, under, EtcdStore, Snapshot,
    MAX_BATCH, MAX_TXN_OPS,
};
use crate::error::{at_key, corrupt, Fault, MAX_TRIES};
use crate::items::error_text;
use crate::keys::{Held, Keys, Meta, Record};
use crate::BACKEND;

/// A page of `items` reads each item's meta, body and error text in one transaction.
const _: () = assert!(3 * MAX_BATCH <= MAX_TXN_OPS);

#[async_trait]
impl OperatorStore for EtcdStore {
    async fn store_time(&self) -> Result<StoreTime> {
        // etcd exposes no clock reading (its lease countdown runs on the leader and
        // is only visible per lease, in whole seconds). This is the handle's own
        // monotonic clock, anchored at the Unix epoch by the host clock read once at
        // connect (so that death records written by other handles compare, up to
        // the hosts' clock offset): for diagnostics only; no expiry decision ever
        // uses it.
        Ok(self.store_now())
    }

    async fn leases(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        // The records and the lease-bound keys of the page in one transaction (one
        // revision), then the lease-bound keys of the sessions its riding members ride
        // (a second read), then the time left of each live one.
        let Page { after, limit } = page;
        let k = self.keys();
        let records = k.records_in(space);
        let lives = k.lives_in(space);
        // Exclusive of `after`: its name followed by NUL, the next key in byte order.
        let start = |prefix: &str| match after {
            Some(a) => format!("{prefix}{}\0", a.name()),
            None => prefix.to_owned(),
        };
        // At most `limit` live keys lie between the page's first and last record, so
        // the first `limit` live keys from the same start cover them all.
        let resp = self
            .txn(Txn::new().and_then(vec![
                TxnOp::get(start(&records), Some(to_prefix_end(&records, limit))),
                TxnOp::get(
                    start(&lives),
                    Some(to_prefix_end(&lives, limit).with_keys_only()),
                ),
            ]))
            .await?;
        let r = ranges(&resp);
        let recs = r.first().map(|g| g.kvs().to_vec()).unwrap_or_default();
        let live: Vec<KeyValue> = r.get(1).map(|g| g.kvs().to_vec()).unwrap_or_default();
        // The sessions the page's riding members ride: their lease-bound keys.
        let mut sessions: Vec<Key> = Vec::new();
        for kv in &recs {
            if let Some(Record {
                session: Some((s, _)),
                ..
            }) = Record::decode(kv.value())
            {
                if !sessions.contains(&s) {
                    sessions.push(s);
                }
            }
        }
        let mut session_lives: Vec<(Key, Option<KeyValue>)> = Vec::new();
        for chunk in sessions.chunks(MAX_TXN_OPS) {
            let reads = chunk.iter().map(|s| get(&k.live(s))).collect::<Vec<_>>();
            let resp = self.txn(Txn::new().and_then(reads)).await?;
            for (s, g) in chunk.iter().zip(ranges(&resp)) {
                session_lives.push((s.clone(), g.kvs().first().cloned()));
            }
        }
        let mut out = Vec::with_capacity(recs.len());
        let mut ttls = tokio::task::JoinSet::new();
        for (i, kv) in recs.into_iter().enumerate() {
            let name = kv
                .key()
                .strip_prefix(records.as_bytes())
                .and_then(|n| std::str::from_utf8(n).ok())
                .and_then(|n| Name::new(n).ok())
                .ok_or_else(|| corrupt(at_key(kv.key())))?;
            let key = Key::new(space.clone(), name);
            let bound = live
                .iter()
                .find(|l| l.key() == k.live(&key).as_bytes())
                .cloned();
            let mut snap = Snapshot::from(Some(kv), bound)?;
            let mut id = snap.record.as_ref().map_or(0, |c| c.rec.lease_id);
            if let Some((s, _)) = snap.rides() {
                snap.session_live = session_lives
                    .iter()
                    .find(|(key, _)| key == s)
                    .and_then(|(_, kv)| kv.clone());
                id = snap.session_live.as_ref().map_or(0, |kv| kv.lease());
            }
            let is_live = snap.is_live();
            let Some(c) = snap.record else { continue };
            if is_live {
                let store = self.clone();
                ttls.spawn(async move { (i, store.time_to_live(id).await) });
            }
            out.push((
                i,
                LeaseInfo::of(key, c.rec.holder, c.token, c.rec.ttl, LeaseStatus::Expired)
                    .with_session(c.rec.session.map(|(s, _)| s)),
            ));
        }
        while let Some(done) = ttls.join_next().await {
            let (i, left) =
                done.map_err(|e| Error::backend(BACKEND, Fault::Task(e.to_string())))?;
            let left = left?;
            if let Some((_, info)) = out.iter_mut().find(|(j, _)| *j == i) {
                // etcd reports whole seconds, truncated: the last second reads 0; a
                // negative answer means revoked since the read (expired now).
                if left >= 0 {
                    info.status = LeaseStatus::Live {
                        remaining: secs(left)
                            .min(info.ttl.duration())
                            .max(Duration::from_millis(1)),
                    };
                }
            }
        }
        Ok(out.into_iter().map(|(_, info)| info).collect())
    }

    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        self.death_page(before, limit).await
    }

    async fn item_counts(&self) -> Result<ItemCounts> {
        let k = self.keys();
        let count =
            |p: String| TxnOp::get(p, Some(GetOptions::new().with_prefix().with_count_only()));
        // Pending ones are the items neither owned nor dead-lettered: the pending
        // index and the held-back items (whose prefix also holds their timers).
        let resp = self
            .txn(Txn::new().and_then(vec![
                count(k.metas()),
                count(k.owneds()),
                count(k.dead_letters()),
            ]))
            .await?;
        let r = ranges(&resp);
        let n = |i: usize| {
            r.get(i)
                .map(|g| u64::try_from(g.count()).unwrap_or(0))
                .unwrap_or(0)
        };
        let (owned, dead) = (n(1), n(2));
        Ok(ItemCounts::new(
            n(0).saturating_sub(owned + dead),
            owned,
            dead,
        ))
    }

    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        // Ids from the state's index (pending while nothing is held back,
        // dead-lettered) or from the meta records (owned: there is no index by id;
        // pending with held-back items, kept by due time), then their metas and
        // payloads in one transaction; an item whose state changed in between is
        // left out.
        let Page { after, limit } = page;
        let k = self.keys();
        let first_id = after.map_or(0, |a| a.0.saturating_add(1));
        let mut ids = Vec::new();
        let indexed = match state {
            ItemStateKind::Owned => None,
            ItemStateKind::Pending => {
                let (prefix, start) = (k.pendings(), k.pending(first_id));
                let resp = self
                    .txn(Txn::new().and_then(vec![
                        TxnOp::get(k.helds(), Some(under(1).with_keys_only())),
                        TxnOp::get(start, Some(to_prefix_end(&prefix, limit).with_keys_only())),
                    ]))
                    .await?;
                let mut r = ranges(&resp).into_iter().map(|mut g| g.take_kvs());
                let held = r.next().unwrap_or_default();
                let index = r.next().unwrap_or_default();
                held.is_empty().then_some(index)
            }
            ItemStateKind::DeadLettered => {
                let (prefix, start) = (k.dead_letters(), k.dead_letter(first_id));
                Some(
                    self.range(start, to_prefix_end(&prefix, limit).with_keys_only())
                        .await?,
                )
            }
        };
        match indexed {
            Some(index) => {
                for kv in index {
                    ids.push(Keys::trailing_id(kv.key()).ok_or_else(|| corrupt(at_key(kv.key())))?);
                }
            }
            None => {
                // Walk the meta records from `after`, a batch at a time.
                let prefix = k.metas();
                let mut start = k.meta(first_id);
                'walk: loop {
                    let batch = self
                        .range(start.clone(), to_prefix_end(&prefix, 256))
                        .await?;
                    let Some(last) = batch.last() else { break };
                    let next =
                        Keys::trailing_id(last.key()).ok_or_else(|| corrupt(at_key(last.key())))?;
                    for kv in &batch {
                        let Some((_, Some(now))) = Meta::decode_with(kv.value()) else {
                            return Err(corrupt(at_key(kv.key())));
                        };
                        if now.kind() == state {
                            ids.push(
                                Keys::trailing_id(kv.key())
                                    .ok_or_else(|| corrupt(at_key(kv.key())))?,
                            );
                            if ids.len() == limit {
                                break 'walk;
                            }
                        }
                    }
                    if batch.len() < 256 {
                        break;
                    }
                    start = k.meta(next.saturating_add(1));
                }
            }
        }
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // 3 reads per item: at most 3 × `MAX_BATCH` (the input checks' bound on
        // `limit`), under etcd's `--max-txn-ops` (asserted at the top of this file).
        let ops = ids
            .iter()
            .flat_map(|id| [get(&k.meta(*id)), get(&k.body(*id)), get(&k.error(*id))])
            .collect::<Vec<_>>();
        let resp = self.txn(Txn::new().and_then(ops)).await?;
        let r = ranges(&resp);
        let mut out = Vec::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            let Some(meta_kv) = first(r.get(3 * i)) else {
                continue; // completed since the listing
            };
            let (meta, now) = match Meta::decode_with(meta_kv.value()) {
                Some((m, Some(s))) => (m, s),
                _ => return Err(corrupt(at_key(meta_kv.key()))),
            };
            if now.kind() != state {
                continue;
            }
            let payload = first(r.get(3 * i + 1))
                .map(|kv| kv.value().to_vec())
                .ok_or_else(|| corrupt(at_key(k.body(*id).as_bytes())))?;
            let last_error = error_text(first(r.get(3 * i + 2)).as_ref())?;
            out.push(
                ItemRecord::new(
                    Item::new(ItemId(*id), payload, meta.attempts, meta.max_attempts),
                    now,
                )
                .with_last_error(last_error),
            );
        }
        Ok(out)
    }

    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        for _ in 0..MAX_TRIES {
            if let Some(mut answer) = self.revive(&[id.0]).await? {
                return answer.pop().unwrap_or(Ok(id.0)).map(|_| ());
            }
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    async fn cancel(&self, id: ItemId) -> Result<Option<ItemState>> {
        for _ in 0..MAX_TRIES {
            if let Some(answer) = self.cancel_once(id.0).await? {
                return Ok(answer);
            }
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        // The lowest dead-lettered ids, moved in one transaction (retried when one of
        // them changed meanwhile).
        let k = self.keys();
        for _ in 0..MAX_TRIES {
            let prefix = k.dead_letters();
            let ids = self
                .trailing_ids(
                    prefix.clone(),
                    to_prefix_end(&prefix, limit).with_keys_only(),
                )
                .await?;
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            if let Some(moved) = self.revive(&ids).await? {
                return Ok(moved.into_iter().flatten().map(ItemId).collect());
            }
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }
}

impl EtcdStore {
    /// One try of `cancel`: the item's meta and its pending entry read, then the
    /// item removed in one transaction guarded by what was read. `Ok(None)` when
    /// something changed meanwhile (the caller reads again).
    ///
    /// A held-back item's entry sits beside its timer (`item/q/<due>/<group>/<id>`),
    /// a place its meta does not name: it is found by walking the held-back keys (an
    /// operator's call, paid only for a held-back item).
    async fn cancel_once(&self, id: u64) -> Result<Option<Option<ItemState>>> {
        let k = self.keys();
        let resp = self
            .txn(Txn::new().and_then([get(&k.meta(id)), get(&k.pending(id))]))
            .await?;
        let r = ranges(&resp);
        let Some(meta) = first(r.first()) else {
            return Ok(Some(None));
        };
        let state = match Meta::decode_with(meta.value()) {
            Some((_, Some(s))) => s,
            _ => return Err(corrupt(at_key(meta.key()))),
        };
        let mut compares = vec![mod_rev(&k.meta(id), meta.mod_revision())];
        let mut ops = vec![del(&k.meta(id)), del(&k.body(id)), del(&k.error(id))];
        match state {
            ItemState::Owned(_) => return Ok(Some(Some(state))),
            ItemState::DeadLettered => ops.push(del(&k.dead_letter(id))),
            ItemState::Pending => match first(r.get(1)) {
                Some(kv) => {
                    compares.push(mod_rev(&k.pending(id), kv.mod_revision()));
                    ops.push(del(&k.pending(id)));
                }
                None => {
                    // Pending without an entry in either place: being moved; read
                    // again.
                    let Some((entry, rev, timer)) = self.held_entry(id).await? else {
                        return Ok(None);
                    };
                    compares.push(mod_rev(&entry, rev));
                    ops.push(del(&entry));
                    ops.extend(timer.map(|t| del(&t)));
                }
            },
        }
        let resp = self.txn(Txn::new().when(compares).and_then(ops)).await?;
        Ok(resp.succeeded().then_some(Some(state)))
    }

    /// The key and mod revision of held-back item `id`'s entry, if it has one; and
    /// its group's timer key when `id` is the group's last item (the timer goes with
    /// it, so that `next_due` waits for no empty group).
    async fn held_entry(&self, id: u64) -> Result<Option<(String, i64, Option<String>)>> {
        let k = self.keys();
        let read = self
            .range(k.helds(), GetOptions::new().with_prefix().with_keys_only())
            .await?;
        let items: Vec<(u64, u64, u64, &KeyValue)> = read
            .iter()
            .filter_map(|kv| match k.parse_held(kv.key()) {
                Some(Held::Item { due, group, id }) => Some((due, group, id, kv)),
                _ => None,
            })
            .collect();
        let found = items
            .iter()
            .find(|(_, _, i, _)| *i == id)
            .map(|(due, group, _, kv)| {
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                (key, kv.mod_revision(), (*due, *group))
            });
        let others = found.as_ref().map_or(0, |(_, _, timer)| {
            items
                .iter()
                .filter(|(due, group, i, _)| (*due, *group) == *timer && *i != id)
                .count()
        });
        Ok(found.map(|(key, rev, (due, group))| {
            let timer = (others == 0).then(|| k.timer(due, group));
            (key, rev, timer)
        }))
    }

    /// Moves the dead-lettered items `ids` back to pending with no attempts, in one
    /// transaction guarded by their metas as read. `Ok(None)` when one changed
    /// meanwhile (the caller reads again); otherwise the ids moved and, for each id
    /// that is not dead-lettered, why (`NoSuchItem` / `NotDeadLettered`).
    pub(crate) async fn revive(&self, ids: &[u64]) -> Result<Option<Vec<Result<u64>>>> {
        let k = self.keys();
        let resp = self
            .txn(Txn::new().and_then(ids.iter().map(|id| get(&k.meta(*id))).collect::<Vec<_>>()))
            .await?;
        let r = ranges(&resp);
        let mut compares = Vec::new();
        let mut ops = Vec::new();
        let mut out = Vec::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            let Some(kv) = first(r.get(i)) else {
                out.push(Err(Error::invalid("item", InputProblem::NoSuchItem)));
                continue;
            };
            let (meta, state) = match Meta::decode_with(kv.value()) {
                Some((m, Some(s))) => (m, s),
                _ => return Err(corrupt(at_key(kv.key()))),
            };
            if state != ItemState::DeadLettered {
                out.push(Err(Error::invalid("item", InputProblem::NotDeadLettered)));
                continue;
            }
            let fresh = Meta {
                attempts: 0,
                ..meta
            };
            compares.push(mod_rev(&k.meta(*id), kv.mod_revision()));
            ops.extend([
                del(&k.dead_letter(*id)),
                put(&k.pending(*id), fresh.encode()),
                put(&k.meta(*id), fresh.encode_with(ItemState::Pending)),
            ]);
            out.push(Ok(*id));
        }
        if ops.is_empty() {
            return Ok(Some(out));
        }
        let resp = self.txn(Txn::new().when(compares).and_then(ops)).await?;
        Ok(resp.succeeded().then_some(out))
    }
}
