//! Issue 13: a batch is one transaction. `acquire_many` of many keys commits once
//! (counted by SQLite's own commit hook on the pool's only connection), not once per
//! key.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use backend_sqlite::{SqliteConfig, SqliteStore};
use liveness_conformance::fresh_namespace;
use liveness_core::{Acquire, HolderId, Key, LeaseStore, Ttl};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_many_is_one_commit_for_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = SqliteConfig::new(dir.path().join("batches.db"), fresh_namespace());
    // One connection, so that the hook set on it sees every commit of the handle.
    config.max_connections = 1;
    let store = SqliteStore::connect(config).await.unwrap();
    let commits = Arc::new(AtomicU64::new(0));
    {
        let mut conn = store.pool().acquire().await.unwrap();
        let mut handle = conn.lock_handle().await.unwrap();
        let seen = commits.clone();
        handle.set_commit_hook(move || {
            seen.fetch_add(1, Ordering::SeqCst);
            true
        });
    }
    let ttl = Ttl::from_secs(30).unwrap();
    let asks: Vec<Acquire> = (0..50)
        .map(|i| {
            Acquire::new(
                Key::member(&format!("m{i}")).unwrap(),
                HolderId::new(format!("h{i}")).unwrap(),
                ttl,
            )
        })
        .collect();
    let answers = store.acquire_many(&asks).await.unwrap();
    assert_eq!(answers.len(), asks.len());
    for (ask, answer) in asks.iter().zip(&answers) {
        let lease = answer.as_ref().unwrap();
        assert_eq!((&lease.key, &lease.holder), (&ask.key, &ask.holder));
    }
    let n = commits.load(Ordering::SeqCst);
    assert_eq!(
        n,
        1,
        "acquire_many of {} keys committed {n} times",
        asks.len()
    );
}
