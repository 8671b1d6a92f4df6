//! Coalesced renewals: one round trip for the renewals of many leases that one
//! process holds on one store.
//!
//! A [`Renewals`] handle is shared by every member (or leadership) of a process that
//! renews through the same store. Each heartbeat hands it a renewal and waits for that
//! lease's own answer; the handle sends every renewal handed to it within a short
//! window in one [`LeaseStore::renew_many`](crate::LeaseStore::renew_many) call.
//!
//! Safety is per lease and unchanged: each heartbeat takes its send time when it hands
//! its renewal over, which is no later than the moment the batch leaves, so the local
//! deadline it computes from it (`send time + ttl − margin`) comes no later than with
//! a renewal of its own. The window only spends a few milliseconds of the margin.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::store::Store;
use crate::traced::traced;

/// The longest a renewal waits for others to join its batch, by default.
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(2);

/// How many batches one handle keeps in flight at once.
const IN_FLIGHT: usize = 4;

struct Ask {
    lease: Lease,
    answer: oneshot::Sender<Result<Lease>>,
}

/// A shared handle that coalesces renewals into
/// [`LeaseStore::renew_many`](crate::LeaseStore::renew_many) calls. Cheap to clone:
/// clones share the batches. Give it to members with
/// [`MemberConfig::renewals`](crate::MemberConfig::renewals).
///
/// Each batch holds at most the store's [`max_batch`](crate::Capabilities::max_batch)
/// leases; at most four batches are in flight at once, so a slow store makes batches
/// larger, not more numerous. The handle's task ends when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct Renewals {
    tx: mpsc::UnboundedSender<Ask>,
}

impl Renewals {
    /// A handle renewing through `store`, gathering each batch for up to `window`
    /// after its first renewal ([`DEFAULT_WINDOW`] is a good start). Spawns its task
    /// on the current tokio runtime: call it inside one.
    pub fn new(store: Arc<dyn Store>, window: Duration) -> Renewals {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(traced(store), window, rx));
        Renewals { tx }
    }

    /// Renews `lease` in the next batch and answers what the store answered for it.
    /// Fails with [`Error::Unavailable`] when the handle's task is gone.
    pub async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let (answer, rx) = oneshot::channel();
        let ask = Ask {
            lease: lease.clone(),
            answer,
        };
        if self.tx.send(ask).is_err() {
            return Err(gone());
        }
        rx.await.unwrap_or_else(|_| Err(gone()))
    }
}

fn gone() -> Error {
    Error::unavailable("batch", "the renewal batcher stopped")
}

async fn run(store: Arc<dyn Store>, window: Duration, mut rx: mpsc::UnboundedReceiver<Ask>) {
    let max = store.capabilities().max_batch.max(1);
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut batch = Vec::with_capacity(max);
    loop {
        // Take everything queued at once (one wake-up for many renewals, not one per
        // renewal: on a busy runtime each wake-up waits its turn behind every other
        // task), then gather more until the window closes or the batch is full.
        if rx.recv_many(&mut batch, max).await == 0 {
            return;
        }
        let until = tokio::time::Instant::now() + window;
        while batch.len() < max {
            let room = max - batch.len();
            tokio::select! {
                biased;
                got = rx.recv_many(&mut batch, room) => if got == 0 { break },
                _ = tokio::time::sleep_until(until) => break,
            }
        }
        let mut batch = std::mem::replace(&mut batch, Vec::with_capacity(max));
        // Renewals whose heartbeat gave up meanwhile (deadline passed) are not sent.
        batch.retain(|a| !a.answer.is_closed());
        if batch.is_empty() {
            continue;
        }
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let store = store.clone();
        tokio::spawn(async move {
            let leases: Vec<Lease> = batch.iter().map(|a| a.lease.clone()).collect();
            match store.renew_many(&leases).await {
                Ok(answers) => {
                    let mut answers = answers.into_iter();
                    for ask in batch {
                        let answer = answers.next().unwrap_or_else(|| {
                            Err(Error::backend(
                                "batch",
                                "renew_many answered too few leases",
                            ))
                        });
                        let _ = ask.answer.send(answer);
                    }
                }
                Err(e) => {
                    // The whole call failed: every lease gets a retryable fault (each
                    // heartbeat retries with its own backoff) unless the call was
                    // refused as invalid, which renewing one lease would not be.
                    let retryable = e.is_retryable();
                    for ask in batch {
                        let lease = ask.lease.clone();
                        let answer = if retryable {
                            Err(Error::unavailable("batch", e.to_string()))
                        } else {
                            store.renew(&lease).await
                        };
                        let _ = ask.answer.send(answer);
                    }
                }
            }
            drop(slot);
        });
    }
}
