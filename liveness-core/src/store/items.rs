//! [`ItemStore`]: work items owned by member leases, requeued when their owner dies.
//! A store opts into it; a store for elections alone leaves it out.

use async_trait::async_trait;

use crate::error::{BatchResult, Error, InputProblem, Result};
use crate::item::{EnqueueOptions, Item, ItemId, ItemRecord, ItemState, Outcome, RequestId, Sweep};
use crate::lease::{DeadToken, Lease};
use crate::queue_name::QueueName;
use crate::types::FencingToken;
#[cfg(doc)]
use crate::{
    capabilities::Capabilities,
    store::{LeaseStore, Store},
};

/// The answer of an operation the store does not offer.
pub(crate) fn unsupported<T>(op: &'static str) -> Result<T> {
    Err(Error::invalid(op, InputProblem::Unsupported))
}

/// Work items owned by member leases, requeued when their owner dies: six methods,
/// on top of [`LeaseStore`].
///
/// A store with items implements all six and says so with [`Capabilities::items`]
/// (true by default); the conformance suite then checks every one. A store for
/// elections alone writes `impl ItemStore for MyStore {}`, sets `items: false`, and
/// every method answers `InvalidInput` ([`InputProblem::Unsupported`]).
///
/// [`Store`] gives `claim`, `complete`, `fail` and `sweep` on top.
///
/// # Contract shared by every method
/// - An item is in exactly one state: pending, owned by one token, or dead-lettered.
///   Completed items are removed.
/// - A pending item may be held back until a time by the store's own clock (its
///   due time: an enqueue's [`EnqueueOptions::delay`], a retry's `after`): it is
///   pending, and no claim assigns it before that time. A store keeps due times only
///   with [`Capabilities::delays`]; without it every pending item is due.
#[async_trait]
pub trait ItemStore: Send + Sync {
    /// Adds a pending item.
    ///
    /// # Contract
    /// - Returns a new id, greater than every id handed out before in the namespace.
    /// - A payload over `max_payload` or `max_attempts == 0` is `InvalidInput`.
    /// - With [`EnqueueOptions::key`]: when an earlier enqueue in the namespace used the
    ///   same key, adds nothing and returns that enqueue's id, whatever became of the
    ///   item since (completed items included), and whatever payload and options this
    ///   call carries. The check and the insert are one atomic step: of concurrent
    ///   enqueues with one key, exactly one adds the item and all answer its id. Keys
    ///   are remembered for the namespace's lifetime.
    /// - With a non-zero [`EnqueueOptions::delay`]: the item is due at the store's
    ///   now (when the call arrives) + the delay, and no claim assigns it before.
    ///
    /// # Retry
    /// - With a key: idempotent; a repeat answers the first call's id.
    /// - Without a key: a repeat of an applied enqueue adds a second item
    ///   (at-least-once). Use a key when a duplicate matters.
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        let _ = (payload, options);
        unsupported("enqueue")
    }

    /// Adds one pending item per payload, all with `options`: a producer's batch in
    /// one round trip where the store has one. Answers the new ids in payload order.
    ///
    /// # Contract
    /// - Each payload as [`ItemStore::enqueue`] takes it; the ids increase in payload
    ///   order.
    /// - No payload, more than `max_batch`, or an idempotency key in `options` (a key
    ///   names one item) is `InvalidInput`, and nothing is added.
    /// - A store that overrides this adds all the items or none. The default adds them
    ///   one by one with [`ItemStore::enqueue`]: on an error, the items before the
    ///   failing one stay added.
    ///
    /// # Retry
    /// - A repeat of an applied call adds the items again (at-least-once, as an
    ///   enqueue without a key).
    async fn enqueue_many(
        &self,
        payloads: &[Vec<u8>],
        options: EnqueueOptions,
    ) -> Result<Vec<ItemId>> {
        let mut ids = Vec::with_capacity(payloads.len());
        for payload in payloads {
            ids.push(self.enqueue(payload, options).await?);
        }
        Ok(ids)
    }

    /// Assigns up to `n` pending items that are due to the lease's token, counts one
    /// attempt on each, and records `req` on each: the claim of `req`. Items enqueued
    /// without a delay and never handed back are assigned lowest id first; an item
    /// that became due later (a delay, a retry's `after`, a sweep) is assigned once
    /// due, in an order the store picks.
    ///
    /// # Contract
    /// - Only while the lease is current and live by the store clock, checked in the
    ///   same atomic step; otherwise [`Error::Lost`] and nothing is assigned.
    /// - `n == 0` is `InvalidInput`; larger `n` is clamped to `max_batch`.
    /// - Returns the claimed items with their new attempt counts (possibly none).
    /// - Claim ids are single-use and must increase per token. The store keeps, with
    ///   the token's lease record, the greatest id it admitted under that token (its
    ///   high-water mark; a new token starts with none). In one atomic step with the
    ///   lease check, a call:
    ///   1. when items the token owns carry `req` (an earlier call with this token
    ///      and this id assigned them): returns exactly those items, lowest id first,
    ///      with their attempt counts unchanged, and assigns nothing new;
    ///   2. else, when `req` is not greater than the mark (a late or repeated copy
    ///      of a call whose items are all completed or failed already, or an older id
    ///      arriving after a newer one): returns no items and changes nothing;
    ///   3. else: is admitted, assigns pending items, and raises the mark to `req`
    ///      (also when no item was pending).
    /// - `req` is scoped to the token: the same id under another token is a new
    ///   request. Callers take each claim's id from [`RequestId::next`], so one
    ///   caller's ids increase; concurrent claims under one token may reach the store
    ///   out of order, and the older one then answers no items.
    ///
    /// # Retry
    /// - Idempotent with the same `req` (and `n`): a repeat after `Unavailable`
    ///   answers the items the first call assigned, so none of them stays owned by a
    ///   live token that does not know it has them; a copy delivered after the repeat
    ///   (and after its items were completed) assigns nothing, so no item is assigned
    ///   under an id nobody waits for.
    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        let _ = (lease, n, req);
        unsupported("claim")
    }

    /// [`ItemStore::claim_request`] from the named queues: assigns up to `n` due
    /// pending items of `queues`, taking the queues in the order given (strict
    /// priority: an item of a later queue only when the earlier ones have no more
    /// due items), each queue in the order `claim_request` promises.
    /// `claim_request` is this with `[QueueName::DEFAULT]`.
    ///
    /// # Contract
    /// - Everything [`ItemStore::claim_request`] promises, the lease check and the
    ///   claim ids' rules among it. A repeat of a claim answers the items its first
    ///   call assigned, whatever queues the repeat names.
    /// - `queues` holds 1 to [`MAX_CLAIM_QUEUES`](crate::MAX_CLAIM_QUEUES) names,
    ///   none twice (`InvalidInput` otherwise). A queue with no items is no error.
    /// - A store without [`Capabilities::queues`] takes only `[QueueName::DEFAULT]`
    ///   (the default of this method calls `claim_request`); any other list is
    ///   `InvalidInput` ([`InputProblem::Unsupported`]).
    ///
    /// # Retry
    /// - As [`ItemStore::claim_request`].
    async fn claim_from(
        &self,
        lease: &Lease,
        queues: &[QueueName],
        n: usize,
        req: RequestId,
    ) -> Result<Vec<Item>> {
        match queues {
            [only] if only.is_default() => self.claim_request(lease, n, req).await,
            _ => unsupported("queues"),
        }
    }

    /// Hands an item back as its owner finished it: [`Outcome::Completed`] removes
    /// it, [`Outcome::Retry`] puts it back to pending, due `after` from the store's
    /// now (or to the dead-letter set when its attempts reached `max_attempts`),
    /// [`Outcome::DeadLetter`] puts it in the dead-letter set. Answers the item's new
    /// state (`None`: removed).
    ///
    /// # Contract
    /// - Succeeds iff the item is still owned by the lease's token; otherwise
    ///   [`Error::Fenced`] and nothing changes. A stale (requeued) owner can never
    ///   complete or fail an item.
    ///
    /// # Retry
    /// - A repeat of an applied call changes nothing and answers `Fenced`: the item
    ///   is gone or no longer the token's. The caller tells its own earlier success
    ///   from a loss with [`ItemStore::item`] while its lease is still current: an
    ///   item owned by a live token moves only through that token's own `finish`;
    ///   only a dead token's items are requeued. `None` means completed, pending or
    ///   dead-lettered means handed back. [`Member::complete`](crate::Member::complete)
    ///   and [`Member::fail`](crate::Member::fail) do this.
    async fn finish(
        &self,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
    ) -> Result<Option<ItemState>> {
        let _ = (lease, id, outcome);
        unsupported("finish")
    }

    /// [`ItemStore::finish`], keeping `error` as the item's last error
    /// ([`ItemRecord::last_error`]) in the same step: what a worker's failed job
    /// reports, so that an operator reading a dead letter or a waiting retry sees why
    /// its last attempt failed.
    ///
    /// # Contract
    /// - Everything [`ItemStore::finish`] promises, with the same answers.
    /// - When the item moves (the call is applied) and `outcome` is a failure, its
    ///   last error becomes `error`; an empty `error` leaves it as it was. A
    ///   completed item is removed with its error.
    /// - `error` is at most [`MAX_ERROR_LEN`](crate::MAX_ERROR_LEN) bytes
    ///   (`InvalidInput` otherwise: [`error_text`](crate::error_text) cuts a longer
    ///   one). The text is kept as given, but a store whose text type has no NUL
    ///   (PostgreSQL) may keep a NUL character as U+FFFD.
    /// - A store without [`Capabilities::error_text`] keeps no text: the default
    ///   calls `finish` and drops `error`.
    ///
    /// # Retry
    /// - As [`ItemStore::finish`].
    ///
    /// [`Capabilities::error_text`]: crate::Capabilities::error_text
    async fn finish_with_error(
        &self,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
        error: &str,
    ) -> Result<Option<ItemState>> {
        let _ = error;
        self.finish(lease, id, outcome).await
    }

    /// Requeues every item still owned by each dead token and forgets the token: what
    /// a checker sends for a round's deaths and its sweep instead of one round trip
    /// per token. [`Store::sweep`] is this with one token.
    ///
    /// # Contract of each token
    /// - Acts only when the token is in the dead set; for any other token (a live
    ///   member's among them) it answers an empty result and changes nothing.
    /// - Each owned item goes back to pending, or to the dead-letter set when its
    ///   attempts reached `max_attempts`; then the token leaves the dead set.
    /// - Idempotent: a second call (or a concurrent one, or the same token twice in
    ///   one call) moves nothing twice.
    ///
    /// # Contract of the batch
    /// - One answer per token, in the order given.
    /// - Any number of tokens: a native implementation splits a list larger than it
    ///   can move in one step.
    /// - A transport fault fails the whole call with `Unavailable` (any subset may
    ///   have been applied), or answers `Unavailable` for just the entries it hit;
    ///   retrying is safe.
    ///
    /// # Retry
    /// - A repeat of an applied call answers an empty result (the token left the dead
    ///   set) and moves nothing; the items were moved by the first.
    async fn sweep_many(&self, tokens: &[FencingToken]) -> BatchResult<Sweep> {
        let _ = tokens;
        unsupported("sweep_many")
    }

    /// Lists the dead set: tokens reaped or released whose items were not yet requeued.
    ///
    /// # Contract
    /// - At most `limit` entries (clamped; zero is `InvalidInput`), lowest token first.
    /// - A token leaves the dead set only through
    ///   [`ItemStore::sweep_many`].
    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        let _ = limit;
        unsupported("dead_tokens")
    }

    /// Reads one item.
    ///
    /// # Contract
    /// - `None` iff the item was completed or never existed.
    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        let _ = id;
        unsupported("item")
    }

    /// A signal that ticks when items may have become pending (an enqueue, a job
    /// handed back to be tried again, a sweep that requeued, a dead letter retried):
    /// an idle [`Worker`](crate::Worker) claims again at once instead of at its next
    /// poll.
    ///
    /// # Contract
    /// - `None` (the default) when the store has no such signal: workers poll. A tick
    ///   is a hint, never a promise: a missed one only delays a worker to its next
    ///   poll, and a tick with nothing pending costs one empty claim.
    fn pending(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }

    /// How long, by the store's clock, until the first pending item that is not yet
    /// due becomes due: what an idle worker sleeps at most before its next claim, so
    /// a scheduled job starts on time without polling.
    ///
    /// # Contract
    /// - `None` when no pending item waits for its due time (nothing is scheduled,
    ///   or everything pending is due already); else the time left until the earliest
    ///   due time, zero when it has passed. Items due already are not looked at: a
    ///   claim finds them.
    /// - A store without [`Capabilities::delays`] answers `None` (the default).
    ///
    /// # Retry
    /// - A read: safe to repeat.
    async fn next_due(&self) -> Result<Option<std::time::Duration>> {
        Ok(None)
    }
}
