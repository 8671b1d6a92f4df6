//! The batch operations of [`EtcdStore`]: `reap_many` as one read and one guarded
//! `Txn` per chunk, instead of a read, a counter read and a `Txn` per lease; and
//! `requeue_orphans_many` as two reads and whole sweeps packed into transactions,
//! instead of two to four round trips per token.
//!
//! Each entry answers exactly what `reap` of it alone would: the guards are the
//! same (the record's mod revision and the lease-bound key's absence, per entry,
//! and the death counter, bumped once per chunk with one death record per reaped
//! lease). A transaction is all or nothing, so a chunk that loses any race (another
//! reaper, an acquire, another death) writes nothing; the entries still open are
//! read again, and after [`MAX_TRIES`] rounds of contention each is reaped alone.

use std::collections::HashSet;

use etcd_client::{Compare, KeyValue, Txn, TxnOp};
use liveness_core::{
    DeathCause, FencingToken, ItemId, ItemState, ItemStore, Key, Requeued, Result,
};

use crate::deaths::death_counter;
use crate::error::corrupt;
use crate::keys::{Keys, Meta};
use crate::lease::{Current, Snapshot};
use crate::store::{hand_back, EtcdStore, MAX_BATCH, MAX_TXN_OPS};
use crate::txn::{del, first, get, mod_rev, put, ranges, revision, under, version, MAX_TRIES};

/// Leases reaped per transaction: each writes up to 5 keys (the record's delete, the
/// dead-set entry, the death record, its pointer, the delete of the record that
/// falls out of retention), plus the death counter once: 24 × 5 + 1 = 121, under
/// etcd's 128 operations.
pub(crate) const REAP_CHUNK: usize = 24;

impl EtcdStore {
    /// `reap_many` (the caller checked the batch's size, at most `MAX_BATCH`: the
    /// read of 2 keys per entry and the counter fits one transaction).
    pub(crate) async fn reap_batch(
        &self,
        expired: &[(Key, FencingToken)],
    ) -> Result<Vec<Result<bool>>> {
        let k = self.keys();
        let ctr = k.death_ctr();
        let mut out: Vec<Option<Result<bool>>> = expired.iter().map(|_| None).collect();
        // A key given twice takes part once; its repeats are reaped alone after it
        // (and answer what a reap after the first one would).
        let mut keys = HashSet::new();
        let (firsts, repeats): (Vec<usize>, Vec<usize>) =
            (0..expired.len()).partition(|i| keys.insert(&expired[*i].0));
        // A chunk never deletes a death record it writes (seq - keep is below it).
        let chunk = REAP_CHUNK.min(usize::try_from(self.death_keep()).unwrap_or(usize::MAX));
        for _ in 0..MAX_TRIES {
            let todo: Vec<usize> = firsts
                .iter()
                .copied()
                .filter(|i| out[*i].is_none())
                .collect();
            if todo.is_empty() {
                break;
            }
            let seen = self.inner.expiry.generation();
            let mut reads: Vec<TxnOp> = todo
                .iter()
                .flat_map(|i| {
                    let key = &expired[*i].0;
                    [get(&k.record(key)), get(&k.live(key))]
                })
                .collect();
            reads.push(get(&ctr));
            let resp = self.txn(Txn::new().and_then(reads)).await?;
            let r = ranges(&resp);
            let (mut ctr_cmp, mut last) =
                death_counter(&ctr, first(r.get(2 * todo.len())).as_ref())?;
            let mut reapable: Vec<(usize, Current)> = Vec::new();
            for (j, i) in todo.iter().enumerate() {
                let (key, token) = &expired[*i];
                let snap = Snapshot::from(first(r.get(2 * j)), first(r.get(2 * j + 1)))?;
                match snap.record {
                    None => {
                        self.inner.expiry.forget_upto(key, seen);
                        out[*i] = Some(Ok(false));
                    }
                    Some(c) if c.token != *token || snap.live.is_some() => {
                        out[*i] = Some(Ok(false));
                    }
                    Some(c) => reapable.push((*i, c)),
                }
            }
            for part in reapable.chunks(chunk.max(1)) {
                let mut compares = vec![ctr_cmp.clone()];
                let mut ops = Vec::with_capacity(part.len() * 5 + 1);
                for (i, c) in part {
                    let (key, token) = &expired[*i];
                    let (rec_key, live_key) = (k.record(key), k.live(key));
                    last += 1;
                    compares.push(mod_rev(&rec_key, c.mod_rev));
                    compares.push(version(&live_key, 0));
                    ops.push(del(&rec_key));
                    ops.push(put(&k.dead(*token), key.to_string()));
                    ops.extend(self.death_ops(
                        key,
                        &c.rec.holder,
                        *token,
                        DeathCause::Reaped,
                        last,
                    ));
                }
                ops.push(put(&ctr, last.to_string()));
                let resp = self.txn(Txn::new().when(compares).and_then(ops)).await?;
                if !resp.succeeded() {
                    // Some entry lost a race, or another death took the counter:
                    // read the open entries again.
                    break;
                }
                for (i, _) in part {
                    self.inner.expiry.forget_upto(&expired[*i].0, seen);
                    out[*i] = Some(Ok(true));
                }
                ctr_cmp = mod_rev(&ctr, revision(&resp));
            }
        }
        for i in firsts.into_iter().chain(repeats) {
            if out[i].is_none() {
                let (key, token) = &expired[i];
                out[i] = Some(liveness_core::LeaseStore::reap(self, key, *token).await);
            }
        }
        Ok(out.into_iter().map(|a| a.unwrap_or(Ok(false))).collect())
    }
}

/// Dead tokens read per transaction: 4 reads each (the dead-set entry, a page of
/// its owned items, its sweep tally, its pointer to its death record).
pub(crate) const REQUEUE_CHUNK: usize = MAX_TXN_OPS / 4;

/// One dead token's whole sweep, planned from one read: its items' moves and its
/// last step, to go in one transaction.
struct Sweep {
    /// Where the token is in the call's list.
    at: usize,
    compares: Vec<Compare>,
    ops: Vec<TxnOp>,
    moved: Requeued,
}

impl EtcdStore {
    /// `requeue_orphans_many` for at most [`REQUEUE_CHUNK`] tokens: one read of
    /// them all, one read of their death records, then each dead token's whole
    /// sweep (its items back to pending or dead letters, its tally into its death
    /// record, the token out of the dead set) in one guarded transaction together
    /// with other tokens' sweeps, as many as fit etcd's 128 operations. A token not
    /// in the dead set answers empty without a write. A token with a full page of
    /// items (more may follow), a repeat of a token, and the tokens of a
    /// transaction that lost a race are swept alone by `requeue_orphans`.
    pub(crate) async fn requeue_batch(
        &self,
        tokens: &[FencingToken],
    ) -> Result<Vec<Result<Requeued>>> {
        let k = self.keys();
        let mut out: Vec<Option<Result<Requeued>>> = tokens.iter().map(|_| None).collect();
        let mut seen = HashSet::new();
        let (firsts, mut alone): (Vec<usize>, Vec<usize>) =
            (0..tokens.len()).partition(|i| seen.insert(tokens[*i]));
        let reads: Vec<TxnOp> = firsts
            .iter()
            .flat_map(|i| {
                let t = tokens[*i];
                [
                    get(&k.dead(t)),
                    TxnOp::get(k.owned_by(t), Some(under(MAX_BATCH))),
                    get(&k.death_tally(t)),
                    get(&k.death_of(t)),
                ]
            })
            .collect();
        let resp = self.txn(Txn::new().and_then(reads)).await?;
        let r = ranges(&resp);
        // The dead tokens with everything they own in the page, with their reads.
        let mut dead = Vec::new();
        for (j, i) in firsts.iter().enumerate() {
            if first(r.get(4 * j)).is_none() {
                // Not (or no longer) in the dead set: nothing to do.
                out[*i] = Some(Ok(Requeued::default()));
                continue;
            }
            let owned = r
                .get(4 * j + 1)
                .map(|g| g.kvs().to_vec())
                .unwrap_or_default();
            if owned.len() >= MAX_BATCH {
                alone.push(*i);
                continue;
            }
            dead.push((*i, owned, first(r.get(4 * j + 2)), first(r.get(4 * j + 3))));
        }
        // Their death records, in one read.
        let mut records = Vec::new();
        let mut at = Vec::new();
        for (n, (_, _, _, of)) in dead.iter().enumerate() {
            if let Some(of) = of {
                records.push(get(&self.death_pointed(of)?));
                at.push(n);
            }
        }
        let mut record: Vec<Option<KeyValue>> = dead.iter().map(|_| None).collect();
        if !records.is_empty() {
            let resp = self.txn(Txn::new().and_then(records)).await?;
            for (n, g) in at.into_iter().zip(ranges(&resp)) {
                record[n] = g.kvs().first().cloned();
            }
        }
        let mut sweeps = Vec::new();
        for ((i, owned, tally, of), rec) in dead.into_iter().zip(record) {
            let t = tokens[i];
            let (tally_cmp, mut swept) = self.sweep_tally(t, tally.as_ref())?;
            let mut compares = Vec::new();
            let mut ops = Vec::new();
            let mut moved = Requeued::default();
            for kv in &owned {
                let id = Keys::trailing_id(kv.key()).ok_or_else(|| corrupt(kv.key()))?;
                let meta = Meta::decode(kv.value()).ok_or_else(|| corrupt(kv.key()))?;
                let key = k.owned(t, id);
                let (state, back) = hand_back(k, &key, id, &meta, true);
                compares.push(mod_rev(&key, kv.mod_revision()));
                ops.extend(back);
                match state {
                    ItemState::Pending => {
                        swept.requeued += 1;
                        moved.requeued.push(ItemId(id));
                    }
                    _ => {
                        swept.dead_lettered += 1;
                        moved.dead_lettered.push(ItemId(id));
                    }
                }
            }
            let (c, o) = self.finish_plan(t, tally_cmp, swept, of.as_ref(), rec.as_ref())?;
            compares.extend(c);
            ops.extend(o);
            sweeps.push(Sweep {
                at: i,
                compares,
                ops,
                moved,
            });
        }
        // As many whole sweeps per transaction as fit.
        let mut sweeps = sweeps.into_iter().peekable();
        while sweeps.peek().is_some() {
            let mut part: Vec<Sweep> = Vec::new();
            let (mut n_cmp, mut n_ops) = (0, 0);
            while let Some(next) = sweeps.peek() {
                let fits = n_cmp + next.compares.len() <= MAX_TXN_OPS
                    && n_ops + next.ops.len() <= MAX_TXN_OPS;
                if !fits && !part.is_empty() {
                    break;
                }
                let Some(next) = sweeps.next() else { break };
                n_cmp += next.compares.len();
                n_ops += next.ops.len();
                part.push(next);
            }
            let mut compares = Vec::with_capacity(n_cmp);
            let mut ops = Vec::with_capacity(n_ops);
            for s in &mut part {
                compares.append(&mut s.compares);
                ops.append(&mut s.ops);
            }
            let resp = self.txn(Txn::new().when(compares).and_then(ops)).await?;
            for s in part {
                if resp.succeeded() {
                    out[s.at] = Some(Ok(s.moved));
                } else {
                    // Lost a race (a concurrent sweeper, a claim's answer): alone.
                    alone.push(s.at);
                }
            }
        }
        alone.sort_unstable();
        for i in alone {
            out[i] = Some(ItemStore::requeue_orphans(self, tokens[i]).await);
        }
        Ok(out
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Ok(Requeued::default())))
            .collect())
    }
}
