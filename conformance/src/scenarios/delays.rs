//! Delay scenarios: a scheduled item and a retry's backoff wait by the store's clock
//! (`EnqueueOptions::delay`, `Outcome::Retry { after }`, `ItemStore::next_due`), and a
//! store without `Capabilities::delays` refuses a wait rather than ignore it.

use std::time::Duration;

use liveness_core::{
    EnqueueOptions, Error, InputProblem, ItemId, ItemState, ItemStateKind, Outcome, Page, MAX_DELAY,
};

use super::common::{assert_counts, assert_invalid, claim_ids, holder};
use crate::{member_key, Ctx};

/// The wait the scenarios give: long enough that a claim sent at once surely
/// arrives before it ends, short enough for a test.
const WAIT: Duration = Duration::from_millis(1500);

/// Sleeps until the store says the first held-back item is due, and a little more
/// (the store's clock and the claim's arrival: a claim sent at the due time may
/// reach a store whose clock reads a hair earlier), until it says nothing waits any
/// more or the first is due. A store whose clock counts coarser than the wait (etcd's whole-second lease
/// countdown) answers a lower bound and is asked again; no answer is over the wait,
/// and everything is due within a few waits.
async fn until_due(ctx: &Ctx) {
    let give_up = tokio::time::Instant::now() + WAIT * 4;
    let mut left = ctx
        .store
        .next_due()
        .await
        .unwrap()
        .expect("an item is held back");
    loop {
        assert!(left <= WAIT, "due in {left:?}, held back {WAIT:?}");
        tokio::time::sleep(left + Duration::from_millis(250)).await;
        match ctx.store.next_due().await.unwrap() {
            // Nothing waits, or the first is due: a claim finds it.
            None | Some(Duration::ZERO) => return,
            Some(again) => left = again,
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "still held back {:?} after the wait of {WAIT:?}",
            WAIT * 4
        );
    }
}

/// An item enqueued with a delay is pending but not claimed before the delay has
/// passed by the store's clock, then claimed; `next_due` says how long is left, and
/// `None` once nothing waits. A store without delays refuses a delay (and a retry's
/// wait) with `InvalidInput` and adds nothing; a delay over `MAX_DELAY` is refused
/// everywhere.
pub async fn a_delayed_item_is_claimed_only_once_due(ctx: Ctx) {
    let s = &ctx.store;
    let later = EnqueueOptions::default().delay(WAIT);
    if !ctx.caps().delays {
        let r = s.enqueue(b"later", later).await;
        assert!(
            matches!(
                r,
                Err(Error::InvalidInput {
                    problem: InputProblem::Unsupported,
                    ..
                })
            ),
            "a delay on a store without delays: {r:?}"
        );
        assert_invalid(s.enqueue_many(&[b"x".to_vec()], later).await, "delay");
        assert_counts(s, [0, 0, 0], "nothing added").await;
        assert_eq!(s.next_due().await.unwrap(), None);
        let id = s.enqueue(b"now", EnqueueOptions::default()).await.unwrap();
        let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
        assert_eq!(s.claim(&lease, 1).await.unwrap()[0].id, id);
        let r = s.finish(&lease, id, Outcome::Retry { after: WAIT }).await;
        assert_invalid(r, "after");
        assert_counts(s, [0, 1, 0], "the item stays owned").await;
        return;
    }
    let over = EnqueueOptions::default().delay(MAX_DELAY + Duration::from_secs(1));
    assert_invalid(s.enqueue(b"never", over).await, "delay");
    assert_eq!(s.next_due().await.unwrap(), None, "nothing held back yet");

    let now = s.enqueue(b"now", EnqueueOptions::default()).await.unwrap();
    let one = s.enqueue(b"later", later).await.unwrap();
    let many = s
        .enqueue_many(&[b"a".to_vec(), b"b".to_vec()], later)
        .await
        .unwrap();
    let mut held: Vec<ItemId> = vec![one];
    held.extend(&many);
    for id in &held {
        let record = s.item(*id).await.unwrap().expect("the item is there");
        assert_eq!(record.state, ItemState::Pending, "held back, pending");
    }
    assert_counts(s, [4, 0, 0], "held-back items count as pending").await;
    let page = s
        .items(ItemStateKind::Pending, Page::first(10))
        .await
        .unwrap();
    let listed: Vec<ItemId> = page.iter().map(|r| r.item.id).collect();
    assert_eq!(
        listed,
        [now, held[0], held[1], held[2]],
        "listed as pending"
    );

    let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
    let first = claim_ids(s, &lease, 10).await;
    assert_eq!(first, [now], "only the item due now");
    assert!(
        s.claim(&lease, 10).await.unwrap().is_empty(),
        "nothing due yet"
    );
    let left = s.next_due().await.unwrap().expect("held back");
    assert!(!left.is_zero() && left <= WAIT, "due in {left:?}");

    until_due(&ctx).await;
    let mut due = claim_ids(s, &lease, 10).await;
    due.sort();
    assert_eq!(due, held, "every held-back item once due");
    assert_eq!(s.next_due().await.unwrap(), None, "nothing waits any more");
}

/// `finish` with `Outcome::Retry { after }` puts the item back to pending, claimed
/// again only once `after` has passed by the store's clock, with one more attempt; out
/// of attempts it is dead-lettered as without a wait. A retry without a wait (or a
/// sweep) is claimable at once.
pub async fn a_retry_waits_its_backoff_before_the_next_claim(ctx: Ctx) {
    if !ctx.caps().delays {
        return; // The refusal is checked by the scenario above.
    }
    let s = &ctx.store;
    let id = s
        .enqueue(b"flaky", EnqueueOptions::default().max_attempts(2))
        .await
        .unwrap();
    let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
    assert_eq!(s.claim(&lease, 1).await.unwrap()[0].attempts, 1);
    let state = s.finish(&lease, id, Outcome::Retry { after: WAIT }).await;
    assert_eq!(state.unwrap(), Some(ItemState::Pending));
    assert!(
        s.claim(&lease, 1).await.unwrap().is_empty(),
        "not claimed during its backoff"
    );
    assert_counts(s, [1, 0, 0], "pending while it waits").await;

    until_due(&ctx).await;
    let again = s.claim(&lease, 1).await.unwrap();
    assert_eq!(again.len(), 1, "claimed once its backoff passed");
    assert_eq!((again[0].id, again[0].attempts), (id, 2));
    let state = s.finish(&lease, id, Outcome::Retry { after: WAIT }).await;
    assert_eq!(
        state.unwrap(),
        Some(ItemState::DeadLettered),
        "out of attempts"
    );
    assert_eq!(s.next_due().await.unwrap(), None);

    let quick = s
        .enqueue(b"quick", EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(s.claim(&lease, 1).await.unwrap()[0].id, quick);
    let state = s.finish(&lease, quick, Outcome::RETRY).await.unwrap();
    assert_eq!(state, Some(ItemState::Pending));
    assert_eq!(
        s.claim(&lease, 1).await.unwrap()[0].id,
        quick,
        "no wait: at once"
    );
}
