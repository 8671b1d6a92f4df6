//! The operator's read paths on etcd: the death history and its sweep counts, the
//! member listing, items by state and the dead-letter retries.
//!
//! A death is recorded by the transaction that ends the lease (reap, release, an
//! acquire over an expired record): it compares the death counter (`death/ctr`) as it
//! was read and bumps it, so seqs are gapless and follow the order of the deaths; a
//! transaction that lost the counter to another death is retried by its caller. The
//! record that fell out of the retention window is deleted by the same transaction
//! (one delete per death). A sweep (`requeue_orphans`, in batches) keeps a running
//! tally next to the dead token, compared and bumped by every batch; its last step
//! writes the tally into the death record and forgets the token, in one transaction.

use std::time::Duration;

use etcd_client::{Compare, GetOptions, KeyValue, Txn, TxnOp};
use liveness_core::lease::death_page;
use liveness_core::{
    DeathCause, DeathRecord, Error, FencingToken, HolderId, InputProblem, Item, ItemId, ItemRecord,
    ItemState, ItemStateKind, Key, LeaseInfo, LeaseStatus, Name, Result, Space, StoreTime, Swept,
};

use crate::error::{corrupt, Fault};
use crate::keys::{Keys, Meta};
use crate::lease::{secs, Snapshot};
use crate::store::EtcdStore;
use crate::txn::{del, exists, first, get, mod_rev, put, ranges, version, MAX_TRIES};
use crate::BACKEND;

/// The compare and the operations that record one death, to add to the transaction
/// that ends the lease.
pub(crate) struct DeathWrite {
    pub(crate) compare: Compare,
    pub(crate) ops: Vec<TxnOp>,
}

/// A death record as stored: `cause\nat_us\ntoken\nkey\nswept\nholder`, `swept` being
/// `-` or `requeued dead_lettered`.
fn encode(rec: &DeathRecord) -> String {
    let cause = match rec.cause {
        DeathCause::Reaped => 0,
        DeathCause::Released => 1,
        DeathCause::Superseded => 2,
    };
    let swept = match rec.swept {
        None => "-".to_owned(),
        Some(s) => format!("{} {}", s.requeued, s.dead_lettered),
    };
    format!(
        "{cause}\n{}\n{}\n{}\n{swept}\n{}",
        rec.at.since_epoch().as_micros(),
        rec.token.0,
        rec.key,
        rec.holder
    )
}

fn decode(seq: u64, raw: &[u8]) -> Option<DeathRecord> {
    let s = std::str::from_utf8(raw).ok()?;
    let mut parts = s.splitn(6, '\n');
    let cause = match parts.next()? {
        "0" => DeathCause::Reaped,
        "1" => DeathCause::Released,
        "2" => DeathCause::Superseded,
        _ => return None,
    };
    let at = StoreTime::from_epoch(Duration::from_micros(parts.next()?.parse().ok()?));
    let token = FencingToken(parts.next()?.parse().ok()?);
    let key = Key::parse(parts.next()?).ok()?;
    let swept = match parts.next()? {
        "-" => None,
        counts => Some(tally(counts.as_bytes())?),
    };
    let holder = HolderId::new(parts.next()?).ok()?;
    Some(DeathRecord {
        seq,
        key,
        holder,
        token,
        at,
        cause,
        swept,
    })
}

/// A sweep tally as stored: `requeued dead_lettered`.
fn tally(raw: &[u8]) -> Option<Swept> {
    let s = std::str::from_utf8(raw).ok()?;
    let (r, d) = s.split_once(' ')?;
    Some(Swept {
        requeued: r.parse().ok()?,
        dead_lettered: d.parse().ok()?,
    })
}

/// The compare on the death counter `ctr` as read in `kv`, and its value (the last
/// death's seq, 0 before the first).
pub(crate) fn death_counter(ctr: &str, kv: Option<&KeyValue>) -> Result<(Compare, u64)> {
    Ok(match kv {
        None => (version(ctr, 0), 0),
        Some(kv) => (mod_rev(ctr, kv.mod_revision()), number(kv)?),
    })
}

fn number(kv: &KeyValue) -> Result<u64> {
    std::str::from_utf8(kv.value())
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| corrupt(kv.key()))
}

/// The first key after every key under `prefix` (the range end of a prefix).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

/// A range read of at most `limit` keys from `start` to the end of `prefix`.
fn from(prefix: &str, limit: usize) -> GetOptions {
    GetOptions::new()
        .with_range(prefix_end(prefix))
        .with_limit(i64::try_from(limit).unwrap_or(i64::MAX))
}

impl EtcdStore {
    /// What records the death of `token` (held by `holder` on `key`): the compare on
    /// the death counter as read now, and the writes. The transaction they join
    /// fails when another death was recorded meanwhile; its caller retries.
    pub(crate) async fn death_write(
        &self,
        key: &Key,
        holder: &HolderId,
        token: FencingToken,
        cause: DeathCause,
    ) -> Result<DeathWrite> {
        let k = self.keys();
        let ctr = k.death_ctr();
        let (compare, last) = death_counter(&ctr, self.get_one(&ctr).await?.as_ref())?;
        let seq = last + 1;
        let mut ops = vec![put(&ctr, seq.to_string())];
        ops.extend(self.death_ops(key, holder, token, cause, seq));
        Ok(DeathWrite { compare, ops })
    }

    /// The writes that record death number `seq` (of `token`, held by `holder` on
    /// `key`), except the death counter's own: the record, the token's pointer to
    /// it, and the delete of the record that falls out of the retention window.
    pub(crate) fn death_ops(
        &self,
        key: &Key,
        holder: &HolderId,
        token: FencingToken,
        cause: DeathCause,
        seq: u64,
    ) -> Vec<TxnOp> {
        let k = self.keys();
        let rec = DeathRecord {
            seq,
            key: key.clone(),
            holder: holder.clone(),
            token,
            at: self.store_now(),
            cause,
            swept: None,
        };
        let mut ops = vec![
            put(&k.death(seq), encode(&rec)),
            put(&k.death_of(token), seq.to_string()),
        ];
        let keep = self.death_keep();
        if seq > keep {
            ops.push(del(&k.death(seq - keep)));
        }
        ops
    }

    /// How many death records the namespace keeps.
    pub(crate) fn death_keep(&self) -> u64 {
        u64::try_from(self.inner.info.caps.death_retention.max(1)).unwrap_or(u64::MAX)
    }

    /// The compare and the value of dead `token`'s sweep tally, as read in `kv`.
    pub(crate) fn sweep_tally(
        &self,
        token: FencingToken,
        kv: Option<&KeyValue>,
    ) -> Result<(Compare, Swept)> {
        let key = self.keys().death_tally(token);
        Ok(match kv {
            None => (version(&key, 0), Swept::default()),
            Some(kv) => (
                mod_rev(&key, kv.mod_revision()),
                tally(kv.value()).ok_or_else(|| corrupt(kv.key()))?,
            ),
        })
    }

    /// The write of a sweep batch's new tally.
    pub(crate) fn tally_op(&self, token: FencingToken, swept: Swept) -> TxnOp {
        put(
            &self.keys().death_tally(token),
            format!("{} {}", swept.requeued, swept.dead_lettered),
        )
    }

    /// The last step of a sweep: takes `token` out of the dead set and writes the
    /// tally into its death record, in one transaction guarded by the dead-set entry
    /// and the tally as read (`tally_cmp`). False when the transaction lost a race
    /// (the caller reads again).
    pub(crate) async fn finish_sweep(
        &self,
        token: FencingToken,
        tally_cmp: Compare,
        swept: Swept,
    ) -> Result<bool> {
        let of = self.get_one(&self.keys().death_of(token)).await?;
        let rec = match &of {
            Some(kv) => self.get_one(&self.keys().death(number(kv)?)).await?,
            None => None,
        };
        let (compares, ops) =
            self.finish_plan(token, tally_cmp, swept, of.as_ref(), rec.as_ref())?;
        let resp = self.txn(Txn::new().when(compares).and_then(ops)).await?;
        Ok(resp.succeeded())
    }

    /// The compares and writes of a sweep's last step (see
    /// [`EtcdStore::finish_sweep`]), given the token's pointer to its death record
    /// (`of`) and that record (`rec`) as read: at most 4 compares and 5 writes.
    pub(crate) fn finish_plan(
        &self,
        token: FencingToken,
        tally_cmp: Compare,
        swept: Swept,
        of: Option<&KeyValue>,
        rec: Option<&KeyValue>,
    ) -> Result<(Vec<Compare>, Vec<TxnOp>)> {
        let k = self.keys();
        let dead = k.dead(token);
        let of_key = k.death_of(token);
        let mut compares = vec![exists(&dead), tally_cmp];
        // The token is forgotten, its claim high-water mark with it.
        let mut ops = vec![
            del(&dead),
            del(&k.death_tally(token)),
            del(&of_key),
            del(&k.claim_mark(token)),
        ];
        if let Some(seq_kv) = of {
            let seq = number(seq_kv)?;
            compares.push(mod_rev(&of_key, seq_kv.mod_revision()));
            if let Some(kv) = rec {
                let rec_key = k.death(seq);
                let mut rec = decode(seq, kv.value()).ok_or_else(|| corrupt(kv.key()))?;
                rec.swept = Some(swept);
                compares.push(mod_rev(&rec_key, kv.mod_revision()));
                ops.push(put(&rec_key, encode(&rec)));
            }
        }
        Ok((compares, ops))
    }

    /// The death record `death_of` points to (its value is the seq).
    pub(crate) fn death_pointed(&self, of: &KeyValue) -> Result<String> {
        Ok(self.keys().death(number(of)?))
    }

    /// The handle's store time (see [`liveness_core::LeaseStore::store_time`] on
    /// [`EtcdStore`]).
    pub(crate) fn store_now(&self) -> StoreTime {
        StoreTime::from_epoch(self.inner.wall_at_start + self.inner.started.elapsed())
    }

    /// `LeaseStore::deaths`: the counter, then the page's window of seqs (records are
    /// contiguous by seq: the oldest ones go first), newest first: O(page).
    pub(crate) async fn death_page(
        &self,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<DeathRecord>> {
        let limit = self.inner.info.caps.clamp_limit("limit", limit)?;
        let k = self.keys();
        let last = match self.get_one(&k.death_ctr()).await? {
            None => return Ok(Vec::new()),
            Some(kv) => number(&kv)?,
        };
        let Some((bottom, top)) = death_page(last, before, limit) else {
            return Ok(Vec::new());
        };
        let opts = GetOptions::new().with_range(k.death(top + 1));
        let mut out = self
            .range(k.death(bottom), opts)
            .await?
            .iter()
            .map(|kv| {
                let seq = Keys::trailing_id(kv.key()).ok_or_else(|| corrupt(kv.key()))?;
                decode(seq, kv.value()).ok_or_else(|| corrupt(kv.key()))
            })
            .collect::<Result<Vec<_>>>()?;
        out.reverse();
        Ok(out)
    }

    /// `LeaseStore::members`: the records and the lease-bound keys of the page in
    /// one transaction (one revision), then the time left of each live one.
    pub(crate) async fn member_page(
        &self,
        space: &Space,
        after: Option<&Key>,
        limit: usize,
    ) -> Result<Vec<LeaseInfo>> {
        let limit = self.inner.info.caps.clamp_limit("limit", limit)?;
        if after.is_some_and(|k| k.space() != space) {
            return Err(Error::invalid("after", InputProblem::OtherSpace));
        }
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
                TxnOp::get(start(&records), Some(from(&records, limit))),
                TxnOp::get(start(&lives), Some(from(&lives, limit).with_keys_only())),
            ]))
            .await?;
        let r = ranges(&resp);
        let recs = r.first().map(|g| g.kvs().to_vec()).unwrap_or_default();
        let live: Vec<KeyValue> = r.get(1).map(|g| g.kvs().to_vec()).unwrap_or_default();
        let mut out = Vec::with_capacity(recs.len());
        let mut ttls = tokio::task::JoinSet::new();
        for (i, kv) in recs.into_iter().enumerate() {
            let name = kv
                .key()
                .strip_prefix(records.as_bytes())
                .and_then(|n| std::str::from_utf8(n).ok())
                .and_then(|n| Name::new(n).ok())
                .ok_or_else(|| corrupt(kv.key()))?;
            let key = Key::new(space.clone(), name);
            let bound = live
                .iter()
                .find(|l| l.key() == k.live(&key).as_bytes())
                .cloned();
            let snap = Snapshot::from(Some(kv), bound)?;
            let is_live = snap.is_live();
            let Some(c) = snap.record else { continue };
            if is_live {
                let store = self.clone();
                let id = c.rec.lease_id;
                ttls.spawn(async move { (i, store.time_to_live(id).await) });
            }
            out.push((
                i,
                LeaseInfo {
                    key,
                    holder: c.rec.holder,
                    token: c.token,
                    ttl: c.rec.ttl,
                    status: LeaseStatus::Expired,
                },
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

    /// `ItemStore::items`: ids from the state's index (pending, dead-lettered) or
    /// from the meta records (owned: there is no index by id), then their metas and
    /// payloads in one transaction; an item whose state changed in between is left
    /// out.
    pub(crate) async fn item_page(
        &self,
        state: ItemStateKind,
        after: Option<ItemId>,
        limit: usize,
    ) -> Result<Vec<ItemRecord>> {
        let limit = self.inner.info.caps.clamp_limit("limit", limit)?;
        let k = self.keys();
        let first_id = after.map_or(0, |a| a.0.saturating_add(1));
        let mut ids = Vec::new();
        match state {
            ItemStateKind::Pending | ItemStateKind::DeadLettered => {
                let (prefix, start) = if state == ItemStateKind::Pending {
                    (k.pendings(), k.pending(first_id))
                } else {
                    (k.dead_letters(), k.dead_letter(first_id))
                };
                for kv in self
                    .range(start, from(&prefix, limit).with_keys_only())
                    .await?
                {
                    ids.push(Keys::trailing_id(kv.key()).ok_or_else(|| corrupt(kv.key()))?);
                }
            }
            ItemStateKind::Owned => {
                // Walk the meta records from `after`, a batch at a time.
                let prefix = k.metas();
                let mut start = k.meta(first_id);
                'walk: loop {
                    let batch = self.range(start.clone(), from(&prefix, 256)).await?;
                    let Some(last) = batch.last() else { break };
                    let next = Keys::trailing_id(last.key()).ok_or_else(|| corrupt(last.key()))?;
                    for kv in &batch {
                        if let Some((_, Some(ItemState::Owned(_)))) = Meta::decode_with(kv.value())
                        {
                            ids.push(Keys::trailing_id(kv.key()).ok_or_else(|| corrupt(kv.key()))?);
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
        let ops = ids
            .iter()
            .flat_map(|id| [get(&k.meta(*id)), get(&k.body(*id))])
            .collect::<Vec<_>>();
        let resp = self.txn(Txn::new().and_then(ops)).await?;
        let r = ranges(&resp);
        let mut out = Vec::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            let Some(meta_kv) = first(r.get(2 * i)) else {
                continue; // completed since the listing
            };
            let (meta, now) = match Meta::decode_with(meta_kv.value()) {
                Some((m, Some(s))) => (m, s),
                _ => return Err(corrupt(meta_kv.key())),
            };
            if now.kind() != state {
                continue;
            }
            let payload = first(r.get(2 * i + 1))
                .map(|kv| kv.value().to_vec())
                .ok_or_else(|| corrupt(k.body(*id).as_bytes()))?;
            out.push(ItemRecord {
                item: Item {
                    id: ItemId(*id),
                    payload,
                    attempts: meta.attempts,
                    max_attempts: meta.max_attempts,
                },
                state: now,
            });
        }
        Ok(out)
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
                _ => return Err(corrupt(kv.key())),
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

    /// `ItemStore::retry_dead_letters`: the lowest dead-lettered ids, moved in one
    /// transaction (retried when one of them changed meanwhile).
    pub(crate) async fn revive_many(&self, limit: usize) -> Result<Vec<ItemId>> {
        let limit = self.inner.info.caps.clamp_limit("limit", limit)?;
        let k = self.keys();
        for _ in 0..MAX_TRIES {
            let prefix = k.dead_letters();
            let ids = self
                .trailing_ids(prefix.clone(), from(&prefix, limit).with_keys_only())
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
