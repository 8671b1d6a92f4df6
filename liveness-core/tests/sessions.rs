//! Sessions on the memory model: a dead session's riders are retired a batch of at
//! most `max_batch` at a time, each exactly once, whatever the session's size.

use std::sync::Arc;

use liveness_core::{
    Capabilities, Checker, CheckerConfig, HolderId, Key, Lease, MemoryServer, Name, Space, Store,
    Ttl,
};

mod common;
use common::ns;

/// A memory store with native sessions and batches of at most 2, and the session
/// `sessions/p` (holder `p`, ttl 500 ms) opened on it.
async fn session_of_two_per_batch() -> (Arc<dyn Store>, HolderId, Lease) {
    let caps = Capabilities::default().max_batch(2).sessions(true);
    let store: Arc<dyn Store> = Arc::new(MemoryServer::new().with_capabilities(caps).store(&ns()));
    let holder = HolderId::new("p").unwrap();
    let ttl = Ttl::from_millis(500).unwrap();
    let key = Key::new(Space::sessions(), Name::new("p").unwrap());
    let session = store.acquire(&key, &holder, ttl).await.unwrap();
    (store, holder, session)
}

#[tokio::test(start_paused = true)]
async fn a_dead_session_is_drained_a_batch_at_a_time() {
    let (store, holder, session) = session_of_two_per_batch().await;
    let mut riders = Vec::new();
    for i in 0..5 {
        let member = Key::member(&format!("m{i}")).unwrap();
        riders.push(
            store
                .join_session(&session, &member, &holder)
                .await
                .unwrap()
                .token,
        );
    }
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(store.reap(&session.key, session.token).await.unwrap());
    let mut sizes = Vec::new();
    let mut retired = Vec::new();
    loop {
        let moved = store.sweep(session.token).await.unwrap();
        sizes.push(moved.members.len());
        retired.extend(moved.members.into_iter().map(|m| m.token));
        let dead = store.dead_tokens(100).await.unwrap();
        if !dead.iter().any(|d| d.token == session.token) {
            break;
        }
    }
    assert_eq!(sizes, [2, 2, 1], "batches of at most max_batch");
    retired.sort();
    assert_eq!(retired, riders, "each rider exactly once");
}

/// A checker with the default configuration watches the sessions too: a session that
/// stops renewing is declared dead, then each member riding it, each exactly once,
/// with its item requeued; switched off, the session is never reaped.
#[tokio::test(start_paused = true)]
async fn a_default_checker_declares_a_dead_session_and_its_members() {
    let (store, holder, session) = session_of_two_per_batch().await;
    let mut want = vec![session.token];
    for i in 0..5 {
        let member = Key::member(&format!("m{i}")).unwrap();
        let member = store
            .join_session(&session, &member, &holder)
            .await
            .unwrap();
        store
            .enqueue(b"job", liveness_core::EnqueueOptions::default())
            .await
            .unwrap();
        assert_eq!(store.claim(&member, 1).await.unwrap().len(), 1);
        want.push(member.token);
    }
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;

    let off = Checker::new(store.clone(), CheckerConfig::default().sessions(false));
    let report = off.round().await.unwrap();
    assert!(report.deaths.is_empty(), "sessions unwatched: {report:?}");

    let checker = Checker::new(store.clone(), CheckerConfig::default());
    let mut died = Vec::new();
    for _ in 0..10 {
        let report = checker.round().await.unwrap();
        died.extend(report.deaths.iter().map(|d| d.lease.token));
        if !report.more && store.item_counts().await.unwrap().pending == 5 {
            break;
        }
    }
    died.sort();
    want.sort();
    assert_eq!(died, want, "the session and each member, once each");
    assert_eq!(
        store.item_counts().await.unwrap().owned,
        0,
        "every item back"
    );
}
