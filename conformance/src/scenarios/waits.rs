//! Wait scenarios: a claim says how long each item waited to be claimed
//! (`Item::waited`), by the store's clock, from when the item last became claimable.

use std::time::Duration;

use liveness_core::{EnqueueOptions, Outcome};

use super::common::holder;
use crate::{member_key, Ctx};

/// How long the first item waits before the second is enqueued.
const GAP: Duration = Duration::from_millis(600);

/// The slack allowed for a store clock's grain and a loaded machine.
const SLACK: Duration = Duration::from_millis(150);

/// A store that measures waits measures every claim: an item enqueued a gap before
/// another has waited that gap longer when both are claimed together (by the store's
/// clock: never less than the gap, less a clock grain), and an item handed back is
/// counted again from its hand-back, not from its enqueue. A store that does not
/// measure them answers `None` for every item.
pub async fn a_claim_says_how_long_its_item_waited(ctx: Ctx) {
    let s = &ctx.store;
    let none = EnqueueOptions::default();
    let early = s.enqueue(b"early", none).await.unwrap();
    tokio::time::sleep(GAP).await;
    let late = s.enqueue(b"late", none).await.unwrap();
    let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
    let items = s.claim(&lease, 2).await.unwrap();
    let ids: Vec<_> = items.iter().map(|i| i.id).collect();
    assert_eq!(ids, [early, late]);
    let (e, l) = match (items[0].waited, items[1].waited) {
        (None, None) => return,
        (Some(e), Some(l)) => (e, l),
        other => panic!("a store measures every claim or none: {other:?}"),
    };
    assert!(
        e >= l + GAP - SLACK,
        "enqueued {GAP:?} apart, claimed together: waited {e:?} and {l:?}"
    );
    assert!(e < GAP + Duration::from_secs(30), "waited {e:?}");

    // Handed back after the wait above: counted from the hand-back.
    tokio::time::sleep(GAP).await;
    let back = s.finish(&lease, early, Outcome::RETRY).await.unwrap();
    assert!(back.is_some(), "the item is pending again");
    let again = s.claim(&lease, 1).await.unwrap();
    assert_eq!(again.iter().map(|i| i.id).collect::<Vec<_>>(), [early]);
    let w = again[0]
        .waited
        .expect("a store that measures waits measures every claim");
    assert!(
        w < GAP,
        "claimed at once after its hand-back, over {:?} after its enqueue: waited {w:?}",
        GAP * 2
    );
}
