//! `acquire_many` of [`EtcdStore`]: a batch of acquires pipelined on the one
//! connection, in a few waves of requests instead of one acquire after the other.
//!
//! etcd cannot take many independent acquires in one transaction: a transaction's
//! compares are all or nothing, all its writes share one revision (and a token is
//! the revision that created the lease-bound key, so two leases taken by one
//! transaction would share a token), and each lease needs its own etcd lease. So
//! each entry keeps `acquire`'s own transaction, and a round sends, one wave each:
//!
//! 1. one read of every entry's record and lease-bound key (and the death counter),
//!    at one revision: a key held live answers `Held` from it, as `acquire`'s own
//!    read would; only the free and expired ones go on (a losing acquire grants no
//!    etcd lease);
//! 2. their etcd lease grants, all at once;
//! 3. their transactions, all at once, each exactly `acquire`'s (the same compares
//!    and writes) plus a compare that CHAINS it to the entry before it: that
//!    entry's record holds the value the entry before wrote (its etcd lease id,
//!    granted to this call alone, makes the value unique). etcd applies requests
//!    sent together in any order; with the chain, a transaction applies only after
//!    the one before it did, so the tokens (revisions) grow in the order of the
//!    entries. A takeover of an expired lease also bumps the death counter, and
//!    compares it with the count the takeover before it wrote.
//!
//! When a transaction fails (a race lost, or it ran ahead of the one before it),
//! every later one fails too (by the chain), and each failed one reads its key
//! again in the same request (the transaction's `else` branch): held live now, it
//! answers `Held`; otherwise it goes in the next wave, with its grant. Each wave
//! settles at least its first entry (which has no chain), so a batch takes at
//! most as many waves as entries, and on a quiet etcd a few (etcd on two cores
//! applied 5 to 20 requests of a wave in order). Entries still open after
//! [`MAX_TRIES`] waves, and every entry from the first one whose key an earlier
//! entry also names (it must see what that one took), go one after the other
//! through `acquire`'s own path, after the waves.

use std::collections::HashSet;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use liveness_core::{Acquire, DeathCause, Error, FencingToken, Key, Lease, Result};

use crate::deaths::death_counter;
use crate::error::Fault;
use crate::keys::Record;
use crate::lease::{Current, Snapshot};
use crate::store::EtcdStore;
use crate::txn::{first, get, mod_rev, put, ranges, revision, version, MAX_TRIES};
use crate::BACKEND;

impl EtcdStore {
    /// What an acquire of `key` that came to `outcome` leaves behind: a `Held` key
    /// is watched for its end (an election candidate waits on it); an etcd lease
    /// `granted` to a failed acquire is revoked (nothing holds it, or, after a lost
    /// answer, nobody knows that something does).
    pub(crate) fn settle_acquire(&self, key: &Key, outcome: &Result<Lease>, granted: Option<i64>) {
        match outcome {
            Ok(_) => self.inner.expiry.not_interested(key),
            Err(e) => {
                if matches!(e, Error::Held { .. }) {
                    self.inner.expiry.interested(key);
                }
                if let Some(id) = granted {
                    self.revoke_later(id);
                }
            }
        }
    }

    /// `acquire_many` (the caller checked the batch's size): see the module docs.
    pub(crate) async fn acquire_batch(&self, asks: &[Acquire]) -> Result<Vec<Result<Lease>>> {
        let caps = self.inner.info.caps;
        let mut out: Vec<Option<Result<Lease>>> = asks
            .iter()
            .map(|ask| caps.check_ttl(ask.ttl).err().map(Err))
            .collect();
        let mut granted: Vec<Option<i64>> = vec![None; asks.len()];
        // Pipelined: the entries before the first whose key an earlier entry names.
        let mut keys = HashSet::new();
        let split = asks
            .iter()
            .position(|ask| !keys.insert(&ask.key))
            .unwrap_or(asks.len());
        let open: Vec<usize> = (0..split).filter(|i| out[*i].is_none()).collect();
        if !open.is_empty() {
            if let Err(e) = self
                .acquire_pipelined(asks, &open, &mut out, &mut granted)
                .await
            {
                // A read failed (or read a corrupt record): the whole call fails,
                // and every grant of this call is let go (nobody will know of them).
                for id in granted.into_iter().flatten() {
                    self.revoke_later(id);
                }
                return Err(e);
            }
        }
        // The rest one after the other, in the order of the entries, after every
        // token the waves took.
        for (i, ask) in asks.iter().enumerate() {
            if out[i].is_none() {
                let answer = self
                    .acquire_with(&ask.key, &ask.holder, ask.ttl, &mut granted[i])
                    .await;
                out[i] = Some(answer);
            }
        }
        Ok(asks
            .iter()
            .zip(out)
            .zip(granted)
            .map(|((ask, answer), granted)| {
                let answer =
                    answer.unwrap_or_else(|| Err(Error::unavailable(BACKEND, Fault::Contention)));
                self.settle_acquire(&ask.key, &answer, granted);
                answer
            })
            .collect())
    }

    /// The pipelined part over the `open` entries (in entry order): one read, the
    /// grants, then waves of chained transactions. Answers the entries it settles in
    /// `out`; any still open after [`MAX_TRIES`] waves are left to the caller. `Err`
    /// only when the read failed.
    async fn acquire_pipelined(
        &self,
        asks: &[Acquire],
        open: &[usize],
        out: &mut [Option<Result<Lease>>],
        granted: &mut [Option<i64>],
    ) -> Result<()> {
        let k = self.keys();
        let ctr = k.death_ctr();
        // 1. One read, at one revision, of every open entry's two keys and the
        // death counter (2 × 32 + 1 operations, under etcd's 128).
        let mut reads: Vec<TxnOp> = open
            .iter()
            .flat_map(|i| {
                let key = &asks[*i].key;
                [get(&k.record(key)), get(&k.live(key))]
            })
            .collect();
        reads.push(get(&ctr));
        let resp = self.txn(Txn::new().and_then(reads)).await?;
        let r = ranges(&resp);
        let mut last_death = death_counter(&ctr, first(r.get(2 * open.len())).as_ref())?.1;
        // Each free (or expired) entry with its record as last read.
        let mut free: Vec<(usize, Option<Current>)> = Vec::new();
        for (j, i) in open.iter().enumerate() {
            let snap = Snapshot::from(first(r.get(2 * j)), first(r.get(2 * j + 1)))?;
            if let Some(record) = self.judge_free(&asks[*i].key, snap, &mut out[*i]) {
                free.push((*i, record));
            }
        }
        // 2. Their grants, all at once.
        let grants =
            futures::future::join_all(free.iter().map(|(i, _)| self.grant(asks[*i].ttl))).await;
        for ((i, _), grant) in free.iter().zip(grants) {
            match grant {
                Ok(id) => granted[*i] = Some(id),
                Err(e) => out[*i] = Some(Err(e)),
            }
        }
        free.retain(|(i, _)| out[*i].is_none());
        // 3. Waves of chained transactions, all of a wave at once.
        for _ in 0..MAX_TRIES {
            if free.is_empty() {
                break;
            }
            let mut txns = Vec::with_capacity(free.len());
            let mut before: Option<(String, String)> = None;
            let mut deaths = 0u64;
            for (i, record) in &free {
                let ask = &asks[*i];
                let id = granted[*i].unwrap_or_default();
                let (rec_key, live_key) = (k.record(&ask.key), k.live(&ask.key));
                let rec = Record {
                    token: None,
                    ttl: ask.ttl,
                    lease_id: id,
                    holder: ask.holder.clone(),
                }
                .encode();
                let put_live = TxnOp::put(
                    live_key.as_str(),
                    "",
                    Some(PutOptions::new().with_lease(id)),
                );
                let mut when: Vec<Compare> = Vec::new();
                if let Some((key, value)) = &before {
                    when.push(Compare::value(
                        key.as_str(),
                        CompareOp::Equal,
                        value.as_str(),
                    ));
                }
                let ops = match record {
                    // Expired, not yet reaped: retired to the dead set in this step,
                    // with its death record, as `acquire` does.
                    Some(c) => {
                        let seq = last_death + deaths + 1;
                        when.push(mod_rev(&rec_key, c.mod_rev));
                        when.push(version(&live_key, 0));
                        when.push(death_count_is(&ctr, seq - 1));
                        deaths += 1;
                        let mut ops = vec![
                            put(&k.dead(c.token), ask.key.to_string()),
                            put(&rec_key, rec.clone()),
                            put_live,
                            put(&ctr, seq.to_string()),
                        ];
                        ops.extend(self.death_ops(
                            &ask.key,
                            &c.rec.holder,
                            c.token,
                            DeathCause::Superseded,
                            seq,
                        ));
                        ops
                    }
                    None => {
                        when.push(version(&rec_key, 0));
                        when.push(version(&live_key, 0));
                        vec![put(&rec_key, rec.clone()), put_live]
                    }
                };
                before = Some((rec_key.clone(), rec));
                // On failure, what changed: the key's two keys and the counter.
                let reread = vec![get(&rec_key), get(&live_key), get(&ctr)];
                txns.push(Txn::new().when(when).and_then(ops).or_else(reread));
            }
            let answers = futures::future::join_all(txns.into_iter().map(|t| self.txn(t))).await;
            let mut still = Vec::new();
            for ((i, record), answer) in free.into_iter().zip(answers) {
                let ask = &asks[i];
                match answer {
                    Ok(resp) if resp.succeeded() => {
                        if record.is_some() {
                            last_death += 1;
                        }
                        let token = u64::try_from(revision(&resp)).unwrap_or(0);
                        out[i] = Some(Ok(Lease::granted(
                            &self.inner.info.issuer,
                            ask.key.clone(),
                            ask.holder.clone(),
                            FencingToken(token),
                            ask.ttl,
                        )));
                    }
                    // A race lost, or it ran ahead of the entry before it (and so
                    // did every later one, chained on it): judged again on what
                    // its failure read.
                    Ok(resp) => {
                        let r = ranges(&resp);
                        last_death =
                            last_death.max(death_counter(&ctr, first(r.get(2)).as_ref())?.1);
                        let snap = Snapshot::from(first(r.first()), first(r.get(1)))?;
                        if let Some(record) = self.judge_free(&ask.key, snap, &mut out[i]) {
                            still.push((i, record));
                        }
                    }
                    // Applied or not, nobody knows: this entry answers Unavailable,
                    // as `acquire` would; a later one applied only after it (the
                    // chain).
                    Err(e) => out[i] = Some(Err(e)),
                }
            }
            free = still;
        }
        Ok(())
    }

    /// Judges an entry on its key as read in `snap`: held live, it answers `Held`
    /// (into `answer`), as `acquire`'s own read would; a lease-bound key without a
    /// record is an error; otherwise the key is free (`Some(None)`) or holds an
    /// expired lease to take over (`Some(Some(record))`).
    fn judge_free(
        &self,
        key: &Key,
        snap: Snapshot,
        answer: &mut Option<Result<Lease>>,
    ) -> Option<Option<Current>> {
        let live = snap.is_live();
        match (snap.record, snap.live) {
            (Some(c), Some(_)) if live => {
                *answer = Some(Err(Error::Held {
                    key: key.clone(),
                    holder: c.rec.holder,
                    token: c.token,
                }));
                None
            }
            (None, Some(_)) => {
                *answer = Some(Err(Error::backend(
                    BACKEND,
                    Fault::Orphan(self.keys().live(key)),
                )));
                None
            }
            (record, _) => Some(record),
        }
    }
}

/// The compare that the death counter `ctr` still counts `last` deaths: absent
/// before the first, else that value (the counter only grows, so its value says as
/// much as its revision).
fn death_count_is(ctr: &str, last: u64) -> Compare {
    if last == 0 {
        version(ctr, 0)
    } else {
        Compare::value(ctr, CompareOp::Equal, last.to_string())
    }
}
