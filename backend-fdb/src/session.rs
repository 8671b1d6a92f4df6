//! Members riding a session ([`liveness_core::LeaseStore::join_session_many`]): the
//! join, how the other steps judge a riding member (through its session), and the
//! sweep of a dead session's members (declared dead one batch per `sweep_many` call).
//!
//! A riding member's record (`("l", space, name)`, with [`LeaseRec::session`]) names
//! its session's key and token; it has no index entry (`"e"`) and no expiry of its
//! own, so while it lives it costs the cluster nothing: the session's renewal is the
//! only write. Its entry among the session's riders, `("s", session token, space,
//! name)`, keys the members by their session's token, so the sweep of a dead session
//! reads them in ranges of at most `MAX_BATCH`.
//!
//! **Conflicts.** FoundationDB's concurrency is optimistic: a transaction that read a
//! key (without `snapshot`) fails at commit if another committed a write to it after
//! its read version. A join writes only the member's keys and its rider entry, never
//! the session's record, and a join or claim reads the session's record by
//! `snapshot`: neither conflicts with the session's renewal, which rewrites that
//! record every ttl/3. What must still conflict is the session's END (release, reap,
//! a superseding acquire), and each of those writes the session token's dead-set
//! entry, which the join or claim reads with a conflict (see
//! [`FdbStore::session_deadline`]). A step that acts because the session is NOT live
//! (declaring a member dead in an acquire, a join or a reap) reads the session's
//! record with a conflict instead: a renewal committed in between makes it retry.
//!
//! **Expiry.** FoundationDB has no clock: a session, like any lease, is judged expired
//! by this handle's own observation of its stamp (`observe.rs`); a riding member is
//! judged through its session's observation.

use liveness_core::sync::lock;
use liveness_core::{
    Acquire, BatchResult, ExpiredLease, FencingToken, JoinAsk, Key, Lease, LostCause,
};
use tokio::time::Instant;

use crate::core::transact;
use crate::core::{lost, ttl_of, Acquired, FdbStore, MAX_BATCH};
use crate::keys::{decode_u64, LeaseRec};
use crate::kv::{Attempt, Fail, RangeRead, Transaction};

// The riding member's record, and judging a record through its session.
impl FdbStore {
    /// The deadline of the session lease `key` under `token` as this handle sees it
    /// at `now`; `None` when that lease is gone, superseded or expired.
    ///
    /// With `snapshot`, the session's record adds no read conflict: a transaction
    /// that acts *because* the session is live (a join, a claim) then does not
    /// conflict with the session's renewal, which only makes it more alive. What
    /// could make that judgment wrong by commit time is the session's end, and every
    /// end of a lease (release, reap, superseding acquire) writes its token's
    /// dead-set entry in the same transaction (`declare_dead`): so the dead-set entry is
    /// read WITH a conflict (and must be absent), and such a commit conflicts
    /// exactly with the session's death, never with its renewal. A transaction that
    /// acts because the session is NOT live (declaring a member dead) reads without
    /// `snapshot`, so a renewal in between makes it conflict, retry and see it live.
    pub(crate) async fn session_deadline(
        &self,
        tx: &mut dyn Transaction,
        key: &Key,
        token: FencingToken,
        now: Instant,
        snapshot: bool,
    ) -> Result<Option<Instant>, Fail> {
        let Some(rec) = self.read_lease(tx, key, snapshot).await? else {
            return Ok(None);
        };
        if rec.token != token || rec.session.is_some() {
            return Ok(None);
        }
        if snapshot && tx.get(&self.layout.dead(token), false).await?.is_some() {
            return Ok(None);
        }
        let ttl = ttl_of(rec.ttl_ms);
        let deadline = lock(&self.obs)
            .deadline(key, &rec.stamp, ttl)
            .unwrap_or(now + ttl);
        Ok((now < deadline).then_some(deadline))
    }

    /// True when `rec` on `key` is expired for this handle at `now`: by its own
    /// stamp, or, for a riding member, by its session's (see `session_deadline` for
    /// `snapshot`).
    pub(crate) async fn rec_expired(
        &self,
        tx: &mut dyn Transaction,
        key: &Key,
        rec: &LeaseRec,
        now: Instant,
        snapshot: bool,
    ) -> Result<bool, Fail> {
        match &rec.session {
            None => Ok(self.is_expired(key, rec, now)),
            Some((skey, stoken)) => Ok(self
                .session_deadline(tx, skey, *stoken, now, snapshot)
                .await?
                .is_none()),
        }
    }

    /// The deadline of `rec` on `key` for this handle at `now` (`inspect`,
    /// `leases`): its own, or its session's (`now` when the session is gone).
    pub(crate) async fn rec_deadline(
        &self,
        tx: &mut dyn Transaction,
        key: &Key,
        rec: &LeaseRec,
        now: Instant,
    ) -> Result<Instant, Fail> {
        match &rec.session {
            None => {
                let ttl = ttl_of(rec.ttl_ms);
                let mut obs = lock(&self.obs);
                obs.note_ttl(ttl);
                Ok(obs.deadline(key, &rec.stamp, ttl).unwrap_or(now + ttl))
            }
            Some((skey, stoken)) => {
                let found = self.read_lease(tx, skey, true).await?;
                Ok(match found {
                    Some(s) if s.token == *stoken && s.session.is_none() => {
                        let ttl = ttl_of(s.ttl_ms);
                        lock(&self.obs)
                            .deadline(skey, &s.stamp, ttl)
                            .unwrap_or(now + ttl)
                    }
                    _ => now,
                })
            }
        }
    }
}

// The join, and the sweep of a dead session's members.
impl FdbStore {
    /// `join_session_many`: every entry in one transaction, so one commit for the
    /// batch, as `acquire_many` takes its entries (`take_each`). A session that is
    /// not current and live answers `Lost` for every entry and takes nothing.
    pub(crate) async fn join_batch(&self, session: &Lease, asks: &[JoinAsk]) -> BatchResult<Lease> {
        let asks: Vec<Acquire> = asks
            .iter()
            .map(|(key, holder)| Acquire::new(key.clone(), holder.clone(), session.ttl))
            .collect();
        let sent = Instant::now();
        let nonce = fastrand::u64(..);
        let joined = transact!(self.db, |tx, at| self
            .join_once(tx, at, session, &asks, nonce));
        let ((outcomes, until), stamp) = match joined {
            Ok(joined) => joined,
            Err(e) => match e.lost_reason() {
                // Only the session's check stops the attempt with `Lost`.
                Some(cause) => return Ok(asks.iter().map(|_| Err(session.lost(cause))).collect()),
                None => return Err(e),
            },
        };
        self.granted(&asks, outcomes, stamp, sent, Some(until))
    }

    /// One attempt of `join_session_many`: the session judged live (by a snapshot
    /// read guarded by its dead-set entry, so that the join does not conflict with
    /// the session's renewal: see `session_deadline`), else `Lost` stops the attempt;
    /// then each key taken as `acquire_many` takes it, writing a riding member's
    /// record. Answers the session's deadline.
    pub(crate) async fn join_once(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        session: &Lease,
        asks: &[Acquire],
        nonce: u64,
    ) -> Result<(Vec<liveness_core::Result<Acquired>>, Instant), Fail> {
        let now = self.observe(tx).await?;
        let until = self
            .session_deadline(tx, &session.key, session.token, now, true)
            .await?;
        let Some(until) = until else {
            let cause = match self.read_lease(tx, &session.key, true).await? {
                None => LostCause::Released,
                Some(rec) if rec.token != session.token => LostCause::Superseded,
                Some(_) => LostCause::Expired,
            };
            return Err(lost(session, cause));
        };
        let taken = self
            .take_each(tx, at, now, asks, nonce, Some(session))
            .await?;
        Ok((taken, until))
    }

    /// Declares one batch (at most `MAX_BATCH`) of the members riding the dead
    /// session `token` dead, in the open transaction: each member's record and rider
    /// entry cleared, its token into the dead set and linked to the session's death
    /// record, whose member count rises by the batch. Returns them, and whether a full
    /// batch was read (more may remain). The rider entries and records are read with
    /// a conflict: of two sweepers racing, one commits, the other retries and finds
    /// them gone, so each member is declared dead (and reported) once.
    pub(crate) async fn sweep_riders(
        &self,
        tx: &mut dyn Transaction,
        token: FencingToken,
    ) -> Result<(Vec<ExpiredLease>, bool), Fail> {
        let (b, e) = self.layout.riders_of(token);
        let rows = tx.range(RangeRead::new(&b, &e, MAX_BATCH)).await?;
        if rows.is_empty() {
            return Ok((Vec::new(), false));
        }
        let full = rows.len() >= MAX_BATCH;
        let seq = match tx.get(&self.layout.death_of(token), false).await? {
            Some(raw) => Some(decode_u64(&raw)?),
            None => None,
        };
        let nonce = fastrand::u64(..);
        let mut members = Vec::with_capacity(rows.len());
        for (k, _) in rows {
            let key = self.layout.parse_rider(&k)?;
            match self.read_lease(tx, &key, false).await? {
                Some(rec) if rec.session.as_ref().is_some_and(|(_, s)| *s == token) => {
                    self.declare_dead(tx, &key, &rec, nonce);
                    if let Some(seq) = seq {
                        tx.set(&self.layout.death_of(rec.token), &seq.to_be_bytes());
                    }
                    members.push(ExpiredLease::new(key, rec.holder, rec.token));
                }
                _ => tx.clear(&k), // a stray entry
            }
        }
        if let (Some(seq), false) = (seq, members.is_empty()) {
            let count = members.len() as u64;
            self.update_swept(tx, seq, |mut swept| {
                swept.members += count;
                swept
            })
            .await?;
        }
        Ok((members, full))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use liveness_core::{
        Acquire, EnqueueOptions, Error, HolderId, ItemStore, Key, LeaseStore, Name, Namespace,
        OperatorStore, RequestId, Space, Store, Ttl,
    };

    use crate::{DoubleDatabase, FdbStore};

    fn key(space: Space, name: &str) -> Key {
        Key::new(space, Name::new(name).unwrap())
    }

    /// A store on a fresh double, a session lease on it (ttl 60 s), one member riding
    /// it and one pending item.
    async fn set_up() -> (
        DoubleDatabase,
        FdbStore,
        liveness_core::Lease,
        liveness_core::Lease,
    ) {
        let db = DoubleDatabase::new();
        let store = db.store(&Namespace::new("sessions_unit").unwrap());
        let ttl = Ttl::new(Duration::from_secs(60)).unwrap();
        let holder = HolderId::new("p").unwrap();
        let session = store
            .acquire(&key(Space::sessions(), "p"), &holder, ttl)
            .await
            .unwrap();
        let member = store
            .join_session(&session, &key(Space::members(), "m"), &holder)
            .await
            .unwrap();
        store
            .enqueue(b"job", EnqueueOptions::default())
            .await
            .unwrap();
        (db, store, session, member)
    }

    /// [`set_up`], then a transaction, left open, in which the member claims the item.
    async fn claim_left_open() -> (
        DoubleDatabase,
        FdbStore,
        liveness_core::Lease,
        liveness_core::Lease,
        Box<dyn crate::kv::Transaction>,
    ) {
        let (db, store, session, member) = set_up().await;
        let mut tx = store.db.begin().await.unwrap();
        let items = store
            .claim_once(
                &mut *tx,
                &member,
                &[liveness_core::QueueName::DEFAULT],
                1,
                RequestId(1),
            )
            .await
            .unwrap();
        assert_eq!(items.len(), 1);
        (db, store, session, member, tx)
    }

    /// A member's claim whose transaction is open while the session's renewal commits
    /// still commits, with no conflict: it read the session's record by snapshot.
    #[tokio::test]
    async fn a_claim_does_not_conflict_with_the_session_s_renewal() {
        let (db, store, session, _, mut tx) = claim_left_open().await;
        store.renew(&session).await.unwrap();
        tx.commit()
            .await
            .expect("the claim commits past the renewal");
        assert_eq!(db.conflicts(), 0);
        assert_eq!(store.item_counts().await.unwrap().owned, 1);
    }

    /// The same claim conflicts when the session ENDS between its read and its
    /// commit (the dead-set entry it read with a conflict): it never commits under
    /// a dead session; retried, it answers `Lost`.
    #[tokio::test]
    async fn a_claim_conflicts_with_the_session_s_end() {
        let (_db, store, session, member, mut tx) = claim_left_open().await;
        assert!(store.release(&session).await.unwrap());
        assert!(tx.commit().await.is_err(), "a claim past the session's end");
        assert_eq!(store.item_counts().await.unwrap().owned, 0);
        assert!(matches!(
            store.claim(&member, 1).await,
            Err(Error::Lost { .. })
        ));
    }

    /// A join whose transaction is open while the session's renewal commits still
    /// commits, with no conflict; one open while the session is released does not.
    #[tokio::test]
    async fn a_join_conflicts_with_the_session_s_end_not_its_renewal() {
        let (db, store, session, _) = set_up().await;
        let holder = HolderId::new("p").unwrap();
        let mut tx = store.db.begin().await.unwrap();
        let at = crate::kv::Attempt::default();
        let k2 = Acquire::new(key(Space::members(), "m2"), holder.clone(), session.ttl);
        let (joined, _) = store
            .join_once(&mut *tx, &at, &session, &[k2], 7)
            .await
            .unwrap();
        assert!(joined[0].is_ok());
        store.renew(&session).await.unwrap();
        tx.commit()
            .await
            .expect("the join commits past the renewal");
        assert_eq!(db.conflicts(), 0);

        let mut tx = store.db.begin().await.unwrap();
        let k3 = key(Space::members(), "m3");
        let ask = Acquire::new(k3.clone(), holder.clone(), session.ttl);
        let (joined, _) = store
            .join_once(&mut *tx, &at, &session, &[ask], 8)
            .await
            .unwrap();
        assert!(joined[0].is_ok());
        assert!(store.release(&session).await.unwrap());
        assert!(tx.commit().await.is_err(), "a join past the session's end");
        assert!(store.inspect(&k3).await.unwrap().is_none());
    }
}
