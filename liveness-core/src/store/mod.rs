//! The store contract: [`LeaseStore`] (every store), [`ItemStore`] (work items) and
//! [`OperatorStore`] (the operator's views), what a store declares about itself in
//! [`Capabilities`], and [`Store`], the three together with the one-entry forms on
//! top.
//!
//! These files are the one place that says what every backend must guarantee: the
//! bullets under each `# Contract` heading (the rules every method shares are here,
//! each method's in its trait's file).
//!
//! | trait | methods a store writes | who calls them |
//! | --- | --- | --- |
//! | [`LeaseStore`] (`leases.rs`) | 8, and `join_session_many` for native sessions | members, sessions, checkers, elections |
//! | [`ItemStore`] (`items.rs`) | 6, or none for a store of elections alone | members, checkers |
//! | [`OperatorStore`] (`operator.rs`) | 6, or none | the `liveness` command, the dashboard |
//!
//! The conformance suite (crate `liveness-conformance`) checks them: every bullet of a method has a named scenario,
//! except those no scenario can see — the cost of [`LeaseStore::expired`] (a store
//! that scans every lease gives the same answers, only slower), checked by
//! `liveness_bench::check_round_cost`; the cost of [`OperatorStore::leases`] and of trimming the
//! death history ([`OperatorStore::deaths`]), which each backend meets with an index; and
//! the transport-fault bullet below, which needs faults injected into the backend's own
//! transport (each backend's fault tests). The suite crate's README maps every bullet
//! to what checks it.
//!
//! # Contract shared by every method
//!
//! - **One atomic step per decision.** Each operation decides and writes in one
//!   atomic step, linearizable within the store handle's namespace: each entry of
//!   `acquire_many`, `join_session_many`, `renew_many` (the extension) and
//!   `reap_many`, and `release`, `claim_request`, `finish` and `enqueue` take effect
//!   at one instant, all of it or nothing; of concurrent
//!   callers racing for the same lease or item, exactly one wins. The steps a store may split are listed
//!   next, and only those; every split keeps the operation's bullets below true for
//!   the caller, and the store's README says which splits it makes.
//! - **What a store may split over more than one step:**
//!   - [`ItemStore::sweep_many`] may move a dead token's items in several
//!     batches, each guarded by the token's dead-set entry, removing the entry with
//!     the last one: a reader may see some of the items moved and the token still in
//!     the dead set; no item moves twice, and the token leaves the dead set only when
//!     none of its items is left (etcd: 32 items a step, FoundationDB: 500).
//!   - [`LeaseStore::renew_many`]'s loss reason may be read in a second, read-only step
//!     after the refused extension: the refusal is atomic, the reason is the one that
//!     held then or a later one (an `Expired` lease read as `Superseded` or `Released`
//!     after somebody acquired or released it meanwhile) (PostgreSQL, SQLite, etcd).
//!   - [`LeaseStore::expired`] may check its candidates in several reads: every lease
//!     listed was expired and unreaped when it was read, but the list is not one
//!     snapshot (etcd).
//! - Only the store clock decides expiry (see DESIGN.md): the server's clock read
//!   inside the operation, or, on observer-local stores
//!   ([`Capabilities::observer_local_expiry`]), this handle's own monotonic clock. A
//!   caller's clock is never sent or compared.
//! - A lease is live while the store's now is strictly before its expiry, and
//!   expired from that instant on: at exactly its expiry `renew` and `claim` answer
//!   `Lost` (`Expired`), `reap` may declare it dead, and any holder may acquire the
//!   key.
//! - Invalid input fails with [`Error::InvalidInput`] and changes nothing. **The
//!   input is checked once, before it reaches the store**: every store a caller gets
//!   (from the state machines, [`checked`](crate::checked()) or the umbrella crate's
//!   `connect`, and in the conformance suite) stands behind
//!   [`CheckInput`](crate::CheckInput), which refuses a foreign lease, a ttl outside
//!   the capabilities, an oversized batch, a zero limit, a page cursor of another
//!   space and an invalid enqueue, clamps limits to `max_batch`, and answers an
//!   empty batch itself (its docs list every check). A store implementation receives
//!   only input that passed those checks and does not repeat them; the `InvalidInput`
//!   bullets below describe the store as its callers see it. A store still refuses
//!   what only it can judge (an item id that names no item, a value its backend
//!   cannot hold). An operation of a part the store's capabilities do not offer
//!   ([`Capabilities::items`], [`Capabilities::operator_views`]) is refused the same
//!   way, with [`InputProblem::Unsupported`].
//! - When two answers apply, invalid input wins: a call that fails a check answers
//!   `InvalidInput` whatever the state of the store (a `claim` with `n == 0` under a
//!   lost lease is `InvalidInput`, not `Lost`).
//! - A transport fault fails with [`Error::Unavailable`];
//!   the operation may or may not have taken effect. Retrying it is safe: each
//!   method's `# Retry` section says what a repeat of an applied call answers. The
//!   two that would act twice take an id the caller repeats: `claim_request` (a
//!   [`RequestId`], increasing per token: single-use by a per-token high-water
//!   mark) and `enqueue` (its [`EnqueueOptions::key`](crate::EnqueueOptions::key)). A store never lets
//!   its client library re-send a call that is not safe to repeat on its own.
//! - **Cancel-safe.** A caller may drop any call at any point (a timeout around
//!   it, a `select!` that took another branch): what the dropped call did is what an
//!   `Unavailable` call may have done (applied or not), and every later call answers
//!   its own request — never an answer the dropped call left on a connection or
//!   stream — and loses nothing the dropped call had in hand.
//! - Two namespaces never see each other's leases, tokens, dead sets or items.
//! - Every operation that takes a [`Lease`] (`release`, `claim_request`, `finish`,
//!   the session of `join_session_many`, each entry of `renew_many`) refuses one issued by another store or
//!   namespace ([`Lease::check_issuer`] against [`Store::issuer`]) with
//!   [`Error::InvalidInput`] (`what: "lease"`, [`InputProblem::ForeignLease`]) and
//!   changes nothing: [`CheckInput`](crate::CheckInput) does it before the store is
//!   called.

use async_trait::async_trait;

#[cfg(doc)]
use crate::error::InputProblem;
use crate::error::{Error, Result};
use crate::item::{Item, ItemId, ItemRecord, ItemState, ItemStateKind, Outcome, RequestId, Sweep};
use crate::lease::{Acquire, Issuer, Lease};
use crate::types::{FencingToken, HolderId, Key, Ttl};

mod items;
mod leases;
mod operator;

pub use crate::capabilities::{check_batch, Capabilities, StoreInfo, StorePart};
pub use items::ItemStore;
pub use leases::LeaseStore;
pub use operator::OperatorStore;

/// Which page of a listing to read ([`OperatorStore::leases`], [`OperatorStore::items`]):
/// the entries after the cursor `after` (exclusive; `None`: from the first), at most
/// `limit` of them. A store clamps `limit` to its `max_batch` and refuses zero
/// (`InvalidInput`).
///
/// ```
/// use liveness_core::store::Page;
/// let first: Page<u64> = Page::first(100);
/// assert_eq!(first.next(7), Page { after: Some(7), limit: 100 });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page<C> {
    /// The last entry of the previous page (its key or id); `None` for the first page.
    pub after: Option<C>,
    /// How many entries at most.
    pub limit: usize,
}

impl<C> Page<C> {
    /// The first page, of at most `limit` entries.
    pub fn first(limit: usize) -> Self {
        Page { after: None, limit }
    }

    /// The page after `cursor` (the last entry of this one), of the same size.
    pub fn next(self, cursor: C) -> Self {
        Page {
            after: Some(cursor),
            limit: self.limit,
        }
    }
}

/// A whole store: [`LeaseStore`], [`ItemStore`] and [`OperatorStore`] in one
/// namespace, what the state machines take as `Arc<dyn Store>`. Implemented for every
/// type that implements the three; it cannot be implemented otherwise, so its own
/// methods (the one-entry forms of the batches, and what [`StoreInfo`] says) are the
/// same for every store and pass through every layer as the batch they call.
#[async_trait]
pub trait Store: LeaseStore + ItemStore + OperatorStore {
    /// The backend's name (`"memory"`, `"redis"`, ...), used in errors and traces:
    /// [`StoreInfo::backend`].
    fn backend(&self) -> &'static str {
        self.info().backend
    }

    /// What this store supports: [`StoreInfo::caps`]. Constant for the handle's
    /// lifetime.
    fn capabilities(&self) -> Capabilities {
        self.info().caps
    }

    /// Who issues this handle's leases: its namespace and the identity of the store
    /// instance (see [`Issuer`]). Every lease it grants carries it, and every
    /// operation that takes a lease refuses one with another issuer. Constant for the
    /// handle's lifetime.
    fn issuer(&self) -> &Issuer {
        &self.info().issuer
    }

    /// Takes the lease on `key` for `holder`: [`LeaseStore::acquire_many`] with that
    /// one entry, and its answer.
    async fn acquire(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Result<Lease> {
        let ask = Acquire::new(key.clone(), holder.clone(), ttl);
        only(
            self.backend(),
            self.acquire_many(std::slice::from_ref(&ask)).await,
        )
    }

    /// Takes `key` for `holder` as a member riding `session`:
    /// [`LeaseStore::join_session_many`] with that one entry.
    async fn join_session(&self, session: &Lease, key: &Key, holder: &HolderId) -> Result<Lease> {
        let ask = (key.clone(), holder.clone());
        let answers = self
            .join_session_many(session, std::slice::from_ref(&ask))
            .await;
        only(self.backend(), answers)
    }

    /// Extends `lease`: [`LeaseStore::renew_many`] with that one lease.
    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        only(
            self.backend(),
            self.renew_many(std::slice::from_ref(lease)).await,
        )
    }

    /// Declares the lease with `token` on `key` dead: [`LeaseStore::reap_many`] with
    /// that one entry.
    async fn reap(&self, key: &Key, token: FencingToken) -> Result<bool> {
        let pair = (key.clone(), token);
        only(
            self.backend(),
            self.reap_many(std::slice::from_ref(&pair)).await,
        )
    }

    /// Requeues the items of the dead `token`: [`ItemStore::sweep_many`]
    /// with that one token.
    async fn sweep(&self, token: FencingToken) -> Result<Sweep> {
        only(self.backend(), self.sweep_many(&[token]).await)
    }

    /// [`ItemStore::claim_request`] with a fresh [`RequestId::next`]: convenient, but
    /// a caller that gets `Unavailable` cannot repeat it, so the items the store may
    /// have assigned stay owned by the token until it ends. Callers that keep their
    /// lease (a member) use `claim_request`.
    async fn claim(&self, lease: &Lease, n: usize) -> Result<Vec<Item>> {
        self.claim_request(lease, n, RequestId::next()).await
    }

    /// Marks an item done and removes it: [`ItemStore::finish`] with
    /// [`Outcome::Completed`].
    async fn complete(&self, lease: &Lease, id: ItemId) -> Result<()> {
        self.finish(lease, id, Outcome::Completed).await.map(|_| ())
    }

    /// Gives an item back after a failure: [`ItemStore::finish`] with
    /// [`Outcome::Retry`] (`retry`) or [`Outcome::DeadLetter`], and the item's new
    /// state.
    async fn fail(&self, lease: &Lease, id: ItemId, retry: bool) -> Result<ItemState> {
        self.hand_back(lease, id, Outcome::failed(retry)).await
    }

    /// Gives an item back after a failure with `outcome` ([`Outcome::Retry`], with
    /// its wait, or [`Outcome::DeadLetter`]): [`ItemStore::finish`], and the item's
    /// new state. [`Outcome::Completed`] is `InvalidInput`: use `complete`.
    async fn hand_back(&self, lease: &Lease, id: ItemId, outcome: Outcome) -> Result<ItemState> {
        self.hand_back_with_error(lease, id, outcome, "").await
    }

    /// [`Store::hand_back`], keeping `error` as the item's last error
    /// ([`ItemStore::finish_with_error`]; empty: [`ItemStore::finish`], the text left
    /// as it was).
    async fn hand_back_with_error(
        &self,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
        error: &str,
    ) -> Result<ItemState> {
        outcome.check_failure()?;
        let moved = match error.is_empty() {
            true => self.finish(lease, id, outcome).await?,
            false => self.finish_with_error(lease, id, outcome, error).await?,
        };
        match moved {
            Some(state) => Ok(state),
            None => Err(Error::backend(
                self.backend(),
                "a failed item was answered as removed",
            )),
        }
    }

    /// The first `limit` dead-lettered items, lowest id first: the first page of
    /// [`OperatorStore::items`] in the dead-lettered state.
    async fn dead_letters(&self, limit: usize) -> Result<Vec<ItemRecord>> {
        let page = Page::first(limit);
        self.items(ItemStateKind::DeadLettered, page).await
    }
}

impl<T: LeaseStore + ItemStore + OperatorStore + ?Sized> Store for T {}

/// The one answer of a one-entry batch. A store that answers another number of
/// entries breaks the contract: `Backend`.
pub(crate) fn only<T>(backend: &'static str, answers: Result<Vec<Result<T>>>) -> Result<T> {
    let mut answers = answers?;
    match (answers.pop(), answers.is_empty()) {
        (Some(answer), true) => answer,
        (_, _) => Err(Error::backend(
            backend,
            "a batch of one was not answered once",
        )),
    }
}
