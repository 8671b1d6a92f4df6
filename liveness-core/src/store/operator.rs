//! [`OperatorStore`]: what an operator reads and does (who is alive, who died, the
//! items by state, retrying dead letters). A store opts into it; the state machines
//! never call it, the `liveness` command and the dashboard do.

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::item::{ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind, QueueCounts};
use crate::lease::{DeathRecord, LeaseInfo};
use crate::queue_name::QueueName;
use crate::store::items::unsupported;
use crate::store::Page;
use crate::types::{Key, Space, StoreTime};
#[cfg(doc)]
use crate::{
    capabilities::Capabilities,
    store::{ItemStore, LeaseStore},
};

/// What an operator reads and does: the store's clock, the leases of a space, the
/// death history, the items by state, and moving dead letters back to pending.
///
/// A store that offers these implements them and says so with
/// [`Capabilities::operator_views`] (true by default); the conformance suite then
/// checks them. The state machines never call them: a store without them (`impl
/// OperatorStore for MyStore {}`, `operator_views: false`) runs members, sessions,
/// checkers and elections, and its operator calls answer `InvalidInput`
/// ([`InputProblem::Unsupported`](crate::InputProblem::Unsupported)).
#[async_trait]
pub trait OperatorStore: Send + Sync {
    /// The store clock's now, for diagnostics and tests.
    ///
    /// # Contract
    /// - Non-decreasing across calls on one handle.
    async fn store_time(&self) -> Result<StoreTime> {
        unsupported("store_time")
    }

    /// Lists the leases of `space`, live or expired-not-reaped, in key order: the
    /// operator's "who is alive right now".
    ///
    /// # Contract
    /// - Returns the leases whose key is greater than `page.after` (all of them
    ///   without it), lowest key first (keys compare by their name's bytes), at most
    ///   `page.limit` of them (clamped to `max_batch`; zero is `InvalidInput`): a
    ///   caller pages through by passing the last key it got as the next `after`
    ///   ([`Page::next`]).
    /// - Each entry is what [`LeaseStore::inspect`] of its key would report: holder,
    ///   token, ttl and status by the store clock (live with the time left, or
    ///   expired and not yet reaped). Released and reaped leases are not listed.
    /// - A `page.after` key of another space is `InvalidInput`
    ///   ([`InputProblem::OtherSpace`](crate::error::InputProblem::OtherSpace)).
    /// - Its cost grows with the page, never with the number of leases in the space
    ///   (an index by key).
    /// - Changes nothing. The page is one snapshot, except on stores whose `expired`
    ///   may read in several steps (etcd), where each entry was true when it was read.
    async fn leases(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let _ = (space, page);
        unsupported("leases")
    }

    /// Lists the namespace's death history, newest first: every token that stopped
    /// being current (reaped, released, or superseded by an acquire), with what its
    /// sweep moved.
    ///
    /// # Contract
    /// - Every reap that returns true, every release that returns true and every
    ///   acquire that reaps an expired lease writes one [`DeathRecord`] in the same
    ///   atomic step (so of racing reapers, exactly one death is recorded), with the
    ///   store time and the [`DeathCause`](crate::DeathCause).
    /// - Its `swept` is `None` until [`ItemStore::sweep_many`] takes the token out of the dead set, and then says
    ///   exactly how many items that sweep sent back to pending and how many to the
    ///   dead-letter set, whichever of any number of checkers made it (written in the
    ///   sweep's own atomic step; a sweep split over several steps fills it in with
    ///   the last one, counting them all).
    /// - Records have increasing `seq` in the order the deaths happened. Returns those
    ///   with `seq < before` (all without `before`), highest `seq` first, at most
    ///   `limit` (clamped to `max_batch`; zero is `InvalidInput`): a caller pages back
    ///   by passing the last `seq` it got as the next `before`.
    /// - The store keeps the newest [`Capabilities::death_retention`] records of the
    ///   namespace and drops older ones as new ones are written, at a cost that does
    ///   not grow with the history (no scan). A record once dropped is never written
    ///   again: the sweep of its token still requeues its items and takes it out of
    ///   the dead set, but `deaths` never lists that token again.
    /// - Changes nothing.
    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        let _ = (before, limit);
        unsupported("deaths")
    }

    /// Counts items by state.
    ///
    /// # Contract
    /// - A consistent snapshot (one atomic read).
    async fn item_counts(&self) -> Result<ItemCounts> {
        unsupported("item_counts")
    }

    /// Counts items by state in each queue: the operator's "how deep is each queue".
    ///
    /// # Contract
    /// - One entry per queue that holds at least one item, in name order (by the
    ///   name's bytes), each with its items counted by state; the entries add up to
    ///   what [`OperatorStore::item_counts`] answers.
    /// - A consistent snapshot (one atomic read), at no more than what
    ///   [`OperatorStore::item_counts`] costs (a store that counts by scanning its
    ///   items scans them here too).
    /// - The default, for a store without [`Capabilities::queues`]: its one queue,
    ///   [`QueueName::DEFAULT`], with [`OperatorStore::item_counts`] (no entry when
    ///   the store holds no item).
    async fn queue_counts(&self) -> Result<Vec<QueueCounts>> {
        let counts = self.item_counts().await?;
        Ok(match counts == ItemCounts::default() {
            true => Vec::new(),
            false => vec![QueueCounts::new(QueueName::DEFAULT, counts)],
        })
    }

    /// Lists a page of the items in one state, lowest id first.
    ///
    /// # Contract
    /// - The items in `state` whose id is greater than `page.after` (all without it),
    ///   at most `page.limit` (clamped to `max_batch`; zero is `InvalidInput`): a
    ///   caller pages through by passing the last id it got as the next `after`
    ///   ([`Page::next`]).
    /// - Each entry is what [`ItemStore::item`] would report. The page is one
    ///   snapshot. Changes nothing.
    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        let _ = (state, page);
        unsupported("items")
    }

    /// Moves a dead-lettered item back to pending, with its attempts reset to zero:
    /// the operator's "retry this one".
    ///
    /// # Contract
    /// - Iff item `id` is dead-lettered, it becomes pending with `attempts == 0`
    ///   (payload and `max_attempts` unchanged), in one atomic step.
    /// - An id of no item (never enqueued, or completed) is `InvalidInput` with
    ///   [`InputProblem::NoSuchItem`](crate::error::InputProblem::NoSuchItem); a pending or owned item is `InvalidInput`
    ///   with [`InputProblem::NotDeadLettered`](crate::error::InputProblem::NotDeadLettered) (`what: "item"`). Nothing changes.
    ///
    /// # Retry
    /// - A repeat of an applied call answers `NotDeadLettered` (the item is pending,
    ///   or claimed since) and changes nothing.
    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        let _ = id;
        unsupported("retry_dead_letter")
    }

    /// Removes item `id` if nobody owns it: a pending job (due or held back) is
    /// cancelled, a dead-lettered one discarded. The operator's "cancel this one".
    ///
    /// # Contract
    /// - A pending or dead-lettered item is removed in one atomic step (as a
    ///   completion removes it: [`ItemStore::item`] answers `None` after), and the
    ///   answer is the state it had.
    /// - An owned item is left alone (its worker may be running it; it finishes or
    ///   fails it, or a sweep hands it back) and the answer is `Some(Owned(token))`.
    /// - No such item (never enqueued, completed, or removed already): `None`.
    ///
    /// # Retry
    /// - A repeat of an applied call answers `None` and changes nothing.
    async fn cancel(&self, id: ItemId) -> Result<Option<ItemState>> {
        let _ = id;
        unsupported("cancel")
    }

    /// Moves up to `limit` dead-lettered items, lowest id first, back to pending with
    /// their attempts reset to zero, and returns their ids (in id order): the
    /// operator's "retry them all", called until it answers an empty list.
    ///
    /// # Contract
    /// - Each moved item is exactly as [`OperatorStore::retry_dead_letter`] would move it,
    ///   each in one atomic step (the workspace's stores move the whole batch in one).
    /// - `limit` is clamped to `max_batch`; zero is `InvalidInput`.
    ///
    /// # Retry
    /// - A repeat moves the items dead-lettered by then; none twice.
    ///
    /// The default reads the first page of dead letters and moves each with
    /// [`OperatorStore::retry_dead_letter`]; an item another caller moved in between is
    /// skipped, so two concurrent calls never move one item twice.
    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        let mut moved = Vec::new();
        let page = Page::first(limit);
        for record in self.items(ItemStateKind::DeadLettered, page).await? {
            let id = record.item.id;
            match self.retry_dead_letter(id).await {
                Ok(()) => moved.push(id),
                // Moved (or completed) by someone else since the page was read.
                Err(Error::InvalidInput { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(moved)
    }
}
