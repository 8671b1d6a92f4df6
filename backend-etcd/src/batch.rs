//! The batches of [`EtcdStore`], the only form of these operations (the one-entry
//! calls of `liveness_core::Store` arrive here as a batch of one): `acquire_many`
//! pipelined in waves, `renew_many` as one keep-alive per lease and one read,
//! `reap_many` as one read and one guarded `Txn` per chunk, `sweep_many`
//! as two reads and whole sweeps packed into transactions. Each entry answers exactly
//! what it would alone; the entries a batch cannot settle go through the one-lease
//! steps (`acquire_with`, `renew_one` in `etcd_lease.rs`; `reap_one`, `sweep_one` in
//! `deaths.rs`).
//!
//! ## `acquire_many`
//!
//! etcd cannot take many independent acquires in one transaction: a transaction's
//! compares are all or nothing, all its writes share one revision (and a token is
//! the revision that created the lease-bound key, so two leases taken by one
//! transaction would share a token), and each lease needs its own etcd lease. So
//! each entry keeps its own transaction, and a round sends, one wave each:
//!
//! 1. one read of every entry's record and lease-bound key (and the death counter),
//!    at one revision: a key held live answers `Held` from it; only the free and
//!    expired ones go on (a losing acquire grants no etcd lease);
//! 2. their etcd lease grants, all at once;
//! 3. their transactions, all at once, each exactly `acquire_with`'s (the same
//!    compares and writes) plus a compare that CHAINS it to the entry before it: that
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
//! through the one-lease path (`acquire_with`), after the waves. So does an entry
//! whose key holds a riding member's record (judged by its session, which the read
//! did not see).
//!
//! ## `reap_many`
//!
//! Each entry answers exactly what it would alone (`reap_one`): the guards are the
//! same (the record's mod revision and the lease-bound key's absence, per entry,
//! and the death counter, bumped once per chunk with one death record per reaped
//! lease). A transaction is all or nothing, so a chunk that loses any race (another
//! reaper, an acquire, another death) writes nothing; the entries still open are
//! read again, and after [`MAX_TRIES`] rounds of contention each is reaped alone.
//! A riding member (judged by its session) and a key given twice are reaped alone
//! too.

use std::collections::HashSet;

use etcd_client::{Compare, CompareOp, KeyValue, Txn, TxnOp};
use liveness_core::{
    Acquire, BatchResult, DeathCause, Error, FencingToken, Key, Lease, Result, Sweep, Swept,
};

use crate::core::{
    counter_at, del, first, get, mod_rev, put, ranges, revision, under, version, Current,
    EtcdStore, Snapshot, MAX_BATCH, MAX_TXN_OPS,
};
use crate::deaths::{add_to_record, plan_hand_backs};
use crate::error::{Fault, MAX_TRIES};
use crate::etcd_lease::lease_bound;
use crate::sweep_members::MemberSweep;
use crate::BACKEND;

impl EtcdStore {
    /// `acquire_many`: see the module docs.
    pub(crate) async fn acquire_batch(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        let mut out: Vec<Option<Result<Lease>>> = asks.iter().map(|_| None).collect();
        let mut granted: Vec<Option<i64>> = vec![None; asks.len()];
        // Pipelined: the entries before the first whose key an earlier entry names.
        let mut keys = HashSet::new();
        let split = asks
            .iter()
            .position(|ask| !keys.insert(&ask.key))
            .unwrap_or(asks.len());
        let open: Vec<usize> = (0..split).collect();
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
        let mut last_death = counter_at(&ctr, first(r.get(2 * open.len())).as_ref())?.1;
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
                let (rec, put_live) = lease_bound(&live_key, None, ask.ttl, id, &ask.holder);
                let rec = rec.encode();
                let mut when: Vec<Compare> = Vec::new();
                if let Some((key, value)) = &before {
                    when.push(Compare::value(
                        key.as_str(),
                        CompareOp::Equal,
                        value.as_str(),
                    ));
                }
                let ops = match record {
                    // Expired, not yet reaped: declared dead in this step,
                    // with its death record, as `acquire_with` does.
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
                        last_death = last_death.max(counter_at(&ctr, first(r.get(2)).as_ref())?.1);
                        let snap = Snapshot::from(first(r.first()), first(r.get(1)))?;
                        if let Some(record) = self.judge_free(&ask.key, snap, &mut out[i]) {
                            still.push((i, record));
                        }
                    }
                    // Applied or not, nobody knows: this entry answers Unavailable,
                    // as `acquire_with` would; a later one applied only after it (the
                    // chain).
                    Err(e) => out[i] = Some(Err(e)),
                }
            }
            free = still;
        }
        Ok(())
    }

    /// Judges an entry on its key as read in `snap`: held live, it answers `Held`
    /// (into `answer`), as `acquire_with`'s read would; a lease-bound key without a
    /// record is an error; otherwise the key is free (`Some(None)`) or holds an
    /// expired lease to take over (`Some(Some(record))`). A riding member's record
    /// (judged by its session, which this read did not see) is left unanswered:
    /// `acquire_with` takes it after the waves.
    fn judge_free(
        &self,
        key: &Key,
        snap: Snapshot,
        answer: &mut Option<Result<Lease>>,
    ) -> Option<Option<Current>> {
        if snap.rides().is_some() {
            return None;
        }
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
                    Fault::BoundWithoutRecord(self.keys().live(key)),
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

impl EtcdStore {
    /// `renew_many`.
    pub(crate) async fn renew_batch(&self, leases: &[Lease]) -> BatchResult<Lease> {
        // Leases this handle renews already on their etcd lease (a keep-alive slot of
        // their ttl): every keep-alive goes out at once on its stream, then ONE read
        // of all their lease-bound keys (after the answers: `renew_judged`). The
        // others (a first renewal, a ttl change, a riding member) take `renew_one`'s
        // path, at the same time.
        let mut fast = Vec::new();
        let mut slow = Vec::new();
        for (i, lease) in leases.iter().enumerate() {
            let slot = self
                .inner
                .slots
                .get(&lease.key, lease.token)
                .filter(|slot| slot.ttl == lease.ttl);
            match slot {
                Some(slot) => fast.push((i, slot)),
                None => slow.push(i),
            }
        }
        let k = self.keys();
        let fast_renewals = async {
            let kept = futures::future::join_all(
                fast.iter()
                    .map(|(_, slot)| slot.keep_alive(&self.inner.lease, self.inner.timeout)),
            )
            .await;
            // Read only the keys whose keep-alive was answered.
            let reads: Vec<TxnOp> = fast
                .iter()
                .zip(&kept)
                .filter(|(_, k)| k.is_ok())
                .map(|((i, _), _)| get(&k.live(&leases[*i].key)))
                .collect();
            if reads.is_empty() {
                return Ok((kept, Vec::new(), 0));
            }
            let resp = self.txn(Txn::new().and_then(reads)).await?;
            let term = resp.header().map_or(0, |h| h.raft_term());
            let bound: Vec<Option<KeyValue>> = ranges(&resp)
                .into_iter()
                .map(|mut r| r.take_kvs().into_iter().next())
                .collect();
            Ok::<_, Error>((kept, bound, term))
        };
        // `renew_one`'s path: the keep-alive and its judging.
        let slow_renewals =
            futures::future::join_all(slow.iter().map(|i| self.renew_one(&leases[*i])));
        let (fast_answers, slow_answers) = tokio::join!(fast_renewals, slow_renewals);
        let (kept, bound, term) = fast_answers?;
        let mut out: Vec<Option<Result<Lease>>> = leases.iter().map(|_| None).collect();
        for (i, answer) in slow.into_iter().zip(slow_answers) {
            out[i] = Some(answer);
        }
        let mut bound = bound.into_iter();
        let judged = futures::future::join_all(fast.iter().zip(kept).map(|((i, slot), kept)| {
            // The reads are in the order of the answered keep-alives.
            let bound = kept.is_ok().then(|| bound.next().flatten()).flatten();
            async move {
                let lease = &leases[*i];
                match kept {
                    Ok(kept) => self.renew_judged(lease, slot, kept, bound, term).await,
                    Err(e) => Err(e),
                }
            }
        }))
        .await;
        for ((i, _), answer) in fast.iter().zip(judged) {
            out[*i] = Some(answer);
        }
        Ok(out
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(Error::unavailable(BACKEND, Fault::Contention))))
            .collect())
    }
}

/// Leases reaped per transaction: each writes up to 5 keys (the record's delete, the
/// dead-set entry, the death record, its pointer, the delete of the record that
/// falls out of retention), plus the death counter once: 24 × 5 + 1 = 121, under
/// etcd's 128 operations.
pub(crate) const REAP_CHUNK: usize = 24;

impl EtcdStore {
    /// `reap_many` (of at most `MAX_BATCH` entries, the input checks' bound: the read
    /// of 2 keys per entry and the counter fits one transaction).
    pub(crate) async fn reap_batch(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
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
        // Riding members, judged by their session, are reaped alone after the rounds.
        let mut riders = HashSet::new();
        for _ in 0..MAX_TRIES {
            let todo: Vec<usize> = firsts
                .iter()
                .copied()
                .filter(|i| out[*i].is_none() && !riders.contains(i))
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
            let (mut ctr_cmp, mut last) = counter_at(&ctr, first(r.get(2 * todo.len())).as_ref())?;
            let mut reapable: Vec<(usize, Current)> = Vec::new();
            for (j, i) in todo.iter().enumerate() {
                let (key, token) = &expired[*i];
                let snap = Snapshot::from(first(r.get(2 * j)), first(r.get(2 * j + 1)))?;
                if snap.rides().is_some() {
                    riders.insert(*i);
                    continue;
                }
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
                out[i] = Some(self.reap_one(key, *token).await);
            }
        }
        Ok(out.into_iter().map(|a| a.unwrap_or(Ok(false))).collect())
    }
}

/// Dead tokens read per transaction: 5 reads each (the dead-set entry, a page of
/// its owned items, its sweep tally, its pointer to its death record, its member
/// sweep's state should it be a session's).
pub(crate) const SWEEP_CHUNK: usize = MAX_TXN_OPS / 5;

/// One dead token's whole sweep, planned from one read: its items' moves and its
/// last step, to go in one transaction.
struct PlannedSweep {
    /// Where the token is in the call's list.
    at: usize,
    compares: Vec<Compare>,
    ops: Vec<TxnOp>,
    moved: Sweep,
    /// Its death record (key, seq, as read) and what its sweep adds to it: one
    /// write per record and transaction, as a session's members share theirs.
    record: Option<(String, u64, KeyValue)>,
    swept: Swept,
}

impl EtcdStore {
    /// `sweep_many` for at most [`SWEEP_CHUNK`] tokens: one read of
    /// them all, one read of their death records, then each dead token's whole
    /// sweep (its items back to pending or dead letters, its tally into its death
    /// record, the token out of the dead set) in one guarded transaction together
    /// with other tokens' sweeps, as many as fit etcd's 128 operations (sweeps that
    /// add to one death record, a session's members', write it once). A token not
    /// in the dead set answers empty without a write. A token with a full page of
    /// items (more may follow), a dead session's token with members left, a repeat
    /// of a token, and the tokens of a transaction that lost a race are swept alone
    /// by [`EtcdStore::sweep_one`].
    pub(crate) async fn sweep_batch(&self, tokens: &[FencingToken]) -> BatchResult<Sweep> {
        let k = self.keys();
        let mut out: Vec<Option<Result<Sweep>>> = tokens.iter().map(|_| None).collect();
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
                    MemberSweep::read(k, t),
                ]
            })
            .collect();
        let resp = self.txn(Txn::new().and_then(reads)).await?;
        let r = ranges(&resp);
        // The dead tokens with everything they own in the page, with their reads.
        let mut dead = Vec::new();
        for (j, i) in firsts.iter().enumerate() {
            if first(r.get(5 * j)).is_none() {
                // Not (or no longer) in the dead set: nothing to do.
                out[*i] = Some(Ok(Sweep::default()));
                continue;
            }
            let owned = r
                .get(5 * j + 1)
                .map(|g| g.kvs().to_vec())
                .unwrap_or_default();
            let state = MemberSweep::of(k, tokens[*i], r.get(5 * j + 4).map_or(&[], |g| g.kvs()))?;
            let riders = state.members_left();
            if owned.len() >= MAX_BATCH || riders {
                alone.push(*i);
                continue;
            }
            dead.push((*i, owned, first(r.get(5 * j + 2)), first(r.get(5 * j + 3))));
        }
        // Their death records, in one read.
        let mut records = Vec::new();
        let mut at = Vec::new();
        let mut pointed: Vec<Option<(String, u64)>> = dead.iter().map(|_| None).collect();
        for (n, (_, _, _, of)) in dead.iter().enumerate() {
            if let Some(of) = of {
                let (key, seq) = self.death_pointed(of)?;
                records.push(get(&key));
                pointed[n] = Some((key, seq));
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
        for (((i, owned, tally, of), rec), pointed) in dead.into_iter().zip(record).zip(pointed) {
            let t = tokens[i];
            let (tally_cmp, mut swept) = self.sweep_tally(t, tally.as_ref())?;
            let mut compares = Vec::new();
            let mut ops = Vec::new();
            let moved = plan_hand_backs(k, t, &owned, &mut swept, &mut compares, &mut ops)?;
            let (c, o) = self.finish_plan(t, tally_cmp, of.as_ref())?;
            compares.extend(c);
            ops.extend(o);
            let record = match (pointed, rec) {
                (Some((key, seq)), Some(kv)) => Some((key, seq, kv)),
                _ => None,
            };
            sweeps.push(PlannedSweep {
                at: i,
                compares,
                ops,
                moved,
                record,
                swept,
            });
        }
        // As many whole sweeps per transaction as fit.
        let mut sweeps = sweeps.into_iter().peekable();
        while sweeps.peek().is_some() {
            let mut part: Vec<PlannedSweep> = Vec::new();
            // The death records the part adds to, each once: (key, seq, as read, sum).
            let mut adds: Vec<(String, u64, KeyValue, Swept)> = Vec::new();
            let (mut n_cmp, mut n_ops) = (0, 0);
            while let Some(next) = sweeps.peek() {
                let new_record = next
                    .record
                    .as_ref()
                    .is_some_and(|(key, _, _)| !adds.iter().any(|(k, ..)| k == key));
                let extra = usize::from(new_record);
                let fits = n_cmp + next.compares.len() + extra <= MAX_TXN_OPS
                    && n_ops + next.ops.len() + extra <= MAX_TXN_OPS;
                if !fits && !part.is_empty() {
                    break;
                }
                let Some(next) = sweeps.next() else { break };
                n_cmp += next.compares.len() + extra;
                n_ops += next.ops.len() + extra;
                if let Some((key, seq, kv)) = &next.record {
                    match adds.iter_mut().find(|(k, ..)| k == key) {
                        Some((.., sum)) => {
                            sum.requeued += next.swept.requeued;
                            sum.dead_lettered += next.swept.dead_lettered;
                        }
                        None => adds.push((key.clone(), *seq, kv.clone(), next.swept)),
                    }
                }
                part.push(next);
            }
            let mut compares = Vec::with_capacity(n_cmp);
            let mut ops = Vec::with_capacity(n_ops);
            for s in &mut part {
                compares.append(&mut s.compares);
                ops.append(&mut s.ops);
            }
            for (key, seq, kv, sum) in &adds {
                let (c, o) = add_to_record(key, *seq, kv, *sum)?;
                compares.push(c);
                ops.push(o);
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
            out[i] = Some(self.sweep_one(tokens[i]).await);
        }
        Ok(out
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Ok(Sweep::default())))
            .collect())
    }
}
