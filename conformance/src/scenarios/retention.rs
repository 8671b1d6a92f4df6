//! Dead-letter retention: a store keeps a dead letter for its
//! `Capabilities::dead_letter_retention` by its own clock, then a later
//! dead-lettering removes it; a dead letter within the retention, one retried back to
//! pending and one discarded are never what a removal touches.

use std::time::Duration;

use liveness_core::{EnqueueOptions, Error, InputProblem, ItemId, ItemState, Lease, Outcome};

use super::common::{assert_counts, claim_ids, holder};
use crate::{member_key, Ctx};

/// The longest retention the scenario waits out; a store keeping dead letters longer
/// (every store's default) is checked for keeping them only. A backend's own tests
/// run this scenario on a store opened with a retention of a second.
const WAITED_OUT: Duration = Duration::from_secs(3);

/// Claims `id`, alone pending, under `lease` and fails it for good.
async fn dead_letter(ctx: &Ctx, lease: &Lease, id: ItemId) {
    assert_eq!(claim_ids(&ctx.store, lease, 1).await, [id]);
    let state = ctx.store.finish(lease, id, Outcome::DeadLetter).await;
    assert_eq!(state.unwrap(), Some(ItemState::DeadLettered));
}

/// Claims `id`, alone pending, under a lease of its own, releases that lease and
/// sweeps its token: the dead owner's item, out of attempts, is dead-lettered.
async fn dead_letter_by_sweep(ctx: &Ctx, id: ItemId, name: &str) {
    let lease = ctx.grant(&member_key(name), &holder(name), ctx.long).await;
    assert_eq!(claim_ids(&ctx.store, &lease, 1).await, [id]);
    ctx.store.release(&lease).await.unwrap();
    let swept = ctx.store.sweep(lease.token).await.unwrap();
    assert_eq!(swept.dead_lettered, [id], "out of attempts");
}

/// The state of item `id` (`None`: gone).
async fn state(ctx: &Ctx, id: ItemId) -> Option<ItemState> {
    ctx.store.item(id).await.unwrap().map(|r| r.state)
}

/// A dead letter is kept through later dead-letterings while its retention lasts;
/// once it has passed by the store's clock, the next dead-lettering (a failure's or
/// a dead owner's sweep) removes it and its counts. A dead letter retried to pending
/// before that stays pending, one discarded stays gone, and the newest dead letter
/// stays. A store without a retention (or one longer than a test waits) keeps all.
pub async fn a_dead_letter_is_kept_for_the_retention_then_removed(ctx: Ctx) {
    if !ctx.caps().operator_views {
        return; // No retry or discard to call, no state to list.
    }
    let s = &ctx.store;
    // A store written before `cancel` answers `Unsupported`: nothing is discarded.
    let discards = match s.cancel(ItemId(1)).await {
        Err(Error::InvalidInput {
            what: "cancel",
            problem: InputProblem::Unsupported,
        }) => false,
        other => other.unwrap().is_none(),
    };
    let once = EnqueueOptions::default().max_attempts(1);
    let w = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
    let old = s.enqueue(b"old", once).await.unwrap();
    dead_letter(&ctx, &w, old).await;
    let swept = s.enqueue(b"swept", once).await.unwrap();
    dead_letter_by_sweep(&ctx, swept, "r1").await;
    let revived = s.enqueue(b"revived", once).await.unwrap();
    dead_letter(&ctx, &w, revived).await;
    let mut discarded = None;
    if discards {
        let id = s.enqueue(b"discarded", once).await.unwrap();
        dead_letter(&ctx, &w, id).await;
        let cancel = s.cancel(id).await.unwrap();
        assert_eq!(cancel, Some(ItemState::DeadLettered));
        discarded = Some(id);
    }
    s.retry_dead_letter(revived).await.unwrap();
    assert_counts(s, [1, 0, 2], "two dead letters, one retried").await;

    let retention = ctx.caps().dead_letter_retention;
    let waits = retention.filter(|r| *r <= WAITED_OUT);
    if let Some(r) = waits {
        // The store's clock and this host's may tick apart by a little.
        tokio::time::sleep(r + Duration::from_millis(500)).await;
    }
    // The retried item is pending again: claim it out of the way first, then a new
    // dead-lettering is the one that may remove the expired ones.
    assert_eq!(claim_ids(s, &w, 1).await, [revived]);
    s.complete(&w, revived).await.unwrap();
    let fresh = s.enqueue(b"fresh", once).await.unwrap();
    dead_letter(&ctx, &w, fresh).await;
    assert_eq!(state(&ctx, fresh).await, Some(ItemState::DeadLettered));
    if let Some(id) = discarded {
        assert_eq!(state(&ctx, id).await, None, "a discard stays done");
    }
    let Some(r) = waits else {
        for id in [old, swept] {
            let why = format!("{id:?} is within the retention ({retention:?})");
            assert_eq!(
                state(&ctx, id).await,
                Some(ItemState::DeadLettered),
                "{why}"
            );
        }
        assert_counts(s, [0, 0, 3], "every dead letter kept").await;
        return;
    };
    for id in [old, swept] {
        assert_eq!(state(&ctx, id).await, None, "{id:?} outlived {r:?}");
    }
    assert_counts(s, [0, 0, 1], "the expired dead letters removed").await;
    let queues = s.queue_counts().await.unwrap();
    let dead: u64 = queues.iter().map(|q| q.counts.dead_lettered).sum();
    assert_eq!(dead, 1, "the queue counts agree: {queues:?}");

    // A dead owner's sweep removes expired dead letters too.
    tokio::time::sleep(r + Duration::from_millis(500)).await;
    let last = s.enqueue(b"last", once).await.unwrap();
    dead_letter_by_sweep(&ctx, last, "r2").await;
    assert_eq!(state(&ctx, fresh).await, None, "removed by the sweep");
    assert_eq!(state(&ctx, last).await, Some(ItemState::DeadLettered));
    assert_counts(s, [0, 0, 1], "only the newest dead letter").await;
}
