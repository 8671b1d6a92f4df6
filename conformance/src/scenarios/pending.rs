//! A store's pending signal ([`ItemStore::pending`](liveness_core::ItemStore::pending)),
//! where it gives one: it ticks when an item is enqueued and when a job handed back
//! to be tried again is pending again, so an idle worker claims at once.

use std::time::Duration;

use liveness_core::{EnqueueOptions, HolderId, Key, Name, Space};
use tokio::sync::watch;
use tokio::time::timeout;

use crate::Ctx;

/// Waits for a tick of `rx` since it was last read, failing the scenario after 2 s.
async fn ticks(rx: &mut watch::Receiver<u64>, after: &str) {
    let ticked = timeout(Duration::from_secs(2), rx.changed()).await;
    assert!(
        matches!(ticked, Ok(Ok(()))),
        "the pending signal did not tick after {after}"
    );
}

/// On a store with a pending signal, an enqueue ticks it, and so does a fail that
/// sends the item back to pending. A store without one passes: its workers poll.
pub async fn the_pending_signal_ticks_when_an_item_becomes_pending(ctx: Ctx) {
    let s = &ctx.store;
    let Some(mut rx) = s.pending() else {
        return;
    };
    rx.borrow_and_update();
    let id = s.enqueue(b"x", EnqueueOptions::default()).await.unwrap();
    ticks(&mut rx, "an enqueue").await;
    let key = Key::new(Space::members(), Name::new("pending-probe").unwrap());
    let lease = ctx
        .grant(&key, &HolderId::new("p").unwrap(), ctx.long)
        .await;
    let claimed = s.claim(&lease, 1).await.unwrap();
    assert_eq!(claimed.len(), 1);
    rx.borrow_and_update();
    s.fail(&lease, id, true).await.unwrap();
    ticks(&mut rx, "a fail with retry").await;
}
