//! The etcd lease under each liveness lease: granting it and binding the key to it
//! (acquire), keeping it alive and judging etcd's answer (renew), moving the key to
//! a new one (a ttl change). These are the one-lease steps that the batches
//! (`batch.rs`) run for the entries they cannot settle together.

use std::sync::Arc;

use etcd_client::{KeyValue, PutOptions, Txn, TxnOp};
use liveness_core::{
    DeathCause, Error, FencingToken, HolderId, Key, Lease, LostCause, Result, Ttl,
};

use crate::core::{
    create_rev, mod_rev, put, revision, secs, token_i64, version, Current, EtcdStore,
};
use crate::error::{Fault, MAX_TRIES};
use crate::keepalive::{KeptAlive, Slot};
use crate::keys::Record;
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

    /// One acquire on its own (an entry `acquire_many` did not settle in its waves:
    /// a key an earlier entry names, a riding member's key, a lost race): reads the
    /// key, and only when it is free or expired grants the etcd lease (once, into
    /// `granted`, reused by later attempts) and writes the record and lease-bound key
    /// in one guarded `Txn`.
    pub(crate) async fn acquire_with(
        &self,
        key: &Key,
        holder: &HolderId,
        ttl: Ttl,
        granted: &mut Option<i64>,
    ) -> Result<Lease> {
        let k = self.keys();
        let (rec_key, live_key) = (k.record(key), k.live(key));
        for _ in 0..MAX_TRIES {
            let snap = self.snapshot(key).await?;
            let live = snap.is_live();
            let (record, bound) = (snap.record, snap.live);
            match (&record, &bound) {
                // Live by its own lease-bound key, or riding a live session.
                (Some(c), _) if live => {
                    return Err(Error::Held {
                        key: key.clone(),
                        holder: c.rec.holder.clone(),
                        token: c.token,
                    })
                }
                (None, Some(_)) => {
                    return Err(Error::backend(
                        BACKEND,
                        Fault::BoundWithoutRecord(live_key.clone()),
                    ))
                }
                _ => {}
            }
            let id = match *granted {
                Some(id) => id,
                None => *granted.insert(self.grant(ttl).await?),
            };
            let (rec, put_live) = lease_bound(&live_key, None, ttl, id, holder);
            let rec = rec.encode();
            let txn = match record {
                // Expired (or riding a dead session), not yet reaped: declared dead
                // in this step, with its death record.
                Some(c) => {
                    let death = self
                        .death_write(key, &c.rec.holder, c.token, DeathCause::Superseded)
                        .await?;
                    let mut ops = vec![
                        put(&k.dead(c.token), key.to_string()),
                        put(&rec_key, rec),
                        put_live,
                    ];
                    ops.extend(self.unride_ops(key, &c));
                    ops.extend(death.ops);
                    let mut when = self.expired_guard(key, &c);
                    if c.rec.session.is_some() {
                        when.push(version(&live_key, 0));
                    }
                    when.push(death.compare);
                    Txn::new().when(when).and_then(ops)
                }
                None => Txn::new()
                    .when(vec![version(&rec_key, 0), version(&live_key, 0)])
                    .and_then(vec![put(&rec_key, rec), put_live]),
            };
            let resp = self.txn(txn).await?;
            if resp.succeeded() {
                let token = u64::try_from(revision(&resp)).unwrap_or(0);
                return Ok(Lease::granted(
                    &self.inner.info.issuer,
                    key.clone(),
                    holder.clone(),
                    FencingToken(token),
                    ttl,
                ));
            }
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    /// One renewal on its own (a lease `renew_many` has no keep-alive slot of its
    /// ttl for: a first renewal on this handle, a ttl change, a riding member): one
    /// keep-alive on the lease's stream, then the read that judges it
    /// ([`EtcdStore::renew_judged`]).
    pub(crate) async fn renew_one(&self, lease: &Lease) -> Result<Lease> {
        let slot = match self.inner.slots.get(&lease.key, lease.token) {
            Some(s) => s,
            None => {
                let snap = self.snapshot(&lease.key).await?;
                let mine = snap.record.as_ref().is_some_and(|c| c.token == lease.token);
                if mine && snap.rides().is_some() {
                    // A riding member: judged by its session, nothing to keep alive.
                    if !snap.is_live() {
                        return Err(lease.lost(LostCause::Expired));
                    }
                    return self.renew_rider(lease, &snap).await;
                }
                let current = snap.check(lease)?;
                self.slot_for(lease, &current)
            }
        };
        if slot.ttl != lease.ttl {
            return self.renew_with_ttl(lease).await;
        }
        // The keep-alive counts only while the lease-bound key is still bound to the
        // slot's etcd lease with this token (another handle may have moved it to a
        // new etcd lease, a ttl change, and the old one lives on when its revoke
        // failed), and only when a read made after its answer shows the same raft
        // term (`renew_judged`): the read follows the keep-alive, two round trips.
        let kept = slot
            .keep_alive(&self.inner.lease, self.inner.timeout)
            .await?;
        let (bound, term) = self.read_bound(&lease.key).await?;
        self.renew_judged(lease, &slot, kept, bound, term).await
    }

    /// The keep-alive slot of `lease` on the etcd lease its record names (`current`).
    pub(crate) fn slot_for(&self, lease: &Lease, current: &Current) -> Arc<Slot> {
        let rec = &current.rec;
        self.inner
            .slots
            .set(&lease.key, lease.token, rec.lease_id, rec.ttl)
    }

    /// Reads `lease`'s lease-bound key, with the raft term the answer is stamped with.
    async fn read_bound(&self, key: &Key) -> Result<(Option<KeyValue>, u64)> {
        self.get_in_term(&self.keys().live(key)).await
    }

    /// The end of a renewal on `slot`: etcd's answer to its keep-alive (`kept`) and
    /// the lease-bound key as read AFTER that answer came (`bound`, read in raft term
    /// `term`). The renewal counts only when both say the key is still bound to the
    /// slot's etcd lease with this token, and the keep-alive was answered in the term
    /// the read was: else a read tells why, or renews the etcd lease the record names
    /// now.
    ///
    /// Why the terms: etcd 3.4 renews a lease on its leader's lessor alone, without
    /// asking the cluster (3.5.3 made renewals linearizable, etcd-io/etcd#13932). A
    /// leader that was frozen while the others elected a new one still believes it
    /// leads for a moment when it resumes, and answers keep-alives from its own
    /// countdown, which the new leader, counting every lease from its own election,
    /// does not keep. Each answer is stamped with the raft term the answering member
    /// has applied up to. A linearizable read is served only once the current leader
    /// has committed an entry of its own term, so a read made after the answer
    /// carries the current term, and a deposed leader's answer an older one. Equal
    /// terms mean the answer came from the lessor that counts. A differing term is
    /// `Unavailable` (retried), also when the answer was good but came from a member
    /// that had not yet applied the new term.
    ///
    /// Not closed: a keep-alive that a follower forwards is stamped with the
    /// follower's term after the forward. Should the follower apply the new term in
    /// those microseconds while a deposed leader renewed, the check passes (an etcd
    /// that confirms leadership before renewing closes it, upstream).
    pub(crate) async fn renew_judged(
        &self,
        lease: &Lease,
        slot: &Slot,
        kept: KeptAlive,
        bound: Option<KeyValue>,
        term: u64,
    ) -> Result<Lease> {
        let on_slot = |slot: &Slot, bound: Option<KeyValue>| {
            bound.is_some_and(|kv| {
                kv.lease() == slot.lease_id && kv.create_revision() == token_i64(lease.token)
            })
        };
        let counted = |kept: KeptAlive, term: u64| {
            if kept.term == term {
                Ok(Self::renewed(lease, kept.left))
            } else {
                Err(Error::unavailable(
                    BACKEND,
                    Fault::TermChanged {
                        answered: kept.term,
                        current: term,
                    },
                ))
            }
        };
        if kept.left > 0 && on_slot(slot, bound) {
            return counted(kept, term);
        }
        if kept.left <= 0 && kept.term != 0 && kept.term != term {
            // "Unknown lease" from a member behind the cluster (a deposed leader does
            // not know leases granted after it froze): retried, not taken as a loss.
            return counted(kept, term);
        }
        // etcd no longer knows that etcd lease (expired, or released), or this
        // handle's slot is stale (another handle changed the ttl). Read why.
        self.inner.slots.remove(&lease.key, lease.token);
        let current = self.snapshot(&lease.key).await?.check(lease)?;
        if current.rec.lease_id == slot.lease_id {
            // Live by the key but unknown to the lessor: it is being revoked now.
            return Err(lease.lost(LostCause::Expired));
        }
        // The key moved to another etcd lease: the slot's one binds nothing now (its
        // revoke may have failed); end it, and renew the one the record names.
        self.revoke_later(slot.lease_id);
        let slot = self.slot_for(lease, &current);
        if slot.ttl != lease.ttl {
            return self.renew_with_ttl(lease).await;
        }
        let kept = slot
            .keep_alive(&self.inner.lease, self.inner.timeout)
            .await?;
        if kept.left <= 0 {
            self.inner.slots.remove(&lease.key, lease.token);
            return Err(lease.lost(LostCause::Expired));
        }
        let (bound, term) = self.read_bound(&lease.key).await?;
        if !on_slot(&slot, bound) {
            // Moved again meanwhile: the caller's retry reads afresh.
            return Err(Error::unavailable(BACKEND, Fault::Contention));
        }
        counted(kept, term)
    }

    /// `lease` renewed, with etcd's countdown (`ttl_secs`) as its time left.
    pub(crate) fn renewed(lease: &Lease, ttl_secs: i64) -> Lease {
        lease.with_expires_in(lease.ttl.duration().min(secs(ttl_secs)))
    }

    /// Renewal with another ttl than the current one: a new etcd lease of the new
    /// ttl takes the lease-bound key over (its create revision, the token, stays),
    /// and the old etcd lease is revoked.
    pub(crate) async fn renew_with_ttl(&self, lease: &Lease) -> Result<Lease> {
        for _ in 0..MAX_TRIES {
            let current = self.snapshot(&lease.key).await?.check(lease)?;
            let id = self.grant(lease.ttl).await?;
            let txn = self.move_txn(lease, &current, id, lease.ttl);
            let resp = match self.txn(txn).await {
                Ok(r) => r,
                Err(e) => {
                    self.revoke_later(id);
                    return Err(e);
                }
            };
            if resp.succeeded() {
                self.inner.slots.remove(&lease.key, lease.token);
                self.revoke_later(current.rec.lease_id);
                return Ok(lease.renewed());
            }
            self.revoke_later(id);
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    /// The transaction that moves `lease` (as `current` read it) to the etcd lease
    /// `id` with `ttl`: the lease-bound key and the record are rewritten under `id`,
    /// guarded by the record being unchanged and the key still carrying the token.
    pub(crate) fn move_txn(&self, lease: &Lease, current: &Current, id: i64, ttl: Ttl) -> Txn {
        let k = self.keys();
        let (rec_key, live_key) = (k.record(&lease.key), k.live(&lease.key));
        let (rec, put_live) =
            lease_bound(&live_key, Some(lease.token.0), ttl, id, &current.rec.holder);
        Txn::new()
            .when(vec![
                mod_rev(&rec_key, current.mod_rev),
                create_rev(&live_key, token_i64(lease.token)),
            ])
            .and_then(vec![put_live, put(&rec_key, rec.encode())])
    }
}

/// The record of a lease-bound lease of `holder` on etcd lease `id` (`token` as
/// [`Record::token`]), with the put of its lease-bound key `live_key` under that
/// etcd lease: the two writes every transaction that takes or moves such a lease
/// makes.
pub(crate) fn lease_bound(
    live_key: &str,
    token: Option<u64>,
    ttl: Ttl,
    id: i64,
    holder: &HolderId,
) -> (Record, TxnOp) {
    let rec = Record {
        token,
        ttl,
        lease_id: id,
        holder: holder.clone(),
        session: None,
        batch: 0,
    };
    let put_live = TxnOp::put(live_key, "", Some(PutOptions::new().with_lease(id)));
    (rec, put_live)
}
