//! Store contents the tests start from.

use std::sync::Arc;
use std::time::Duration;

use liveness_core::{EnqueueOptions, Member, MemberConfig, Outcome, Store, Ttl};

/// Enqueues `n` items with the default options and the payloads `job 0`, `job 1`, …
///
/// # Panics
///
/// When the store refuses one: the test then fails, saying so.
pub async fn enqueue_jobs<S: Store + ?Sized>(store: &S, n: usize) {
    for i in 0..n {
        store
            .enqueue(format!("job {i}").as_bytes(), EnqueueOptions::default())
            .await
            .unwrap_or_else(|e| panic!("enqueue job {i}: {e}"));
    }
}

/// The error text [`dead_letters`] fails each item with: what a store with
/// [`Capabilities::error_text`](liveness_core::Capabilities::error_text) answers as
/// its last error.
pub const FAILER_ERROR: &str = "the failer gave it up";

/// Enqueues `n` items, the `i`th with the payload `payload(i)`, and dead-letters them
/// through a member `failer` that claims and fails each (with [`FAILER_ERROR`]), then
/// leaves. Returns their
/// ids, in the order they were enqueued.
///
/// # Panics
///
/// When a store call fails, or the member claims other than the `n` items: the test
/// then fails, saying which.
pub async fn dead_letters(
    store: &Arc<dyn Store>,
    n: usize,
    payload: impl Fn(usize) -> String,
) -> Vec<u64> {
    let fail = |what: &str, e: liveness_core::Error| -> ! { panic!("{what}: {e}") };
    let mut ids = Vec::new();
    for i in 0..n {
        let id = store
            .enqueue(payload(i).as_bytes(), EnqueueOptions::default())
            .await
            .unwrap_or_else(|e| fail("enqueue", e));
        ids.push(id.0);
    }
    let ttl = Ttl::from_secs(30).unwrap_or_else(|e| fail("ttl", e));
    let config = MemberConfig::new("failer", ttl).unwrap_or_else(|e| fail("member", e));
    let member = Member::join(store.clone(), config)
        .await
        .unwrap_or_else(|e| fail("join", e));
    let claimed = member.claim(n).await.unwrap_or_else(|e| fail("claim", e));
    assert_eq!(claimed.len(), n, "the failer claimed other than {n} items");
    for claimed in &claimed {
        member
            .fail_with_error(claimed, Outcome::DeadLetter, FAILER_ERROR)
            .await
            .unwrap_or_else(|e| fail("fail", e));
    }
    member
        .leave(Duration::ZERO)
        .await
        .unwrap_or_else(|e| fail("leave", e));
    ids
}
