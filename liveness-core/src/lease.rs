//! Lease values: what `acquire` hands out, what `inspect` and `expired` report.

use std::time::Duration;

use crate::error::{Error, InputProblem, LostCause, Result};
use crate::types::{FencingToken, HolderId, ItemId, Key, Namespace, StoreTime, Ttl};

/// Which store and namespace issued a [`Lease`]. Fencing tokens are counted per
/// namespace (every namespace starts at 1), so a token alone does not say where a
/// lease is valid: a store refuses a lease whose issuer is not its own with
/// [`InputProblem::ForeignLease`] and changes nothing ([`Lease::check_issuer`]).
///
/// Two parts: the namespace, and a 64-bit identity of the store instance. A backend
/// derives the instance from the location its handle reached (a server's addresses, a
/// database file's canonical path: [`Issuer::located`]), so every handle on the same
/// location and namespace has the same issuer and accepts the others' leases, while
/// the same namespace on another server or file does not. An in-process store draws a
/// random one per server ([`Issuer::random`]).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Issuer {
    namespace: Namespace,
    store: u64,
}

impl Issuer {
    /// The issuer for `namespace` of the store instance `store` (any 64-bit identity
    /// that differs between instances, e.g. a random one drawn when an in-process
    /// store is created).
    pub fn new(namespace: Namespace, store: u64) -> Issuer {
        Issuer { namespace, store }
    }

    /// The issuer for `namespace` of an in-process store created now: a random
    /// instance identity, so that no other store accepts its leases (nor it theirs).
    pub fn random(namespace: Namespace) -> Issuer {
        Issuer::new(namespace, fastrand::u64(..))
    }

    /// The issuer for `namespace` of the store that `backend` reaches at `location`:
    /// the instance is a stable hash (64-bit FNV-1a, the same in every build) of the
    /// backend name and the location. Give the location without credentials or
    /// tuning parameters (server addresses and database, a canonical file path), so
    /// that every handle on the same store agrees.
    pub fn located(backend: &str, location: &str, namespace: Namespace) -> Issuer {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in backend.bytes().chain([0]).chain(location.bytes()) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Issuer::new(namespace, hash)
    }

    /// The namespace that issued the lease.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The identity of the store instance that issued the lease.
    pub fn store(&self) -> u64 {
        self.store
    }
}

impl std::fmt::Debug for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{:016x}", self.namespace, self.store)
    }
}

/// A lease held by the caller: the proof of an acquisition, passed back to `renew`,
/// `release`, `claim`, `complete` and `fail` of the store (and namespace) that
/// issued it.
///
/// [`Lease::token`] and [`Lease::issuer`] together identify the acquisition; the
/// other fields describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lease {
    /// The store and namespace that issued it; every other one refuses it.
    pub issuer: Issuer,
    /// The leased key.
    pub key: Key,
    /// Who holds it.
    pub holder: HolderId,
    /// The fencing token of this acquisition.
    pub token: FencingToken,
    /// The ttl each renewal extends the lease by, counted by the store clock.
    pub ttl: Ttl,
    /// How long the lease had left by the store clock when the store answered (a
    /// duration, never an absolute time: it crosses machines safely).
    pub expires_in: Duration,
}

impl Lease {
    /// A lease the store with identity `issuer` just granted: the whole `ttl` left.
    pub fn granted(
        issuer: &Issuer,
        key: Key,
        holder: HolderId,
        token: FencingToken,
        ttl: Ttl,
    ) -> Lease {
        Lease {
            issuer: issuer.clone(),
            key,
            holder,
            token,
            ttl,
            expires_in: ttl.duration(),
        }
    }

    /// This lease as the store just renewed it: the same acquisition (token), its
    /// whole ttl left again.
    pub fn renewed(&self) -> Lease {
        Lease {
            expires_in: self.ttl.duration(),
            ..self.clone()
        }
    }

    /// The same acquisition with `left` of it left by the store clock (what a store
    /// answers when a renewal or a join tells it how long the lease still has).
    pub fn with_expires_in(&self, left: Duration) -> Lease {
        Lease {
            expires_in: left,
            ..self.clone()
        }
    }

    /// Refuses a lease issued by another store or namespace than `issuer` (the
    /// checking store's own): [`Error::InvalidInput`] with `what: "lease"` and
    /// [`InputProblem::ForeignLease`]. Every operation that takes a lease calls it
    /// first, before it reads or changes anything.
    pub fn check_issuer(&self, issuer: &Issuer) -> Result<()> {
        if &self.issuer == issuer {
            Ok(())
        } else {
            Err(Error::invalid("lease", InputProblem::ForeignLease))
        }
    }

    /// The [`Error::Lost`] a store answers when this lease is no longer current.
    pub fn lost(&self, reason: LostCause) -> Error {
        Error::Lost {
            key: self.key.clone(),
            token: self.token,
            reason,
        }
    }

    /// The [`Error::Held`] a store answers an `acquire` of this lease's key while the
    /// lease is live: who holds the key, and under which token.
    pub fn held(&self) -> Error {
        Error::Held {
            key: self.key.clone(),
            holder: self.holder.clone(),
            token: self.token,
        }
    }

    /// The [`Error::Fenced`] a store answers when `item` is not owned by this lease's
    /// token.
    pub fn fenced(&self, item: ItemId) -> Error {
        Error::Fenced {
            item,
            token: self.token,
        }
    }
}

/// One entry of [`LeaseStore::acquire_many`](crate::LeaseStore::acquire_many): the
/// arguments of one [`Store::acquire`](crate::Store::acquire).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Acquire {
    /// The key to take.
    pub key: Key,
    /// Who takes it.
    pub holder: HolderId,
    /// The lease's ttl.
    pub ttl: Ttl,
}

impl Acquire {
    /// The acquire of `key` by `holder` for `ttl`.
    pub fn new(key: Key, holder: HolderId, ttl: Ttl) -> Acquire {
        Acquire { key, holder, ttl }
    }
}

/// Whether a lease is live by the store clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseStatus {
    /// Live, with this much time left by the store clock.
    Live {
        /// Time left until expiry.
        remaining: Duration,
    },
    /// Past its expiry and not yet reaped.
    Expired,
}

/// What `inspect` reports about a key that has a lease record.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseInfo {
    /// The key.
    pub key: Key,
    /// The current holder.
    pub holder: HolderId,
    /// The current token.
    pub token: FencingToken,
    /// The ttl of the current acquisition.
    pub ttl: Ttl,
    /// Live or expired, by the store clock (for a member riding a session: as its
    /// session stands).
    pub status: LeaseStatus,
    /// The session this member rides ([`LeaseStore::join_session_many`](crate::LeaseStore::join_session_many)),
    /// on a store with native sessions; `None` for a lease of its own. Operators group
    /// members by it: one session is one process.
    pub session: Option<Key>,
}

impl LeaseStatus {
    /// The status of a lease with `remaining` time left by the store clock: live
    /// while some is left, expired from the instant none is (a lease is not live at
    /// exactly its expiry).
    ///
    /// ```
    /// use std::time::Duration;
    /// use liveness_core::LeaseStatus;
    /// let left = Duration::from_millis(5);
    /// assert_eq!(LeaseStatus::with_remaining(left), LeaseStatus::Live { remaining: left });
    /// assert_eq!(LeaseStatus::with_remaining(Duration::ZERO), LeaseStatus::Expired);
    /// ```
    pub fn with_remaining(remaining: Duration) -> LeaseStatus {
        if remaining.is_zero() {
            LeaseStatus::Expired
        } else {
            LeaseStatus::Live { remaining }
        }
    }
}

impl LeaseInfo {
    /// What `inspect` reports of `lease` (as last granted or renewed) with `remaining`
    /// time left by the store clock: its key, holder, token and ttl, the status
    /// [`LeaseStatus::with_remaining`] gives, and no session (a lease of its own).
    pub fn new(lease: &Lease, remaining: Duration) -> LeaseInfo {
        LeaseInfo {
            key: lease.key.clone(),
            holder: lease.holder.clone(),
            token: lease.token,
            ttl: lease.ttl,
            status: LeaseStatus::with_remaining(remaining),
            session: None,
        }
    }

    /// What `inspect` reports of a lease record read back from a store: `key` held by
    /// `holder` under `token` for `ttl`, `status` by the store clock, and no session
    /// (add one with [`LeaseInfo::with_session`]).
    pub fn of(
        key: Key,
        holder: HolderId,
        token: FencingToken,
        ttl: Ttl,
        status: LeaseStatus,
    ) -> LeaseInfo {
        LeaseInfo {
            key,
            holder,
            token,
            ttl,
            status,
            session: None,
        }
    }

    /// The same, riding `session` (`None`: a lease of its own).
    pub fn with_session(mut self, session: Option<Key>) -> LeaseInfo {
        self.session = session;
        self
    }

    /// True when the lease is live by the store clock.
    pub fn is_live(&self) -> bool {
        matches!(self.status, LeaseStatus::Live { .. })
    }
}

/// A lease past its expiry that nobody has reaped yet, as `expired` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExpiredLease {
    /// The key.
    pub key: Key,
    /// Who held it.
    pub holder: HolderId,
    /// Its token: pass it to `reap`.
    pub token: FencingToken,
}

impl ExpiredLease {
    /// The entry `expired` lists for `key`, held by `holder` under `token`.
    pub fn new(key: Key, holder: HolderId, token: FencingToken) -> ExpiredLease {
        ExpiredLease { key, holder, token }
    }
}

impl From<&Lease> for ExpiredLease {
    /// The entry `expired` lists for `lease`: its key, holder and token.
    fn from(lease: &Lease) -> ExpiredLease {
        ExpiredLease {
            key: lease.key.clone(),
            holder: lease.holder.clone(),
            token: lease.token,
        }
    }
}

/// An entry of the dead set: a token that stopped being current (reaped or released)
/// and whose items may still need requeueing.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadToken {
    /// The key the token was acquired on.
    pub key: Key,
    /// The dead token.
    pub token: FencingToken,
}

impl DeadToken {
    /// The entry of the dead set for `token`, acquired on `key`.
    pub fn new(key: Key, token: FencingToken) -> DeadToken {
        DeadToken { key, token }
    }
}

/// The default for [`Capabilities::death_retention`](crate::Capabilities::death_retention):
/// how many death records a store keeps per namespace (the newest ones).
pub const DEFAULT_DEATH_RETENTION: usize = 10_000;

/// Why a token stopped being current, as a [`DeathRecord`] says.
///
/// Not `#[non_exhaustive]`: a store keeps the cause of every death it records, so a
/// new cause must fail the build of every store until it can keep it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeathCause {
    /// Expired by the store clock and reaped (by a checker's `reap` or `reap_many`).
    Reaped,
    /// Released by its holder (`release`), live or expired.
    Released,
    /// Expired, and taken over by a new `acquire` of the same key, which reaped it in
    /// the same atomic step (a member that lost its lease and joined again, or another
    /// contender).
    Superseded,
}

impl DeathCause {
    /// A short lowercase word for tables and logs: `reaped`, `released`, `superseded`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeathCause::Reaped => "reaped",
            DeathCause::Released => "released",
            DeathCause::Superseded => "superseded",
        }
    }
}

impl std::fmt::Display for DeathCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the sweep of a dead token moved: filled into its [`DeathRecord`] by the
/// `sweep` (or `sweep_many`) call that took the token out of the
/// dead set, in the same atomic step, whichever checker made it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Swept {
    /// Members of a session declared dead under this record (a session's one entry counts
    /// the members that died with it); 0 for a lease no member rode.
    pub members: u64,
    /// Items the token still owned that went back to pending.
    pub requeued: u64,
    /// Items the token still owned that went to the dead-letter set (out of attempts).
    pub dead_lettered: u64,
}

impl Swept {
    /// A sweep that declared `members` riding members dead and sent `requeued` items back
    /// to pending and `dead_lettered` to the dead-letter set.
    pub fn new(members: u64, requeued: u64, dead_lettered: u64) -> Swept {
        Swept {
            members,
            requeued,
            dead_lettered,
        }
    }
}

/// The seqs of one page of [`OperatorStore::deaths`](crate::OperatorStore::deaths) on a
/// store whose records are contiguous by seq (the oldest are dropped first) and whose
/// newest record has seq `last` (0: none yet): `(bottom, top)`, both included, newest
/// first from `top`; `None` when the page is empty. `limit` is already clamped.
///
/// ```
/// use liveness_core::lease::death_page;
/// assert_eq!(death_page(10, None, 3), Some((8, 10)));
/// assert_eq!(death_page(10, Some(9), 3), Some((6, 8)));
/// assert_eq!(death_page(10, Some(1), 3), None);
/// assert_eq!(death_page(0, None, 3), None);
/// ```
pub fn death_page(last: u64, before: Option<u64>, limit: usize) -> Option<(u64, u64)> {
    let top = before.map_or(last, |b| b.saturating_sub(1).min(last));
    if top == 0 || limit == 0 {
        return None;
    }
    let bottom = top
        .saturating_sub(u64::try_from(limit).unwrap_or(u64::MAX) - 1)
        .max(1);
    Some((bottom, top))
}

/// One entry of a namespace's death history ([`OperatorStore::deaths`](crate::OperatorStore::deaths)):
/// a token that stopped being current and went to the dead set.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeathRecord {
    /// Its place in the namespace's history: strictly increasing in the order the
    /// deaths happened, never reused.
    pub seq: u64,
    /// The key the token was acquired on.
    pub key: Key,
    /// Who held it.
    pub holder: HolderId,
    /// The dead token.
    pub token: FencingToken,
    /// The store time of the death (the reap, the release or the superseding acquire).
    pub at: StoreTime,
    /// Why it died.
    pub cause: DeathCause,
    /// What the sweep of the token moved: `None` until `sweep` took the
    /// token out of the dead set. A session's record adds up, as its sweep goes, the
    /// members declared dead with it and what their sweeps moved.
    pub swept: Option<Swept>,
}

impl DeathRecord {
    /// A record from its parts, in field order: how a store builds one it decodes
    /// from its stored form, or a new one (`swept` `None`). Every part has its own
    /// type, so the compiler checks the order.
    #[must_use]
    pub fn new(
        seq: u64,
        key: Key,
        holder: HolderId,
        token: FencingToken,
        at: StoreTime,
        cause: DeathCause,
        swept: Option<Swept>,
    ) -> DeathRecord {
        DeathRecord {
            seq,
            key,
            holder,
            token,
            at,
            cause,
            swept,
        }
    }
}
