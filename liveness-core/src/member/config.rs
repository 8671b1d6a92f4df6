//! [`MemberConfig`]: how a member behaves, its defaults and their valid ranges.

use std::sync::Arc;
use std::time::Duration;

use crate::batch::Batcher;
use crate::clock::{Clock, HostClock};
use crate::error::{Error, InputProblem, Result};
use crate::events::EventBus;
use crate::heartbeat::{lease_config_setters, HeartbeatConfig};
use crate::types::{HolderId, Name, Ttl};

#[cfg(doc)]
use crate::{Claimed, Event, LostCause, Member};

/// How a member behaves.
#[derive(Clone, Debug)]
#[non_exhaustive]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(
        try_from = "crate::settings::MemberForm",
        into = "crate::settings::MemberForm"
    )
)]
pub struct MemberConfig {
    /// The member's name: its key is `members/NAME`. Two live members cannot share it.
    pub name: Name,
    /// Its holder id, as operators see it; default: the member's name. Each
    /// [`Member::join`] adds a nonce of its own to it: the lease's holder (and the
    /// [`Event::Joined`] holder) is `ID#` and 16 hex digits ([`HolderId::instance`]),
    /// e.g. `worker-1#3f9c0e7a1b2d4c5e`, the same for every generation of that
    /// member. A member recognises only leases of that whole id as its own, so two
    /// instances configured with one id (a replacement started while the old process
    /// is frozen) never act under one lease: the second is answered `Held`.
    pub holder: HolderId,
    /// Heartbeat timing: ttl, renew interval, safety margin.
    pub heartbeat: HeartbeatConfig,
    /// Whether a lost member acquires a new lease (new token) by itself; default true.
    /// While the store is unreachable it retries with jittered backoff, capped at the
    /// renew interval, so it is back within about one renew interval of the store.
    pub rejoin: bool,
    /// Where events go; default a bus of the member's own ([`Member::events`]), which
    /// allocates its buffer only when somebody subscribes. Give many members one
    /// shared bus to observe them all.
    pub events: EventBus,
    /// The clock of the local safety deadline and of every "may I still act?" check.
    pub clock: Arc<dyn Clock>,
    /// When set, renewals and acquires (join, re-join) go through this shared
    /// batcher: one `renew_many` (or `acquire_many`) round trip for those of many
    /// members due within its window, instead of one round trip each. Default none:
    /// then the batcher shared by the store handle's members
    /// ([`MemberConfig::shared_batcher`]), unless that is off. Each lease's deadline
    /// still counts from its own request's send time.
    pub batcher: Option<Batcher>,
    /// With no [`MemberConfig::batcher`] set: true (the default) to renew and acquire
    /// through the batcher that every member joined on the same store handle (the
    /// same `Arc`) shares, so that many members of one process cost the store one
    /// round trip per window, not one each, and a slow store or a starved process
    /// does not turn into a queue of single renewals; false for one round trip per
    /// renewal ([`MemberConfig::unbatched`]). A member alone on its handle is
    /// batched with nobody: its renewal waits at most the window (2 ms).
    pub shared_batcher: bool,
    /// The member's watchdog, for a job that is stuck while the process is fine: when
    /// set, it watches each job the member claimed and still holds (a [`Claimed`]
    /// neither completed, failed nor dropped). A job that makes no progress — no
    /// [`Claimed::progress`] or [`Member::progress`] since its claim — for this long
    /// is stalled: the member's work is told to stop ([`LostCause::Stalled`]; its
    /// cancellation fires and its checks answer `Lost`), given the safety margin, its
    /// items are handed back (an attempt each) and its lease released; it then
    /// re-joins under a new token if [`MemberConfig::rejoin`] says so. Fencing is by
    /// the member's token, so a stuck job costs its member that token and every job
    /// under it. Other members of the process are untouched. A completion the stuck
    /// work reports later is `Fenced`.
    ///
    /// The member's other jobs coming and going say nothing of a stuck one, and a
    /// member holding no job is idle, never stalled. A job that legitimately takes
    /// longer calls [`Claimed::progress`] while it runs ([`Member::progress`] vouches
    /// for every job the member holds). Default none: no watchdog. Between
    /// [`MIN_PROGRESS_TIMEOUT`] and [`MAX_GRACE`]. A member riding a session
    /// ([`Session::join_with`](crate::Session::join_with)) is watched by its session's
    /// task, which looks at each rider when its timeout is due, as the member's own
    /// task would.
    pub progress_timeout: Option<Duration>,
}

impl MemberConfig {
    /// Defaults for a member `name` with `ttl`: renew every ttl/3, margin ttl/5,
    /// re-join on loss.
    pub fn new(name: &str, ttl: Ttl) -> Result<Self> {
        let name = Name::new(name)?;
        // Made unique per instance by `join` (a nonce of its own).
        Ok(MemberConfig {
            holder: HolderId::new(name.as_str())?,
            name,
            heartbeat: HeartbeatConfig::new(ttl),
            rejoin: true,
            events: EventBus::default(),
            clock: Arc::new(HostClock::new()),
            batcher: None,
            shared_batcher: true,
            progress_timeout: None,
        })
    }

    lease_config_setters! {
        /// Sets the holder id ([`MemberConfig::holder`]: each join adds a nonce to it).
    }

    /// Sets whether a lost member re-joins by itself.
    pub fn rejoin(mut self, rejoin: bool) -> Self {
        self.rejoin = rejoin;
        self
    }

    /// Renews and acquires through this shared batcher ([`MemberConfig::batcher`]).
    pub fn batcher(mut self, batcher: Batcher) -> Self {
        self.batcher = Some(batcher);
        self
    }

    /// One round trip per renewal and per acquire, with no batcher shared with the
    /// other members of the store handle ([`MemberConfig::shared_batcher`]).
    pub fn unbatched(mut self) -> Self {
        self.shared_batcher = false;
        self
    }

    /// Starts a watchdog that releases the member when its work makes no progress
    /// for `timeout` ([`MemberConfig::progress_timeout`]).
    pub fn progress_timeout(mut self, timeout: Duration) -> Self {
        self.progress_timeout = Some(timeout);
        self
    }

    /// `InvalidInput` naming the field when a setting is out of range.
    pub(crate) fn validate(&self) -> Result<()> {
        self.heartbeat.validate()?;
        match self.progress_timeout {
            Some(got) if got < MIN_PROGRESS_TIMEOUT => Err(Error::invalid(
                "progress_timeout",
                InputProblem::TooShort {
                    min: MIN_PROGRESS_TIMEOUT,
                    got,
                },
            )),
            Some(got) if got > MAX_GRACE => Err(Error::invalid(
                "progress_timeout",
                InputProblem::TooLongDuration {
                    max: MAX_GRACE,
                    got,
                },
            )),
            _ => Ok(()),
        }
    }
}

/// The shortest [`MemberConfig::progress_timeout`]: 10 ms.
pub const MIN_PROGRESS_TIMEOUT: Duration = Duration::from_millis(10);

/// The longest grace [`Member::leave`] waits for: thirty years (the farthest
/// instant tokio's own timers use). A longer one is capped to it. Also the longest
/// [`MemberConfig::progress_timeout`].
pub const MAX_GRACE: Duration = Duration::from_secs(30 * 365 * 24 * 3600);
