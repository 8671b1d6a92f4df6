//! Error-text scenarios: a failure's text is kept on its item
//! (`ItemStore::finish_with_error`, `ItemRecord::last_error`) where the store keeps
//! it (`Capabilities::error_text`), and never anywhere else.

use liveness_core::{
    EnqueueOptions, Error, ItemId, ItemRecord, ItemState, ItemStateKind, Outcome, Page, Store,
    MAX_ERROR_LEN,
};

use super::common::{assert_counts, assert_invalid, claim_ids, holder};
use crate::{member_key, Ctx};

/// The last error the store answers for item `id`, by `item` and by the listing of
/// its state, which must agree.
async fn last_error(s: &dyn Store, id: ItemId) -> Option<String> {
    let record: ItemRecord = s.item(id).await.unwrap().expect("the item is kept");
    let kind = match record.state {
        ItemState::Pending => ItemStateKind::Pending,
        ItemState::Owned(_) => ItemStateKind::Owned,
        ItemState::DeadLettered => ItemStateKind::DeadLettered,
    };
    let listed = s.items(kind, Page::first(1000)).await.unwrap();
    let listed = listed.iter().find(|r| r.item.id == id).expect("listed");
    assert_eq!(listed.last_error, record.last_error, "item and items agree");
    record.last_error
}

/// A failure's error text stays on its item, through a retry and into the
/// dead-letter set, as given (any character, up to `MAX_ERROR_LEN` bytes); a failure
/// without text, a refused (fenced) call and a dead letter's retry leave it as it
/// was; a longer text is `InvalidInput` and moves nothing. A store without
/// `Capabilities::error_text` moves the item alike and answers no text.
pub async fn a_failure_s_error_text_stays_on_its_item(ctx: Ctx) {
    let s = ctx.store.as_ref();
    let keeps = ctx.caps().error_text;
    let kept = |text: &str| keeps.then(|| text.to_owned());
    let id = ctx
        .store
        .enqueue(b"job", EnqueueOptions::default().max_attempts(3))
        .await
        .unwrap();
    let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
    let other = ctx.grant(&member_key("o"), &holder("o"), ctx.long).await;
    assert_eq!(last_error(s, id).await, None, "a new item has no error");

    // Quotes, a newline, a backslash and characters beyond ASCII: kept as given.
    let first = "timeout: \"upstream\" said 503\nretry later \\ ünï ✓";
    assert_eq!(claim_ids(&ctx.store, &lease, 1).await, [id]);
    let r = s.finish_with_error(&lease, id, Outcome::RETRY, first).await;
    assert_eq!(r.unwrap(), Some(ItemState::Pending));
    assert_eq!(last_error(s, id).await, kept(first), "after a retry");

    // Refused: another token's call, and a text over the limit.
    assert_eq!(claim_ids(&ctx.store, &lease, 1).await, [id]);
    let r = s
        .finish_with_error(&other, id, Outcome::RETRY, "not mine")
        .await;
    assert!(matches!(r, Err(Error::Fenced { .. })), "{r:?}");
    let over = "e".repeat(MAX_ERROR_LEN + 1);
    assert_invalid(
        s.finish_with_error(&lease, id, Outcome::DeadLetter, &over)
            .await,
        "error",
    );
    assert_counts(&ctx.store, [0, 1, 0], "the item stays owned").await;
    assert_eq!(last_error(s, id).await, kept(first), "after refused calls");

    // A failure without text leaves it.
    assert_eq!(
        s.finish(&lease, id, Outcome::RETRY).await.unwrap(),
        Some(ItemState::Pending)
    );
    assert_eq!(
        last_error(s, id).await,
        kept(first),
        "after a failure without text"
    );

    // The third attempt runs out: dead-lettered with its own text, the longest taken.
    let last = format!("{}✓", "x".repeat(MAX_ERROR_LEN - '✓'.len_utf8()));
    assert_eq!(last.len(), MAX_ERROR_LEN);
    assert_eq!(claim_ids(&ctx.store, &lease, 1).await, [id]);
    let r = s.finish_with_error(&lease, id, Outcome::RETRY, &last).await;
    assert_eq!(r.unwrap(), Some(ItemState::DeadLettered));
    assert_eq!(last_error(s, id).await, kept(&last), "on the dead letter");

    // Retried by an operator: pending again, the text kept until a new failure.
    s.retry_dead_letter(id).await.unwrap();
    assert_eq!(
        last_error(s, id).await,
        kept(&last),
        "after a dead letter's retry"
    );
    assert_eq!(claim_ids(&ctx.store, &lease, 1).await, [id]);
    let r = s
        .finish_with_error(&lease, id, Outcome::DeadLetter, "for good")
        .await;
    assert_eq!(r.unwrap(), Some(ItemState::DeadLettered));
    assert_eq!(last_error(s, id).await, kept("for good"), "replaced");

    // A completed item goes with its text.
    s.retry_dead_letter(id).await.unwrap();
    assert_eq!(claim_ids(&ctx.store, &lease, 1).await, [id]);
    let r = s
        .finish_with_error(&lease, id, Outcome::Completed, "ignored")
        .await;
    assert_eq!(r.unwrap(), None);
    assert_eq!(s.item(id).await.unwrap(), None);
    assert_counts(&ctx.store, [0, 0, 0], "completed").await;
}
