//! The member's work: claiming items under the current generation, completing and
//! failing them (fenced when the generation that claimed them is gone), the claims
//! whose replies were lost, and the workers' holds that the watchdog and a leave
//! wait on.

use super::*;
use crate::item::Outcome;
use crate::queue_name::QueueName;

/// An item claimed by a member, bound to the generation that claimed it.
#[derive(Clone, Debug)]
pub struct Claimed {
    /// The item.
    pub item: Item,
    /// The lease it was claimed under: complete and fail use its token.
    pub lease: Lease,
    /// Fires when that lease is lost: stop working on the item.
    pub cancel: CancellationToken,
    footing: Arc<Footing>,
    _hold: Arc<Hold>,
}

/// Alive as long as a clone of a [`Claimed`] is: when the last one is dropped, the
/// worker let go of the item, and a leaving member may hand it back at once. While
/// it lives, the watchdog watches the job's progress.
#[derive(Debug)]
pub(super) struct Hold {
    let_go: Arc<Notify>,
    /// When the job last made progress (its claim, or [`Claimed::progress`]), on the
    /// member's clock ([`Clock::boot`](crate::Clock::boot), in nanoseconds).
    pub(super) progress: AtomicU64,
    clock: Arc<dyn crate::clock::Clock>,
}

impl Hold {
    /// Records that the job made progress now.
    fn note_progress(&self) {
        self.progress
            .store(boot_nanos(&*self.clock), Ordering::Relaxed);
    }
}

/// The clock's [`Clock::boot`](crate::Clock::boot) reading, in nanoseconds.
pub(super) fn boot_nanos(clock: &dyn crate::clock::Clock) -> u64 {
    u64::try_from(clock.boot().as_nanos()).unwrap_or(u64::MAX)
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.let_go.notify_waiters();
    }
}

impl Claimed {
    /// May the work on this item still act? Returns the fencing token to pass with a
    /// side effect while the lease it was claimed under is held and its local safety
    /// deadline has not passed by the member's clock *right now*; otherwise
    /// [`Error::Lost`] (and the cancellation fires, if it had not yet). Cheap and
    /// synchronous: call it before every side effect, so a worker woken from a freeze
    /// stops even when the heartbeat task has not run yet.
    pub fn check(&self) -> Result<FencingToken> {
        self.footing.check()
    }

    /// Tells the watchdog ([`MemberConfig::progress_timeout`]) that this job is
    /// moving: call it from a job that takes longer than the timeout. Cheap: one
    /// clock read and one atomic store.
    pub fn progress(&self) {
        self._hold.note_progress();
    }
}

impl Member {
    /// Claims up to `n` pending items under the current lease.
    ///
    /// Returns no items while the member is leaving or its current generation fails
    /// [`Generation::check`] (cancelled, or its local deadline passed: waiting for a
    /// re-join); fails with `Lost` when the store finds the lease no longer live, and
    /// when the store's answer comes after the generation failed that check (its
    /// local deadline passed while the claim was in flight): then nothing is handed
    /// out, and the items the store gave stay owned by that token until a checker
    /// requeues them with it.
    ///
    /// Every claim carries a fresh [`RequestId::next`] (increasing, as the store's
    /// per-token high-water mark requires). When one fails with `Unavailable`
    /// the store may have applied it (a lost reply): the member keeps its id, and the
    /// next `claim` under the same lease repeats that request first
    /// ([`ItemStore::claim_request`](crate::ItemStore::claim_request)), so it answers
    /// the items the lost claim took (up to the `n` that claim asked for) instead of
    /// leaving them owned by a live token that does not know it has them. A claim
    /// whose lease is lost meanwhile needs no repeat: the old token's items are
    /// requeued with it.
    pub async fn claim(&self, n: usize) -> Result<Vec<Claimed>> {
        self.claim_from(&[QueueName::DEFAULT], n).await
    }

    /// [`Member::claim`] from the named queues, in the order given (strict
    /// priority: [`ItemStore::claim_from`](crate::ItemStore::claim_from)). A claim
    /// repeated after `Unavailable` answers what the lost one took, whatever queues
    /// it named.
    pub async fn claim_from(&self, queues: &[QueueName], n: usize) -> Result<Vec<Claimed>> {
        let gen = self.generation();
        if self.inner.leaving.load(Ordering::SeqCst) || gen.check().is_err() {
            return Ok(Vec::new());
        }
        let token = gen.lease.token;
        let (request, n) = {
            let mut unanswered = lock(&self.inner.unanswered);
            unanswered.retain(|(t, _, _)| *t == token);
            unanswered
                .pop()
                .map_or((RequestId::next(), n), |(_, request, n)| (request, n))
        };
        let items = match self
            .inner
            .store
            .claim_from(&gen.lease, queues, n, request)
            .await
        {
            Ok(items) => items,
            Err(e) => {
                if e.is_retryable() {
                    lock(&self.inner.unanswered).push((token, request, n));
                }
                if let Error::Lost {
                    token: t, reason, ..
                } = &e
                {
                    if *t == token {
                        self.lost_by_store(&gen, *reason);
                    }
                }
                return Err(e);
            }
        };
        // The reply may come after the local deadline (a process frozen, or a store
        // slow, while the claim was in flight): the items may be requeued to another
        // worker already, and the heartbeat task may not have run yet. Nothing is
        // handed out then; the items stay owned by this token, which is dead or about
        // to be, and a checker requeues them with it.
        gen.check()?;
        let now = boot_nanos(&*self.inner.config.clock);
        let mut owned = lock(&self.inner.owned);
        Ok(items
            .into_iter()
            .map(|item| {
                let hold = Arc::new(Hold {
                    let_go: self.inner.let_go.clone(),
                    progress: AtomicU64::new(now),
                    clock: self.inner.config.clock.clone(),
                });
                owned.insert(item.id, (gen.lease.token, Arc::downgrade(&hold)));
                Claimed {
                    item,
                    lease: gen.lease.clone(),
                    cancel: gen.cancel.clone(),
                    footing: gen.footing.clone(),
                    _hold: hold,
                }
            })
            .collect())
    }

    /// The store answered a call under `gen` with `Lost` for `reason`. A riding member
    /// has no renewal of its own that would tell it (its record may be gone while its
    /// session is fine: an asynchronous failover, an operator's release): its
    /// generation is marked lost now, and its session's task takes the loss on and
    /// re-joins it. A member of its own lease learns it from its next renewal.
    fn lost_by_store(&self, gen: &Generation, reason: LostCause) {
        let (Some(riding), Some(session)) = (gen.riding(), &self.inner.session) else {
            return;
        };
        if riding.session_lost() {
            return;
        }
        riding.lose(reason);
        session
            .riders()
            .due_by(&self.inner.key, self.inner.config.clock.boot());
    }

    /// Completes a claimed item. Fails with [`Error::Fenced`] when the item was
    /// requeued since (its generation was lost): the work must be considered not done.
    /// Also `Fenced`, at once and without a round trip, once the generation is lost
    /// or its local deadline passed by the member's clock ([`Claimed::check`] answers
    /// `Lost`, for any reason but a graceful leave's stop): the item may be requeued
    /// to another worker by now, so the work counts as not done either way.
    ///
    /// Safe to call again after `Unavailable`: when the earlier call was applied (its
    /// reply lost), the store answers the repeat with `Fenced`; the member then reads
    /// the item, and while the generation still passes [`Claimed::check`] an item that
    /// is gone was completed by that earlier call (a live token's items move only
    /// through its own calls), so it answers `Ok`.
    pub async fn complete(&self, claimed: &Claimed) -> Result<()> {
        if let Some(refused) = self.refused_past_deadline("complete", claimed) {
            return refused;
        }
        let mut r = self
            .inner
            .store
            .complete(&claimed.lease, claimed.item.id)
            .await;
        if self.was_unsure(claimed, &r) {
            if let Ok(None) = self.inner.store.item(claimed.item.id).await {
                r = Ok(());
            }
        }
        self.count_fenced("complete", &r);
        self.forget(claimed, &r);
        r
    }

    /// Gives a claimed item back: to pending with `retry` (unless out of attempts),
    /// else to the dead-letter set. Fails with [`Error::Fenced`] like `complete`, and
    /// is safe to call again after `Unavailable` like `complete`: a repeat of an
    /// applied fail answers the state that fail gave the item. Past the local
    /// deadline it is `Fenced` at once, without a round trip, like `complete`.
    pub async fn fail(&self, claimed: &Claimed, retry: bool) -> Result<ItemState> {
        self.hand_back(claimed, Outcome::failed(retry), "").await
    }

    /// Gives a claimed item back to be tried again once `after` has passed by the
    /// store's clock (a retry backoff), or to the dead-letter set when it is out of
    /// attempts: [`Member::fail`] with a wait. A non-zero `after` needs
    /// [`Capabilities::delays`](crate::Capabilities::delays) (`InvalidInput`
    /// otherwise, and the item stays the member's).
    pub async fn retry_after(&self, claimed: &Claimed, after: Duration) -> Result<ItemState> {
        self.hand_back(claimed, Outcome::Retry { after }, "").await
    }

    /// Gives a claimed item back after a failure with `outcome` ([`Outcome::Retry`],
    /// with its wait, or [`Outcome::DeadLetter`]), keeping `error` as the item's last
    /// error where the store keeps one
    /// ([`Capabilities::error_text`](crate::Capabilities::error_text)): what an
    /// operator reads on the dead letter or the waiting retry. A text longer than
    /// [`MAX_ERROR_LEN`](crate::MAX_ERROR_LEN) is cut to it; [`error_text`](crate::error_text)
    /// makes one from an error and its sources. Otherwise [`Member::fail`]:
    /// `Fenced` once the item is no longer the member's, safe to call again after
    /// `Unavailable`. [`Outcome::Completed`] is `InvalidInput`: use
    /// [`Member::complete`].
    pub async fn fail_with_error(
        &self,
        claimed: &Claimed,
        outcome: Outcome,
        error: &str,
    ) -> Result<ItemState> {
        outcome.check_failure()?;
        let error = crate::item::cut_error_text(error.to_owned());
        self.hand_back(claimed, outcome, &error).await
    }

    /// [`Member::fail`], [`Member::retry_after`] and [`Member::fail_with_error`]:
    /// hands `claimed` back with `outcome` (a failure's) and `error` (empty: none).
    async fn hand_back(
        &self,
        claimed: &Claimed,
        outcome: Outcome,
        error: &str,
    ) -> Result<ItemState> {
        let retry = outcome != Outcome::DeadLetter;
        if let Some(refused) = self.refused_past_deadline("fail", claimed) {
            return refused;
        }
        let mut r = self
            .inner
            .store
            .hand_back_with_error(&claimed.lease, claimed.item.id, outcome, error)
            .await;
        if self.was_unsure(claimed, &r) {
            match self.inner.store.item(claimed.item.id).await {
                // Dead-lettered: by that fail (or out of attempts).
                Ok(Some(rec)) if rec.state == ItemState::DeadLettered => {
                    r = Ok(ItemState::DeadLettered)
                }
                // Pending, or taken (even completed) by another since: that fail put
                // it back to pending.
                Ok(_) if retry => r = Ok(ItemState::Pending),
                _ => {}
            }
        }
        self.count_fenced("fail", &r);
        if let Ok(ItemState::DeadLettered) = r {
            self.inner
                .metrics
                .labels()
                .counter(ITEMS_DEAD_LETTERED_TOTAL, &[])
                .increment(1);
        }
        self.forget(claimed, &r);
        r
    }

    /// `Fenced` (counted as a fenced `op`) when the generation `claimed` belongs to is
    /// lost or its local deadline passed by the clock right now, read afresh: a process
    /// woken from a freeze answers before any of its tasks ran. The member then
    /// forgets the item: its token is dead or about to be, and a checker requeues it.
    fn refused_past_deadline<T>(&self, op: &'static str, claimed: &Claimed) -> Option<Result<T>> {
        claimed.footing.lost()?;
        let r = Err(Error::Fenced {
            item: claimed.item.id,
            token: claimed.lease.token,
        });
        lock(&self.inner.unsure).remove(&claimed.item.id);
        self.count_fenced(op, &r);
        self.forget(claimed, &r);
        Some(r)
    }

    /// Notes an `Unavailable` answer to a complete or fail of `claimed`; true when
    /// this answer is `Fenced` after such an earlier answer, while the generation is
    /// still current: the earlier call may have been applied, and the item's state
    /// tells.
    fn was_unsure<T>(&self, claimed: &Claimed, r: &Result<T>) -> bool {
        let id = claimed.item.id;
        match r {
            Err(e) if e.is_retryable() => {
                lock(&self.inner.unsure).insert(id);
                false
            }
            Err(Error::Fenced { .. }) => {
                lock(&self.inner.unsure).remove(&id) && claimed.check().is_ok()
            }
            _ => {
                lock(&self.inner.unsure).remove(&id);
                false
            }
        }
    }

    /// Counts a `complete` or `fail` (`op`) refused by fencing.
    fn count_fenced<T>(&self, op: &'static str, r: &Result<T>) {
        if let Err(Error::Fenced { .. }) = r {
            self.inner
                .metrics
                .labels()
                .counter(FENCED_TOTAL, &[("op", op)])
                .increment(1);
        }
    }

    fn forget<T>(&self, claimed: &Claimed, r: &Result<T>) {
        if matches!(r, Ok(_) | Err(Error::Fenced { .. })) {
            lock(&self.inner.owned).remove(&claimed.item.id);
            self.inner.let_go.notify_waiters();
        }
    }

    /// How many claimed items are not yet completed or failed.
    pub fn owned(&self) -> usize {
        lock(&self.inner.owned).len()
    }

    /// True when no worker holds an item owned under the current token any more: each
    /// was completed, failed, or its every [`Claimed`] clone dropped. (Items of earlier
    /// tokens are not handed back by `leave`: those tokens are finished already.)
    fn all_let_go(&self) -> bool {
        let current = self.token();
        lock(&self.inner.owned)
            .values()
            .all(|(token, hold)| *token != current || hold.strong_count() == 0)
    }

    /// Waits until every worker let go of its items, or until `until`.
    pub(super) async fn wait_let_go(&self, until: Instant) {
        loop {
            let notified = self.inner.let_go.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.all_let_go() {
                return;
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(until) => return,
            }
        }
    }
}
