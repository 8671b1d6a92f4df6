//! `impl OperatorStore for EtcdStore`: the operator's views, on input that
//! `liveness_core::CheckInput` already checked: the store time, the lease listing,
//! the death history (`deaths.rs`), the item counts and listings by state, and the
//! dead-letter retries.

use std::time::Duration;

use etcd_client::{GetOptions, KeyValue, Txn, TxnOp};
use liveness_core::{
    async_trait, DeathRecord, Error, InputProblem, Item, ItemCounts, ItemId, ItemRecord, ItemState,
    ItemStateKind, Key, LeaseInfo, LeaseStatus, Name, OperatorStore, Page, QueueCounts, QueueName,
    Result, Space, StoreTime,
};

use crate::core::{
    del, first, get, mod_rev, put, ranges, secs, to_prefix_end, under, EtcdStore, Snapshot,
    MAX_BATCH, MAX_TXN_OPS,
};
use crate::error::{at_key, corrupt, is_compacted, map, Fault, MAX_TRIES};
use crate::items::error_text;
use crate::keys::{Held, Keys, Meta, Record};
use crate::watch::prefix_end;
use crate::BACKEND;

/// Keys one page of `queue_counts`' scans reads.
const COUNT_PAGE: usize = 1_000;

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

    /// At one revision: each queue's pending index counted (etcd counts, as for
    /// `item_counts`), the queues other than the default found one read each (the
    /// first key after the previous queue's index); the held-back, owned and
    /// dead-lettered items, whose indexes are not by queue, read in pages and counted
    /// by the queue their values name. Read again from a new revision when etcd
    /// compacted the first one away meanwhile.
    async fn queue_counts(&self) -> Result<Vec<QueueCounts>> {
        for _ in 0..MAX_TRIES {
            if let Some(counts) = self.queue_counts_at(COUNT_PAGE).await? {
                return Ok(counts);
            }
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        // Ids from the state's index (pending while nothing is held back or in
        // another queue than the default, dead-lettered) or from the meta records
        // (owned: there is no index by id; pending with held-back items, kept by due
        // time, or with items in other queues, kept by queue), then their metas and
        // payloads in one transaction; an item whose state changed in between is
        // left out.
        let Page { after, limit } = page;
        let k = self.keys();
        let first_id = after.map_or(0, |a| a.0.saturating_add(1));
        let mut ids = Vec::new();
        let indexed = match state {
            ItemStateKind::Owned => None,
            ItemStateKind::Pending => {
                // The default queue's index, while no item is held back or pending
                // in another queue.
                let default = QueueName::DEFAULT;
                let (prefix, start) = (k.pendings(default), k.pending(default, first_id));
                let resp = self
                    .txn(Txn::new().and_then(vec![
                        TxnOp::get(k.helds(), Some(under(1).with_keys_only())),
                        TxnOp::get(k.named_pendings(), Some(under(1).with_keys_only())),
                        TxnOp::get(start, Some(to_prefix_end(&prefix, limit).with_keys_only())),
                    ]))
                    .await?;
                let mut r = ranges(&resp).into_iter().map(|mut g| g.take_kvs());
                let held = r.next().unwrap_or_default();
                let named = r.next().unwrap_or_default();
                let index = r.next().unwrap_or_default();
                (held.is_empty() && named.is_empty()).then_some(index)
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
                    Item::new(ItemId(*id), payload, meta.attempts, meta.max_attempts)
                        .with_queue(meta.queue),
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
    /// One range read at revision `rev` (0: the current one): `None` when etcd
    /// compacted that revision away.
    async fn read_at(
        &self,
        key: impl Into<Vec<u8>>,
        opts: GetOptions,
        rev: i64,
    ) -> Result<Option<etcd_client::GetResponse>> {
        let opts = match rev {
            0 => opts,
            rev => opts.with_revision(rev),
        };
        match self.get_unmapped(key, opts).await {
            Ok(resp) => Ok(Some(resp)),
            Err(e) if is_compacted(&e) => Ok(None),
            Err(e) => Err(map(e)),
        }
    }

    /// One try of `queue_counts`, its scans reading `page` keys at a time: `None`
    /// when etcd compacted the revision it reads at away meanwhile.
    pub(crate) async fn queue_counts_at(&self, page: usize) -> Result<Option<Vec<QueueCounts>>> {
        let k = self.keys();
        let mut counts: Vec<(QueueName, ItemCounts)> = Vec::new();
        let mut of = |queue: QueueName, state: ItemStateKind, n: u64| {
            let at = match counts.iter().position(|(q, _)| *q == queue) {
                Some(at) => at,
                None => {
                    counts.push((queue, ItemCounts::default()));
                    counts.len() - 1
                }
            };
            let c = &mut counts[at].1;
            match state {
                ItemStateKind::Pending => c.pending += n,
                ItemStateKind::Owned => c.owned += n,
                ItemStateKind::DeadLettered => c.dead_lettered += n,
            }
        };
        let count_only = || GetOptions::new().with_prefix().with_count_only();
        let counted = |resp: &etcd_client::GetResponse| u64::try_from(resp.count()).unwrap_or(0);
        // The default queue's pending index; its revision is every later read's.
        let default = k.pendings(QueueName::DEFAULT);
        let Some(resp) = self.read_at(default, count_only(), 0).await? else {
            return Ok(None);
        };
        let rev = resp.header().map_or(0, |h| h.revision());
        of(QueueName::DEFAULT, ItemStateKind::Pending, counted(&resp));
        // Every other queue's: the first key after the previous one's index names
        // the next queue.
        let named = k.named_pendings();
        let end = prefix_end(&named);
        let mut from = named.into_bytes();
        loop {
            let opts = GetOptions::new()
                .with_range(end.clone())
                .with_limit(1)
                .with_keys_only();
            let Some(mut resp) = self.read_at(from, opts, rev).await? else {
                return Ok(None);
            };
            let Some(kv) = resp.take_kvs().into_iter().next() else {
                break;
            };
            let queue = k
                .parse_named_pending(kv.key())
                .ok_or_else(|| corrupt(at_key(kv.key())))?;
            let index = k.pendings(queue);
            from = prefix_end(&index);
            let Some(resp) = self.read_at(index, count_only(), rev).await? else {
                return Ok(None);
            };
            of(queue, ItemStateKind::Pending, counted(&resp));
        }
        // The indexes that are not by queue, by the queue in each value.
        let scans = [
            (k.helds(), ItemStateKind::Pending),
            (k.owneds(), ItemStateKind::Owned),
            (k.dead_letters(), ItemStateKind::DeadLettered),
        ];
        let limit = i64::try_from(page.max(1)).unwrap_or(i64::MAX);
        for (prefix, state) in scans {
            let end = prefix_end(&prefix);
            let mut from = prefix.as_bytes().to_vec();
            loop {
                let opts = GetOptions::new().with_range(end.clone()).with_limit(limit);
                let Some(mut resp) = self.read_at(from.clone(), opts, rev).await? else {
                    return Ok(None);
                };
                let more = resp.more();
                let kvs = resp.take_kvs();
                for kv in &kvs {
                    if state == ItemStateKind::Pending {
                        match k.parse_held(kv.key()) {
                            Some(Held::Item { .. }) => {}
                            Some(Held::Timer { .. }) => continue,
                            None => return Err(corrupt(at_key(kv.key()))),
                        }
                    }
                    let meta = Meta::decode(kv.value()).ok_or_else(|| corrupt(at_key(kv.key())))?;
                    of(meta.queue, state, 1);
                }
                match kvs.last() {
                    Some(last) if more => {
                        from = last.key().to_vec();
                        from.push(0);
                    }
                    _ => break,
                }
            }
        }
        counts.retain(|(_, c)| *c != ItemCounts::default());
        counts.sort_by(|(a, _), (b, _)| a.as_str().cmp(b.as_str()));
        Ok(Some(
            counts
                .into_iter()
                .map(|(q, c)| QueueCounts::new(q, c))
                .collect(),
        ))
    }

    /// One try of `cancel`: the item's meta and its pending entry read (in the
    /// default queue's index with the meta; in another queue's, named by the meta,
    /// right after), then the item removed in one transaction guarded by what was
    /// read. `Ok(None)` when something changed meanwhile (the caller reads again).
    ///
    /// A held-back item's entry sits beside its timer (`item/q/<due>/<group>/<id>`),
    /// a place its meta does not name: it is found by walking the held-back keys (an
    /// operator's call, paid only for a held-back item).
    async fn cancel_once(&self, id: u64) -> Result<Option<Option<ItemState>>> {
        let k = self.keys();
        let resp = self
            .txn(Txn::new().and_then([get(&k.meta(id)), get(&k.pending(QueueName::DEFAULT, id))]))
            .await?;
        let r = ranges(&resp);
        let Some(meta) = first(r.first()) else {
            return Ok(Some(None));
        };
        let (queue, state) = match Meta::decode_with(meta.value()) {
            Some((m, Some(s))) => (m.queue, s),
            _ => return Err(corrupt(at_key(meta.key()))),
        };
        let mut compares = vec![mod_rev(&k.meta(id), meta.mod_revision())];
        let mut ops = vec![del(&k.meta(id)), del(&k.body(id)), del(&k.error(id))];
        match state {
            ItemState::Owned(_) => return Ok(Some(Some(state))),
            ItemState::DeadLettered => ops.push(del(&k.dead_letter(id))),
            ItemState::Pending => {
                let pending = k.pending(queue, id);
                let entry = match queue.is_default() {
                    true => first(r.get(1)),
                    false => self.get_one(&pending).await?,
                };
                match entry {
                    Some(kv) => {
                        compares.push(mod_rev(&pending, kv.mod_revision()));
                        ops.push(del(&pending));
                    }
                    None => {
                        // Pending without an entry in either place: being moved;
                        // read again.
                        let Some((entry, rev, timer)) = self.held_entry(id).await? else {
                            return Ok(None);
                        };
                        compares.push(mod_rev(&entry, rev));
                        ops.push(del(&entry));
                        ops.extend(timer.map(|t| del(&t)));
                    }
                }
            }
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

    /// Moves the dead-lettered items `ids` back to pending (each in its own queue)
    /// with no attempts, in one
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
                put(&k.pending(fresh.queue, *id), fresh.encode()),
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
