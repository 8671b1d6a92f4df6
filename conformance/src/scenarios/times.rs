//! Item-time scenarios: a store with `Capabilities::item_times` says, by its own
//! clock, when each item was enqueued, last claimed and last finished an attempt
//! without completing (`ItemRecord::times`); a store without answers `None`.

use liveness_core::{
    EnqueueOptions, ItemId, ItemRecord, ItemStateKind, ItemTimes, Outcome, Page, Store, StoreTime,
};

use super::common::{claim_ids, holder};
use crate::{member_key, Ctx};

/// The times the store answers for item `id`, by `item` and by the listing of its
/// state, which must agree.
async fn times(s: &dyn Store, id: ItemId) -> ItemTimes {
    let record: ItemRecord = s.item(id).await.unwrap().expect("the item is kept");
    let listed = s
        .items(record.state.kind(), Page::first(1000))
        .await
        .unwrap();
    let listed = listed.iter().find(|r| r.item.id == id).expect("listed");
    assert_eq!(listed.times, record.times, "item and items agree");
    record.times
}

/// Asserts `at` is a time of the store between `from` and `to` (its readings before
/// and after the call that set it).
fn between(at: Option<StoreTime>, from: StoreTime, to: StoreTime, what: &str) -> StoreTime {
    let at = at.unwrap_or_else(|| panic!("{what}: no time"));
    assert!(
        from <= at && at <= to,
        "{what}: {at:?} is not between {from:?} and {to:?}"
    );
    at
}

/// An item's enqueue, latest claim and latest unfinished attempt are stamped by the
/// store's clock when they happen: a failure's hand-back and a dead owner's sweep end
/// an attempt alike; a dead letter's retry leaves the times. A store without
/// `Capabilities::item_times` answers no time at all.
pub async fn an_item_says_when_it_was_enqueued_attempted_and_finished(ctx: Ctx) {
    let s = ctx.store.as_ref();
    let keeps = ctx.caps().item_times;
    let t0 = s.store_time().await.unwrap();
    let id = ctx
        .store
        .enqueue(b"job", EnqueueOptions::default().max_attempts(3))
        .await
        .unwrap();
    let t1 = s.store_time().await.unwrap();
    if !keeps {
        let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
        assert_eq!(claim_ids(&ctx.store, &lease, 1).await, [id]);
        s.finish(&lease, id, Outcome::RETRY).await.unwrap();
        assert_eq!(times(s, id).await, ItemTimes::default(), "no times kept");
        return;
    }
    let enqueued = between(times(s, id).await.enqueued, t0, t1, "enqueued");
    let fresh = times(s, id).await;
    assert_eq!(
        (fresh.attempted, fresh.finished),
        (None, None),
        "never claimed"
    );

    // A claim, then a failure handed back.
    let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let t2 = s.store_time().await.unwrap();
    assert_eq!(claim_ids(&ctx.store, &lease, 1).await, [id]);
    let t3 = s.store_time().await.unwrap();
    let claimed = times(s, id).await;
    let attempted = between(claimed.attempted, t2, t3, "attempted");
    assert!(attempted > enqueued, "claimed after its enqueue");
    assert_eq!(claimed.enqueued, Some(enqueued), "the enqueue time stays");
    assert_eq!(claimed.finished, None, "still running");
    s.finish(&lease, id, Outcome::RETRY).await.unwrap();
    let t4 = s.store_time().await.unwrap();
    let failed = times(s, id).await;
    let finished = between(failed.finished, t3, t4, "finished by a failure");
    assert_eq!(failed.attempted, Some(attempted), "the claim time stays");

    // Claimed again by a worker that dies: its sweep ends the attempt.
    let dying = ctx.grant(&member_key("d"), &holder("d"), ctx.long).await;
    assert_eq!(claim_ids(&ctx.store, &dying, 1).await, [id]);
    let again = times(s, id).await;
    assert!(again.attempted.is_some_and(|a| a >= finished), "{again:?}");
    assert!(s.release(&dying).await.unwrap());
    let t5 = s.store_time().await.unwrap();
    s.sweep(dying.token).await.unwrap();
    let t6 = s.store_time().await.unwrap();
    let swept = times(s, id).await;
    between(swept.finished, t5, t6, "finished by the sweep");

    // Out of attempts: dead-lettered, stamped; its retry keeps every time.
    assert_eq!(claim_ids(&ctx.store, &lease, 1).await, [id]);
    s.finish(&lease, id, Outcome::RETRY).await.unwrap();
    let dead = s.item(id).await.unwrap().expect("kept");
    assert_eq!(dead.state.kind(), ItemStateKind::DeadLettered);
    s.retry_dead_letter(id).await.unwrap();
    assert_eq!(times(s, id).await, dead.times, "a retry leaves the times");
    assert_eq!(dead.times.enqueued, Some(enqueued));
}
