//! The batches that take leases and declare deaths: one transaction, so one commit,
//! for many entries. `acquire_many` takes every entry in one transaction by the
//! acquire step defined here ([`FdbStore::take_each`], which `join_session_many`
//! shares: `session.rs`), `reap_many` reaps every entry in one by `reap_once`, and
//! `sweep_many` packs the batches of `sweep_once` of as many tokens as fit
//! into each. A call of one entry is the batch of one. The trait methods (`lease.rs`,
//! `items.rs`) call these, on input that `liveness_core::CheckInput` already checked.

use std::collections::HashMap;

use liveness_core::{
    Acquire, BatchResult, DeathCause, Error, FencingToken, HolderId, Key, Lease, Result, Sweep, Ttl,
};
use tokio::time::Instant;

use crate::core::transact;
use crate::core::{Acquired, FdbStore, MAX_BATCH};
use crate::error::corrupt;
use crate::kv::{Attempt, Fail, Transaction};

// Acquires: `acquire_many` in one transaction, and the acquire step it shares with
// `join_session_many`.
impl FdbStore {
    /// `acquire_many`: every entry in one transaction, so one commit for the batch.
    /// All the leases written carry the call's nonce, so a retry after an unknown
    /// commit result finds each of them (`Already`).
    pub(crate) async fn acquire_batch(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        let sent = Instant::now();
        let nonce = fastrand::u64(..);
        let (outcomes, stamp) = transact!(self.db, |tx, at| async {
            let now = self.observe(tx).await?;
            self.take_each(tx, at, now, asks, nonce, None).await
        })?;
        self.granted(asks, outcomes, stamp, sent, None)
    }

    /// Takes every entry's key in order in the open transaction at `now` (this
    /// attempt's observation), each by [`FdbStore::acquire_at`] (`ride`: the session
    /// the new records ride, for `join_session_many`). An entry's answer (`Held`)
    /// fails only that entry; a database failure fails the attempt.
    ///
    /// A later entry on a key an earlier entry took answers `Held` from what this
    /// attempt wrote, without reading the key again: its lease record is
    /// versionstamped, which FoundationDB does not let the writing transaction read.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn take_each(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        now: Instant,
        asks: &[Acquire],
        nonce: u64,
        ride: Option<&Lease>,
    ) -> Result<Vec<Result<Acquired, Error>>, Fail> {
        let mut taken: HashMap<&Key, (HolderId, FencingToken)> = HashMap::new();
        let mut out = Vec::with_capacity(asks.len());
        for ask in asks {
            if let Some((holder, token)) = taken.get(&ask.key) {
                out.push(Err(Error::Held {
                    key: ask.key.clone(),
                    holder: holder.clone(),
                    token: *token,
                }));
                continue;
            }
            let entry = match self
                .acquire_at(tx, at, now, &ask.key, &ask.holder, ask.ttl, nonce, ride)
                .await
            {
                Ok(acquired) => acquired,
                Err(Fail::Stop(e)) => {
                    out.push(Err(e));
                    continue;
                }
                Err(e @ Fail::Db(_)) => return Err(e),
            };
            let owner = match &entry {
                Acquired::New { token, .. } => (ask.holder.clone(), *token),
                Acquired::Already(rec) => (rec.holder.clone(), rec.token),
            };
            taken.insert(&ask.key, owner);
            out.push(Ok(entry));
        }
        Ok(out)
    }

    /// Acquires `key` at `now` (this attempt's observation) in the open transaction:
    /// the step of each entry of [`FdbStore::take_each`] (`ride`: the session the new
    /// record rides). A live lease answers `Held` (`Fail::Stop`, nothing written); an
    /// expired one, or one riding a session that is expired or gone, is declared dead
    /// (dead set, death record) first. The session of a riding record is read with a
    /// conflict here: declaring it dead because its session is not live must not
    /// commit past a renewal of that session.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn acquire_at(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        now: Instant,
        key: &Key,
        holder: &HolderId,
        ttl: Ttl,
        nonce: u64,
        ride: Option<&Lease>,
    ) -> Result<Acquired, Fail> {
        let mut superseded = None;
        if let Some(rec) = self.read_lease(tx, key, false).await? {
            if at.maybe_committed && rec.nonce == nonce {
                return Ok(Acquired::Already(rec));
            }
            if !self.rec_expired(tx, key, &rec, now, false).await? {
                return Err(Fail::Stop(Error::Held {
                    key: key.clone(),
                    holder: rec.holder,
                    token: rec.token,
                }));
            }
            self.declare_dead(tx, key, &rec, nonce);
            self.record_death(tx, key, &rec, DeathCause::Superseded)
                .await?;
            superseded = Some(rec);
        }
        let token = FencingToken(self.next_counter(tx, "token").await?);
        self.write_lease(tx, key, token, ttl.as_millis(), nonce, holder, ride);
        Ok(Acquired::New { token, superseded })
    }
}

// Reaps and sweeps of many dead tokens at once.
impl FdbStore {
    /// `reap_many`: every reap in one transaction.
    pub(crate) async fn reap_batch(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
        // Every reap in one transaction: one commit for a round's deaths. Each entry
        // has its nonce, so a retry after an unknown commit result recognises the
        // reaps that commit applied; a repeat of an entry reads the first's work
        // (read-your-writes) and answers false.
        let nonces: Vec<u64> = expired.iter().map(|_| fastrand::u64(..)).collect();
        let (outcomes, _) = transact!(self.db, |tx, at| async {
            let mut out = Vec::with_capacity(expired.len());
            for ((key, token), nonce) in expired.iter().zip(&nonces) {
                out.push(self.reap_once(tx, at, key, *token, *nonce).await?);
            }
            Ok(out)
        })?;
        if outcomes.len() != expired.len() {
            return Err(corrupt("reap_many answered another number of entries"));
        }
        Ok(expired
            .iter()
            .zip(outcomes)
            .map(|((key, _), outcome)| Ok(self.declared_dead(key, outcome)))
            .collect())
    }

    /// `sweep_many`: as many dead tokens per transaction as their items fit.
    pub(crate) async fn sweep_batch(&self, tokens: &[FencingToken]) -> BatchResult<Sweep> {
        // As many tokens per transaction as their items fit (`MAX_BATCH` moved, give
        // or take one token's batch): a round's deaths, a few items each, are one
        // commit instead of one per token. A token with more items than fit goes on
        // in the next transaction, within this call. A repeat of a token reads the
        // first's work (read-your-writes): it moves nothing.
        let mut out: Vec<Sweep> = tokens.iter().map(|_| Sweep::default()).collect();
        let mut next = 0;
        while next < tokens.len() {
            let ((moved, upto), _) = transact!(self.db, |tx, _at| async {
                let mut moved: Vec<(usize, Sweep)> = Vec::new();
                let (mut count, mut i) = (0, next);
                while i < tokens.len() && count < MAX_BATCH {
                    let Some((batch, done)) = self.sweep_once(tx, tokens[i]).await? else {
                        i += 1;
                        continue;
                    };
                    let members = !batch.members.is_empty();
                    count += batch.requeued.len() + batch.dead_lettered.len();
                    count += batch.members.len();
                    moved.push((i, batch));
                    if !done {
                        // A dead session's batch of members is all this call does
                        // for its token (one batch per call); items go on.
                        if members {
                            i += 1;
                        }
                        break;
                    }
                    i += 1;
                }
                Ok((moved, i))
            })?;
            for (i, batch) in moved {
                out[i].requeued.extend(batch.requeued);
                out[i].dead_lettered.extend(batch.dead_lettered);
                out[i].members.extend(batch.members);
            }
            next = upto;
        }
        Ok(out.into_iter().map(Ok).collect())
    }
}
