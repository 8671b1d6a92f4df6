//! `impl LeaseStore for FdbStore`: each method runs its transaction body in
//! FoundationDB's retry loop (`transact!`), on input that
//! `liveness_core::CheckInput` already checked. The bodies of
//! acquire, renew, release, inspect and members are here; those of expiry and reaping
//! are in `deaths.rs`, the batch ones in `batch.rs`.

use std::collections::HashMap;
use std::time::Duration;

use liveness_core::sync::lock;
use liveness_core::wake::tick;
use liveness_core::{
    async_trait, Acquire, DeadToken, DeathCause, DeathRecord, ExpiredLease, FencingToken, HolderId,
    Key, Lease, LeaseInfo, LeaseStatus, LeaseStore, Name, Page, Result, Space, StoreInfo,
    StoreTime, Ttl,
};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::core::transact;
use crate::core::{ttl_of, Acquired, FdbStore, Retire};
use crate::error::corrupt;
use crate::keys::LeaseRec;
use crate::kv::{Attempt, Fail, RangeRead, Transaction};

#[async_trait]
impl LeaseStore for FdbStore {
    fn info(&self) -> &StoreInfo {
        &self.info
    }

    async fn acquire(
        &self,
        key: &Key,
        holder: &HolderId,
        ttl: Ttl,
    ) -> liveness_core::Result<Lease> {
        let sent = Instant::now();
        let nonce = fastrand::u64(..);
        let (outcome, stamp) = transact!(self.db, |tx, at| self
            .acquire_once(tx, at, key, holder, ttl, nonce))?;
        self.granted(key, holder, ttl, outcome, stamp, sent)
    }

    async fn acquire_many(&self, asks: &[Acquire]) -> liveness_core::Result<Vec<Result<Lease>>> {
        self.acquire_batch(asks).await
    }

    async fn join_session(
        &self,
        session: &Lease,
        key: &Key,
        holder: &HolderId,
    ) -> liveness_core::Result<Lease> {
        let nonce = fastrand::u64(..);
        let ((outcome, until), _) = transact!(self.db, |tx, at| self
            .join_once(tx, at, session, key, holder, nonce))?;
        let token = match outcome {
            Acquired::New { token, retired } => {
                if let Some(old) = retired {
                    lock(&self.obs).forget_stamp(key, &old.stamp);
                    tick(&self.wake);
                }
                token
            }
            Acquired::Already(rec) => rec.token,
        };
        // No `wrote`: a riding member has no expiry of its own to observe.
        Ok(Lease {
            expires_in: until.saturating_duration_since(Instant::now()),
            ..Lease::granted(
                &self.info.issuer,
                key.clone(),
                holder.clone(),
                token,
                session.ttl,
            )
        })
    }

    async fn renew(&self, lease: &Lease) -> liveness_core::Result<Lease> {
        let sent = Instant::now();
        let ((_, session), stamp) = transact!(self.db, |tx, _at| self.renew_once(tx, lease))?;
        if let Some(until) = session {
            // A riding member: nothing was written; it stands as its session does.
            return Ok(Lease {
                expires_in: until.saturating_duration_since(Instant::now()),
                ..lease.clone()
            });
        }
        let stamp =
            stamp.ok_or_else(|| corrupt("a versionstamped commit returned no versionstamp"))?;
        lock(&self.obs).wrote(&lease.key, stamp, sent, lease.ttl.duration());
        Ok(Lease {
            expires_in: (sent + lease.ttl.duration()).saturating_duration_since(Instant::now()),
            ..lease.clone()
        })
    }

    async fn release(&self, lease: &Lease) -> liveness_core::Result<bool> {
        let nonce = fastrand::u64(..);
        let (outcome, _) = transact!(self.db, |tx, at| self.release_once(tx, at, lease, nonce))?;
        Ok(self.retired(&lease.key, outcome))
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

    async fn reap(&self, key: &Key, token: FencingToken) -> liveness_core::Result<bool> {
        let nonce = fastrand::u64(..);
        let (outcome, _) = transact!(self.db, |tx, at| self.reap_once(tx, at, key, token, nonce))?;
        Ok(self.retired(key, outcome))
    }

    async fn reap_many(
        &self,
        expired: &[(Key, FencingToken)],
    ) -> liveness_core::Result<Vec<liveness_core::Result<bool>>> {
        self.reap_batch(expired).await
    }

    async fn dead_tokens(&self, limit: usize) -> liveness_core::Result<Vec<DeadToken>> {
        Ok(transact!(self.db, |tx, _at| self.dead_once(tx, limit))?.0)
    }

    async fn store_time(&self) -> liveness_core::Result<StoreTime> {
        Ok(self.store_now())
    }

    async fn members(
        &self,
        space: &Space,
        page: Page<&Key>,
    ) -> liveness_core::Result<Vec<LeaseInfo>> {
        let Page { after, limit } = page;
        Ok(transact!(self.db, |tx, _at| self
            .members_once(tx, space, after, limit))?
        .0)
    }

    async fn deaths(
        &self,
        before: Option<u64>,
        limit: usize,
    ) -> liveness_core::Result<Vec<DeathRecord>> {
        Ok(transact!(self.db, |tx, _at| self.deaths_once(tx, before, limit))?.0)
    }

    async fn next_expiry(&self, space: &Space) -> liveness_core::Result<Option<Duration>> {
        Ok(transact!(self.db, |tx, _at| self.next_expiry_once(tx, space))?.0)
    }

    fn wakeups(&self) -> Option<watch::Receiver<u64>> {
        Some(self.wake.subscribe())
    }
}

// The transaction bodies of the lease operations: one attempt each.
impl FdbStore {
    pub(crate) async fn acquire_once(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        key: &Key,
        holder: &HolderId,
        ttl: Ttl,
        nonce: u64,
    ) -> Result<Acquired, Fail> {
        let now = self.observe(tx).await?;
        self.acquire_at(tx, at, now, key, holder, ttl, nonce, None)
            .await
    }

    /// `renew`: a lease of its own gets a new stamp; a riding member writes nothing
    /// and answers its session's deadline (`Some`).
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
    ) -> Result<Retire, Fail> {
        if self.we_retired(tx, at, lease.token, nonce).await? {
            return Ok(Retire::Done(None));
        }
        match self.read_lease(tx, &lease.key, false).await? {
            Some(rec) if rec.token == lease.token => {
                self.retire(tx, &lease.key, &rec, nonce);
                self.record_death(tx, &lease.key, &rec, DeathCause::Released)
                    .await?;
                Ok(Retire::Done(Some(rec)))
            }
            _ => Ok(Retire::No),
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
        Ok(Some(LeaseInfo {
            session: rec.session.map(|(k, _)| k),
            key: key.clone(),
            holder: rec.holder,
            token: rec.token,
            ttl,
            status,
        }))
    }

    /// `members`: a range of lease records in key order, each judged as `inspect`
    /// judges it.
    pub(crate) async fn members_once(
        &self,
        tx: &mut dyn Transaction,
        space: &Space,
        after: Option<&Key>,
        limit: usize,
    ) -> Result<Vec<LeaseInfo>, Fail> {
        let now = self.observe(tx).await?;
        let (b, e) = self
            .layout
            .leases_after(space, after.map(|k| k.name().as_str()));
        let mut out = Vec::new();
        // Members of one session share its deadline: one read of it per page.
        let mut sessions: HashMap<(Key, FencingToken), Instant> = HashMap::new();
        for (k, v) in tx.range(RangeRead::new(&b, &e, limit).snapshot()).await? {
            let name = Name::new(self.layout.parse_lease(&k)?)
                .map_err(|_| Fail::Stop(corrupt("a lease key")))?;
            let key = Key::new(space.clone(), name);
            let rec = LeaseRec::decode(&v)?;
            let ttl = ttl_of(rec.ttl_ms);
            let deadline = match &rec.session {
                Some(ridden) => match sessions.get(ridden) {
                    Some(d) => *d,
                    None => {
                        let d = self.rec_deadline(tx, &key, &rec, now).await?;
                        sessions.insert(ridden.clone(), d);
                        d
                    }
                },
                None => self.rec_deadline(tx, &key, &rec, now).await?,
            };
            let status = LeaseStatus::with_remaining(deadline.saturating_duration_since(now));
            out.push(LeaseInfo {
                session: rec.session.map(|(k, _)| k),
                key,
                holder: rec.holder,
                token: rec.token,
                ttl: Ttl::new(ttl).map_err(|_| corrupt("the ttl of a lease record"))?,
                status,
            });
        }
        Ok(out)
    }
}
