//! Election: at most one holder of a singleton role (a dispatcher, a scheduler).
//!
//! The role is a lease on `leaders/NAME`, kept alive by the same heartbeat as a
//! member's. The [`Leadership`] handle carries the fencing token — pass it with every
//! write the leader makes elsewhere — and a cancellation signal that fires the moment
//! leadership is lost or may be: a leader that lost it must stop acting NOW.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::clock::{Clock, HostClock};
use crate::departure::Departure;
use crate::error::{Error, LostCause, Result};
use crate::events::{Event, EventBus};
use crate::heartbeat::{End, Heartbeat, HeartbeatConfig, Standing};
use crate::lease::{Lease, LeaseInfo};
use crate::metrics::{HolderMetrics, Role};
use crate::store::Store;
use crate::traced::traced;
use crate::types::{FencingToken, HolderId, Key, Name, Space, Ttl};

/// How a candidate campaigns and holds a role.
#[derive(Clone, Debug)]
#[non_exhaustive]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(
        try_from = "crate::settings::ElectionForm",
        into = "crate::settings::ElectionForm"
    )
)]
pub struct ElectionConfig {
    /// The role's name: its key is `leaders/NAME`.
    pub name: Name,
    /// This candidate's id, as operators see it. Each acquire attempt's lease carries
    /// it with a nonce drawn per campaign (and per [`Election::try_lead`]) added:
    /// `ID#` and 16 hex digits ([`HolderId::instance`]), e.g. `node-a#3f9c0e7a1b2d4c5e`.
    /// A campaign recognises only its own attempts' leases as its own, by the whole
    /// id, so two candidates (or two campaigns of one candidate) configured with one
    /// id never take the role from each other; a distinct id per candidate still
    /// makes the leader easier to tell apart.
    pub holder: HolderId,
    /// Heartbeat timing while leading.
    pub heartbeat: HeartbeatConfig,
    /// Where events go.
    pub events: EventBus,
    /// The clock of the local safety deadline and of [`Leadership::check`].
    pub clock: Arc<dyn Clock>,
}

impl ElectionConfig {
    /// Defaults for candidate `holder` on role `name` with `ttl`.
    pub fn new(name: &str, holder: &str, ttl: Ttl) -> Result<Self> {
        Ok(ElectionConfig {
            name: Name::new(name)?,
            holder: HolderId::new(holder)?,
            heartbeat: HeartbeatConfig::new(ttl),
            events: EventBus::default(),
            clock: Arc::new(HostClock::new()),
        })
    }

    /// Measures the safety deadline on this clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sends events to this bus.
    pub fn events(mut self, events: EventBus) -> Self {
        self.events = events;
        self
    }
}

/// A candidate for one role.
#[derive(Clone, Debug)]
pub struct Election {
    store: Arc<dyn Store>,
    config: ElectionConfig,
    key: Key,
    metrics: HolderMetrics,
}

impl Election {
    /// A candidate over `store`.
    pub fn new(store: Arc<dyn Store>, config: ElectionConfig) -> Self {
        let key = Key::new(Space::leaders(), config.name.clone());
        Election {
            metrics: HolderMetrics::new(&*store, Role::Leader),
            store: traced(store),
            config,
            key,
        }
    }

    /// The role's key, `leaders/NAME`.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Who leads now, by the store clock (`None` when nobody holds a live lease).
    pub async fn leader(&self) -> Result<Option<LeaseInfo>> {
        Ok(self
            .store
            .inspect(&self.key)
            .await?
            .filter(LeaseInfo::is_live))
    }

    /// One attempt: leadership if the role is free now, `None` if somebody holds it.
    /// The lease's holder is this candidate's id with a fresh nonce
    /// ([`ElectionConfig::holder`]).
    pub async fn try_lead(&self) -> Result<Option<Leadership>> {
        self.try_lead_as(&self.config.holder.instance()).await
    }

    /// One attempt under `holder`, this attempt's id.
    async fn try_lead_as(&self, holder: &HolderId) -> Result<Option<Leadership>> {
        self.config.heartbeat.validate()?;
        let sent = Instant::now();
        let sent_on_clock = self.config.clock.boot();
        match self
            .store
            .acquire(&self.key, holder, self.config.heartbeat.ttl)
            .await
        {
            Ok(lease) => Ok(Some(self.lead(lease, sent, sent_on_clock))),
            Err(Error::Held { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Campaigns until this candidate leads. While another holds the role it sleeps
    /// until that lease's store-reported expiry (a duration, on the local monotonic
    /// clock), or until the store signals a release. Retryable faults are retried;
    /// permanent ones end the campaign.
    ///
    /// Every attempt of one campaign carries the same holder id: the configured id
    /// and a nonce drawn for this campaign ([`ElectionConfig::holder`]). A lease of
    /// exactly that id, found after one of its attempts failed with a transient
    /// fault, is the ghost of that attempt (the store applied it, the reply was
    /// lost): it is released and the campaign acquires again, with a greater token.
    /// Nobody else's lease carries that id, whatever the configured ids: another
    /// process's, or another campaign's of this same candidate, is waited out.
    pub async fn campaign(&self) -> Result<Leadership> {
        self.config.heartbeat.validate()?;
        let holder = self.config.holder.instance();
        let ttl = self.config.heartbeat.ttl.duration();
        let mut wake = self.store.wakeups();
        let mut backoff = Backoff::new(
            self.config.heartbeat.renew_every / 8,
            self.config.heartbeat.renew_every,
        );
        // True once an attempt failed with a transient fault: the store may have
        // applied it and lost the reply, leaving a "ghost" lease of ours.
        let mut maybe_ghost = false;
        loop {
            let pause = match self.try_lead_as(&holder).await {
                Ok(Some(l)) => return Ok(l),
                Ok(None) => match self.store.inspect(&self.key).await {
                    Ok(Some(info)) if maybe_ghost && info.holder == holder => {
                        // Our own ghost: an earlier attempt of this campaign that the
                        // store applied. Nobody leads with it: release it and try again
                        // (a new, greater token) instead of waiting out its ttl.
                        let ghost = Lease {
                            issuer: self.store.issuer().clone(),
                            key: info.key,
                            holder: info.holder,
                            token: info.token,
                            ttl: info.ttl,
                            expires_in: Duration::ZERO,
                        };
                        match self.store.release(&ghost).await {
                            Ok(_) => {
                                maybe_ghost = false;
                                Duration::ZERO
                            }
                            Err(e) if e.is_retryable() => backoff.next(),
                            Err(e) => return Err(e),
                        }
                    }
                    Ok(Some(info)) => match info.status {
                        crate::lease::LeaseStatus::Live { remaining } => {
                            remaining.min(ttl) + Duration::from_millis(1 + fastrand::u64(0..5))
                        }
                        crate::lease::LeaseStatus::Expired => Duration::ZERO,
                    },
                    Ok(None) => Duration::ZERO,
                    Err(e) if e.is_retryable() => backoff.next(),
                    Err(e) => return Err(e),
                },
                Err(e) if e.is_retryable() => {
                    maybe_ghost = true;
                    backoff.next()
                }
                Err(e) => return Err(e),
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = crate::wake::woken(&mut wake) => {}
            }
        }
    }

    fn lead(&self, lease: Lease, sent: Instant, sent_on_clock: Duration) -> Leadership {
        let standing = Arc::new(Standing::new(
            self.config.clock.clone(),
            &lease,
            &self.config.heartbeat,
            sent_on_clock,
        ));
        let cancel = standing.cancel().clone();
        let stop = CancellationToken::new();
        let events = self.config.events.clone();
        self.metrics
            .labels()
            .counter(crate::metrics::LEADERSHIPS_TOTAL, &[])
            .increment(1);
        events.emit(Event::LeadershipAcquired {
            key: lease.key.clone(),
            token: lease.token,
        });
        let task = tokio::spawn({
            let store = self.store.clone();
            let (standing, stop, lease) = (standing.clone(), stop.clone(), lease.clone());
            let heartbeat = self.config.heartbeat;
            let metrics = self.metrics.clone();
            async move {
                let heartbeat = Heartbeat {
                    store: &store,
                    batcher: None,
                    alongside: None,
                    config: heartbeat,
                    stop: &stop,
                    events: &events,
                    metrics: &metrics,
                };
                let end = heartbeat.keep_alive(lease, sent, &standing).await;
                match end {
                    End::Lost(lease, reason) => {
                        events.emit(Event::LeadershipLost {
                            key: lease.key.clone(),
                            token: lease.token,
                            reason: Some(reason),
                        });
                        None
                    }
                    End::Stopped(lease) => Some(lease),
                }
            }
        });
        Leadership {
            store: self.store.clone(),
            lease,
            cancel,
            standing,
            stop,
            task: Mutex::new(Some(task)),
            events: self.config.events.clone(),
            margin: self.config.heartbeat.safety_margin,
            settled: false,
        }
    }
}

/// Held leadership of a role. [`Leadership::resign`] hands the role over at once.
/// Dropping it is a release too, a safer one: the cancellation fires and the heartbeat
/// stops at once, and the lease is released in the background after the safety margin
/// (the time the leader's work has to stop), so another candidate leads within the
/// margin instead of one ttl later. [`Leadership::orphan`] stops without releasing.
#[derive(Debug)]
pub struct Leadership {
    store: Arc<dyn Store>,
    lease: Lease,
    cancel: CancellationToken,
    standing: Arc<Standing>,
    stop: CancellationToken,
    task: Mutex<Option<JoinHandle<Option<Lease>>>>,
    events: EventBus,
    /// The safety margin the work has to stop, before a dropped leadership releases.
    margin: Duration,
    /// Resigned or orphaned: a drop releases nothing.
    settled: bool,
}

impl Leadership {
    /// The fencing token of this leadership: strictly greater than every earlier
    /// leader's. Writes fenced with it are refused once a newer leader wrote.
    pub fn token(&self) -> FencingToken {
        self.lease.token
    }

    /// The lease as acquired.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Fires when leadership is lost or may be (a renewal said `Lost`, or the local
    /// safety deadline passed): stop acting as leader at once.
    pub fn cancelled(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// May this leader still act? Returns its fencing token while the lease is held
    /// and its local safety deadline has not passed by the candidate's clock *right
    /// now*; otherwise [`Error::Lost`] (and the cancellation fires, if it had not yet).
    /// Cheap and synchronous: call it before every write the leader makes. It does not
    /// depend on the heartbeat task having run, so a leader woken from a freeze
    /// answers correctly before any of its tasks ran.
    pub fn check(&self) -> Result<FencingToken> {
        self.standing.check()
    }

    /// True once leadership is lost or may be: [`Leadership::check`] fails. Compares
    /// the clock with the deadline itself; it never answers `false` on a stale belief.
    pub fn is_lost(&self) -> bool {
        self.check().is_err()
    }

    /// Gives the role up: stops the heartbeat, fires the cancellation signal and
    /// releases the lease so another candidate can lead at once.
    pub async fn resign(mut self) -> Result<()> {
        self.settled = true;
        self.stop.cancel();
        let task = crate::sync::lock(&self.task).take();
        let latest = match task {
            Some(t) => t.await.ok().flatten(),
            None => None,
        };
        self.standing.stop_work(LostCause::Released);
        if let Some(lease) = latest {
            self.store.release(&lease).await?;
            self.events.emit(Event::LeadershipLost {
                key: lease.key.clone(),
                token: lease.token,
                reason: None,
            });
        }
        Ok(())
    }

    /// Stops leading without releasing, as a killed process does: the cancellation
    /// fires and the heartbeat stops at once, and the lease is left to expire by the
    /// store's clock, after which another candidate may lead. For a process that must
    /// not touch the store any more, and for tests and demonstrations of a crash.
    pub fn orphan(mut self) {
        self.settled = true;
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.stop.cancel();
        let held = self.standing.lost().is_none();
        self.standing.stop_work(LostCause::GaveUp);
        if !held || self.settled {
            return;
        }
        let event = Event::LeadershipLost {
            key: self.lease.key.clone(),
            token: self.lease.token,
            reason: None,
        };
        Departure {
            store: self.store.clone(),
            lease: self.lease.clone(),
            items: Vec::new(),
            margin: self.margin,
            announce: Some((self.events.clone(), event)),
            keep: None,
        }
        .start();
    }
}
