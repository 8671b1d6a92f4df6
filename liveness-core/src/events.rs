//! Events of the state machines, on a broadcast channel.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::broadcast;

use crate::error::LostCause;
use crate::item::ItemId;
use crate::queue_name::QueueName;
use crate::types::{FencingToken, HolderId, Key, Space};
use crate::worker::JobEnd;

/// Why a holder stopped holding a lease, as its own heartbeat saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HolderLoss {
    /// The store answered `Lost` to a renewal.
    Store(LostCause),
    /// The local safety deadline passed without a successful renewal (the store was
    /// unreachable or slow): the holder stopped before the store could expire it.
    Deadline,
    /// The store answered a permanent error to a renewal.
    Fault,
    /// The store answered that it lost acknowledged state
    /// ([`StoreLostState`](crate::durability::StoreLostState)): it has no record of
    /// the lease and never handed out its token (a restart without persistence, a
    /// restore from an older backup, a failover to a stale replica). Not a release:
    /// items may be gone and tokens will repeat. Page somebody.
    StoreLostState,
    /// The member's work made no progress for its
    /// [`progress_timeout`](crate::MemberConfig::progress_timeout): the member's
    /// watchdog stopped the work and released the lease ([`LostCause::Stalled`]); the
    /// rest of the process is untouched.
    Stalled,
}

/// A step of a checker round (see [`Checker::round`](crate::Checker::round)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CheckStep {
    /// Listing the expired leases.
    Expired,
    /// Reaping one expired lease.
    Reap,
    /// Sweeping one dead token (its items, and a dead session's members).
    Sweep,
    /// Listing the dead set.
    DeadTokens,
    /// Reading the next expiry.
    NextExpiry,
}

/// Something a member, checker or election did or saw.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A member acquired its lease (at join, or at a re-join with a new token).
    Joined {
        /// The member's key.
        key: Key,
        /// Its holder id.
        holder: HolderId,
        /// The new token.
        token: FencingToken,
    },
    /// A renewal succeeded, but later than planned (retries, a slow store, a paused
    /// process): the lease came close to its local deadline.
    RenewedLate {
        /// The lease's key.
        key: Key,
        /// Its token.
        token: FencingToken,
        /// How long after the planned renewal time it succeeded.
        late_by: Duration,
    },
    /// A member lost its lease; its cancellation signal has fired.
    Lost {
        /// The lease's key.
        key: Key,
        /// The lost token.
        token: FencingToken,
        /// Why.
        reason: HolderLoss,
    },
    /// A checker declared a member dead (it won the reap) and requeued its items.
    Died {
        /// The member's key.
        key: Key,
        /// Who held it.
        holder: HolderId,
        /// The dead token.
        token: FencingToken,
        /// How many items went back to pending.
        requeued: usize,
        /// How many went to the dead-letter set.
        dead_lettered: usize,
    },
    /// A checker's sweep requeued items of a token already in the dead set (released
    /// with items, or reaped by a checker that stopped before requeueing).
    Swept {
        /// The dead token.
        token: FencingToken,
        /// How many items went back to pending.
        requeued: usize,
        /// How many went to the dead-letter set.
        dead_lettered: usize,
    },
    /// A member left gracefully and released its lease.
    Left {
        /// The member's key.
        key: Key,
        /// Its last token.
        token: FencingToken,
    },
    /// An election was won.
    LeadershipAcquired {
        /// The role's key.
        key: Key,
        /// The leader's token: fence writes elsewhere with it.
        token: FencingToken,
    },
    /// Leadership ended: lost, or resigned. Its cancellation signal has fired.
    LeadershipLost {
        /// The role's key.
        key: Key,
        /// The token that no longer leads.
        token: FencingToken,
        /// Why; `None` for a resignation.
        reason: Option<HolderLoss>,
    },
    /// A checker round could not handle one entry (or one listing) because the store
    /// answered an error; it skipped it and went on with the rest. The error itself is
    /// logged. A permanent one (a corrupt record) recurs every round until fixed.
    CheckSkipped {
        /// The step that failed.
        step: CheckStep,
        /// The lease's key, when the step was about one lease.
        key: Option<Key>,
        /// The token, when the step was about one token.
        token: Option<FencingToken>,
        /// Whether the error was a transient fault ([`Error::is_retryable`](crate::Error::is_retryable)).
        retryable: bool,
    },
    /// Expired leases in `space` stayed unreaped for a whole watch period (5 ttl, at
    /// least 5 s): no checker runs, or the checkers fall that far behind, and the dead
    /// members' items wait. Sent once to the bus of every member and session of the
    /// process with a lease in that space, until a look finds none left over.
    Unreaped {
        /// The space watched: `members`, or `sessions`.
        space: Space,
        /// How many of the leases the look listed were left over from the look before.
        leases: usize,
    },
    /// A job of a [`Worker`](crate::Worker) ended, as `end` says: sent on the
    /// worker's member's bus once per job claimed, after the store took (or refused)
    /// the job's answer.
    JobEnded {
        /// The worker's member.
        key: Key,
        /// The member's token the job was claimed under.
        token: FencingToken,
        /// The item.
        id: ItemId,
        /// The queue it waited in.
        queue: QueueName,
        /// How it ended.
        end: JobEnd,
    },
    /// An item ran out of attempts and went to the dead-letter set.
    ItemDeadLettered {
        /// The item.
        id: ItemId,
        /// The dead token that owned it last.
        token: FencingToken,
    },
}

/// A broadcast channel of [`Event`]s. Clones send to the same subscribers; events
/// sent while nobody listens are dropped, and a slow subscriber skips the oldest
/// (tokio's broadcast semantics).
///
/// The channel's buffer is allocated by the first [`EventBus::subscribe`], not before:
/// a bus nobody listens to costs one small allocation, so a process hosting many
/// members (each with a bus of its own by default) pays nothing for their events
/// until it observes them.
#[derive(Clone, Debug)]
pub struct EventBus {
    inner: Arc<Lazy>,
}

#[derive(Debug)]
struct Lazy {
    capacity: usize,
    tx: OnceLock<broadcast::Sender<Event>>,
}

impl Default for EventBus {
    fn default() -> Self {
        Self::new(1024)
    }
}

impl EventBus {
    /// A bus that buffers up to `capacity` events per subscriber (at least 1). Nothing
    /// is buffered, and the buffer is not allocated, until somebody subscribes.
    pub fn new(capacity: usize) -> Self {
        EventBus {
            inner: Arc::new(Lazy {
                capacity: capacity.max(1),
                tx: OnceLock::new(),
            }),
        }
    }

    /// A receiver of every event sent from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.inner
            .tx
            .get_or_init(|| broadcast::channel(self.inner.capacity).0)
            .subscribe()
    }

    /// Sends an event to every current subscriber.
    pub fn emit(&self, event: Event) {
        tracing::debug!(?event, "liveness event");
        // No subscriber is not an error: events are optional observation.
        if let Some(tx) = self.inner.tx.get() {
            let _ = tx.send(event);
        }
    }
}
