//! What the scenarios share: a holder id from a literal, and the asserts on an
//! `InvalidInput` answer and on a store's item counts.

use std::sync::Arc;

use liveness_core::{Error, HolderId, Item, ItemCounts, ItemId, Lease, Store};

/// A holder id from a literal the scenarios know is valid.
pub(crate) fn holder(s: &str) -> HolderId {
    HolderId::new(s).unwrap_or_else(|e| panic!("holder: {e}"))
}

/// Asserts that `r` is `InvalidInput` about `what`.
pub(crate) fn assert_invalid<T: std::fmt::Debug>(r: liveness_core::Result<T>, what: &str) {
    match r {
        Err(Error::InvalidInput { what: w, .. }) => assert_eq!(w, what),
        other => panic!("expected InvalidInput({what}), got {other:?}"),
    }
}

/// Asserts the store's `[pending, owned, dead_lettered]` item counts; `why` says what
/// they show.
pub(crate) async fn assert_counts(
    s: &Arc<dyn Store>,
    [pending, owned, dead_lettered]: [u64; 3],
    why: &str,
) {
    let want = ItemCounts::new(pending, owned, dead_lettered);
    assert_eq!(s.item_counts().await.unwrap(), want, "{why}");
}

/// The ids of the items a claim of up to `n` under `lease` assigns, in the order
/// answered.
pub(crate) async fn claim_ids(s: &Arc<dyn Store>, lease: &Lease, n: usize) -> Vec<ItemId> {
    let items = s.claim(lease, n).await.unwrap();
    items.iter().map(|i| i.id).collect()
}

/// `items` without their `waited` (a measurement, which a repeat of a claim may answer
/// otherwise or not at all): what a repeat must answer the same.
pub(crate) fn unmeasured(items: &[Item]) -> Vec<Item> {
    items.iter().map(|i| i.clone().with_waited(None)).collect()
}
