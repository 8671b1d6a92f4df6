//! Observer-local expiry across handles, unknown commit results, and the cost of
//! `expired`, on the in-crate TEST DOUBLE (tokio's paused clock: no real waiting).

use std::time::Duration;

use liveness_conformance::fresh_namespace;
use liveness_core::{
    EnqueueOptions, HolderId, ItemState, ItemStore, Key, LeaseStatus, LeaseStore, LostCause,
    OperatorStore, RequestId, Space, Store, Ttl,
};
use liveness_fdb::{DoubleDatabase, FdbStore};
use tokio::time::advance;

fn holder() -> HolderId {
    HolderId::new("h").unwrap()
}

fn ttl() -> Ttl {
    Ttl::from_secs(1).unwrap()
}

/// Two handles on one fresh namespace of a fresh database: a holder and an observer.
fn two_handles() -> (FdbStore, FdbStore) {
    let db = DoubleDatabase::new();
    let ns = fresh_namespace();
    (db.store(&ns), db.store(&ns))
}

#[tokio::test(start_paused = true)]
async fn a_fresh_observer_waits_one_ttl_of_its_own() {
    let db = DoubleDatabase::new();
    let ns = fresh_namespace();
    let a = db.store(&ns);
    let key = Key::member("w1").unwrap();
    let lease = a.acquire(&key, &holder(), ttl()).await.unwrap();

    let b = db.store(&ns);
    assert!(b.expired(&Space::members(), 10).await.unwrap().is_empty());
    advance(Duration::from_millis(999)).await;
    assert!(b.expired(&Space::members(), 10).await.unwrap().is_empty());
    assert!(
        !b.reap(&key, lease.token).await.unwrap(),
        "b has not watched for a ttl"
    );

    // A third handle made much later starts from zero again.
    advance(Duration::from_secs(5)).await;
    let c = db.store(&ns);
    assert!(c.expired(&Space::members(), 10).await.unwrap().is_empty());
    assert!(matches!(
        c.inspect(&key).await.unwrap().unwrap().status,
        LeaseStatus::Live { .. }
    ));
    assert_eq!(
        c.next_expiry(&Space::members()).await.unwrap(),
        Some(ttl().duration())
    );

    // b has watched long enough: it lists and reaps, exactly once.
    let listed = b.expired(&Space::members(), 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].token, lease.token);
    assert!(b.reap(&key, lease.token).await.unwrap());
    assert!(!c.reap(&key, lease.token).await.unwrap());
    assert_eq!(
        a.renew(&lease).await.unwrap_err().lost_reason(),
        Some(LostCause::Released)
    );
}

#[tokio::test(start_paused = true)]
async fn a_renew_restarts_every_observers_count() {
    let (a, b) = two_handles();
    let key = Key::member("w2").unwrap();
    let lease = a.acquire(&key, &holder(), ttl()).await.unwrap();
    assert!(b.expired(&Space::members(), 10).await.unwrap().is_empty());
    advance(Duration::from_millis(600)).await;
    a.renew(&lease).await.unwrap();
    advance(Duration::from_millis(600)).await;
    // b saw the old stamp 1.2 s ago, but it changed: b counts the new one from when
    // it first saw it (now).
    assert!(b.expired(&Space::members(), 10).await.unwrap().is_empty());
    advance(Duration::from_millis(900)).await;
    assert!(b.expired(&Space::members(), 10).await.unwrap().is_empty());
    advance(Duration::from_millis(200)).await;
    assert_eq!(b.expired(&Space::members(), 10).await.unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_holder_expires_before_any_observer() {
    let (a, b) = two_handles();
    let key = Key::member("w3").unwrap();
    b.expired(&Space::members(), 10).await.unwrap(); // b watches from before the acquire
    let lease = a.acquire(&key, &holder(), ttl()).await.unwrap();
    advance(ttl().duration()).await;
    // The holder counts from before its commit: expired for it, never renewed.
    assert_eq!(
        a.inspect(&key).await.unwrap().unwrap().status,
        LeaseStatus::Expired
    );
    assert_eq!(
        a.renew(&lease).await.unwrap_err().lost_reason(),
        Some(LostCause::Expired)
    );
    assert_eq!(
        a.claim(&lease, 1).await.unwrap_err().lost_reason(),
        Some(LostCause::Expired)
    );
    // b read nothing between the acquire and now: it first sees the stamp now, and
    // gives the lease a whole ttl from here. Observers never expire it before the
    // holder does.
    let seen = b.inspect(&key).await.unwrap().unwrap();
    assert_eq!(
        seen.status,
        LeaseStatus::Live {
            remaining: ttl().duration()
        }
    );
    advance(Duration::from_millis(999)).await;
    assert!(!b.reap(&key, lease.token).await.unwrap());
    advance(Duration::from_millis(1)).await;
    assert!(b.reap(&key, lease.token).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn unknown_commit_results_are_recognised_on_retry() {
    let db = DoubleDatabase::new();
    let s = db.store(&fresh_namespace());
    let key = Key::member("w4").unwrap();

    db.inject_unknown_results(1);
    let lease = s.acquire(&key, &holder(), ttl()).await.unwrap();
    let info = s.inspect(&key).await.unwrap().unwrap();
    assert_eq!(
        info.token, lease.token,
        "the retry returned the lease it had committed"
    );

    for _ in 0..3 {
        s.enqueue(b"x", EnqueueOptions::default()).await.unwrap();
    }
    db.inject_unknown_results(1);
    let got = s.claim(&lease, 2).await.unwrap();
    assert_eq!(
        got.len(),
        2,
        "the retry returned what the first attempt claimed"
    );
    assert_eq!(s.item_counts().await.unwrap().owned, 2);
    assert_eq!(s.item_counts().await.unwrap().pending, 1);

    advance(ttl().duration()).await;
    db.inject_unknown_results(1);
    assert!(
        s.reap(&key, lease.token).await.unwrap(),
        "our own reap is recognised"
    );
    assert!(!s.reap(&key, lease.token).await.unwrap());

    let again = s.acquire(&key, &holder(), ttl()).await.unwrap();
    db.inject_unknown_results(1);
    assert!(
        s.release(&again).await.unwrap(),
        "our own release is recognised"
    );
    assert!(!s.release(&again).await.unwrap());
}

/// An item operation whose commit result is unknown is answered, on the retry, as the
/// applied call was: a keyed enqueue adds one item, a complete and a fail answer as
/// they did (not `Fenced`), a claim with the caller's request id repeats its answer.
#[tokio::test(start_paused = true)]
async fn unknown_commit_results_of_item_calls_answer_as_applied() {
    let db = DoubleDatabase::new();
    let s = db.store(&fresh_namespace());
    let lease = s
        .acquire(
            &Key::member("w5").unwrap(),
            &holder(),
            Ttl::from_secs(60).unwrap(),
        )
        .await
        .unwrap();
    let key = RequestId::random();
    db.inject_unknown_results(1);
    let id = s.enqueue(b"x", EnqueueOptions::keyed(key)).await.unwrap();
    assert_eq!(
        s.enqueue(b"x", EnqueueOptions::keyed(key)).await.unwrap(),
        id
    );
    s.enqueue(b"y", EnqueueOptions::default()).await.unwrap();
    assert_eq!(
        s.item_counts().await.unwrap().pending,
        2,
        "one item per key"
    );

    let request = RequestId::next();
    let got = s.claim_request(&lease, 2, request).await.unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(s.claim_request(&lease, 2, request).await.unwrap(), got);

    db.inject_unknown_results(1);
    s.complete(&lease, got[0].id)
        .await
        .expect("our own complete is recognised");
    assert_eq!(s.item(got[0].id).await.unwrap(), None);
    db.inject_unknown_results(1);
    assert_eq!(
        s.fail(&lease, got[1].id, true).await.unwrap(),
        ItemState::Pending,
        "our own fail is recognised"
    );
    assert!(matches!(
        s.complete(&lease, got[0].id).await,
        Err(liveness_core::Error::Fenced { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn expired_reads_what_is_expired_not_what_is_live() {
    let db = DoubleDatabase::new();
    let s = db.store(&fresh_namespace());
    let long = Ttl::from_secs(3600).unwrap();
    for i in 0..2000 {
        let key = Key::member(&format!("live{i}")).unwrap();
        s.acquire(&key, &holder(), long).await.unwrap();
    }
    let observer = db.store(s.namespace());
    observer.expired(&Space::members(), 100).await.unwrap();
    for i in 0..3 {
        let key = Key::member(&format!("dead{i}")).unwrap();
        s.acquire(&key, &holder(), ttl()).await.unwrap();
    }
    observer.expired(&Space::members(), 100).await.unwrap();
    advance(Duration::from_millis(1100)).await;
    let before = db.rows_read();
    let listed = observer.expired(&Space::members(), 100).await.unwrap();
    let cost = db.rows_read() - before;
    assert_eq!(listed.len(), 3);
    // One row per ttl group found (2) plus the expired rows (3): not the 2000 live.
    assert!(cost <= 10, "expired read {cost} rows");
    let before = db.rows_read();
    assert_eq!(
        observer.next_expiry(&Space::members()).await.unwrap(),
        Some(Duration::ZERO)
    );
    assert!(db.rows_read() - before <= 10);
}
