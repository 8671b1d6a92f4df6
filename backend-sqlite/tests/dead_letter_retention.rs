//! Dead letters are kept for the URL's `dead_letter_retention_s` by the store clock,
//! then removed by later dead-letterings, at most 100 each, the oldest first: the
//! conformance scenario on a store with a retention of a second, a backlog removed a
//! batch per dead-lettering, the default retention, and a reboot counting it again.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use liveness_core::{
    EnqueueOptions, HolderId, ItemId, ItemState, ItemStateKind, ItemStore, Key, Lease, LeaseStore,
    OperatorStore, Outcome, Page, Store, Ttl, DEAD_LETTER_TRIM,
};
use liveness_sqlite::SqliteStore;

mod common;

const NS: &str = "dead_test";

/// A store on `path` keeping dead letters a second.
async fn open_short(path: &Path, ns: &str) -> SqliteStore {
    let url = format!(
        "sqlite://{}?ns={ns}&synchronous=normal&dead_letter_retention_s=1",
        path.display()
    );
    liveness_sqlite::connect(&url).await.unwrap()
}

/// A lease on the member `name`, for an hour.
async fn lease(store: &SqliteStore, name: &str) -> Lease {
    let ttl = Ttl::from_secs(3600).unwrap();
    let key = Key::member(name).unwrap();
    store
        .acquire(&key, &HolderId::new(name).unwrap(), ttl)
        .await
        .unwrap()
}

/// Enqueues an item of one attempt, claims it under `lease` and fails it for good.
async fn dead_letter_one(store: &SqliteStore, lease: &Lease) -> ItemId {
    let once = EnqueueOptions::default().max_attempts(1);
    let id = store.enqueue(b"fails", once).await.unwrap();
    assert_eq!(store.claim(lease, 1).await.unwrap()[0].id, id);
    let state = store.finish(lease, id, Outcome::DeadLetter).await.unwrap();
    assert_eq!(state, Some(ItemState::DeadLettered));
    id
}

/// The rows of `liveness_items` the store's namespace holds, dead-lettered.
async fn dead_rows(store: &SqliteStore) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM liveness_items WHERE ns = ?1 AND state = 2")
        .bind(store.namespace().as_ref())
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// The ids of the namespace's dead letters, lowest first.
async fn dead_letters(store: &SqliteStore) -> Vec<ItemId> {
    let listed = store
        .items(ItemStateKind::DeadLettered, Page::first(1000))
        .await
        .unwrap();
    listed.iter().map(|r| r.item.id).collect()
}

/// The conformance scenario of dead-letter retention waits the second out: expired
/// dead letters are removed by the next dead-lettering (a failure's, then a sweep's),
/// with their counts, and nothing else is.
#[test]
fn dead_letters_outlive_a_short_retention_only_until_the_next_dead_letter() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scenario.db");
    let short = move || {
        let path = path.clone();
        async move {
            let ns = liveness_conformance::fresh_namespace();
            let store = open_short(&path, ns.as_ref()).await;
            assert_eq!(
                store.capabilities().dead_letter_retention,
                Some(Duration::from_secs(1))
            );
            Some(Arc::new(store) as Arc<dyn Store>)
        }
    };
    liveness_conformance::run(
        "a_dead_letter_is_kept_for_the_retention_then_removed",
        liveness_conformance::factory(short),
    );
}

/// 150 expired dead letters: a failure's dead-lettering removes the 100 oldest, a
/// sweep's the other 50; the counts and the listing follow, and the newest stay.
#[tokio::test]
async fn expired_dead_letters_are_removed_100_per_dead_lettering() {
    let (_dir, path) = common::scratch("trim.db");
    let store = open_short(&path, NS).await;
    let backlog = DEAD_LETTER_TRIM + 50;
    let payloads: Vec<Vec<u8>> = (0..backlog).map(|i| format!("{i}").into_bytes()).collect();
    let once = EnqueueOptions::default().max_attempts(1);
    let old = store.enqueue_many(&payloads, once).await.unwrap();
    // One owner dies holding them all: its sweep dead-letters the 150 at once.
    let dying = lease(&store, "dying").await;
    assert_eq!(store.claim(&dying, backlog).await.unwrap().len(), backlog);
    assert!(store.release(&dying).await.unwrap());
    let swept = store.sweep(dying.token).await.unwrap();
    assert_eq!(swept.dead_lettered, old);
    assert_eq!(dead_rows(&store).await, 150);

    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let w = lease(&store, "w").await;
    let first = dead_letter_one(&store, &w).await;
    let mut kept = old[DEAD_LETTER_TRIM..].to_vec();
    kept.push(first);
    assert_eq!(dead_letters(&store).await, kept, "the 100 oldest removed");
    assert_eq!(store.item_counts().await.unwrap().dead_lettered, 51);

    let orphan = store.enqueue(b"orphan", once).await.unwrap();
    let dying = lease(&store, "dying2").await;
    assert_eq!(store.claim(&dying, 1).await.unwrap()[0].id, orphan);
    assert!(store.release(&dying).await.unwrap());
    assert_eq!(
        store.sweep(dying.token).await.unwrap().dead_lettered,
        [orphan]
    );
    assert_eq!(dead_letters(&store).await, [first, orphan], "the other 50");
    let queues = store.queue_counts().await.unwrap();
    let dead: u64 = queues.iter().map(|q| q.counts.dead_lettered).sum();
    assert_eq!(dead, 2, "{queues:?}");
    assert_eq!(dead_rows(&store).await, 2);
}

/// The default retention is 30 days, and the capability says so.
#[tokio::test]
async fn the_default_retention_is_30_days() {
    let (_dir, path) = common::scratch("default.db");
    let store = common::open(&path, NS).await;
    assert_eq!(
        store.capabilities().dead_letter_retention,
        Some(liveness_core::DEFAULT_DEAD_LETTER_RETENTION)
    );
    assert_eq!(
        liveness_core::DEFAULT_DEAD_LETTER_RETENTION,
        Duration::from_secs(30 * 86_400)
    );
    let store = liveness_sqlite::connect(&format!("sqlite://{}?ns=other", path.display()))
        .await
        .unwrap();
    assert_eq!(
        store.capabilities().dead_letter_retention,
        Some(Duration::from_secs(30 * 86_400))
    );
}

/// A reboot is simulated as `tests/boot_clock.rs` does: another boot id written into
/// the file, as the last boot left it, with the dead letters' times as that boot's
/// clock left them (`dead_at`, `ahead` of this boot's clock, or behind it when
/// negative). The first open under this boot counts each one's whole retention again
/// from its own now: a dead letter whose old time lies far ahead (a long-running
/// boot) is not kept for that boot's uptime, and one whose old time lies a retention
/// behind this clock is not removed at once.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[tokio::test]
async fn a_reboot_counts_each_dead_letter_s_retention_again() {
    for ahead_s in [40 * 86_400_i64, -3_600] {
        let (_dir, path) = common::scratch("reboot.db");
        let store = open_short(&path, NS).await;
        let w = lease(&store, "w").await;
        let old = dead_letter_one(&store, &w).await;
        sqlx::query("UPDATE liveness_boot SET boot_id = 'before-the-reboot'")
            .execute(store.pool())
            .await
            .unwrap();
        sqlx::query("UPDATE liveness_items SET dead_at = dead_at + ?1 WHERE state = 2")
            .bind(ahead_s * 1000)
            .execute(store.pool())
            .await
            .unwrap();
        store.close().await;

        let store = open_short(&path, NS).await;
        let times = store.item(old).await.unwrap().unwrap().times;
        assert_eq!(times.finished, None, "item times are forgotten, as before");
        let w = lease(&store, "w2").await;
        let next = dead_letter_one(&store, &w).await;
        assert_eq!(dead_letters(&store).await, [old, next], "{ahead_s} s: kept");
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        let last = dead_letter_one(&store, &w).await;
        assert_eq!(dead_letters(&store).await, [last], "{ahead_s} s: removed");
    }
}
