//! `impl LeaseStore for EtcdStore`: each method runs its own transaction or the
//! inherent step it names (`batch.rs` for `acquire_many`, `renew_many` and
//! `reap_many`, `session.rs` for `join_session_many`, `deaths.rs` for expiry) on
//! input that `liveness_core::CheckInput` already checked. Here too: release's
//! attempt on one read.

use std::time::Duration;

use etcd_client::Txn;
use liveness_core::{
    async_trait, Acquire, BatchResult, DeathCause, Error, ExpiredLease, FencingToken, JoinAsk, Key,
    Lease, LeaseInfo, LeaseStatus, LeaseStore, Result, Space, StoreInfo,
};
use tokio::sync::watch;

use crate::core::{del, first_range, get, mod_rev, put, secs, EtcdStore, Snapshot};
use crate::error::{Fault, MAX_TRIES};
use crate::BACKEND;

/// What one release attempt ([`EtcdStore::release_from`]) came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Released {
    /// This attempt ended the lease: its token is declared dead.
    DeclaredDead,
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
    /// the etcd lease (which deletes the lease-bound key) and then deleted the record
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
                return Ok(Released::DeclaredDead);
            }
            if self.revoke(c.rec.lease_id).await.is_err() {
                self.revoke_later(c.rec.lease_id);
            }
            return Ok(Released::DeclaredDead);
        }
        // The record changed since the read, or another death took the counter.
        // Still this token's: the lease moved to another etcd lease, or only the
        // counter moved, so try again. Gone or another token's: a checker or an
        // acquire declared it dead (it had expired), or another release did.
        let now = Snapshot::from(first_range(&resp).into_iter().next(), None)?;
        match now.record {
            Some(c) if c.token == lease.token => Ok(Released::Retry),
            _ => Ok(Released::NotCurrent),
        }
    }
}

#[async_trait]
impl LeaseStore for EtcdStore {
    fn info(&self) -> &StoreInfo {
        &self.inner.info
    }

    async fn acquire_many(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        self.acquire_batch(asks).await
    }

    async fn join_session_many(&self, session: &Lease, asks: &[JoinAsk]) -> BatchResult<Lease> {
        self.join_many(session, asks).await
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
                Released::DeclaredDead => {
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
        Ok(Some(
            LeaseInfo::of(key.clone(), c.rec.holder, c.token, c.rec.ttl, status)
                .with_session(c.rec.session.map(|(s, _)| s)),
        ))
    }

    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        self.sync_expiry().await?;
        self.verified(space, limit).await
    }

    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
        self.reap_batch(expired).await
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
