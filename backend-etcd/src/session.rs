//! Members riding a session ([`liveness_core::LeaseStore::join_session_many`]): the
//! join, what the other steps need to judge a riding member and declare it dead, and
//! the sweep of a dead session's members, one batch per `sweep` of its token.
//!
//! A riding member's record (`lease/<space>/<name>`, with [`Record::session`]) names
//! its session's key and token; it has no lease-bound key and no etcd lease of its
//! own, so while it lives it costs etcd nothing: the session's keep-alive is the only
//! renewal. Only the session's own lease-bound key is bound to an etcd lease. Binding
//! the members' keys to it too would let one revoke (or expiry) delete them all in
//! one step, with no death record for any of them, and etcd applies a revoke of a
//! lease with many keys as one large transaction. A member is live while its
//! session's lease-bound key exists with the session's token as its create revision;
//! every transaction that needs it live (a claim) or expired (a reap, a takeover)
//! compares exactly that.
//!
//! The session's member index (`sm/<session token>/<batch>/<space>/<name>`) lists its
//! members, filed by batch: a join reads the session's join counter
//! (`ss/<session token>/j`, whose etcd version counts the joins) and files its entry
//! under the count divided by [`INDEX_BATCH`], bumping the counter in its
//! transaction. Once the session's token is in the dead set, each `sweep`
//! of it declares up to [`MEMBER_SWEEP_BATCH`] of them dead in one transaction: their
//! records deleted, their tokens into the dead set, each linked to the session's death
//! record (whose member count grows by the batch), their index entries deleted by
//! one range delete, and the sweep's cursor (`ss/<session token>/d`) moved past the
//! batches that are now empty. Each step reads a window of a few batches from the
//! cursor, never the whole index: etcd 3.4 walks every key of a range before it
//! applies a limit, so a read of the whole index would cost O(members left) per
//! batch. Batches emptied by releases are skipped with windows that grow while they
//! come back empty.

use std::time::Duration;

use etcd_client::{Compare, DeleteOptions, GetOptions, KeyValue, Txn, TxnOp};
use liveness_core::{
    BatchResult, DeathCause, Error, ExpiredLease, FencingToken, HolderId, JoinAsk, Key, Lease,
    LostCause, Result, Ttl,
};

use crate::core::{
    create_rev, del, exists, first, get, mod_rev, not_create_rev, number, put, ranges, revision,
    secs, token_i64, version, Current, EtcdStore, Snapshot, MAX_BATCH, MAX_TXN_OPS,
};
use crate::deaths::add_members;
use crate::error::{at_key, corrupt, Fault, MAX_TRIES};
use crate::keys::{Record, INDEX_BATCH};
use crate::sweep_members::{MemberSweep, MembersSwept};
use crate::BACKEND;

/// Members declared dead per member-sweep transaction. Each costs 3 writes (its
/// record's delete, its dead-set entry, its link to the session's death record) and 1
/// compare (its record as read); the transaction adds the index entries' range delete,
/// the death record's new member count and the sweep cursor (3 writes), and the dead-set entry,
/// the death record and the cursor as read (3 compares): 32 × 3 + 3 = 99 writes and
/// 35 compares, under etcd's default `--max-txn-ops` of 128 (which bounds compares
/// and writes apart).
pub(crate) const MEMBER_SWEEP_BATCH: usize = if MAX_BATCH < (MAX_TXN_OPS - 3) / 3 {
    MAX_BATCH
} else {
    (MAX_TXN_OPS - 3) / 3
};

// A batch of the member index holds what one member-sweep transaction declares dead.
const _: () = assert!(INDEX_BATCH as usize == MEMBER_SWEEP_BATCH);

/// A member sweep's first window, in batches of the member index: two, so that one
/// read of full batches finds a sweep batch and the one entry over it.
const FIRST_WINDOW: u64 = 2;

/// The widest window, in batches: a read walks at most this many batches' entries
/// (about 2,000 keys when they are full), however many members remain.
const MAX_WINDOW: u64 = 64;

impl EtcdStore {
    /// The compares that `c`, `key`'s record as read, is still that record and is not
    /// live: for a lease of its own, its lease-bound key is gone; for a riding member,
    /// its session's lease-bound key no longer carries the session's token.
    pub(crate) fn expired_guard(&self, key: &Key, c: &Current) -> Vec<Compare> {
        let k = self.keys();
        let gone = match &c.rec.session {
            Some((session, st)) => not_create_rev(&k.live(session), token_i64(*st)),
            None => version(&k.live(key), 0),
        };
        vec![mod_rev(&k.record(key), c.mod_rev), gone]
    }

    /// The write that takes `key`'s record `c`, declared dead, out of its session's member
    /// index, for a riding member (none for a lease of its own).
    pub(crate) fn unride_ops(&self, key: &Key, c: &Current) -> Vec<TxnOp> {
        c.rec
            .session
            .iter()
            .map(|(_, st)| del(&self.keys().session_member(*st, c.rec.batch, key)))
            .collect()
    }

    /// How long a riding member has left: its session's etcd lease's countdown
    /// (`bound`, the session's lease-bound key as read live), at least 1 ms (etcd
    /// reports whole seconds, truncated), capped by the ttl. An etcd lease the
    /// lessor no longer knows (revoked since the read) counts 1 ms.
    pub(crate) async fn session_left(&self, bound: Option<i64>, ttl: Ttl) -> Duration {
        let left = match bound {
            Some(id) => self.time_to_live(id).await.unwrap_or(-1),
            None => -1,
        };
        secs(left).min(ttl.duration()).max(Duration::from_millis(1))
    }

    /// `renew` of a riding member (`snap`, its key as read, shows it current and
    /// live): nothing is written; the answer is its session's time left. When the
    /// lessor no longer knows the session's etcd lease, a second read decides.
    pub(crate) async fn renew_rider(&self, lease: &Lease, snap: &Snapshot) -> Result<Lease> {
        let id = snap.session_live.as_ref().map(|kv| kv.lease());
        if let Some((session, st)) = snap.rides() {
            self.inner.riders.remember(lease, session, *st);
        }
        let left = match id {
            Some(id) => self.time_to_live(id).await?,
            None => -1,
        };
        if left < 0 {
            self.snapshot(&lease.key).await?.check(lease)?;
        }
        Ok(lease.with_expires_in(
            secs(left.max(0))
                .min(lease.ttl.duration())
                .max(Duration::from_millis(1)),
        ))
    }

    /// `join_session_many`: each entry's [`EtcdStore::join`], one after the other (a
    /// later entry on the same key sees what an earlier one took). A key refused as
    /// `Held` is watched for its end, as a key a losing acquire asked for is.
    pub(crate) async fn join_many(&self, session: &Lease, asks: &[JoinAsk]) -> BatchResult<Lease> {
        let mut out = Vec::with_capacity(asks.len());
        for (key, holder) in asks {
            let answer = self.join(session, key, holder).await;
            if let Err(Error::Held { .. }) = &answer {
                self.inner.expiry.interested(key);
            }
            out.push(answer);
        }
        Ok(out)
    }

    /// One entry of `join_session_many`: one read of the session's record,
    /// lease-bound key and join counter and of `key`'s (and, when `key`'s record
    /// rides another session, a read of that session's key), then one guarded
    /// transaction: the session's lease-bound key still carries its token, `key` is
    /// free or holds an expired lease (declared dead in this step, as an acquire does), and
    /// the member's record and index entry (in the batch of the join count as read)
    /// are written and the join counter bumped. The member's token is the
    /// transaction's revision.
    pub(crate) async fn join(
        &self,
        session: &Lease,
        key: &Key,
        holder: &HolderId,
    ) -> Result<Lease> {
        let k = self.keys();
        let (rec_key, live_key) = (k.record(key), k.live(key));
        let session_live = k.live(&session.key);
        let joins = k.session_joins(session.token);
        for _ in 0..MAX_TRIES {
            let resp = self
                .txn(Txn::new().and_then(vec![
                    get(&k.record(&session.key)),
                    get(&session_live),
                    get(&rec_key),
                    get(&live_key),
                    get(&joins),
                ]))
                .await?;
            let r = ranges(&resp);
            // Not compared: concurrent joins may share a count, and so a batch.
            let joined = first(r.get(4)).map_or(0, |kv| u64::try_from(kv.version()).unwrap_or(0));
            let batch = joined / INDEX_BATCH;
            let ses = Snapshot::from(first(r.first()), first(r.get(1)))?.at(&resp);
            let bound = ses.live.as_ref().map(|kv| kv.lease());
            if ses.check(session)?.rec.session.is_some() {
                // Only a lease of its own can be ridden.
                return Err(session.lost(LostCause::Superseded));
            }
            let mut snap = Snapshot::from(first(r.get(2)), first(r.get(3)))?.at(&resp);
            if let Some((other, _)) = snap.rides() {
                if *other == session.key {
                    snap.session_live = first(r.get(1));
                } else {
                    snap = self.snapshot(key).await?;
                }
            }
            let live = snap.is_live();
            match (&snap.record, &snap.live) {
                (Some(c), _) if live => {
                    return Err(Error::Held {
                        key: key.clone(),
                        holder: c.rec.holder.clone(),
                        token: c.token,
                    })
                }
                (None, Some(_)) => {
                    return Err(Error::backend(BACKEND, Fault::BoundWithoutRecord(live_key)))
                }
                _ => {}
            }
            let rec = Record {
                token: None,
                ttl: session.ttl,
                lease_id: 0,
                holder: holder.clone(),
                session: Some((session.key.clone(), session.token)),
                batch,
            };
            let mut when = vec![create_rev(&session_live, token_i64(session.token))];
            let mut ops = vec![
                put(&rec_key, rec.encode()),
                put(&k.session_member(session.token, batch, key), ""),
                put(&joins, ""),
            ];
            match &snap.record {
                None => when.extend([version(&rec_key, 0), version(&live_key, 0)]),
                // Expired, or riding a dead session: declared dead in this step, with its
                // death record, as `acquire` does.
                Some(c) => {
                    let death = self
                        .death_write(key, &c.rec.holder, c.token, DeathCause::Superseded)
                        .await?;
                    when.extend(self.expired_guard(key, c));
                    when.push(death.compare);
                    ops.push(put(&k.dead(c.token), key.to_string()));
                    ops.extend(self.unride_ops(key, c));
                    ops.extend(death.ops);
                }
            }
            // The session's time left is read beside the write (etcd's whole
            // seconds, truncated, outweigh the difference).
            let (resp, left) = tokio::join!(
                self.txn(Txn::new().when(when).and_then(ops)),
                self.session_left(bound, session.ttl)
            );
            let resp = resp?;
            if resp.succeeded() {
                let token = FencingToken(u64::try_from(revision(&resp)).unwrap_or(0));
                let mut lease = Lease::granted(
                    &self.inner.info.issuer,
                    key.clone(),
                    holder.clone(),
                    token,
                    session.ttl,
                );
                lease.expires_in = left;
                self.inner
                    .riders
                    .remember(&lease, &session.key, session.token);
                return Ok(lease);
            }
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    /// Up to [`MEMBER_SWEEP_BATCH`] entries of the member index of the dead session
    /// `token` from its cursor on, the cursor past them, and whether an entry
    /// remains past them. Each read is one window of batches with a limit of one
    /// entry over what is still wanted: the first window [`FIRST_WINDOW`] batches,
    /// each next one twice as wide (up to [`MAX_WINDOW`]), so a read walks a few
    /// batches' entries whatever the session's size, and emptied batches are
    /// skipped quickly.
    pub(crate) async fn next_riders(
        &self,
        token: FencingToken,
        state: &MemberSweep,
    ) -> Result<(Vec<KeyValue>, u64, bool)> {
        let k = self.keys();
        let mut got: Vec<KeyValue> = Vec::with_capacity(MEMBER_SWEEP_BATCH + 1);
        let (mut from, mut window) = (state.cursor, FIRST_WINDOW);
        while from < state.end {
            let to = from.saturating_add(window).min(state.end);
            let want = MEMBER_SWEEP_BATCH + 1 - got.len();
            let opts = GetOptions::new()
                .with_range(k.session_batch(token, to))
                .with_keys_only()
                .with_limit(i64::try_from(want).unwrap_or(i64::MAX));
            let page = self
                .range_walked(k.session_batch(token, from), opts)
                .await?;
            let cut = page.len() >= want;
            got.extend(page);
            if cut {
                // The entry over the batch: the cursor stops at its index batch.
                if let Some(over) = got.pop() {
                    let (batch, _) = k
                        .parse_session_member(token, over.key())
                        .ok_or_else(|| corrupt(at_key(over.key())))?;
                    return Ok((got, batch, true));
                }
            }
            from = to;
            window = window.saturating_mul(2).min(MAX_WINDOW);
        }
        Ok((got, from, false))
    }

    /// One batch of the sweep of the dead session `token`'s members, from where it
    /// stands (`state`) and `of` (the pointer to its death record), read with the token in
    /// the dead set: the next entries of its member index ([`EtcdStore::next_riders`]),
    /// then their records and the death record, then ONE transaction guarded by the
    /// token still being in the dead set, the cursor, each record and the death record
    /// as read, which declares the members dead, deletes their entries and moves the cursor
    /// past them. An entry whose record is gone or no longer rides this session (under
    /// this batch) is only deleted; an index with no entry left only moves the cursor.
    pub(crate) async fn sweep_members(
        &self,
        token: FencingToken,
        state: MemberSweep,
        of: Option<KeyValue>,
    ) -> Result<MembersSwept> {
        let k = self.keys();
        let dead = k.dead(token);
        let (entries, cursor, more) = self.next_riders(token, &state).await?;
        let seq = of.as_ref().map(number).transpose()?;
        let members = entries
            .iter()
            .map(|kv| {
                k.parse_session_member(token, kv.key())
                    .ok_or_else(|| corrupt(at_key(kv.key())))
            })
            .collect::<Result<Vec<(u64, Key)>>>()?;
        let mut reads: Vec<TxnOp> = members.iter().map(|(_, m)| get(&k.record(m))).collect();
        if let (Some(seq), false) = (seq, members.is_empty()) {
            reads.push(get(&k.death(seq)));
        }
        let r = if reads.is_empty() {
            Vec::new()
        } else {
            ranges(&self.txn(Txn::new().and_then(reads)).await?)
        };
        let mut compares = vec![exists(&dead), state.cursor_cmp];
        let mut ops = Vec::with_capacity(members.len() * 3 + 3);
        let mut dead_members = Vec::with_capacity(members.len());
        for (i, (batch, key)) in members.iter().enumerate() {
            let Some(c) = Snapshot::from(first(r.get(i)), None)?.record else {
                continue;
            };
            if c.rec.session.as_ref().map(|(_, st)| *st) != Some(token) || c.rec.batch != *batch {
                continue;
            }
            compares.push(mod_rev(&k.record(key), c.mod_rev));
            ops.push(del(&k.record(key)));
            ops.push(put(&k.dead(c.token), key.to_string()));
            if let Some(seq) = seq {
                ops.push(put(&k.death_of(c.token), seq.to_string()));
            }
            dead_members.push(ExpiredLease::new(key.clone(), c.rec.holder, c.token));
        }
        // The entries read are the index's consecutive keys from the cursor on: one
        // range delete.
        if let (Some(first_entry), Some(last_entry)) = (entries.first(), entries.last()) {
            let mut end = last_entry.key().to_vec();
            end.push(0);
            ops.push(TxnOp::delete(
                first_entry.key(),
                Some(DeleteOptions::new().with_range(end)),
            ));
        }
        ops.push(put(&k.session_cursor(token), cursor.to_string()));
        if let (Some(seq), Some(rec)) = (seq, seq.and_then(|_| first(r.get(members.len())))) {
            if !dead_members.is_empty() {
                let (cmp, op) = add_members(&k.death(seq), seq, &rec, dead_members.len() as u64)?;
                compares.push(cmp);
                ops.push(op);
            }
        }
        let resp = self.txn(Txn::new().when(compares).and_then(ops)).await?;
        Ok(if resp.succeeded() {
            MembersSwept::DeclaredDead(dead_members, more)
        } else {
            MembersSwept::Conflict
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::atomic::Ordering;

    use etcd_client::GetOptions;
    use liveness_core::{FencingToken, ItemStore, Key, LeaseStore, Name, Space, Store, Ttl};

    use super::MEMBER_SWEEP_BATCH;
    use crate::keys::INDEX_BATCH;
    use crate::tests::{holder, store};

    /// Each sweep call reads a few batches of the dead session's member index, never
    /// the whole index: etcd's own count of the keys the call's index reads covered
    /// (what etcd 3.4 walks to answer a range, whatever its limit) stays under a
    /// bound that does not grow with the session, across batches emptied by
    /// releases, and every member left is declared dead exactly once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sweep_call_walks_a_few_index_batches_not_the_session() {
        let Some(store) = store().await else {
            return;
        };
        let n = 1000;
        let name = Name::new(format!("p-{:08x}", fastrand::u32(..))).unwrap();
        let ttl = Ttl::from_secs(60).unwrap();
        let session = store
            .acquire(&Key::new(Space::sessions(), name), &holder(), ttl)
            .await
            .unwrap();
        // One after the other: every batch of the index holds INDEX_BATCH entries.
        let mut members = Vec::with_capacity(n);
        for i in 0..n {
            let key = Key::member(&format!("m{i}")).unwrap();
            members.push(store.join_session(&session, &key, &holder()).await.unwrap());
        }
        let per = usize::try_from(INDEX_BATCH).unwrap();
        // Holes: batches 3 to 5 empty, and half of batch 10.
        let leaving: Vec<usize> = (3 * per..6 * per).chain(10 * per..10 * per + 16).collect();
        for i in &leaving {
            assert!(store.release(&members[*i]).await.unwrap());
        }
        assert!(store.release(&session).await.unwrap());

        let walked = || store.inner.calls.walked.load(Ordering::Relaxed);
        let (mut seen, mut calls, mut most) = (HashSet::new(), 0, 0);
        loop {
            let before = walked();
            let moved = store.sweep(session.token).await.unwrap();
            most = most.max(walked() - before);
            calls += 1;
            assert!(moved.members.len() <= MEMBER_SWEEP_BATCH);
            for m in &moved.members {
                assert!(seen.insert(m.token), "{:?} declared dead twice", m.token);
            }
            let dead = store.dead_tokens(n).await.unwrap();
            if !dead.iter().any(|d| d.token == session.token) {
                break;
            }
            assert_eq!(
                moved.members.len(),
                MEMBER_SWEEP_BATCH,
                "a full batch while more remain"
            );
            assert!(calls <= n, "the sweep never ended");
        }
        // A read of the whole index (the layout before batches) walked all 888
        // members left on the first call, and one fewer batch on each next one.
        let bound = 8 * MEMBER_SWEEP_BATCH as u64;
        assert!(most <= bound, "a sweep call walked {most} index keys");
        let left: HashSet<FencingToken> = (0..n)
            .filter(|i| !leaving.contains(i))
            .map(|i| members[i].token)
            .collect();
        assert_eq!(seen, left, "each member left exactly once");
        assert_eq!(calls, left.len().div_ceil(MEMBER_SWEEP_BATCH));
        // The session's join counter and sweep cursor went with its sweep.
        let k = store.keys();
        let state = store
            .range(
                k.session_state(session.token),
                GetOptions::new().with_prefix(),
            )
            .await
            .unwrap();
        assert!(state.is_empty(), "the session's sweep state stayed behind");
    }
}
