//! The pending signal across handles (as across processes): a handle's `pending()`
//! ticks when another handle on the same cluster and namespace makes items pending
//! (an enqueue, a retry) or when a timer of held-back items ends (they are due), not
//! for another namespace; it watches again after etcd restarts, and stops when the
//! handle is dropped.

use std::time::Duration;

use liveness_conformance::fixtures::acquire_member;
use liveness_conformance::fresh_namespace;
use liveness_core::{EnqueueOptions, ItemStore, Namespace, Store, Ttl};
use liveness_etcd::{EtcdConfig, EtcdStore};
use liveness_testkit::etcd::EtcdServer;
use tokio::sync::watch;
use tokio::time::timeout;

/// Waits for a tick of `rx` since it was last read, failing after `within`.
async fn ticks_within(rx: &mut watch::Receiver<u64>, within: Duration, after: &str) {
    let ticked = timeout(within, rx.changed()).await;
    assert!(
        matches!(ticked, Ok(Ok(()))),
        "the pending signal did not tick within {within:?} after {after}"
    );
    rx.borrow_and_update();
}

/// Waits for a tick of `rx` since it was last read, failing after 2 s.
async fn ticks(rx: &mut watch::Receiver<u64>, after: &str) {
    ticks_within(rx, Duration::from_secs(2), after).await;
}

/// Checks that `rx` does not tick for 500 ms.
async fn stays_quiet(rx: &mut watch::Receiver<u64>, after: &str) {
    let ticked = timeout(Duration::from_millis(500), rx.changed()).await;
    assert!(ticked.is_err(), "the pending signal ticked after {after}");
}

async fn connect(server: &EtcdServer, namespace: Namespace) -> EtcdStore {
    let config = EtcdConfig::from_url(server.url())
        .unwrap()
        .with_namespace(namespace);
    EtcdStore::connect(config).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_handle_on_the_namespace_ticks_it_another_namespace_does_not() {
    let Some(server) = liveness_testkit::etcd::shared() else {
        return;
    };
    let ns = fresh_namespace();
    let watcher = connect(server, ns.clone()).await;
    let mut rx = watcher
        .pending()
        .expect("the etcd store has a pending signal");
    // The tick that follows the watches' creation: from here on, events arrive.
    ticks(&mut rx, "the watches' creation").await;
    stays_quiet(&mut rx, "nothing happened").await;

    let other = connect(server, fresh_namespace()).await;
    other
        .enqueue(b"elsewhere", EnqueueOptions::default())
        .await
        .unwrap();
    stays_quiet(&mut rx, "an enqueue in another namespace").await;

    let writer = connect(server, ns).await;
    let id = writer
        .enqueue(b"job", EnqueueOptions::default())
        .await
        .unwrap();
    ticks(&mut rx, "another handle's enqueue").await;

    let lease = acquire_member(&writer, "w", "w", Ttl::from_secs(60).unwrap()).await;
    assert_eq!(writer.claim(&lease, 1).await.unwrap().len(), 1);
    stays_quiet(&mut rx, "a claim").await;
    writer.fail(&lease, id, true).await.unwrap();
    ticks(&mut rx, "another handle's fail with retry").await;

    // Held back for etcd's shortest timer: no tick at the enqueue (nothing is
    // pending yet), one when the timer ends.
    let wait = writer.capabilities().min_ttl;
    let options = EnqueueOptions::default().delay(wait);
    writer.enqueue(b"later", options).await.unwrap();
    rx.borrow_and_update();
    ticks_within(&mut rx, wait * 3, "the end of a timer of held-back items").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_watches_again_after_etcd_restarts_and_stops_with_the_handle() {
    let Some(mut server) = liveness_testkit::etcd::start() else {
        return;
    };
    let ns = fresh_namespace();
    let watcher = connect(&server, ns.clone()).await;
    let mut rx = watcher.pending().unwrap();
    ticks(&mut rx, "the watches' creation").await;

    tokio::task::block_in_place(|| server.restart()).unwrap();
    server.wait_healthy(Duration::from_secs(20)).unwrap();
    // The watches start again (a tick on their creation); then events arrive again.
    ticks_within(&mut rx, Duration::from_secs(20), "etcd restarted").await;
    let writer = connect(&server, ns).await;
    writer
        .enqueue(b"job", EnqueueOptions::default())
        .await
        .unwrap();
    ticks(&mut rx, "an enqueue after the restart").await;

    drop(watcher);
    let closed = timeout(Duration::from_secs(2), rx.changed()).await;
    assert!(
        matches!(closed, Ok(Err(_))),
        "the signal's task still runs after its handle was dropped"
    );
}
