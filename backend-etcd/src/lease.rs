//! `impl LeaseStore for EtcdStore`: each method runs its own transaction or the
//! inherent step it names (`etcd_lease.rs` for acquire and renew, `deaths.rs` for
//! expiry and reaping, `batch.rs` for the `*_many` calls) on input that
//! `liveness_core::CheckInput` already checked. Here too: release's attempt on one
//! read, and the member listing.

use std::time::Duration;

use etcd_client::{KeyValue, Txn, TxnOp};
use liveness_core::{
    async_trait, Acquire, BatchResult, DeadToken, DeathCause, DeathRecord, Error, ExpiredLease,
    FencingToken, HolderId, Key, Lease, LeaseInfo, LeaseStatus, LeaseStore, Name, Page, Result,
    Space, StoreInfo, StoreTime, Ttl,
};
use tokio::sync::watch;

use crate::core::{
    del, first_range, get, mod_rev, put, ranges, secs, to_prefix_end, EtcdStore, Snapshot,
    MAX_TXN_OPS,
};
use crate::error::{at_key, corrupt, Fault, MAX_TRIES};
use crate::keys::Record;
use crate::BACKEND;

/// What one release attempt ([`EtcdStore::release_from`]) came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Released {
    /// This attempt ended the lease: the record is retired to the dead set.
    Retired,
    /// The lease was not current (gone, or another token's): nothing changed.
    NotCurrent,
    /// The record changed between the read and the write: read again.
    Retry,
}

impl EtcdStore {
    /// One release attempt on `snap`, the key's record and lease-bound key as just
    /// read: ONE transaction, guarded by the record being unchanged, deletes the
    /// record and the lease-bound key, puts the token in the dead set and records the
    /// death as a release; then the etcd lease the record named is revoked.
    /// [`Released::Retry`] when the record changed in between (another handle moved
    /// the lease to a new etcd lease, or another death took the death counter).
    ///
    /// Why one transaction, and the revoke after it: a release that first revoked
    /// the etcd lease (which deletes the lease-bound key) and then retired the record
    /// showed a checker in between "record present, lease-bound key gone", an
    /// expired lease, which it reaped and recorded as a death (`Reaped`) of a member
    /// that had left. Ended in one step, the lease is never seen expired on the way.
    /// The etcd lease binds nothing once the transaction applied: a renewal of it
    /// (on any handle) finds the lease-bound key gone and answers `Lost`. Should the
    /// revoke fail, or the caller stop before it, it expires by its own ttl.
    pub(crate) async fn release_from(&self, lease: &Lease, snap: Snapshot) -> Result<Released> {
        let Some(c) = snap.record else {
            return Ok(Released::NotCurrent);
        };
        if c.token != lease.token {
            return Ok(Released::NotCurrent);
        }
        let k = self.keys();
        let (rec_key, live_key) = (k.record(&lease.key), k.live(&lease.key));
        let death = self
            .death_write(&lease.key, &c.rec.holder, c.token, DeathCause::Released)
            .await?;
        let mut ops = vec![
            del(&rec_key),
            del(&live_key),
            put(&k.dead(c.token), lease.key.to_string()),
        ];
        // A riding member leaves its session's member index; it has no etcd lease.
        ops.extend(self.unride_ops(&lease.key, &c));
        ops.extend(death.ops);
        let resp = self
            .txn(
                Txn::new()
                    .when(vec![mod_rev(&rec_key, c.mod_rev), death.compare])
                    .and_then(ops)
                    .or_else(vec![get(&rec_key)]),
            )
            .await?;
        if resp.succeeded() {
            #[cfg(test)]
            self.inner.between_release_steps.here().await;
            if c.rec.session.is_some() {
                return Ok(Released::Retired);
            }
            if self.revoke(c.rec.lease_id).await.is_err() {
                self.revoke_later(c.rec.lease_id);
            }
            return Ok(Released::Retired);
        }
        // The record changed since the read, or another death took the counter.
        // Still this token's: the lease moved to another etcd lease, or only the
        // counter moved, so try again. Gone or another token's: a checker or an
        // acquire retired it (it had expired), or another release did.
        let now = Snapshot::from(first_range(&resp).into_iter().next(), None)?;
        match now.record {
            Some(c) if c.token == lease.token => Ok(Released::Retry),
            _ => Ok(Released::NotCurrent),
        }
    }

    /// `LeaseStore::members`: the records and the lease-bound keys of the page in
    /// one transaction (one revision), then the lease-bound keys of the sessions its
    /// riding members ride (a second read), then the time left of each live one.
    pub(crate) async fn member_page(
        &self,
        space: &Space,
        after: Option<&Key>,
        limit: usize,
    ) -> Result<Vec<LeaseInfo>> {
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
                LeaseInfo {
                    session: c.rec.session.map(|(s, _)| s),
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
}

#[async_trait]
impl LeaseStore for EtcdStore {
    fn info(&self) -> &StoreInfo {
        &self.inner.info
    }

    async fn acquire(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Result<Lease> {
        // The etcd lease is granted only once a read found the key free or expired:
        // a losing acquire (the key held live) costs that read, no grant and revoke.
        let mut granted: Option<i64> = None;
        let outcome = self.acquire_with(key, holder, ttl, &mut granted).await;
        self.settle_acquire(key, &outcome, granted);
        outcome
    }

    async fn acquire_many(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        self.acquire_batch(asks).await
    }

    async fn join_session(&self, session: &Lease, key: &Key, holder: &HolderId) -> Result<Lease> {
        let outcome = self.join(session, key, holder).await;
        if let Err(Error::Held { .. }) = &outcome {
            self.inner.expiry.interested(key);
        }
        outcome
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        self.renew_one(lease).await
    }

    async fn renew_many(&self, leases: &[Lease]) -> BatchResult<Lease> {
        self.renew_batch(leases).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.slots.remove(&lease.key, lease.token);
        self.inner.riders.forget(lease);
        for _ in 0..MAX_TRIES {
            let seen = self.inner.expiry.generation();
            let snap = self.snapshot(&lease.key).await?;
            match self.release_from(lease, snap).await? {
                Released::Retired => {
                    // This release deleted the record: an expiry candidate for it,
                    // as of the read, is stale.
                    self.inner.expiry.forget_upto(&lease.key, seen);
                    return Ok(true);
                }
                Released::NotCurrent => return Ok(false),
                Released::Retry => {}
            }
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        let snap = self.snapshot(key).await?;
        let live = snap.is_live();
        // A riding member's time left is its session's etcd lease's.
        let id = match snap.rides() {
            Some(_) => snap.session_live.as_ref().map_or(0, |kv| kv.lease()),
            None => snap.record.as_ref().map_or(0, |c| c.rec.lease_id),
        };
        let Some(c) = snap.record else {
            return Ok(None);
        };
        let status = if live {
            match self.time_to_live(id).await? {
                // Unknown to the lessor that answered: revoked since the read, or a
                // member that lost leadership without knowing it yet answered from its
                // stale lessor (LeaseTimeToLive is not linearizable). A second
                // linearizable read decides: a lease-bound key still bound to this
                // token is live.
                left if left < 0 => match self.snapshot(key).await? {
                    again
                        if again.is_live()
                            && again.record.as_ref().map(|r| r.token) == Some(c.token) =>
                    {
                        LeaseStatus::Live {
                            remaining: Duration::from_millis(1),
                        }
                    }
                    _ => LeaseStatus::Expired,
                },
                // etcd reports whole seconds, truncated: the last second reads 0.
                left => LeaseStatus::Live {
                    remaining: secs(left)
                        .min(c.rec.ttl.duration())
                        .max(Duration::from_millis(1)),
                },
            }
        } else {
            LeaseStatus::Expired
        };
        Ok(Some(LeaseInfo {
            session: c.rec.session.map(|(s, _)| s),
            key: key.clone(),
            holder: c.rec.holder,
            token: c.token,
            ttl: c.rec.ttl,
            status,
        }))
    }

    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        self.sync_expiry().await?;
        self.verified(space, limit).await
    }

    async fn reap(&self, key: &Key, token: FencingToken) -> Result<bool> {
        self.reap_one(key, token).await
    }

    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
        self.reap_batch(expired).await
    }

    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        self.dead_set(limit).await
    }

    async fn store_time(&self) -> Result<StoreTime> {
        // etcd exposes no clock reading (its lease countdown runs on the leader and
        // is only visible per lease, in whole seconds). This is the handle's own
        // monotonic clock, anchored at the Unix epoch by the host clock read once at
        // connect (so that death records written by other handles compare, up to
        // the hosts' clock offset): for diagnostics only; no expiry decision ever
        // uses it.
        Ok(self.store_now())
    }

    async fn members(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let Page { after, limit } = page;
        self.member_page(space, after, limit).await
    }

    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        self.death_page(before, limit).await
    }

    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        self.next_expiry_in(space).await
    }

    fn wakeups(&self) -> Option<watch::Receiver<u64>> {
        let inner = &self.inner;
        inner.expiry.ensure(&inner.kv, &inner.watch, &inner.keys);
        Some(inner.expiry.wakeups())
    }
}
