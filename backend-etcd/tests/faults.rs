//! Fault scenarios against a real etcd member that each test starts for itself:
//! killed and restarted, or frozen (SIGSTOP) past the ttl and resumed.
//!
//! What is asserted, and why (see also the README's "Faults" section):
//!
//! - **Restart** (kill -9, ~1.5 ttl down, start again on the same data folder): etcd
//!   fsyncs every acknowledged write to its write-ahead log, so records, items, the
//!   dead set and the revision (the token source) survive. On restart the member
//!   becomes leader again and its lessor *extends every lease by its full ttl* (etcd
//!   does this on every leader change): a lease whose holder stopped renewing expires
//!   one ttl after the restart, not during the outage. Members, meanwhile, saw their
//!   local deadline pass (their renewals failed), fired their cancellation and
//!   re-join. Asserted: every member re-joins with a newer token, every item ends
//!   completed (none lost, none dead-lettered), new tokens are newer than all old
//!   ones, and no token is declared dead before its member saw `Lost`.
//! - **Pause** (SIGSTOP for ~2.5 ttl, SIGCONT): a frozen etcd answers nothing, and its
//!   lessor's countdown is frozen with it; on resume the lessor finds the leases past
//!   their expiry (its clock is monotonic wall time, which ran on) and revokes them,
//!   and a renewal of an expired lease is refused (etcd waits for the revoke). What is
//!   guaranteed, and asserted: every member whose lease expired saw `Lost` BEFORE any
//!   checker declared that token dead; every member re-joins with a newer token;
//!   every item ends completed. An `acquire` sent during the freeze may execute after
//!   the client gave up waiting: that ghost lease is held by nobody, owns no items,
//!   and expires (the test checks it moved nothing).

use std::sync::Arc;
use std::time::Duration;

use liveness_conformance::fleet::{self, Fleet};
use liveness_conformance::fresh_namespace;
use liveness_core::{Store, Ttl};
use liveness_etcd::{EtcdConfig, EtcdStore};
use liveness_testkit::etcd::EtcdServer;
use tokio::time::Instant;

const DEADLINE: Duration = Duration::from_secs(90);

async fn connect(server: &EtcdServer) -> EtcdStore {
    let config = EtcdConfig::from_url(server.url())
        .unwrap()
        .with_namespace(fresh_namespace())
        .with_timeout(Duration::from_millis(500))
        .unwrap();
    EtcdStore::connect(config).await.unwrap()
}

/// Waits, polling, until `cond` holds; panics with `what` at [`DEADLINE`].
async fn wait_until<F, Fut>(what: &str, cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    fleet::wait_until(what, DEADLINE, cond).await
}

/// `members` workers, each on its own store handle (as separate processes would be),
/// and the checker on another.
async fn start_fleet(server: &EtcdServer, ttl: Ttl, members: usize, items: usize) -> Fleet {
    let checker_store = connect(server).await;
    let ns = checker_store.namespace().clone();
    let mut member_stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..members {
        let config = EtcdConfig::from_url(server.url())
            .unwrap()
            .with_namespace(ns.clone())
            .with_timeout(Duration::from_millis(500))
            .unwrap();
        member_stores.push(Arc::new(EtcdStore::connect(config).await.unwrap()));
    }
    Fleet::start(Arc::new(checker_store), member_stores, ttl, items, DEADLINE).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restart_mid_run_members_rejoin_and_no_item_is_lost() {
    let Some(mut server) = liveness_testkit::etcd::start() else {
        return;
    };
    let ttl = Ttl::from_secs(2).unwrap();
    let world = start_fleet(&server, ttl, 3, 120).await;
    world.wait_working(100).await;
    let before = world.tokens();

    tokio::task::block_in_place(|| server.kill()).unwrap();
    // The outage: longer than the ttl, so every member's local deadline passes.
    tokio::time::sleep(ttl.duration() * 3 / 2).await;
    tokio::task::block_in_place(|| server.restart()).unwrap();

    world.wait_all_completed().await;
    // The revision survived the restart: new tokens are newer than every old one.
    world.assert_all_rejoined(&before).await;
    let dead_letters = world.store().dead_letters(10).await.unwrap();
    assert!(
        dead_letters.is_empty(),
        "items dead-lettered: {dead_letters:?}"
    );
    world.assert_lost_before_requeue();
    world.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pause_past_ttl_every_expired_member_sees_lost_first() {
    let Some(server) = liveness_testkit::etcd::start() else {
        return;
    };
    let ttl = Ttl::from_secs(2).unwrap();
    let world = start_fleet(&server, ttl, 3, 120).await;
    world.wait_working(100).await;
    let before = world.tokens();

    server.pause().unwrap();
    // Frozen past the ttl: every member's local deadline passes during the freeze.
    let frozen = Instant::now();
    wait_until("every member saw Lost during the freeze", || async {
        let lost = world.lost_tokens();
        before.iter().all(|t| lost.contains(t)) || frozen.elapsed() > ttl.duration() * 5 / 2
    })
    .await;
    let lost_while_frozen = world.lost_tokens();
    tokio::time::sleep((ttl.duration() * 5 / 2).saturating_sub(frozen.elapsed())).await;
    server.resume().unwrap();

    for t in &before {
        assert!(
            lost_while_frozen.contains(t),
            "member with token {t} did not stop while the store was frozen"
        );
    }
    world.wait_all_completed().await;
    world.assert_all_rejoined(&before).await;
    world.assert_lost_before_requeue();
    world.shut_down().await;
}

/// An etcd that lost its data (its data folder gone, or a snapshot restored
/// without `--bump-revision`) starts its revisions over: a renewal of a lease acquired
/// before fails loudly with `StoreLostState` (its token, a revision, is above every
/// revision this etcd has seen), never a plain `Lost(Released)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_after_etcd_lost_its_data_says_so() {
    let Some(mut server) = liveness_testkit::etcd::start() else {
        return;
    };
    let store = connect(&server).await;
    let ttl = Ttl::from_secs(30).unwrap();
    let holder = liveness_core::HolderId::new("h").unwrap();
    // Enough writes that the lease's token (a revision) is above what a fresh etcd
    // reaches by the time the renewal runs.
    for i in 0..20 {
        let key = liveness_core::Key::member(&format!("filler{i}")).unwrap();
        store.acquire(&key, &holder, ttl).await.unwrap();
    }
    let key = liveness_core::Key::member("w").unwrap();
    let lease = store.acquire(&key, &holder, ttl).await.unwrap();
    store.renew(&lease).await.unwrap();

    server.kill().unwrap();
    let data = server.process().unwrap().dir().join("data");
    std::fs::remove_dir_all(&data).unwrap();
    server.restart().unwrap();

    let until = Instant::now() + DEADLINE;
    let err = loop {
        match store.renew(&lease).await {
            Err(e) if e.is_retryable() && Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            other => break other.unwrap_err(),
        }
    };
    assert!(
        liveness_core::durability::StoreLostState::is_source_of(&err),
        "expected StoreLostState, got {err:?}"
    );
    assert!(!err.is_retryable());
}
