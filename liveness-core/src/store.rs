//! The store contract: [`LeaseStore`] and [`ItemStore`], and what a store declares
//! about itself in [`Capabilities`].
//!
//! This file is the one place that says what every backend must guarantee: the
//! bullets under each `# Contract` heading. The conformance suite (crate
//! `liveness-conformance`) checks them: every bullet of a method has a named scenario,
//! except those no scenario can see — the cost of [`LeaseStore::expired`] (a store
//! that scans every lease gives the same answers, only slower), checked by the suite's
//! `bench::check_round_cost`; the cost of [`LeaseStore::members`] and of trimming the
//! death history ([`LeaseStore::deaths`]), which each backend meets with an index; and
//! the transport-fault bullet below, which needs faults injected into the backend's own
//! transport (each backend's fault tests). The suite crate's README maps every bullet
//! to what checks it.
//!
//! # Contract shared by every method
//!
//! - **One atomic step per decision.** Each operation decides and writes in one
//!   atomic step, linearizable within the store handle's namespace: `acquire`,
//!   `renew` (the extension), `release`, `reap`, `claim`, `complete`, `fail` and
//!   `enqueue` take effect at one instant, all of it or nothing; of concurrent
//!   callers racing for the same lease or item, exactly one wins. The steps a store may split are listed
//!   next, and only those; every split keeps the operation's bullets below true for
//!   the caller, and the store's README says which splits it makes.
//! - **What a store may split over more than one step:**
//!   - [`ItemStore::requeue_orphans`] may move a dead token's items in several
//!     batches, each guarded by the token's dead-set entry, removing the entry with
//!     the last one: a reader may see some of the items moved and the token still in
//!     the dead set; no item moves twice, and the token leaves the dead set only when
//!     none of its items is left (etcd: 32 items a step, FoundationDB: 500).
//!   - [`LeaseStore::renew`]'s loss reason may be read in a second, read-only step
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
//!   bullets below describe the store as its callers see it. A store still refuses what only it can judge (an
//!   item id that names no item, a value its backend cannot hold).
//! - When two answers apply, invalid input wins: a call that fails a check answers
//!   `InvalidInput` whatever the state of the store (a `claim` with `n == 0` under a
//!   lost lease is `InvalidInput`, not `Lost`).
//! - A transport fault fails with [`Error::Unavailable`];
//!   the operation may or may not have taken effect. Retrying it is safe: each
//!   method's `# Retry` section says what a repeat of an applied call answers. The
//!   two that would act twice take an id the caller repeats: `claim_request` (a
//!   [`RequestId`], increasing per token: single-use by a per-token high-water
//!   mark) and `enqueue` (its [`EnqueueOptions::key`]). A store never lets
//!   its client library re-send a call that is not safe to repeat on its own.
//! - **Cancel-safe.** A caller may drop any call at any point (a timeout around
//!   it, a `select!` that took another branch): what the dropped call did is what an
//!   `Unavailable` call may have done (applied or not), and every later call answers
//!   its own request — never an answer the dropped call left on a connection or
//!   stream — and loses nothing the dropped call had in hand.
//! - Two namespaces never see each other's leases, tokens, dead sets or items.
//! - Every operation that takes a [`Lease`] (`renew`, `release`, `claim`, `complete`,
//!   `fail`, each entry of `renew_many`) refuses one issued by another store or
//!   namespace ([`Lease::check_issuer`] against [`LeaseStore::issuer`]) with
//!   [`Error::InvalidInput`] (`what: "lease"`, [`InputProblem::ForeignLease`](crate::error::InputProblem::ForeignLease)) and
//!   changes nothing: [`CheckInput`](crate::CheckInput) does it before the store is
//!   called.

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::error::{BatchResult, Error, JoinAsk, Result};
use crate::item::{
    EnqueueOptions, Item, ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind, RequestId,
    Requeued,
};
use crate::lease::{Acquire, DeadToken, DeathRecord, ExpiredLease, Issuer, Lease, LeaseInfo};
use crate::types::{FencingToken, HolderId, Key, Space, StoreTime, Ttl};

use crate::each::one_by_one;

pub use crate::capabilities::{check_batch, Capabilities, StoreInfo};

/// Expiring leases with fencing tokens, judged by the store's clock.
///
/// Implement this (and [`ItemStore`]) to plug a new backend in; run the
/// `liveness-conformance` suite against it to check the contract below. Users call the
/// state machines ([`Member`](crate::Member), [`Checker`](crate::Checker),
/// [`Election`](crate::Election)) rather than these methods directly.
///
/// The trait is object safe: everything works through `Arc<dyn Store>`.
#[async_trait]
pub trait LeaseStore: Send + Sync + std::fmt::Debug {
    /// What this store is: its backend's name, its capabilities and the issuer of
    /// its leases ([`StoreInfo`]). The one method of the three that a store writes.
    ///
    /// # Contract
    /// - Constant for the handle's lifetime; the issuer is the same for every handle
    ///   on the same store and namespace, different for another namespace or store
    ///   instance.
    fn info(&self) -> &StoreInfo;

    /// The backend's name (`"memory"`, `"redis"`, ...), used in errors and traces:
    /// [`StoreInfo::backend`]. Provided; do not override it.
    fn backend(&self) -> &'static str {
        self.info().backend
    }

    /// What this store supports: [`StoreInfo::caps`]. Provided; do not override it.
    ///
    /// # Contract
    /// - Constant for the handle's lifetime.
    fn capabilities(&self) -> Capabilities {
        self.info().caps
    }

    /// Who issues this handle's leases: its namespace and the identity of the store
    /// instance (see [`Issuer`]). Every lease it grants carries it, and every
    /// operation that takes a lease refuses one with another issuer.
    /// [`StoreInfo::issuer`]. Provided; do not override it.
    ///
    /// # Contract
    /// - Constant for the handle's lifetime; the same for every handle on the same
    ///   store and namespace, different for another namespace or store instance.
    fn issuer(&self) -> &Issuer {
        &self.info().issuer
    }

    /// Takes the lease on `key` for `holder`.
    ///
    /// # Contract
    /// - Succeeds iff no live lease is on `key`; returns the lease with a new token and
    ///   its time left by the store clock (`expires_in` = `ttl` at the store's now).
    /// - The token is strictly greater than every token handed out before in the
    ///   namespace, on any key, also after releases, expiries and reaps.
    /// - An expired lease still on `key` is reaped by the same atomic step: its
    ///   `(key, token)` goes to the dead set, exactly as [`LeaseStore::reap`] would.
    /// - Fails with [`Error::Held`] naming the live holder and token otherwise, and
    ///   changes nothing.
    /// - A ttl outside the capabilities fails with `InvalidInput`.
    ///
    /// # Retry
    /// - A repeat of an applied acquire answers [`Error::Held`] naming the caller's own
    ///   holder id and the token the first one took (a "ghost" lease): the caller
    ///   releases it with that token and acquires again, as [`Member`](crate::Member)
    ///   and [`Election`](crate::Election) do. Nothing is acquired twice.
    async fn acquire(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Result<Lease>;

    /// Takes many leases in one call: what a process starting many members (or a
    /// batcher gathering their re-joins) sends instead of one round trip per key.
    ///
    /// # Contract
    /// - One answer per entry, in the order given, each exactly what
    ///   [`LeaseStore::acquire`] of that entry alone would answer when the store
    ///   applies it: every bullet of `acquire` holds for each entry by itself (a new
    ///   token per success, strictly increasing in the order of the entries; `Held`
    ///   changes nothing; an expired lease on the key is reaped by the same step).
    ///   One entry's answer never depends on another's, except that a later entry on
    ///   the same key sees what an earlier one took.
    /// - Not atomic across entries.
    /// - Concurrent calls on overlapping keys: a store may lock the keys entry by
    ///   entry until the call ends (PostgreSQL does), so two calls that meet in
    ///   opposite orders can deadlock, and the store then aborts one of them, which
    ///   fails with `Unavailable`. Give overlapping keys in key order, as
    ///   [`Batcher`](crate::Batcher) does, and calls only wait on each other.
    /// - More entries than [`Capabilities::max_batch`] is `InvalidInput` and changes
    ///   nothing; an invalid entry (a ttl outside the capabilities) fails alone with
    ///   `InvalidInput`; no entry answers an empty list.
    /// - A transport fault fails the whole call with `Unavailable` (any subset may
    ///   have been applied), or answers `Unavailable` for just the entries it hit.
    ///
    /// # Retry
    /// - As for `acquire`: a repeat of an applied entry answers [`Error::Held`] naming
    ///   the caller's own holder id and the token it took (a "ghost" lease).
    ///
    /// The default acquires one entry after the other; backends that can do it in
    /// one round trip override it.
    async fn acquire_many(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        acquire_each(self, asks).await
    }

    /// Takes `key` for `holder` as a member riding the session `session`: a lease the
    /// caller holds on a key of [`Space::sessions`], one per process.
    ///
    /// # Contract (stores with [`Capabilities::sessions`])
    /// - Atomic. The answer is the member's own lease: its key, `holder`, a new token
    ///   (strictly increasing, as `acquire`'s), the session's ttl, and the session's
    ///   time left. The member has no expiry of its own: it is live exactly while its
    ///   record is current and the session's lease, under that very token, is live.
    ///   Renewing the session keeps it alive; renewing the member answers as the
    ///   session stands.
    /// - A session that is not current and live by the store's clock: [`Error::Lost`]
    ///   with the session's key and token, and nothing is taken.
    /// - A live lease on `key` (its own, or one riding a live session):
    ///   [`Error::Held`], nothing changes. An expired one, or one whose session is
    ///   gone or expired, is retired first in the same step (dead set, death record,
    ///   cause superseded), as `acquire` does.
    /// - Every other operation judges a riding member through its session: `renew`,
    ///   `inspect`, `members`, `claim` and `reap` see it expired once its session is
    ///   expired or gone; `release` retires it alone; `expired` never lists it (the
    ///   session is listed instead).
    /// - Once the session's token is in the dead set (reaped or released),
    ///   [`ItemStore::requeue_orphans`] of that token retires its riding members in
    ///   batches of at most [`Capabilities::max_batch`], each exactly once, and keeps
    ///   the session's token in the dead set until none is left.
    /// - A session key outside [`Space::sessions`], a `key` inside it, or a session of
    ///   another store is `InvalidInput` ([`CheckInput`](crate::CheckInput)).
    ///
    /// # Retry
    /// - As for `acquire`: a repeat of an applied join answers [`Error::Held`] naming
    ///   the caller's own holder id and the token it took.
    ///
    /// The default (a store without native sessions) is `acquire` with the session's
    /// ttl: an ordinary lease, which its holder must renew itself.
    async fn join_session(&self, session: &Lease, key: &Key, holder: &HolderId) -> Result<Lease> {
        self.acquire(key, holder, session.ttl).await
    }

    /// Joins many members into the session `session` in one call: what a process
    /// joining (or re-joining after a session loss) thousands of members sends
    /// instead of one round trip per member.
    ///
    /// # Contract
    /// - One answer per `(key, holder)` entry, in the order given, each exactly what
    ///   [`LeaseStore::join_session`] of that entry alone would answer when the store
    ///   applies it: every bullet of `join_session` holds for each entry by itself (a
    ///   new token per success, strictly increasing in the order of the entries;
    ///   `Held` changes nothing; a dead or expired session answers `Lost` for every
    ///   entry and takes nothing). A later entry on the same key sees what an earlier
    ///   one took.
    /// - Not atomic across entries (a store may apply the whole batch in one step).
    /// - More entries than [`Capabilities::max_batch`] is `InvalidInput` and changes
    ///   nothing; a session key outside [`Space::sessions`] (or a session of another
    ///   store) is `InvalidInput` for the whole call; a `key` inside it fails alone
    ///   with `InvalidInput`; no entry answers an empty list.
    /// - A transport fault fails the whole call with `Unavailable` (any subset may
    ///   have been applied), or answers `Unavailable` for just the entries it hit.
    ///
    /// # Retry
    /// - As for `join_session`: a repeat of an applied entry answers [`Error::Held`]
    ///   naming the caller's own holder id and the token it took.
    ///
    /// The default joins one entry after the other; backends that can do it in one
    /// round trip override it.
    async fn join_session_many(&self, session: &Lease, asks: &[JoinAsk]) -> BatchResult<Lease> {
        check_batch(self.capabilities(), "joins", asks.len())?;
        Ok(one_by_one(asks, |(key, holder)| {
            self.join_session(session, key, holder)
        })
        .await)
    }

    /// Extends a lease to the store's now + `lease.ttl`: the ttl carried by the lease
    /// value passed in (normally the one [`LeaseStore::acquire`] returned), not the
    /// ttl the store recorded at acquisition.
    ///
    /// # Contract
    /// - Succeeds iff the lease's token is the key's current token AND the lease is
    ///   not expired by the store clock; the lease then expires at the store's now +
    ///   `lease.ttl`, and the returned lease has that time left (`expires_in` at most
    ///   `lease.ttl`) and the same token.
    /// - A `lease.ttl` other than the acquired one becomes the lease's ttl: it expires
    ///   by it, and [`LeaseStore::inspect`] reports it. A ttl outside the capabilities
    ///   is `InvalidInput` and changes nothing, also on a lost lease (invalid input
    ///   wins).
    /// - An expired lease is NEVER renewed, even when nobody else took the key:
    ///   [`Error::Lost`] with [`LostCause::Expired`](crate::LostCause::Expired).
    /// - A key now held under another token: `Lost` with `Superseded`; a key with no
    ///   lease: `Lost` with `Released`. Nothing changes on any `Lost`.
    ///
    /// # Retry
    /// - Idempotent: a repeat extends the same lease again, from the store's now.
    async fn renew(&self, lease: &Lease) -> Result<Lease>;

    /// Renews many leases in one call: what a process hosting many leases sends
    /// instead of one round trip per lease.
    ///
    /// # Contract
    /// - One answer per lease, in the order given, each exactly what
    ///   [`LeaseStore::renew`] of that lease alone would answer when the store applies
    ///   it: every bullet of `renew` holds for each lease by itself. One lease's answer
    ///   never depends on another's: a lost or invalid lease fails alone.
    /// - Not atomic across leases: callers must not rely on the leases being renewed
    ///   at one store instant (each lease's safety deadline counts from the send time
    ///   of the call, which is no later than any of them was applied).
    /// - More leases than [`Capabilities::max_batch`] is `InvalidInput` and changes
    ///   nothing; no lease answers an empty list.
    /// - A transport fault fails the whole call with `Unavailable` (any subset may
    ///   have been applied), or answers `Unavailable` for just the entries it hit (the
    ///   default); retrying is safe.
    ///
    /// The default renews one lease after the other; backends that can do it in one
    /// round trip override it.
    async fn renew_many(&self, leases: &[Lease]) -> BatchResult<Lease> {
        renew_each(self, leases).await
    }

    /// Gives a lease up.
    ///
    /// # Contract
    /// - Removes the lease iff its token is current (live or expired), and puts
    ///   `(key, token)` in the dead set so that items the token still owns are
    ///   requeued by the checker's sweep. Returns true iff it removed the lease.
    /// - Idempotent: releasing a lease that is gone or superseded returns false and
    ///   changes nothing.
    ///
    /// # Retry
    /// - A repeat of an applied release returns false (the lease is gone already)
    ///   and changes nothing: after an `Unavailable`, false means "released, by this
    ///   call or before it".
    async fn release(&self, lease: &Lease) -> Result<bool>;

    /// Reads the lease on `key`.
    ///
    /// # Contract
    /// - `None` iff no lease record is on the key (never acquired, released, reaped).
    /// - Otherwise holder, token, ttl (the last acquire's or renew's) and status: live
    ///   with the time left by the store clock, or expired (not yet reaped). Changes
    ///   nothing.
    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>>;

    /// Lists leases in `space` past their expiry and not yet reaped.
    ///
    /// # Contract
    /// - Returns at most `limit` (clamped to `max_batch`; zero is `InvalidInput`),
    ///   earliest expiry first. Only expired leases: a store with a coarse index
    ///   (see [`LeaseStore::next_expiry`]) checks each candidate's real expiry.
    /// - Its cost grows with the number of expired leases, not with the number of live
    ///   ones (an expiry index). No scenario can see this (a scan gives the same
    ///   answers); `liveness_bench::check_round_cost` checks it.
    /// - On observer-local stores, "expired" means unchanged for a whole ttl as observed
    ///   by this handle.
    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>>;

    /// Declares a lease dead.
    ///
    /// # Contract
    /// - Iff the lease with `token` is still on `key` and expired by the store clock,
    ///   removes it, adds `(key, token)` to the dead set, and returns true.
    /// - Exactly one of any number of concurrent callers gets true; a live, superseded
    ///   or missing lease gives false and changes nothing.
    ///
    /// # Retry
    /// - A repeat of an applied reap returns false and changes nothing. The token is
    ///   in the dead set either way, so the checker's sweep of the dead set requeues
    ///   its items even when the caller that reaped never learnt it won.
    async fn reap(&self, key: &Key, token: FencingToken) -> Result<bool>;

    /// Declares many leases dead in one call: what a checker sends for a round's
    /// expired leases instead of one round trip each.
    ///
    /// # Contract
    /// - One answer per `(key, token)`, in the order given, each exactly what
    ///   [`LeaseStore::reap`] of that pair alone would answer: true for exactly one of
    ///   any number of concurrent reapers (of either method) of an expired lease.
    /// - More entries than [`Capabilities::max_batch`] is `InvalidInput` and changes
    ///   nothing.
    /// - A transport fault fails the whole call with `Unavailable` (any subset may
    ///   have been applied), or answers `Unavailable` for just the entries it hit (the
    ///   default, which keeps every answer it got); retrying is safe (a second reap of
    ///   a reaped lease is false; its token is in the dead set either way, for the
    ///   sweep).
    ///
    /// The default reaps one after the other.
    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
        reap_each(self, expired).await
    }

    /// Lists the dead set: tokens reaped or released whose items were not yet requeued.
    ///
    /// # Contract
    /// - At most `limit` entries (clamped; zero is `InvalidInput`), lowest token first.
    /// - A token leaves the dead set only through [`ItemStore::requeue_orphans`].
    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>>;

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
    async fn members(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>>;

    /// Lists the namespace's death history, newest first: every token that stopped
    /// being current (reaped, released, or superseded by an acquire), with what its
    /// sweep moved.
    ///
    /// # Contract
    /// - Every reap that returns true, every release that returns true and every
    ///   acquire that reaps an expired lease writes one [`DeathRecord`] in the same
    ///   atomic step (so of racing reapers, exactly one death is recorded), with the
    ///   store time and the [`DeathCause`](crate::DeathCause).
    /// - Its `swept` is `None` until [`ItemStore::requeue_orphans`] (or
    ///   `requeue_orphans_many`) takes the token out of the dead set, and then says
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
    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>>;

    /// The store clock's now, for diagnostics and tests.
    ///
    /// # Contract
    /// - Non-decreasing across calls on one handle.
    async fn store_time(&self) -> Result<StoreTime>;

    /// How long, by the store clock, until a lease in `space` needs the checker: zero
    /// while one is expired and unreaped, else the time until the earliest live lease
    /// expires.
    ///
    /// # Contract
    /// - `None` iff the space has no lease record: no live lease and no expired,
    ///   unreaped one.
    /// - `Some(Duration::ZERO)` while any lease in the space is expired and not yet
    ///   reaped — also when it is the only lease, and whatever live leases are beside
    ///   it.
    /// - Otherwise the time left of the earliest-expiring live lease (at most its ttl),
    ///   or less: a store may keep a coarse expiry index that is never later than the
    ///   real expiries (Redis's: a renewal moves its lease in the index only every
    ///   half ttl), and a checker woken early just finds nothing expired yet. It may
    ///   also answer zero when such an index needs more correcting than one call does.
    ///   A store whose [`LeaseStore::wakeups`] signal expiries
    ///   ([`Capabilities::pushes_expiry_events`]) may answer a longer time, because
    ///   its wakeup, not this duration, brings the checker to the expiry. On
    ///   observer-local stores, a lease this handle has not observed yet counts a whole
    ///   ttl from now.
    /// - A duration, never an absolute time: the caller sleeps that long on its own
    ///   monotonic clock, and no clock offset crosses machines.
    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>>;

    /// A signal that ticks when something happened that a checker should look at
    /// (a release; an expiry, when [`Capabilities::pushes_expiry_events`]).
    ///
    /// # Contract
    /// - `None` when the store has no such events; the checker then relies on
    ///   `next_expiry` alone. A tick is a hint, never a promise: missing one only
    ///   delays the checker to its next timed round.
    fn wakeups(&self) -> Option<watch::Receiver<u64>> {
        None
    }

    /// True when every call to this store passes [`CheckInput`](crate::CheckInput)
    /// before it reaches the store below, so [`checked`](crate::checked()) need not put
    /// another in front. Provided (false); a store never overrides it: the layer
    /// stack answers it.
    fn checks_input(&self) -> bool {
        false
    }
}

/// Work items owned by member leases, requeued when their owner dies.
///
/// # Contract shared by every method
/// - An item is in exactly one state: pending, owned by one token, or dead-lettered.
///   Completed items are removed.
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
    ///
    /// # Retry
    /// - With a key: idempotent; a repeat answers the first call's id.
    /// - Without a key: a repeat of an applied enqueue adds a second item
    ///   (at-least-once). Use a key when a duplicate matters.
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId>;

    /// [`ItemStore::claim_request`] with a fresh [`RequestId::next`]: convenient, but a
    /// caller that gets `Unavailable` cannot repeat it, so the items the store may have
    /// assigned stay owned by the token until it ends. Callers that keep their lease
    /// (a member) use `claim_request`. Provided; do not override it.
    async fn claim(&self, lease: &Lease, n: usize) -> Result<Vec<Item>> {
        self.claim_request(lease, n, RequestId::next()).await
    }

    /// Assigns up to `n` pending items to the lease's token, lowest id first, counts
    /// one attempt on each, and records `req` on each: the claim of `req`.
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
    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>>;

    /// Marks an item done and removes it.
    ///
    /// # Contract
    /// - Succeeds iff the item is still owned by the lease's token; otherwise
    ///   [`Error::Fenced`] and nothing changes. A stale (requeued) owner can never
    ///   complete.
    ///
    /// # Retry
    /// - A repeat of an applied complete changes nothing and answers `Fenced`: the
    ///   item is gone. The caller tells its own completion from a loss with
    ///   [`ItemStore::item`]: `None` while its lease is still current means the item
    ///   was completed by its earlier attempt (an item owned by a live token moves
    ///   only through that token's own `complete` and `fail`; only a dead token's
    ///   items are requeued). [`Member::complete`](crate::Member::complete) does this.
    async fn complete(&self, lease: &Lease, id: ItemId) -> Result<()>;

    /// Gives an item back after a failure.
    ///
    /// # Contract
    /// - Succeeds iff the item is still owned by the lease's token; otherwise
    ///   [`Error::Fenced`].
    /// - With `retry`, the item goes back to pending, or to the dead-letter set when
    ///   its attempts reached `max_attempts`; without, to the dead-letter set. Returns
    ///   the new state.
    ///
    /// # Retry
    /// - A repeat of an applied fail changes nothing and answers `Fenced`: the item is
    ///   no longer the token's. (Pending or dead-lettered by [`ItemStore::item`] while
    ///   the lease is still current: the earlier attempt handed it back.)
    async fn fail(&self, lease: &Lease, id: ItemId, retry: bool) -> Result<ItemState>;

    /// Requeues every item still owned by a dead token and forgets the token.
    ///
    /// # Contract
    /// - Acts only when `token` is in the dead set; for any other token (a live member's
    ///   among them) it returns an empty result and changes nothing.
    /// - Each owned item goes back to pending, or to the dead-letter set when its
    ///   attempts reached `max_attempts`; then the token leaves the dead set.
    /// - Idempotent: a second call (or a concurrent one) moves nothing twice.
    ///
    /// # Retry
    /// - A repeat of an applied call returns an empty result (the token left the dead
    ///   set) and moves nothing; the items were moved by the first.
    async fn requeue_orphans(&self, token: FencingToken) -> Result<Requeued>;

    /// Requeues the items of many dead tokens in one call: what a checker sends for
    /// a round's deaths and its sweep instead of one round trip per token.
    ///
    /// # Contract
    /// - One answer per token, in the order given, each exactly what
    ///   [`ItemStore::requeue_orphans`] of that token alone would answer (a token not
    ///   in the dead set answers an empty result and changes nothing; a token given
    ///   twice moves nothing twice).
    /// - Any number of tokens: a native implementation splits a list larger than it
    ///   can move in one step.
    /// - A transport fault fails the whole call with `Unavailable` (any subset may
    ///   have been applied), or answers `Unavailable` for just the entries it hit (the
    ///   default); retrying is safe.
    ///
    /// The default requeues one token after the other.
    async fn requeue_orphans_many(&self, tokens: &[FencingToken]) -> BatchResult<Requeued> {
        requeue_each(self, tokens).await
    }

    /// Reads one item.
    ///
    /// # Contract
    /// - `None` iff the item was completed or never existed.
    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>>;

    /// Counts items by state.
    ///
    /// # Contract
    /// - A consistent snapshot (one atomic read).
    async fn item_counts(&self) -> Result<ItemCounts>;

    /// Lists dead-lettered items, lowest id first.
    ///
    /// # Contract
    /// - At most `limit` (clamped; zero is `InvalidInput`).
    ///
    /// The default is the first page of [`ItemStore::items`] in the dead-lettered
    /// state, which is exactly this.
    async fn dead_letters(&self, limit: usize) -> Result<Vec<ItemRecord>> {
        let page = Page::first(limit);
        self.items(ItemStateKind::DeadLettered, page).await
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
    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>>;

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
    async fn retry_dead_letter(&self, id: ItemId) -> Result<()>;

    /// Moves up to `limit` dead-lettered items, lowest id first, back to pending with
    /// their attempts reset to zero, and returns their ids (in id order): the
    /// operator's "retry them all", called until it answers an empty list.
    ///
    /// # Contract
    /// - Each moved item is exactly as [`ItemStore::retry_dead_letter`] would move it,
    ///   each in one atomic step (the workspace's stores move the whole batch in one).
    /// - `limit` is clamped to `max_batch`; zero is `InvalidInput`.
    ///
    /// # Retry
    /// - A repeat moves the items dead-lettered by then; none twice.
    ///
    /// The default reads the first page of dead letters and moves each with
    /// [`ItemStore::retry_dead_letter`]; an item another caller moved in between is
    /// skipped, so two concurrent calls never move one item twice.
    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        let mut moved = Vec::new();
        for record in self.dead_letters(limit).await? {
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

/// Which page of a listing to read ([`LeaseStore::members`], [`ItemStore::items`]):
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

/// A complete store: leases and items in one namespace. Implemented automatically for
/// every type that implements both [`LeaseStore`] and [`ItemStore`]; do not implement
/// it yourself.
pub trait Store: LeaseStore + ItemStore {}

impl<T: LeaseStore + ItemStore + ?Sized> Store for T {}

/// [`LeaseStore::acquire_many`] as one `acquire` after the other (the trait's
/// default). A native `acquire_many` may fall back to it for a batch its one step
/// cannot take.
pub async fn acquire_each<S: LeaseStore + ?Sized>(
    store: &S,
    asks: &[Acquire],
) -> BatchResult<Lease> {
    check_batch(store.capabilities(), "acquires", asks.len())?;
    Ok(one_by_one(asks, |ask| store.acquire(&ask.key, &ask.holder, ask.ttl)).await)
}

/// [`LeaseStore::renew_many`] as one `renew` after the other (the trait's default).
/// A native `renew_many` falls back to it for a batch its one step cannot take, such
/// as one with a foreign lease (each `renew` then refuses just that one).
pub async fn renew_each<S: LeaseStore + ?Sized>(store: &S, leases: &[Lease]) -> BatchResult<Lease> {
    check_batch(store.capabilities(), "leases", leases.len())?;
    Ok(one_by_one(leases, |lease| store.renew(lease)).await)
}

/// [`LeaseStore::reap_many`] as one `reap` after the other (the trait's default).
pub(crate) async fn reap_each<S: LeaseStore + ?Sized>(
    store: &S,
    expired: &[(Key, FencingToken)],
) -> BatchResult<bool> {
    check_batch(store.capabilities(), "expired", expired.len())?;
    Ok(one_by_one(expired, |(key, token)| store.reap(key, *token)).await)
}

/// [`ItemStore::requeue_orphans_many`] as one `requeue_orphans` after the other (the
/// trait's default).
pub(crate) async fn requeue_each<S: ItemStore + ?Sized>(
    store: &S,
    tokens: &[FencingToken],
) -> BatchResult<Requeued> {
    Ok(one_by_one(tokens, |token| store.requeue_orphans(*token)).await)
}
