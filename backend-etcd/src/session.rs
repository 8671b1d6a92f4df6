//! Members riding a session ([`liveness_core::LeaseStore::join_session`]): the join,
//! what the other steps need to judge and retire a riding member, and the drain of a
//! dead session's members, one batch per `requeue_orphans` call.
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
//! The session's member index (`sm/<session token>/<space>/<name>`) lists its
//! members. Once the session's token is in the dead set, each `requeue_orphans` of it
//! retires up to [`DRAIN_BATCH`] of them in one transaction: their records deleted,
//! their tokens into the dead set, each linked to the session's death record (whose
//! member count grows by the batch), their index entries deleted by one range delete.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use etcd_client::{Compare, DeleteOptions, GetOptions, KeyValue, Txn, TxnOp};
use liveness_core::sync::lock;
use liveness_core::{
    DeathCause, Error, ExpiredLease, FencingToken, HolderId, Key, Lease, LostCause, Result, Ttl,
};

use crate::core::{
    create_rev, del, exists, first, get, mod_rev, not_create_rev, put, ranges, revision, secs,
    token_i64, version, Current, EtcdStore, Snapshot, MAX_BATCH, MAX_TXN_OPS,
};
use crate::deaths::add_members;
use crate::error::{at_key, corrupt, Fault, MAX_TRIES};
use crate::keys::Record;
use crate::BACKEND;

/// Members retired per drain transaction. Each costs 3 writes (its record's delete,
/// its dead-set entry, its link to the session's death record) and 1 compare (its
/// record as read); the transaction adds the member index's range delete and the
/// death record's new member count (2 writes), and the dead-set entry and the death
/// record as read (2 compares): 32 × 3 + 2 = 98 writes and 34 compares, under etcd's
/// default `--max-txn-ops` of 128 (which bounds compares and writes apart).
pub(crate) const DRAIN_BATCH: usize = if MAX_BATCH < (MAX_TXN_OPS - 2) / 3 {
    MAX_BATCH
} else {
    (MAX_TXN_OPS - 2) / 3
};

/// The riding members a handle joined or met, by key: their token and their
/// session's key and token. A claim's guard judges them through their session
/// ([`EtcdStore::live_guard`]); a member not known here is learnt on its first
/// claim, which then asks again.
#[derive(Default)]
pub(crate) struct Riders(Mutex<HashMap<Key, (FencingToken, Key, FencingToken)>>);

impl Riders {
    /// Remembers that `lease` rides the session `session` with token `st`.
    pub(crate) fn remember(&self, lease: &Lease, session: &Key, st: FencingToken) {
        lock(&self.0).insert(lease.key.clone(), (lease.token, session.clone(), st));
    }

    /// The session `lease` rides (its key and token), when this handle knows it.
    pub(crate) fn of(&self, lease: &Lease) -> Option<(Key, FencingToken)> {
        match lock(&self.0).get(&lease.key) {
            Some((token, session, st)) if *token == lease.token => Some((session.clone(), *st)),
            _ => None,
        }
    }

    /// Forgets `lease` (released).
    pub(crate) fn forget(&self, lease: &Lease) {
        let mut riders = lock(&self.0);
        if riders
            .get(&lease.key)
            .is_some_and(|(t, _, _)| *t == lease.token)
        {
            riders.remove(&lease.key);
        }
    }
}

/// What one drain transaction ([`EtcdStore::drain_batch`]) came to.
pub(crate) enum Drained {
    /// These members were retired; `true` when more remain.
    Retired(Vec<ExpiredLease>, bool),
    /// The transaction lost a race (another sweeper, a release): read again.
    Conflict,
}

/// The read of a dead session's next drain batch: up to [`DRAIN_BATCH`] + 1 entries
/// of its member index (the one over says more follow), keys only. etcd 3.4 walks
/// the whole range whatever the limit: O(members left), once per batch.
pub(crate) fn next_riders(k: &crate::keys::Keys, token: FencingToken) -> TxnOp {
    let limit = i64::try_from(DRAIN_BATCH + 1).unwrap_or(i64::MAX);
    let opts = GetOptions::new()
        .with_prefix()
        .with_keys_only()
        .with_limit(limit);
    TxnOp::get(k.session_members(token), Some(opts))
}

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

    /// The write that takes `key`'s retired record `c` out of its session's member
    /// index, for a riding member (none for a lease of its own).
    pub(crate) fn unride_ops(&self, key: &Key, c: &Current) -> Vec<TxnOp> {
        c.rec
            .session
            .iter()
            .map(|(_, st)| del(&self.keys().session_member(*st, key)))
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
        Ok(Lease {
            expires_in: secs(left.max(0))
                .min(lease.ttl.duration())
                .max(Duration::from_millis(1)),
            ..lease.clone()
        })
    }

    /// `join_session`: one read of the session's record and lease-bound key and of
    /// `key`'s (and, when `key`'s record rides another session, a read of that
    /// session's key), then one guarded transaction: the session's lease-bound key
    /// still carries its token, `key` is free or holds an expired lease (retired in
    /// this step, as `acquire` does), and the member's record and index entry are
    /// written. The member's token is the transaction's revision.
    pub(crate) async fn join(
        &self,
        session: &Lease,
        key: &Key,
        holder: &HolderId,
    ) -> Result<Lease> {
        let k = self.keys();
        let (rec_key, live_key) = (k.record(key), k.live(key));
        let session_live = k.live(&session.key);
        for _ in 0..MAX_TRIES {
            let resp = self
                .txn(Txn::new().and_then(vec![
                    get(&k.record(&session.key)),
                    get(&session_live),
                    get(&rec_key),
                    get(&live_key),
                ]))
                .await?;
            let r = ranges(&resp);
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
                (None, Some(_)) => return Err(Error::backend(BACKEND, Fault::Orphan(live_key))),
                _ => {}
            }
            let rec = Record {
                token: None,
                ttl: session.ttl,
                lease_id: 0,
                holder: holder.clone(),
                session: Some((session.key.clone(), session.token)),
            };
            let mut when = vec![create_rev(&session_live, token_i64(session.token))];
            let mut ops = vec![
                put(&rec_key, rec.encode()),
                put(&k.session_member(session.token, key), ""),
            ];
            match &snap.record {
                None => when.extend([version(&rec_key, 0), version(&live_key, 0)]),
                // Expired, or riding a dead session: retired in this step, with its
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

    /// One batch of the drain of the dead session `token`, from `entries` (its
    /// member index as [`next_riders`] read it, not empty) and `of` (the pointer to
    /// its death record), read with the token in the dead set: their records and the
    /// death record are read, then they are retired in ONE transaction guarded by
    /// the token still being in the dead set, each record as read and the death
    /// record as read. An entry whose record is gone or no longer rides this session
    /// is only deleted.
    pub(crate) async fn drain_batch(
        &self,
        token: FencingToken,
        mut entries: Vec<KeyValue>,
        of: Option<KeyValue>,
    ) -> Result<Drained> {
        let k = self.keys();
        let dead = k.dead(token);
        let prefix = k.session_members(token);
        let more = entries.len() > DRAIN_BATCH;
        entries.truncate(DRAIN_BATCH);
        let seq = match &of {
            Some(kv) => Some(
                std::str::from_utf8(kv.value())
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| corrupt(at_key(kv.key())))?,
            ),
            None => None,
        };
        let members = entries
            .iter()
            .map(|kv| {
                k.parse_key(&prefix, kv.key())
                    .ok_or_else(|| corrupt(at_key(kv.key())))
            })
            .collect::<Result<Vec<Key>>>()?;
        let mut reads: Vec<TxnOp> = members.iter().map(|m| get(&k.record(m))).collect();
        if let Some(seq) = seq {
            reads.push(get(&k.death(seq)));
        }
        let resp = self.txn(Txn::new().and_then(reads)).await?;
        let r = ranges(&resp);
        let mut compares = vec![exists(&dead)];
        let mut ops = Vec::with_capacity(members.len() * 3 + 2);
        let mut retired = Vec::with_capacity(members.len());
        for (i, key) in members.iter().enumerate() {
            let Some(c) = Snapshot::from(first(r.get(i)), None)?.record else {
                continue;
            };
            if c.rec.session.as_ref().map(|(_, st)| *st) != Some(token) {
                continue;
            }
            compares.push(mod_rev(&k.record(key), c.mod_rev));
            ops.push(del(&k.record(key)));
            ops.push(put(&k.dead(c.token), key.to_string()));
            if let Some(seq) = seq {
                ops.push(put(&k.death_of(c.token), seq.to_string()));
            }
            retired.push(ExpiredLease {
                key: key.clone(),
                holder: c.rec.holder,
                token: c.token,
            });
        }
        // The batch's index entries are consecutive keys: one range delete.
        if let (Some(first_entry), Some(last_entry)) = (entries.first(), entries.last()) {
            let mut end = last_entry.key().to_vec();
            end.push(0);
            ops.push(TxnOp::delete(
                first_entry.key(),
                Some(DeleteOptions::new().with_range(end)),
            ));
        }
        if let (Some(seq), Some(rec)) = (seq, seq.and_then(|_| first(r.get(members.len())))) {
            if !retired.is_empty() {
                let (cmp, op) = add_members(&k.death(seq), seq, &rec, retired.len() as u64)?;
                compares.push(cmp);
                ops.push(op);
            }
        }
        let resp = self.txn(Txn::new().when(compares).and_then(ops)).await?;
        Ok(if resp.succeeded() {
            Drained::Retired(retired, more)
        } else {
            Drained::Conflict
        })
    }
}
