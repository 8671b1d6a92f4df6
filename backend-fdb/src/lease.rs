//! `impl LeaseStore for FdbStore`: each method runs its transaction body in
//! FoundationDB's retry loop (`transact!`), on input that
//! `liveness_core::CheckInput` already checked. The bodies of renew, release and
//! inspect are here; those of expiry and reaping are in `deaths.rs`, the batches that
//! take leases and reap in `batch.rs`, the join in `session.rs`.

use std::time::Duration;

use liveness_core::sync::lock;
use liveness_core::{
    async_trait, Acquire, BatchResult, DeathCause, ExpiredLease, FencingToken, JoinAsk, Key, Lease,
    LeaseInfo, LeaseStatus, LeaseStore, Space, StoreInfo, Ttl,
};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::core::transact;
use crate::core::{ttl_of, Declared, FdbStore};
use crate::error::corrupt;
use crate::keys::LeaseRec;
use crate::kv::{Attempt, Fail, Transaction};

#[async_trait]
impl LeaseStore for FdbStore {
    fn info(&self) -> &StoreInfo {
        &self.info
    }

    async fn acquire_many(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        self.acquire_batch(asks).await
    }

    async fn join_session_many(&self, session: &Lease, asks: &[JoinAsk]) -> BatchResult<Lease> {
        self.join_batch(session, asks).await
    }

    async fn renew_many(&self, leases: &[Lease]) -> BatchResult<Lease> {
        // One transaction per lease. A renewal rewrites the lease's versionstamped
        // record, which the writing transaction cannot read back (so a second entry on
        // the key could not be judged in it), and one lease's conflict would make every
        // other renewal of the batch run again.
        let mut out = Vec::with_capacity(leases.len());
        for lease in leases {
            out.push(self.renew_one(lease).await);
        }
        Ok(out)
    }

    async fn release(&self, lease: &Lease) -> liveness_core::Result<bool> {
        let nonce = fastrand::u64(..);
        let (outcome, _) = transact!(self.db, |tx, at| self.release_once(tx, at, lease, nonce))?;
        Ok(self.declared_dead(&lease.key, outcome))
    }

    async fn inspect(&self, key: &Key) -> liveness_core::Result<Option<LeaseInfo>> {
        Ok(transact!(self.db, |tx, _at| self.inspect_once(tx, key))?.0)
    }

    async fn expired(
        &self,
        space: &Space,
        limit: usize,
    ) -> liveness_core::Result<Vec<ExpiredLease>> {
        Ok(transact!(self.db, |tx, _at| self.expired_once(tx, space, limit))?.0)
    }

    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
        self.reap_batch(expired).await
    }

    async fn next_expiry(&self, space: &Space) -> liveness_core::Result<Option<Duration>> {
        Ok(transact!(self.db, |tx, _at| self.next_expiry_once(tx, space))?.0)
    }

    fn wakeups(&self) -> Option<watch::Receiver<u64>> {
        Some(self.wake.subscribe())
    }
}

impl FdbStore {
    /// One entry of `renew_many`, in its own transaction: a lease of its own gets a
    /// new stamp, which this handle records as its write (sent at the call's start);
    /// a riding member writes nothing and answers as its session stands.
    async fn renew_one(&self, lease: &Lease) -> liveness_core::Result<Lease> {
        let sent = Instant::now();
        let ((_, session), stamp) = transact!(self.db, |tx, _at| self.renew_once(tx, lease))?;
        if let Some(until) = session {
            // A riding member: nothing was written; it stands as its session does.
            return Ok(lease.with_expires_in(until.saturating_duration_since(Instant::now())));
        }
        let stamp =
            stamp.ok_or_else(|| corrupt("a versionstamped commit returned no versionstamp"))?;
        lock(&self.obs).wrote(&lease.key, stamp, sent, lease.ttl.duration());
        Ok(lease.with_expires_in(
            (sent + lease.ttl.duration()).saturating_duration_since(Instant::now()),
        ))
    }
}

// The transaction bodies of the lease operations: one attempt each.
impl FdbStore {
    /// One attempt of a `renew_many` entry: a lease of its own gets a new stamp; a
    /// riding member writes nothing and answers its session's deadline (`Some`).
    pub(crate) async fn renew_once(
        &self,
        tx: &mut dyn Transaction,
        lease: &Lease,
    ) -> Result<(LeaseRec, Option<Instant>), Fail> {
        let (rec, session) = self.check_current(tx, lease).await?;
        if rec.session.is_some() {
            return Ok((rec, session));
        }
        tx.clear(&self.layout.index(&lease.key, rec.ttl_ms, &rec.stamp));
        self.write_lease(
            tx,
            &lease.key,
            rec.token,
            lease.ttl.as_millis(),
            rec.nonce,
            &rec.holder,
            None,
        );
        Ok((rec, None))
    }

    pub(crate) async fn release_once(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        lease: &Lease,
        nonce: u64,
    ) -> Result<Declared, Fail> {
        if self.we_declared_dead(tx, at, lease.token, nonce).await? {
            return Ok(Declared::Done(None));
        }
        match self.read_lease(tx, &lease.key, false).await? {
            Some(rec) if rec.token == lease.token => {
                self.declare_dead(tx, &lease.key, &rec, nonce);
                self.record_death(tx, &lease.key, &rec, DeathCause::Released)
                    .await?;
                Ok(Declared::Done(Some(rec)))
            }
            _ => Ok(Declared::No),
        }
    }

    pub(crate) async fn inspect_once(
        &self,
        tx: &mut dyn Transaction,
        key: &Key,
    ) -> Result<Option<LeaseInfo>, Fail> {
        let now = self.observe(tx).await?;
        let Some(rec) = self.read_lease(tx, key, true).await? else {
            return Ok(None);
        };
        let ttl = ttl_of(rec.ttl_ms);
        let deadline = self.rec_deadline(tx, key, &rec, now).await?;
        let status = LeaseStatus::with_remaining(deadline.saturating_duration_since(now));
        let ttl = Ttl::new(ttl).map_err(|_| corrupt("the ttl of a lease record"))?;
        let session = rec.session.map(|(k, _)| k);
        let info = LeaseInfo::of(key.clone(), rec.holder, rec.token, ttl, status);
        Ok(Some(info.with_session(session)))
    }
}
