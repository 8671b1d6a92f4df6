//! Work items: ids, payloads, states, and what requeueing reports.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::time::Duration;

use crate::error::{Error, InputProblem, Result};
use crate::lease::{ExpiredLease, Swept};
use crate::queue_name::QueueName;
pub use crate::types::ItemId;
use crate::types::{FencingToken, StoreTime};

/// An id the caller picks for one mutating request (a claim, a keyed enqueue), so that
/// the store recognises a retry of that request and answers it as it answered the
/// first time instead of acting twice.
///
/// Pick a fresh one per request and send the SAME one again when retrying that
/// request after [`Error::Unavailable`]. Written as 32 lowercase hex digits; ids
/// compare as 128-bit unsigned integers (the hex text compares the same way).
///
/// - Claim ids must INCREASE per token: a store admits a claim only when its id is
///   greater than every claim id it admitted before under that token (its high-water
///   mark), and answers an older or equal id with no items (see
///   [`ItemStore::claim_request`](crate::ItemStore::claim_request)). So a claim
///   delivered late, after a repeat of it already ran, assigns nothing. Take claim ids
///   from [`RequestId::next`].
/// - Enqueue keys only need to be unique: [`RequestId::random`] (128 random bits, so
///   two requests never share one by chance) or [`RequestId::next`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct RequestId(pub u128);

/// The sequence behind [`RequestId::next`]: the high 64 bits of its ids.
static NEXT_SEQUENCE: AtomicU64 = AtomicU64::new(1);

impl RequestId {
    /// A fresh random id (for enqueue keys; claim ids come from [`RequestId::next`]).
    pub fn random() -> RequestId {
        RequestId(fastrand::u128(..))
    }

    /// A fresh id greater than every id `next` returned before in this process, from
    /// any thread: the high 64 bits are a process-wide sequence (starting at 1), the
    /// low 64 bits random, so ids of different processes still differ. What claims
    /// use: a token's claims then carry increasing ids, as
    /// [`ItemStore::claim_request`](crate::ItemStore::claim_request) requires.
    pub fn next() -> RequestId {
        let seq = NEXT_SEQUENCE.fetch_add(1, AtomicOrdering::Relaxed);
        RequestId((u128::from(seq) << 64) | u128::from(fastrand::u64(..)))
    }

    /// The id as 32 lowercase hex digits (how text-keyed stores record it).
    pub fn to_hex(self) -> String {
        format!("{:032x}", self.0)
    }

    /// The id as 16 big-endian bytes (how byte-keyed stores record it).
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// The default for [`EnqueueOptions::max_attempts`].
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// Options of `enqueue`. Start from the defaults and set what differs:
///
/// ```
/// use liveness_core::{EnqueueOptions, RequestId};
/// use std::time::Duration;
/// let options = EnqueueOptions::default()
///     .max_attempts(5)
///     .key(RequestId(42))
///     .delay(Duration::from_secs(60));
/// assert_eq!((options.max_attempts, options.key), (5, Some(RequestId(42))));
/// assert_eq!(options.delay, Duration::from_secs(60));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(
        try_from = "crate::settings::EnqueueForm",
        into = "crate::settings::EnqueueForm"
    )
)]
pub struct EnqueueOptions {
    /// How many claims the item gets before a requeue sends it to the dead-letter set
    /// instead of back to pending (so a poison item that kills every worker that takes
    /// it cannot loop forever). At least 1; default [`DEFAULT_MAX_ATTEMPTS`].
    pub max_attempts: u32,
    /// The idempotency key: an enqueue with a key that an earlier enqueue in the
    /// namespace used adds nothing and answers that enqueue's id, so a caller can
    /// retry an enqueue whose reply was lost without adding the item twice. The
    /// store remembers a key (one small record) for its
    /// [`Capabilities::key_retention`](crate::Capabilities::key_retention) after the
    /// enqueue that used it, by its own clock ([`DEFAULT_KEY_RETENTION`], a day, unless
    /// its URL's `key_retention_s` says otherwise), then may forget it: a repeat after
    /// that adds a new item. Default `None`: every call adds an item, and a retry
    /// after `Unavailable` may add it twice (at-least-once).
    pub key: Option<RequestId>,
    /// How long the item waits before it can be claimed, counted by the store's own
    /// clock from the enqueue's arrival (a scheduled job): no host's clock is read,
    /// so a host whose clock is off schedules exactly as one whose clock is right.
    /// At most [`MAX_DELAY`]; a non-zero delay needs [`Capabilities::delays`]
    /// (`InvalidInput`, [`InputProblem::Unsupported`], otherwise). Default zero:
    /// claimable at once.
    ///
    /// [`Capabilities::delays`]: crate::Capabilities::delays
    pub delay: Duration,
    /// The queue the item waits in: a worker claims only from the queues it names
    /// ([`ItemStore::claim_from`](crate::ItemStore::claim_from)). Default
    /// [`QueueName::DEFAULT`]; another queue needs
    /// [`Capabilities::queues`](crate::Capabilities::queues) (`InvalidInput`,
    /// [`InputProblem::Unsupported`], otherwise, and nothing is added).
    pub queue: QueueName,
}

/// How long a store keeps an enqueue's idempotency key unless told otherwise (its
/// URL's `key_retention_s`): a day. See
/// [`Capabilities::key_retention`](crate::Capabilities::key_retention).
pub const DEFAULT_KEY_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// How long a store with a clock keeps a dead letter unless told otherwise (its URL's
/// `dead_letter_retention_s`): 30 days, time for an operator to read why it failed
/// and retry it. See
/// [`Capabilities::dead_letter_retention`](crate::Capabilities::dead_letter_retention).
pub const DEFAULT_DEAD_LETTER_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// The most expired dead letters one dead-lettering call removes
/// ([`Capabilities::dead_letter_retention`](crate::Capabilities::dead_letter_retention)):
/// a call's cost stays bounded, and since each call adds at most what it sends,
/// a backlog of expired ones still shrinks a hundredfold faster than it grows.
pub const DEAD_LETTER_TRIM: usize = 100;

/// The longest [`EnqueueOptions::delay`] and retry delay ([`Outcome::Retry`]) a store
/// accepts: 366 days.
pub const MAX_DELAY: Duration = Duration::from_secs(366 * 24 * 3600);

impl Default for EnqueueOptions {
    fn default() -> Self {
        EnqueueOptions {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            key: None,
            delay: Duration::ZERO,
            queue: QueueName::DEFAULT,
        }
    }
}

impl EnqueueOptions {
    /// The defaults with an idempotency key ([`EnqueueOptions::key`]).
    pub fn keyed(key: RequestId) -> Self {
        EnqueueOptions::default().key(key)
    }

    /// The same options with `max_attempts` claims before the dead-letter set.
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// The same options with the idempotency key `key`.
    pub fn key(mut self, key: RequestId) -> Self {
        self.key = Some(key);
        self
    }

    /// The same options with the item kept back for `delay` by the store's clock
    /// ([`EnqueueOptions::delay`]).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The same options with the item put in `queue` ([`EnqueueOptions::queue`]).
    pub fn queue(mut self, queue: QueueName) -> Self {
        self.queue = queue;
        self
    }

    /// Checks the options and the payload against a store's payload limit (the delay
    /// against [`MAX_DELAY`]).
    pub fn validate(&self, payload: &[u8], max_payload: usize) -> Result<()> {
        if self.max_attempts == 0 {
            return Err(Error::invalid("max_attempts", InputProblem::Zero));
        }
        check_delay("delay", self.delay)?;
        if payload.len() > max_payload {
            return Err(Error::invalid(
                "payload",
                InputProblem::TooLong {
                    max: max_payload,
                    len: payload.len(),
                },
            ));
        }
        Ok(())
    }
}

/// Refuses a delay over [`MAX_DELAY`] with `InvalidInput`.
pub(crate) fn check_delay(what: &'static str, delay: Duration) -> Result<()> {
    if delay > MAX_DELAY {
        return Err(Error::invalid(
            what,
            InputProblem::TooLongDuration {
                max: MAX_DELAY,
                got: delay,
            },
        ));
    }
    Ok(())
}

/// A work item as a worker sees it after `claim`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Item {
    /// Its id.
    pub id: ItemId,
    /// The payload given at enqueue.
    pub payload: Vec<u8>,
    /// How many times it has been claimed, this claim included.
    pub attempts: u32,
    /// Its attempt limit.
    pub max_attempts: u32,
    /// How long it waited to be claimed, by the store's clock: from the moment it
    /// last became claimable (its enqueue, or its due time when held back; a retry's
    /// hand-back, a requeue after its owner's death, a dead letter's retry, each from
    /// then or its due time) to this claim. The time a job spent in its queue: what a
    /// [`Worker`](crate::Worker) records in `liveness_job_wait_seconds`. `None` where
    /// the store does not measure it (one with no clock of its own: etcd,
    /// FoundationDB), and possibly on a repeat of a claim.
    pub waited: Option<Duration>,
    /// The queue it waits in ([`EnqueueOptions::queue`]).
    pub queue: QueueName,
}

impl Item {
    /// Item `id` carrying `payload`, claimed `attempts` times of `max_attempts`.
    pub fn new(id: ItemId, payload: Vec<u8>, attempts: u32, max_attempts: u32) -> Item {
        Item {
            id,
            payload,
            attempts,
            max_attempts,
            waited: None,
            queue: QueueName::DEFAULT,
        }
    }

    /// The same item in `queue`.
    pub fn with_queue(mut self, queue: QueueName) -> Item {
        self.queue = queue;
        self
    }

    /// The same item with `waited` as how long it waited to be claimed.
    pub fn with_waited(mut self, waited: Option<Duration>) -> Item {
        self.waited = waited;
        self
    }
}

/// Where an item is.
///
/// Not `#[non_exhaustive]`: a store keeps every state, so a new state must fail the
/// build of every store until it can keep it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ItemState {
    /// Waiting to be claimed.
    Pending,
    /// Owned by the member lease with this token.
    Owned(FencingToken),
    /// Given up on: failed without retry, or out of attempts. Never claimed again.
    DeadLettered,
}

impl ItemState {
    /// The state without its owner: what [`OperatorStore::items`](crate::OperatorStore::items)
    /// pages by.
    pub fn kind(self) -> ItemStateKind {
        match self {
            ItemState::Pending => ItemStateKind::Pending,
            ItemState::Owned(_) => ItemStateKind::Owned,
            ItemState::DeadLettered => ItemStateKind::DeadLettered,
        }
    }
}

/// An item state without its owner: which page [`OperatorStore::items`](crate::OperatorStore::items)
/// lists. Exhaustive, as [`ItemState`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ItemStateKind {
    /// Waiting to be claimed.
    Pending,
    /// Owned by some token.
    Owned,
    /// In the dead-letter set.
    DeadLettered,
}

impl ItemStateKind {
    /// A short lowercase word: `pending`, `owned`, `dead-lettered`.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemStateKind::Pending => "pending",
            ItemStateKind::Owned => "owned",
            ItemStateKind::DeadLettered => "dead-lettered",
        }
    }
}

impl fmt::Display for ItemStateKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An item with its state, as `item` and `dead_letters` report it. Completed items are
/// gone from the store.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ItemRecord {
    /// The item.
    pub item: Item,
    /// Its state.
    pub state: ItemState,
    /// The error text of its latest failure that gave one
    /// ([`ItemStore::finish_with_error`](crate::ItemStore::finish_with_error), what a
    /// [`Worker`](crate::Worker)'s failed job reports): why a dead letter died, or why a
    /// retried job waits. A failure without text, a requeue after its owner's death and
    /// a dead letter's retry leave it as it was. `None` on a store without
    /// [`Capabilities::error_text`](crate::Capabilities::error_text).
    pub last_error: Option<String>,
    /// When, by the store's clock, it was enqueued, last claimed and last finished an
    /// attempt without completing. All `None` on a store without
    /// [`Capabilities::item_times`](crate::Capabilities::item_times).
    pub times: ItemTimes,
}

/// When things happened to an item, by the store's own clock ([`StoreTime`]: compare
/// them with each other and with [`OperatorStore::store_time`](crate::OperatorStore::store_time),
/// never with a local clock). A completed item is removed, so no time of a completed
/// item is ever read. All `None` on a store without
/// [`Capabilities::item_times`](crate::Capabilities::item_times) (one with no clock
/// of its own: etcd, FoundationDB).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ItemTimes {
    /// When it was enqueued.
    pub enqueued: Option<StoreTime>,
    /// When it was last claimed; `None` until its first claim. A dead letter's retry
    /// leaves it (and `finished`) as it was.
    pub attempted: Option<StoreTime>,
    /// When its latest attempt ended without completing it: its owner handed it back
    /// (a failure, retried or dead-lettered), or the sweep of its dead owner requeued
    /// or dead-lettered it. `None` until then.
    pub finished: Option<StoreTime>,
}

impl ItemTimes {
    /// An item enqueued at `at`, never claimed.
    pub fn enqueued(at: StoreTime) -> ItemTimes {
        ItemTimes {
            enqueued: Some(at),
            attempted: None,
            finished: None,
        }
    }

    /// These times with `attempted` and `finished` as given.
    pub fn with(self, attempted: Option<StoreTime>, finished: Option<StoreTime>) -> ItemTimes {
        ItemTimes {
            attempted,
            finished,
            ..self
        }
    }
}

/// The longest error text, in bytes, that
/// [`ItemStore::finish_with_error`](crate::ItemStore::finish_with_error) takes (a
/// longer one is `InvalidInput`); [`error_text`] cuts a longer text to it.
pub const MAX_ERROR_LEN: usize = 2048;

/// The error text a store keeps for `error`: its message and those of its sources,
/// joined by `": "`, cut to at most [`MAX_ERROR_LEN`] bytes at a character boundary
/// (ending in `…` when cut).
///
/// ```
/// let err = std::io::Error::other("disk full");
/// assert_eq!(liveness_core::error_text(&err), "disk full");
/// let long = "x".repeat(5000);
/// assert!(liveness_core::error_text(&std::io::Error::other(long)).len() <= liveness_core::MAX_ERROR_LEN);
/// ```
pub fn error_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let more = e.to_string();
        // A source whose message the outer one already repeats adds nothing.
        if !text.ends_with(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = e.source();
    }
    cut_error_text(text)
}

/// `text` cut to at most [`MAX_ERROR_LEN`] bytes at a character boundary, ending in
/// `…` when cut.
pub(crate) fn cut_error_text(mut text: String) -> String {
    if text.len() <= MAX_ERROR_LEN {
        return text;
    }
    let mut end = MAX_ERROR_LEN - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
    text
}

/// How an item's owner hands it back ([`ItemStore::finish`](crate::ItemStore::finish)).
///
/// Not `#[non_exhaustive]`: a store moves the item for each outcome (or calls
/// [`Outcome::apply`]), so a new outcome must fail the build of every store that
/// matches on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Done: the item is removed.
    Completed,
    /// Failed, to be tried again: back to pending, or to the dead-letter set when its
    /// attempts reached `max_attempts`. A pending item is claimable again once `after`
    /// has passed by the store's clock (a retry backoff; zero: at once). A non-zero
    /// `after` needs [`Capabilities::delays`](crate::Capabilities::delays) and is at
    /// most [`MAX_DELAY`].
    Retry {
        /// How long the item waits before it can be claimed again.
        after: Duration,
    },
    /// Failed for good: to the dead-letter set.
    DeadLetter,
}

impl Outcome {
    /// A failure's outcome: [`Outcome::Retry`] at once with `retry`, else
    /// [`Outcome::DeadLetter`].
    pub fn failed(retry: bool) -> Outcome {
        match retry {
            true => Outcome::RETRY,
            false => Outcome::DeadLetter,
        }
    }

    /// `Ok` for a failure's outcome ([`Outcome::Retry`], [`Outcome::DeadLetter`]);
    /// `InvalidInput` naming `outcome` for [`Outcome::Completed`], which is no
    /// failure.
    pub fn check_failure(self) -> Result<()> {
        match self {
            Outcome::Completed => Err(Error::invalid(
                "outcome",
                InputProblem::Malformed {
                    expected: "a failure's outcome: Retry or DeadLetter",
                },
            )),
            _ => Ok(()),
        }
    }

    /// [`Outcome::Retry`] with no wait: claimable again at once.
    pub const RETRY: Outcome = Outcome::Retry {
        after: Duration::ZERO,
    };

    /// How long a retried item waits before it can be claimed again: `after` of
    /// [`Outcome::Retry`], zero for the other outcomes.
    pub fn delay(self) -> Duration {
        match self {
            Outcome::Retry { after } => after,
            _ => Duration::ZERO,
        }
    }

    /// `None` for [`Outcome::Completed`] (the item is removed); for a failure, whether
    /// it is retried: the `retry` of [`ItemRecord::hand_back`].
    pub fn retry(self) -> Option<bool> {
        match self {
            Outcome::Completed => None,
            Outcome::Retry { .. } => Some(true),
            Outcome::DeadLetter => Some(false),
        }
    }

    /// The item's state after an owner's [`ItemStore::finish`](crate::ItemStore::finish)
    /// with this outcome, as every store moves it: `None` (removed) for
    /// [`Outcome::Completed`], else [`ItemRecord::hand_back`]'s answer.
    pub fn apply(self, record: &mut ItemRecord) -> Option<ItemState> {
        self.retry().map(|retry| record.hand_back(retry))
    }
}

/// The item's moves between states, as every store makes them (each inside the
/// store's own atomic step): a store that keeps records in memory calls these rather
/// than writing the rules out again.
impl ItemRecord {
    /// `item` in `state`, as a store reads it back.
    pub fn new(item: Item, state: ItemState) -> ItemRecord {
        ItemRecord {
            item,
            state,
            last_error: None,
            times: ItemTimes::default(),
        }
    }

    /// The same record with `times` as when things happened to it.
    pub fn with_times(mut self, times: ItemTimes) -> ItemRecord {
        self.times = times;
        self
    }

    /// The same record with `last_error` as its latest failure's error text.
    pub fn with_last_error(mut self, last_error: Option<String>) -> ItemRecord {
        self.last_error = last_error;
        self
    }

    /// A new item as `enqueue` adds it: pending, `payload`, no attempts yet, and
    /// `max_attempts` claims before it goes to the dead-letter set.
    pub fn pending(id: ItemId, payload: &[u8], max_attempts: u32) -> ItemRecord {
        let payload = payload.to_vec();
        let item = Item::new(id, payload, 0, max_attempts);
        ItemRecord {
            item,
            state: ItemState::Pending,
            last_error: None,
            times: ItemTimes::default(),
        }
    }

    /// Gives the item to `token` (a claim): owned by it, one more attempt counted.
    /// Returns the item as `claim` answers it.
    pub fn claim(&mut self, token: FencingToken) -> Item {
        self.state = ItemState::Owned(token);
        self.item.attempts = self.item.attempts.saturating_add(1);
        self.item.clone()
    }

    /// Gives the item back (`fail`, or the sweep of a dead owner): pending again when
    /// `retry` is true and attempts are left, else dead-lettered. Returns the new state.
    ///
    /// ```
    /// use liveness_core::{FencingToken, ItemId, ItemRecord, ItemState};
    /// let mut record = ItemRecord::pending(ItemId(1), b"job", 2);
    /// record.claim(FencingToken(7));
    /// assert_eq!(record.hand_back(true), ItemState::Pending);
    /// record.claim(FencingToken(8));
    /// assert_eq!(record.hand_back(true), ItemState::DeadLettered); // out of attempts
    /// assert!(record.revive().is_ok());
    /// assert_eq!((record.state, record.item.attempts), (ItemState::Pending, 0));
    /// ```
    pub fn hand_back(&mut self, retry: bool) -> ItemState {
        let again = retry && self.item.attempts < self.item.max_attempts;
        self.state = if again {
            ItemState::Pending
        } else {
            ItemState::DeadLettered
        };
        self.state
    }

    /// A dead-lettered item back to pending with no attempts counted
    /// (`retry_dead_letter`). An item in any other state is refused with
    /// `InvalidInput` ([`InputProblem::NotDeadLettered`]) and left as it is.
    pub fn revive(&mut self) -> Result<()> {
        if self.state != ItemState::DeadLettered {
            return Err(Error::invalid("item", InputProblem::NotDeadLettered));
        }
        self.state = ItemState::Pending;
        self.item.attempts = 0;
        Ok(())
    }
}

/// What one `sweep` call moved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sweep {
    /// Items sent back to pending, in id order.
    pub requeued: Vec<ItemId>,
    /// Items sent to the dead-letter set (out of attempts), in id order.
    pub dead_lettered: Vec<ItemId>,
    /// For a dead session's token: the riding members this call declared dead with
    /// their session (each exactly once; its token now in the dead set). Empty for
    /// any other token.
    pub members: Vec<ExpiredLease>,
}

impl Sweep {
    /// A sweep that sent `requeued` back to pending and `dead_lettered` to the
    /// dead-letter set, and declared no member dead (add them with
    /// [`Sweep::with_members`]).
    pub fn new(requeued: Vec<ItemId>, dead_lettered: Vec<ItemId>) -> Sweep {
        Sweep {
            requeued,
            dead_lettered,
            members: Vec::new(),
        }
    }

    /// The same, having declared the riding members `members` dead.
    pub fn with_members(mut self, members: Vec<ExpiredLease>) -> Sweep {
        self.members = members;
        self
    }

    /// Notes where the sweep put item `id`: in `requeued` when `state` is pending, in
    /// `dead_lettered` otherwise (what [`ItemRecord::hand_back`] answered).
    pub fn add(&mut self, id: ItemId, state: ItemState) {
        match state {
            ItemState::Pending => self.requeued.push(id),
            _ => self.dead_lettered.push(id),
        }
    }

    /// True when nothing moved.
    pub fn is_empty(&self) -> bool {
        self.requeued.is_empty() && self.dead_lettered.is_empty() && self.members.is_empty()
    }
}

impl From<&Sweep> for Swept {
    /// What one sweep moved, as its death record counts it: the members it declared dead and
    /// the items it sent back to pending or to the dead-letter set.
    fn from(moved: &Sweep) -> Swept {
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        Swept {
            members: count(moved.members.len()),
            requeued: count(moved.requeued.len()),
            dead_lettered: count(moved.dead_lettered.len()),
        }
    }
}

/// How many items are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ItemCounts {
    /// Waiting to be claimed.
    pub pending: u64,
    /// Owned by some token.
    pub owned: u64,
    /// In the dead-letter set.
    pub dead_lettered: u64,
}

/// One queue's items counted by state: an entry of
/// [`OperatorStore::queue_counts`](crate::OperatorStore::queue_counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueCounts {
    /// The queue.
    pub queue: QueueName,
    /// Its items by state.
    pub counts: ItemCounts,
}

impl QueueCounts {
    /// `counts` of `queue`.
    pub fn new(queue: QueueName, counts: ItemCounts) -> QueueCounts {
        QueueCounts { queue, counts }
    }
}

impl ItemCounts {
    /// `pending` items waiting, `owned` held, `dead_lettered` given up on.
    pub fn new(pending: u64, owned: u64, dead_lettered: u64) -> ItemCounts {
        ItemCounts {
            pending,
            owned,
            dead_lettered,
        }
    }
}

impl FromIterator<ItemStateKind> for ItemCounts {
    /// Counts the states of a store's items, one entry per item: what `item_counts`
    /// answers when they are all read in one step.
    fn from_iter<I: IntoIterator<Item = ItemStateKind>>(states: I) -> ItemCounts {
        let mut counts = ItemCounts::default();
        for state in states {
            let count = match state {
                ItemStateKind::Pending => &mut counts.pending,
                ItemStateKind::Owned => &mut counts.owned,
                ItemStateKind::DeadLettered => &mut counts.dead_lettered,
            };
            *count += 1;
        }
        counts
    }
}

#[cfg(test)]
mod error_text_tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("send the digest")]
    struct Outer(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("connect: {0}")]
    struct Repeats(#[source] std::io::Error);

    #[test]
    fn an_error_text_names_its_sources_once_and_is_cut_at_a_char_boundary() {
        let e = Outer(std::io::Error::other("refused"));
        assert_eq!(error_text(&e), "send the digest: refused");
        // A message that already ends with its source's does not repeat it.
        let e = Repeats(std::io::Error::other("refused"));
        assert_eq!(error_text(&e), "connect: refused");
        let long = "é".repeat(MAX_ERROR_LEN);
        let cut = cut_error_text(long);
        assert!(
            cut.len() <= MAX_ERROR_LEN && cut.ends_with('…'),
            "{}",
            cut.len()
        );
        assert_eq!(cut_error_text("short".into()), "short");
    }
}

#[cfg(test)]
mod tests {
    use super::{ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind, RequestId, Sweep};
    use crate::lease::Swept;
    use crate::types::FencingToken;

    #[test]
    fn a_sweep_sorts_items_by_where_they_went_and_its_record_counts_them() {
        let mut out = Sweep::default();
        let mut spent = ItemRecord::pending(ItemId(2), b"", 1);
        spent.claim(FencingToken(1));
        let mut fresh = ItemRecord::pending(ItemId(1), b"", 3);
        fresh.claim(FencingToken(1));
        out.add(ItemId(1), fresh.hand_back(true));
        out.add(ItemId(2), spent.hand_back(true));
        out.add(ItemId(3), ItemState::DeadLettered);
        assert_eq!(out.requeued, [ItemId(1)]);
        assert_eq!(out.dead_lettered, [ItemId(2), ItemId(3)]);
        let swept = Swept::from(&out);
        assert_eq!(
            (swept.members, swept.requeued, swept.dead_lettered),
            (0, 1, 2)
        );
    }

    #[test]
    fn a_refused_revive_and_a_fail_without_retry_change_what_they_should() {
        let mut record = ItemRecord::pending(ItemId(1), b"x", 5);
        assert!(
            record.revive().is_err(),
            "a pending item is not dead-lettered"
        );
        assert_eq!(record.state, ItemState::Pending);
        let item = record.claim(FencingToken(9));
        assert_eq!(
            (item.attempts, record.state),
            (1, ItemState::Owned(FencingToken(9)))
        );
        assert_eq!(record.hand_back(false), ItemState::DeadLettered);
        assert_eq!(record.item.attempts, 1, "giving back counts no attempt");
    }

    #[test]
    fn item_counts_count_each_state() {
        use ItemStateKind::{DeadLettered, Owned, Pending};
        let counts: ItemCounts = [Pending, Owned, Pending, DeadLettered]
            .into_iter()
            .collect();
        assert_eq!(
            (counts.pending, counts.owned, counts.dead_lettered),
            (2, 1, 1)
        );
    }

    #[test]
    fn next_ids_increase_across_threads() {
        let mut ids: Vec<RequestId> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..1000).map(|_| RequestId::next()).collect::<Vec<_>>()))
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect()
        });
        // Each thread saw its own ids strictly increase; all are distinct.
        for chunk in ids.chunks(1000) {
            assert!(chunk.windows(2).all(|w| w[0] < w[1]));
        }
        assert_eq!(ids.len(), 4000);
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 4000);
        // Later calls are greater than every earlier one.
        let later = RequestId::next();
        assert!(ids.iter().all(|id| *id < later));
        // Hex text orders as the ids do.
        assert!(ids[0].to_hex() < later.to_hex());
    }
}
