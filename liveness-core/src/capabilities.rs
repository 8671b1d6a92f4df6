//! What a store declares about itself ([`Capabilities`], [`StoreInfo`]) and the
//! checks the core makes from it before a store is called.

use std::time::Duration;

use crate::error::{Error, InputProblem, Result};
use crate::lease::{Issuer, DEFAULT_DEATH_RETENTION};
use crate::types::Ttl;

/// What a store declares about itself. The conformance suite and the state machines
/// choose their behaviour from it.
///
/// Build one from the defaults with its builder methods (it is `#[non_exhaustive]`:
/// a new capability gets a default, and no store breaks):
///
/// ```
/// use std::time::Duration;
/// use liveness_core::Capabilities;
///
/// let caps = Capabilities::default()
///     .min_ttl(Duration::from_secs(2))
///     .pushes_expiry_events(true);
/// assert!(caps.check_ttl(liveness_core::Ttl::from_millis(500).unwrap()).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// The shortest ttl the store accepts.
    pub min_ttl: Duration,
    /// The longest ttl the store accepts.
    pub max_ttl: Duration,
    /// True when [`LeaseStore::wakeups`](crate::LeaseStore::wakeups) signals expiries as they happen (etcd watch),
    /// not only releases.
    pub pushes_expiry_events: bool,
    /// True when expiry is judged on this handle's own monotonic clock (FoundationDB):
    /// a fresh handle then needs up to one ttl of observation before it can see a
    /// lease as expired.
    pub observer_local_expiry: bool,
    /// The most items or leases one call moves or lists; larger limits are clamped.
    pub max_batch: usize,
    /// The largest item payload in bytes.
    pub max_payload: usize,
    /// How many death records ([`OperatorStore::deaths`](crate::OperatorStore::deaths)) the store keeps per namespace:
    /// the newest ones; older ones are dropped as new deaths are recorded. Default
    /// [`DEFAULT_DEATH_RETENTION`]; at least 1.
    pub death_retention: usize,
    /// True when the store serves [`LeaseStore::join_session_many`](crate::LeaseStore::join_session_many) natively: a member
    /// riding a session costs the store nothing while it lives, and the sweep declares
    /// a dead session's members dead in batches (`docs/sessions.md`). False (the default):
    /// `join_session` takes an ordinary lease with the session's ttl, which its holder
    /// renews like any other.
    pub sessions: bool,
    /// True (the default) when the store keeps work items: it implements every
    /// method of [`ItemStore`](crate::ItemStore), and the conformance suite checks
    /// them. False for a store of elections alone, whose item calls answer
    /// `InvalidInput` ([`InputProblem::Unsupported`]).
    pub items: bool,
    /// True (the default) when the store offers the operator's views: it implements
    /// every method of [`OperatorStore`](crate::OperatorStore) (its clock, the leases
    /// of a space, the death history, the items by state, retrying dead letters), and
    /// the conformance suite checks them. False: those calls answer `InvalidInput`
    /// ([`InputProblem::Unsupported`]).
    pub operator_views: bool,
    /// True when the store keeps an item back until a delay has passed by its own
    /// clock: [`EnqueueOptions::delay`](crate::EnqueueOptions::delay) (a scheduled
    /// job) and a retry's `after` ([`Outcome::Retry`](crate::Outcome::Retry), a
    /// backoff), and answers [`ItemStore::next_due`](crate::ItemStore::next_due).
    /// False (the default): a non-zero delay is `InvalidInput`
    /// ([`InputProblem::Unsupported`]), so nothing runs earlier than asked.
    pub delays: bool,
    /// True when the store keeps the error text of an item's latest failure
    /// ([`ItemStore::finish_with_error`](crate::ItemStore::finish_with_error)) and
    /// answers it in [`ItemRecord::last_error`](crate::ItemRecord::last_error). False
    /// (the default): the text is dropped and `last_error` is always `None`.
    pub error_text: bool,
    /// How long, by the store's own clock, the store keeps an enqueue's idempotency
    /// key ([`EnqueueOptions::key`](crate::EnqueueOptions::key)) after that enqueue:
    /// a repeat within it answers the first enqueue's id; after it the key may be
    /// forgotten, and a repeat adds a new item. Keys then take room for a bounded
    /// time, not for good. `None` (the default): kept for good (a store with no clock
    /// to count by).
    pub key_retention: Option<Duration>,
    /// How long, by the store's own clock, the store keeps a dead letter after it was
    /// dead-lettered (counted from its latest attempt's end,
    /// [`ItemTimes::finished`](crate::ItemTimes::finished)). After it, a later
    /// dead-lettering in the namespace may remove it, as an operator's
    /// [`cancel`](crate::OperatorStore::cancel) would: each call that dead-letters
    /// removes up to [`DEAD_LETTER_TRIM`](crate::DEAD_LETTER_TRIM) of the oldest
    /// expired ones, so dead letters take room for a bounded time, not for good. A
    /// dead letter from before the store counted the retention is counted from the
    /// upgrade, or kept until an operator acts, as the store's README says. `None`
    /// (the default): kept until an operator retries, cancels or discards it (a store
    /// with no clock to count by).
    pub dead_letter_retention: Option<Duration>,
    /// True when the store keeps named queues: an item waits in the queue its
    /// enqueue named ([`EnqueueOptions::queue`](crate::EnqueueOptions::queue)), a
    /// claim takes from the queues it names
    /// ([`ItemStore::claim_from`](crate::ItemStore::claim_from)), and
    /// [`OperatorStore::queue_counts`](crate::OperatorStore::queue_counts) counts
    /// each. False (the default): every item is in
    /// [`QueueName::DEFAULT`](crate::QueueName::DEFAULT), and naming another queue is
    /// `InvalidInput` ([`InputProblem::Unsupported`]).
    pub queues: bool,
    /// True when the store keeps when each item was enqueued, last claimed and last
    /// finished an attempt, by its own clock, and answers them in
    /// [`ItemRecord::times`](crate::ItemRecord::times). False (the default): those are
    /// `None`.
    pub item_times: bool,
}

impl Default for Capabilities {
    fn default() -> Self {
        Capabilities {
            min_ttl: Duration::from_millis(1),
            max_ttl: Ttl::MAX,
            pushes_expiry_events: false,
            observer_local_expiry: false,
            max_batch: 1000,
            max_payload: 1024 * 1024,
            death_retention: DEFAULT_DEATH_RETENTION,
            sessions: false,
            items: true,
            operator_views: true,
            delays: false,
            error_text: false,
            key_retention: None,
            dead_letter_retention: None,
            queues: false,
            item_times: false,
        }
    }
}

/// The part of the store contract an operation belongs to: what
/// [`Capabilities::offers`] answers for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StorePart {
    /// [`LeaseStore`](crate::LeaseStore): every store.
    Leases,
    /// [`ItemStore`](crate::ItemStore): [`Capabilities::items`].
    Items,
    /// [`OperatorStore`](crate::OperatorStore): [`Capabilities::operator_views`].
    OperatorViews,
}

/// One builder method per field: `Capabilities::default().sessions(true)`.
macro_rules! set {
    ($($field:ident: $ty:ty),* $(,)?) => {
        $(
            #[doc = concat!("The same capabilities with [`Capabilities::", stringify!($field), "`] set to `value`.")]
            pub fn $field(mut self, value: $ty) -> Self {
                self.$field = value;
                self
            }
        )*
    };
}

/// Builder methods: a store states what differs from the defaults.
///
/// ```
/// use liveness_core::Capabilities;
/// let caps = Capabilities::default().sessions(true).max_batch(500);
/// assert!(caps.sessions && caps.items);
/// assert_eq!(caps.max_batch, 500);
/// ```
impl Capabilities {
    set!(
        min_ttl: Duration,
        max_ttl: Duration,
        pushes_expiry_events: bool,
        observer_local_expiry: bool,
        max_batch: usize,
        max_payload: usize,
        death_retention: usize,
        sessions: bool,
        items: bool,
        operator_views: bool,
        delays: bool,
        error_text: bool,
        key_retention: Option<Duration>,
        dead_letter_retention: Option<Duration>,
        queues: bool,
        item_times: bool,
    );
}

impl Capabilities {
    /// True when the store offers the operations of `part`.
    pub fn offers(&self, part: StorePart) -> bool {
        match part {
            StorePart::Leases => true,
            StorePart::Items => self.items,
            StorePart::OperatorViews => self.operator_views,
        }
    }

    /// Rejects a ttl outside `min_ttl ..= max_ttl` with [`Error::InvalidInput`].
    pub fn check_ttl(&self, ttl: Ttl) -> Result<()> {
        let got = ttl.duration();
        if got < self.min_ttl {
            return Err(Error::invalid(
                "ttl",
                InputProblem::TooShort {
                    min: self.min_ttl,
                    got,
                },
            ));
        }
        if got > self.max_ttl {
            return Err(Error::invalid(
                "ttl",
                InputProblem::TooLongDuration {
                    max: self.max_ttl,
                    got,
                },
            ));
        }
        Ok(())
    }

    /// Rejects a zero limit with [`Error::InvalidInput`] and clamps the rest to
    /// [`Capabilities::max_batch`].
    pub fn clamp_limit(&self, what: &'static str, limit: usize) -> Result<usize> {
        if limit == 0 {
            return Err(Error::invalid(what, InputProblem::Zero));
        }
        Ok(limit.min(self.max_batch.max(1)))
    }
}

/// What a store is, fixed for the handle's lifetime: the backend's name, its
/// capabilities, and the issuer of its leases. A store keeps one and lends it from
/// [`LeaseStore::info`](crate::LeaseStore::info).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreInfo {
    /// The backend's name (`"memory"`, `"redis"`, ...), used in errors and traces.
    pub backend: &'static str,
    /// What the store supports.
    pub caps: Capabilities,
    /// Who issues the store's leases (see [`Issuer`]).
    pub issuer: Issuer,
}

impl StoreInfo {
    /// What a store says of itself: its `backend` name, its `caps` and its `issuer`.
    pub fn new(backend: &'static str, caps: Capabilities, issuer: Issuer) -> StoreInfo {
        StoreInfo {
            backend,
            caps,
            issuer,
        }
    }
}

/// Rejects a batch of `len` entries larger than the store's `max_batch` with
/// [`Error::InvalidInput`]: the check [`CheckInput`](crate::CheckInput) makes of
/// every `*_many` call but `sweep_many`.
pub fn check_batch(caps: Capabilities, what: &'static str, len: usize) -> Result<()> {
    let max = caps.max_batch.max(1);
    if len > max {
        return Err(Error::invalid(what, InputProblem::TooLong { max, len }));
    }
    Ok(())
}
