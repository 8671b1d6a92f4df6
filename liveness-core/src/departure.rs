//! Dropping a handle is a release. A [`Member`](crate::Member) (of its own lease or
//! riding a session), a [`Session`](crate::Session) or a
//! [`Leadership`](crate::Leadership) dropped without its graceful exit (an early `?`
//! return, a panicking task) has its work told to stop at once, by its `Drop`; then a
//! [`Departure`] waits the stop margin in the background, hands back the items still
//! owned under the lease and releases the lease. The work comes back within the margin,
//! with no checker running, instead of one ttl later (or, for a member riding a
//! session, never while the session lives).
//!
//! The handles' `orphan` methods stop without a release, as a killed process does.

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::backoff::Backoff;
use crate::error::Result;
use crate::events::{Event, EventBus};
use crate::item::ItemId;
use crate::lease::Lease;
use crate::store::Store;

/// What a dropped handle leaves to do: after `margin`, hand `items` back and release
/// `lease`.
pub(crate) struct Departure {
    /// The store the lease is held in.
    pub(crate) store: Arc<dyn Store>,
    /// The lease to release.
    pub(crate) lease: Lease,
    /// Items still owned under the lease: handed back (to pending, or dead-lettered
    /// when out of attempts) before the release.
    pub(crate) items: Vec<ItemId>,
    /// The stop margin: how long the work has to stop before it is handed over.
    pub(crate) margin: Duration,
    /// The event to send, and where, once the lease is released (`None`: none).
    pub(crate) announce: Option<(EventBus, Event)>,
    /// Kept alive until the release answered: a riding member's session, which keeps
    /// the member's lease alive meanwhile.
    pub(crate) keep: Option<Arc<dyn Any + Send + Sync>>,
}

impl Departure {
    /// Starts the departure on the current tokio runtime. Outside one (a handle
    /// dropped by a plain thread, or while its runtime shuts down), nothing runs: the
    /// lease then expires by the store's clock and a checker requeues its items, as
    /// for a killed process.
    pub(crate) fn start(self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(self.run());
    }

    async fn run(self) {
        tokio::time::sleep(self.margin).await;
        let key = &self.lease.key;
        for id in &self.items {
            if let Err(e) = retried(|| self.store.fail(&self.lease, *id, true)).await {
                tracing::warn!(%key, item = %id, error = %e, "a dropped holder's item was not handed back: a checker requeues it");
            }
        }
        match retried(|| self.store.release(&self.lease)).await {
            Ok(true) => {
                if let Some((events, event)) = self.announce {
                    events.emit(event);
                }
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(%key, error = %e, "a dropped holder's lease was not released: it expires by its ttl")
            }
        }
        drop(self.keep);
    }
}

/// How many times a departure (or a rider join's clean-up) sends each store call that
/// failed with a retryable fault. A riding member's lease has no expiry of its own:
/// one call that did not get through would leave its name held for the life of its
/// session.
const TRIES: u32 = 8;

/// `call`, sent again with a backoff (50 ms doubling to 2 s, about 10 s in all)
/// while it fails with a retryable fault, [`TRIES`] times at most. A repeat of a call
/// the store applied is harmless: a repeated `fail` answers `Fenced`, a repeated
/// `release` `false`.
pub(crate) async fn retried<T, F>(mut call: impl FnMut() -> F) -> Result<T>
where
    F: Future<Output = Result<T>>,
{
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    let mut tries = 1;
    loop {
        match call().await {
            Err(e) if e.is_retryable() && tries < TRIES => {
                tries += 1;
                tokio::time::sleep(backoff.next()).await;
            }
            answer => return answer,
        }
    }
}

/// The [`Event::Left`] of `lease`, sent to `events`.
pub(crate) fn left(events: &EventBus, lease: &Lease) -> Option<(EventBus, Event)> {
    let event = Event::Left {
        key: lease.key.clone(),
        token: lease.token,
    };
    Some((events.clone(), event))
}
