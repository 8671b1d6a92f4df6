//! [`LeaseStore`]: expiring leases with fencing tokens, judged by the store's clock.
//! Every store implements it; it is all an election needs.

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::capabilities::StoreInfo;
use crate::error::{BatchResult, JoinAsk, Result};
use crate::lease::{Acquire, ExpiredLease, Lease, LeaseInfo};
use crate::types::{FencingToken, Key, Space};
#[cfg(doc)]
use crate::{
    capabilities::Capabilities,
    error::Error,
    store::{ItemStore, OperatorStore, Store},
};

/// Expiring leases with fencing tokens, judged by the store's clock: the part of the
/// contract every store implements (eight methods), and all that an
/// [`Election`](crate::Election) needs.
///
/// The batch is the primitive: a store writes `acquire_many`, `renew_many` and
/// `reap_many`, and [`Store`] gives the one-entry forms (`acquire`, `renew`, `reap`)
/// on top. Run the `liveness-conformance` suite against a store to check the
/// contract below. Users call the state machines ([`Member`](crate::Member),
/// [`Checker`](crate::Checker), [`Election`](crate::Election)) rather than these
/// methods directly.
///
/// The trait is object safe: everything works through `Arc<dyn Store>`.
#[async_trait]
pub trait LeaseStore: Send + Sync + std::fmt::Debug {
    /// What this store is: its backend's name, its capabilities and the issuer of
    /// its leases ([`StoreInfo`]).
    ///
    /// # Contract
    /// - Constant for the handle's lifetime; the issuer is the same for every handle
    ///   on the same store and namespace, different for another namespace or store
    ///   instance.
    fn info(&self) -> &StoreInfo;

    /// Takes the lease on each entry's `key` for its `holder`: what a process
    /// starting many members (or a batcher gathering their joins) sends instead of
    /// one round trip per key. [`Store::acquire`] is this with one entry.
    ///
    /// # Contract of each entry
    /// - Succeeds iff no live lease is on `key`; answers the lease with a new token
    ///   and its time left by the store clock (`expires_in` = `ttl` at the store's
    ///   now).
    /// - The token is strictly greater than every token handed out before in the
    ///   namespace, on any key, also after releases, expiries and reaps (and so
    ///   strictly increasing in the order of the entries).
    /// - An expired lease still on `key` is reaped by the same atomic step: its
    ///   `(key, token)` goes to the dead set, exactly as [`LeaseStore::reap_many`]
    ///   would.
    /// - Fails with [`Error::Held`] naming the live holder and token otherwise, and
    ///   changes nothing.
    /// - A ttl outside the capabilities fails alone with `InvalidInput`.
    ///
    /// # Contract of the batch
    /// - One answer per entry, in the order given; one entry's answer never depends
    ///   on another's, except that a later entry on the same key sees what an earlier
    ///   one took. Not atomic across entries.
    /// - Concurrent calls on overlapping keys: a store may lock the keys entry by
    ///   entry until the call ends (PostgreSQL does), so two calls that meet in
    ///   opposite orders can deadlock, and the store then aborts one of them, which
    ///   fails with `Unavailable`. Give overlapping keys in key order, as
    ///   [`Batcher`](crate::Batcher) does, and calls only wait on each other.
    /// - More entries than [`Capabilities::max_batch`] is `InvalidInput` and changes
    ///   nothing; no entry answers an empty list.
    /// - A transport fault fails the whole call with `Unavailable` (any subset may
    ///   have been applied), or answers `Unavailable` for just the entries it hit.
    ///
    /// # Retry
    /// - A repeat of an applied entry answers [`Error::Held`] naming the caller's own
    ///   holder id and the token the first one took (a "ghost" lease): the caller
    ///   releases it with that token and acquires again, as [`Member`](crate::Member)
    ///   and [`Election`](crate::Election) do. Nothing is acquired twice.
    async fn acquire_many(&self, asks: &[Acquire]) -> BatchResult<Lease>;

    /// Joins members into the session `session` (a lease the caller holds on a key of
    /// [`Space::sessions`], one per process): each `(key, holder)` entry takes `key`
    /// for `holder` as a member riding the session. [`Store::join_session`] is this
    /// with one entry.
    ///
    /// The session is the store's one opt-in: a store that serves it natively says
    /// so with [`Capabilities::sessions`] and overrides this method. The default (a
    /// store without native sessions) is `acquire_many` with the session's ttl:
    /// ordinary leases, which their holders renew themselves.
    ///
    /// # Contract of each entry (stores with [`Capabilities::sessions`])
    /// - Atomic. The answer is the member's own lease: its key, `holder`, a new token
    ///   (strictly increasing, as `acquire_many`'s), the session's ttl, and the
    ///   session's time left. The member has no expiry of its own: it is live exactly
    ///   while its record is current and the session's lease, under that very token,
    ///   is live. Renewing the session keeps it alive; renewing the member answers as
    ///   the session stands.
    /// - A session that is not current and live by the store's clock: [`Error::Lost`]
    ///   with the session's key and token, and nothing is taken.
    /// - A live lease on `key` (its own, or one riding a live session):
    ///   [`Error::Held`], nothing changes. An expired one, or one whose session is
    ///   gone or expired, is declared dead first in the same step (dead set, death record,
    ///   cause superseded), as `acquire_many` does.
    /// - Every other operation judges a riding member through its session: `renew`,
    ///   `inspect`, `leases`, `claim` and `reap` see it expired once its session is
    ///   expired or gone; `release` declares it dead alone; `expired` never lists it (the
    ///   session is listed instead).
    /// - Once the session's token is in the dead set (reaped or released),
    ///   [`ItemStore::sweep_many`] of that token declares its riding members dead
    ///   in batches of at most [`Capabilities::max_batch`], each exactly once, and
    ///   keeps the session's token in the dead set until none is left.
    /// - A `key` inside [`Space::sessions`] fails alone with `InvalidInput`.
    ///
    /// # Contract of the batch
    /// - One answer per entry, in the order given (a dead or expired session answers
    ///   `Lost` for every entry and takes nothing). A later entry on the same key sees
    ///   what an earlier one took. Not atomic across entries (a store may apply the
    ///   whole batch in one step).
    /// - More entries than [`Capabilities::max_batch`] is `InvalidInput` and changes
    ///   nothing; a session key outside [`Space::sessions`] (or a session of another
    ///   store) is `InvalidInput` for the whole call
    ///   ([`CheckInput`](crate::CheckInput)); no entry answers an empty list.
    /// - A transport fault fails the whole call with `Unavailable` (any subset may
    ///   have been applied), or answers `Unavailable` for just the entries it hit.
    ///
    /// # Retry
    /// - As for `acquire_many`: a repeat of an applied entry answers [`Error::Held`]
    ///   naming the caller's own holder id and the token it took.
    async fn join_session_many(&self, session: &Lease, asks: &[JoinAsk]) -> BatchResult<Lease> {
        let asks: Vec<Acquire> = asks
            .iter()
            .map(|(key, holder)| Acquire::new(key.clone(), holder.clone(), session.ttl))
            .collect();
        self.acquire_many(&asks).await
    }

    /// Extends each lease to the store's now + `lease.ttl`: the ttl carried by the
    /// lease value passed in (normally the one `acquire_many` answered), not the ttl
    /// the store recorded at acquisition. What a process hosting many leases sends
    /// instead of one round trip per lease; [`Store::renew`] is this with one lease.
    ///
    /// # Contract of each lease
    /// - Succeeds iff the lease's token is the key's current token AND the lease is
    ///   not expired by the store clock; the lease then expires at the store's now +
    ///   `lease.ttl`, and the answer has that time left (`expires_in` at most
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
    /// # Contract of the batch
    /// - One answer per lease, in the order given; one lease's answer never depends
    ///   on another's: a lost or invalid lease fails alone.
    /// - Not atomic across leases: callers must not rely on the leases being renewed
    ///   at one store instant (each lease's safety deadline counts from the send time
    ///   of the call, which is no later than any of them was applied).
    /// - More leases than [`Capabilities::max_batch`] is `InvalidInput` and changes
    ///   nothing; no lease answers an empty list.
    /// - A transport fault fails the whole call with `Unavailable` (any subset may
    ///   have been applied), or answers `Unavailable` for just the entries it hit.
    ///
    /// # Retry
    /// - Idempotent: a repeat extends the same leases again, from the store's now.
    async fn renew_many(&self, leases: &[Lease]) -> BatchResult<Lease>;

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

    /// Declares leases dead: what a checker sends for a round's expired leases
    /// instead of one round trip each. [`Store::reap`] is this with one entry.
    ///
    /// # Contract of each entry
    /// - Iff the lease with `token` is still on `key` and expired by the store clock,
    ///   removes it, adds `(key, token)` to the dead set, and answers true.
    /// - Exactly one of any number of concurrent reapers gets true; a live, superseded
    ///   or missing lease gives false and changes nothing.
    ///
    /// # Contract of the batch
    /// - One answer per entry, in the order given.
    /// - More entries than [`Capabilities::max_batch`] is `InvalidInput` and changes
    ///   nothing.
    /// - A transport fault fails the whole call with `Unavailable` (any subset may
    ///   have been applied), or answers `Unavailable` for just the entries it hit.
    ///
    /// # Retry
    /// - A repeat of an applied reap answers false and changes nothing. The token is
    ///   in the dead set either way, so the checker's sweep of the dead set requeues
    ///   its items even when the caller that reaped never learnt it won.
    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool>;

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
