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
use crate::error::{Error, Result};
use crate::events::{Event, EventBus};
use crate::heartbeat::{keep_alive, End, HeartbeatConfig};
use crate::lease::{Lease, LeaseInfo};
use crate::store::Store;
use crate::traced::traced;
use crate::types::{FencingToken, HolderId, Key, Name, Space, Ttl};

/// How a candidate campaigns and holds a role.
#[derive(Clone, Debug)]
pub struct ElectionConfig {
    /// The role's name: its key is `leaders/NAME`.
    pub name: Name,
    /// This candidate's id.
    pub holder: HolderId,
    /// Heartbeat timing while leading.
    pub heartbeat: HeartbeatConfig,
    /// Where events go.
    pub events: EventBus,
}

impl ElectionConfig {
    /// Defaults for candidate `holder` on role `name` with `ttl`.
    pub fn new(name: &str, holder: &str, ttl: Ttl) -> Result<Self> {
        Ok(ElectionConfig {
            name: Name::new(name)?,
            holder: HolderId::new(holder)?,
            heartbeat: HeartbeatConfig::new(ttl),
            events: EventBus::default(),
        })
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
}

impl Election {
    /// A candidate over `store`.
    pub fn new(store: Arc<dyn Store>, config: ElectionConfig) -> Self {
        let key = Key::new(Space::leaders(), config.name.clone());
        Election {
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
    pub async fn try_lead(&self) -> Result<Option<Leadership>> {
        self.config.heartbeat.validate()?;
        let sent = Instant::now();
        match self
            .store
            .acquire(&self.key, &self.config.holder, self.config.heartbeat.ttl)
            .await
        {
            Ok(lease) => Ok(Some(self.lead(lease, sent))),
            Err(Error::Held { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Campaigns until this candidate leads. While another holds the role it sleeps
    /// until that lease's store-reported expiry (a duration, on the local monotonic
    /// clock), or until the store signals a release. Retryable faults are retried;
    /// permanent ones end the campaign.
    pub async fn campaign(&self) -> Result<Leadership> {
        self.config.heartbeat.validate()?;
        let ttl = self.config.heartbeat.ttl.duration();
        let mut wake = self.store.wakeups();
        let mut backoff = Backoff::new(
            self.config.heartbeat.renew_every / 8,
            self.config.heartbeat.renew_every,
        );
        loop {
            let pause = match self.try_lead().await {
                Ok(Some(l)) => return Ok(l),
                Ok(None) => match self.store.inspect(&self.key).await {
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
                Err(e) if e.is_retryable() => backoff.next(),
                Err(e) => return Err(e),
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = crate::wake::woken(&mut wake) => {}
            }
        }
    }

    fn lead(&self, lease: Lease, sent: Instant) -> Leadership {
        let cancel = CancellationToken::new();
        let stop = CancellationToken::new();
        let events = self.config.events.clone();
        events.emit(Event::LeadershipAcquired {
            key: lease.key.clone(),
            token: lease.token,
        });
        let task = tokio::spawn({
            let store = self.store.clone();
            let (cancel, stop, lease) = (cancel.clone(), stop.clone(), lease.clone());
            let heartbeat = self.config.heartbeat;
            async move {
                let end = keep_alive(&store, lease, sent, heartbeat, &cancel, &stop, &events).await;
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
            stop,
            task: Mutex::new(Some(task)),
            events: self.config.events.clone(),
        }
    }
}

/// Held leadership of a role. Dropping it stops the heartbeat without releasing (the
/// lease then expires); [`Leadership::resign`] hands the role over at once.
#[derive(Debug)]
pub struct Leadership {
    store: Arc<dyn Store>,
    lease: Lease,
    cancel: CancellationToken,
    stop: CancellationToken,
    task: Mutex<Option<JoinHandle<Option<Lease>>>>,
    events: EventBus,
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

    /// True once the cancellation signal has fired.
    pub fn is_lost(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Gives the role up: stops the heartbeat, fires the cancellation signal and
    /// releases the lease so another candidate can lead at once.
    pub async fn resign(self) -> Result<()> {
        self.stop.cancel();
        let task = crate::sync::lock(&self.task).take();
        let latest = match task {
            Some(t) => t.await.ok().flatten(),
            None => None,
        };
        self.cancel.cancel();
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
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.stop.cancel();
        self.cancel.cancel();
    }
}
