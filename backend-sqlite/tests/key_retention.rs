//! Idempotency keys are kept for the URL's `key_retention_s` by the store clock, then
//! forgotten, and keyed enqueues delete the expired ones a batch at a time: the keys
//! table stays bounded by what one retention records.

use std::time::Duration;

use liveness_core::{EnqueueOptions, ItemStore, RequestId, Store};
use liveness_sqlite::SqliteStore;

mod common;

/// The rows of `liveness_enqueue_keys` the store's namespace holds.
async fn key_rows(store: &SqliteStore) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM liveness_enqueue_keys WHERE ns = ?1")
        .bind(store.namespace().as_ref())
        .fetch_one(store.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_key_is_kept_for_the_url_s_retention_then_forgotten() {
    let (_dir, path) = common::scratch("keys.db");
    let url = format!(
        "sqlite://{}?ns=key_test&synchronous=normal&key_retention_s=1",
        path.display()
    );
    let store = liveness_sqlite::connect(&url).await.unwrap();
    assert_eq!(
        store.capabilities().key_retention,
        Some(Duration::from_secs(1))
    );
    let key = RequestId::random();
    let first = store
        .enqueue(b"a", EnqueueOptions::keyed(key))
        .await
        .unwrap();
    let again = store
        .enqueue(b"a", EnqueueOptions::keyed(key))
        .await
        .unwrap();
    assert_eq!(again, first, "a repeat within the retention");
    for _ in 0..150 {
        store
            .enqueue(b"b", EnqueueOptions::keyed(RequestId::random()))
            .await
            .unwrap();
    }
    assert_eq!(key_rows(&store).await, 151);

    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let later = store
        .enqueue(b"a", EnqueueOptions::keyed(key))
        .await
        .unwrap();
    assert_ne!(later, first, "after the retention: a new item");
    assert_eq!(
        store
            .enqueue(b"a", EnqueueOptions::keyed(key))
            .await
            .unwrap(),
        later
    );
    assert_eq!(key_rows(&store).await, 52, "100 expired keys deleted");
    store
        .enqueue(b"c", EnqueueOptions::keyed(RequestId::random()))
        .await
        .unwrap();
    assert_eq!(key_rows(&store).await, 2, "the expired keys are gone");
}

/// The default retention is a day, and the capability says so.
#[tokio::test]
async fn the_default_retention_is_a_day() {
    let (_dir, path) = common::scratch("default.db");
    let store = common::open(&path, "key_test").await;
    assert_eq!(
        store.capabilities().key_retention,
        Some(liveness_core::DEFAULT_KEY_RETENTION)
    );
}
