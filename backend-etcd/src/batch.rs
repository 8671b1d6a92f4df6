//! The batch operations of [`EtcdStore`]: `reap_many` as one read and one guarded
//! `Txn` per chunk, instead of a read, a counter read and a `Txn` per lease.
//!
//! Each entry answers exactly what `reap` of it alone would: the guards are the
//! same (the record's mod revision and the lease-bound key's absence, per entry,
//! and the death counter, bumped once per chunk with one death record per reaped
//! lease). A transaction is all or nothing, so a chunk that loses any race (another
//! reaper, an acquire, another death) writes nothing; the entries still open are
//! read again, and after [`MAX_TRIES`] rounds of contention each is reaped alone.

use std::collections::HashSet;

use etcd_client::{Txn, TxnOp};
use liveness_core::{DeathCause, FencingToken, Key, Result};

use crate::deaths::death_counter;
use crate::lease::{Current, Snapshot};
use crate::store::EtcdStore;
use crate::txn::{del, first, get, mod_rev, put, ranges, revision, version, MAX_TRIES};

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
