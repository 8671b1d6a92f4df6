//! The pending signal ([`ItemStore::pending`]): a handle's first `pending()` starts a
//! task that watches the namespace's pending indexes for new entries (PUTs under
//! `item/p/` and `item/pq/`: an enqueue, a job handed back to be tried again, a sweep
//! that requeued, a dead letter retried, held-back items moved once due) and its
//! timers for their ends (DELETEs under `item/q/`: etcd ended a timer's lease, so its
//! held-back items are due), whichever process wrote them, and ticks the handle's
//! watch channel on each. An idle worker then claims at once instead of at its next
//! poll.
//!
//! Both watches share one watch stream. The task starts them again after a broken or
//! cancelled stream with a bounded, jittered backoff, ticks once each time they are
//! created (entries written while no watch ran are not delivered), and stops when
//! the last clone of the handle is dropped.
//!
//! [`ItemStore::pending`]: liveness_core::ItemStore::pending

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{WatchClient, WatchFilterType, WatchOptions};
use liveness_core::sync::lock;
use liveness_core::wake::tick;
use liveness_core::Backoff;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::keys::Keys;

/// The first pause before the watches start again; it doubles up to [`RESTART_MAX`].
const RESTART_FIRST: Duration = Duration::from_millis(100);

/// The longest pause between two starts; a stream that delivered anything starts the
/// next loss's pauses again from [`RESTART_FIRST`].
const RESTART_MAX: Duration = Duration::from_secs(5);

/// The watches on the one stream: the pending indexes' PUTs, the timers' DELETEs.
const WATCHES: usize = 2;

/// A handle's pending signal, shared by its clones: the watch channel every
/// `pending()` receiver reads, and the task that feeds it, started on the first call.
pub(crate) struct PendingSignal {
    signal: Arc<watch::Sender<u64>>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl PendingSignal {
    /// A signal whose task has not started.
    pub(crate) fn new() -> PendingSignal {
        PendingSignal {
            signal: Arc::new(watch::channel(0).0),
            task: Mutex::new(None),
        }
    }

    /// A receiver of the signal; starts the watching task on `client` when it is not
    /// running (the first call, or after the runtime it ran on shut down). `None`
    /// outside a Tokio runtime: no task can watch there, and the caller polls.
    ///
    /// The receiver is taken before the task starts, so it sees the tick that follows
    /// the watches' creation however soon that comes.
    pub(crate) fn receiver(
        &self,
        client: &WatchClient,
        keys: &Keys,
    ) -> Option<watch::Receiver<u64>> {
        let rx = self.signal.subscribe();
        let mut task = lock(&self.task);
        if task.as_ref().is_none_or(JoinHandle::is_finished) {
            let runtime = tokio::runtime::Handle::try_current().ok()?;
            let watching = watch_pending(client.clone(), keys.clone(), self.signal.clone());
            *task = Some(runtime.spawn(watching));
        }
        Some(rx)
    }
}

impl Drop for PendingSignal {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }
}

/// The watching task: both watches on one stream, started again after each break.
async fn watch_pending(client: WatchClient, keys: Keys, signal: Arc<watch::Sender<u64>>) {
    let pace = || Backoff::new(RESTART_FIRST, RESTART_MAX);
    let mut backoff = pace();
    loop {
        match watch_until_broken(client.clone(), &keys, &signal).await {
            Ok(true) => backoff = pace(),
            Ok(false) => {}
            Err(e) => tracing::debug!(error = %e, "etcd pending watch broke; starting it again"),
        }
        tokio::time::sleep(backoff.next()).await;
    }
}

/// Watches the pending indexes' PUTs and the timers' DELETEs on one stream until it
/// ends; ticks `signal` once both are created and on every response with events. True when the stream
/// delivered anything.
async fn watch_until_broken(
    mut client: WatchClient,
    keys: &Keys,
    signal: &watch::Sender<u64>,
) -> Result<bool, etcd_client::Error> {
    let only =
        |dropped: WatchFilterType| Some(WatchOptions::new().with_prefix().with_filters([dropped]));
    let mut stream = client
        .watch(keys.pending_indexes(), only(WatchFilterType::NoDelete))
        .await?;
    stream
        .watch(keys.helds(), only(WatchFilterType::NoPut))
        .await?;
    let (mut created, mut delivered) = (0, false);
    while let Some(resp) = stream.message().await? {
        if resp.canceled() {
            break;
        }
        delivered = true;
        // One tick once both watches run, then one per response with events.
        created += usize::from(resp.created());
        if (resp.created() && created == WATCHES) || !resp.events().is_empty() {
            tick(signal);
        }
    }
    Ok(delivered)
}
