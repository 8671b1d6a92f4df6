//! Leader faults in a three-member etcd cluster that each test starts for itself, while
//! a [`Fleet`] (three members on their own handles, one checker) works 150 items
//! through a URL that names all three members.
//!
//! - **Leader killed** (SIGKILL mid-run; the two others elect a new leader; the dead
//!   member stays down until the work is done).
//! - **Leader frozen** (SIGSTOP for 3 s — a partition that keeps its connections open,
//!   so clients wait on it until their request timeout — then SIGCONT: it comes back
//!   as a follower of the new leader).
//!
//! Asserted in both:
//!
//! - no lease is renewed after its expiry: a probe lease, acquired just before the
//!   fault and never renewed, is refused (`Lost`) once the cluster reports it expired;
//! - tokens stay strictly increasing: every token handed out after the fault exceeds
//!   every token handed out before it, and each member's successive tokens increase;
//! - every member either keeps its lease or sees `Lost` before any checker hands its
//!   items on ([`Fleet::assert_lost_before_requeue`]);
//! - every item completes; none is dead-lettered.
//!
//! Measured and printed (`FIGURES ...` lines; the README's "Clusters" section has a
//! run's figures): how long until the surviving members agree on a new leader, which
//! members kept their lease, and the **detection delay** — how long after its nominal
//! expiry (acquisition + ttl) the cluster reported the probe lease expired. A new
//! leader extends every lease by its full ttl when it takes over (etcd's lessor
//! `Promote`, etcd-io/etcd#9888), so a lease whose holder died just before a leader
//! change expires about one election plus one ttl after the fault, not one ttl after
//! its last renewal: the delay is late, never early.

use std::sync::Arc;
use std::time::Duration;

use backend_etcd::{EtcdConfig, EtcdStore};
use liveness_conformance::fleet::{self, Fleet};
use liveness_conformance::fresh_namespace;
use liveness_core::{Error, FencingToken, LeaseStatus, LeaseStore, Namespace, Store, Ttl};
use liveness_testkit::etcd_cluster::EtcdCluster;
use tokio::time::Instant;

const DEADLINE: Duration = Duration::from_secs(90);
const ITEMS: usize = 150;
const PROBE_READS: usize = 30;

async fn connect(cluster: &EtcdCluster, ns: Namespace) -> EtcdStore {
    let config = EtcdConfig::from_url(&cluster.url())
        .unwrap()
        .with_namespace(ns)
        .with_timeout(Duration::from_millis(500))
        .unwrap();
    EtcdStore::connect(config).await.unwrap()
}

/// Three members, each on its own handle (as separate processes would be), and the
/// checker on another.
async fn start_fleet(cluster: &EtcdCluster, ttl: Ttl) -> Fleet {
    let ns = &fresh_namespace();
    Fleet::start_connected(
        move || async move { Arc::new(connect(cluster, ns.clone()).await) as Arc<dyn Store> },
        3,
        ttl,
        ITEMS,
        DEADLINE,
    )
    .await
}

/// Tokens stay strictly increasing across the fault: each member's successive tokens
/// increase, no token is handed out twice, and every token handed out after the fault
/// exceeds every one handed out before it.
fn assert_tokens_increase(before: &[(String, FencingToken)], all: &[(String, FencingToken)]) {
    let max_before = before.iter().map(|(_, t)| *t).max().unwrap();
    for (key, token) in &all[before.len()..] {
        assert!(
            *token > max_before,
            "{key} got token {token} after the fault, not above {max_before}"
        );
    }
    let mut seen: Vec<FencingToken> = all.iter().map(|(_, t)| *t).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(
        seen.len(),
        all.len(),
        "a token was handed out twice: {all:?}"
    );
    for (key, _) in all {
        let mine: Vec<FencingToken> = all
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, t)| *t)
            .collect();
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "{key}'s tokens do not increase: {mine:?}"
        );
    }
}

/// What the fault does to the leader, and how the cluster is made whole afterwards.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill,
    Freeze,
}

async fn run(fault: Fault) {
    let Some(mut cluster) = EtcdCluster::start() else {
        return;
    };
    let ttl = Ttl::from_secs(2).unwrap();
    let world = start_fleet(&cluster, ttl).await;
    world.wait_working(ITEMS as u64 - 20).await;
    let (leader, term) =
        tokio::task::block_in_place(|| cluster.leader(&[], Duration::from_secs(10))).unwrap();

    // The probe: a lease nobody renews, acquired just before the fault.
    let probe_store = connect(&cluster, fresh_namespace()).await;
    let (probe_key, probe, probe_due) = fleet::acquire_probe(&probe_store, ttl).await;

    let before_tokens = world.tokens();
    let before = world.joined();
    let fault_at = Instant::now();
    match fault {
        Fault::Kill => tokio::task::block_in_place(|| cluster.kill(leader)),
        Fault::Freeze => cluster.pause(leader).unwrap(),
    }
    let (new_leader, new_term) =
        tokio::task::block_in_place(|| cluster.leader(&[leader], Duration::from_secs(20))).unwrap();
    let failover = fault_at.elapsed();
    assert_ne!(new_leader, leader);
    assert!(new_term > term);
    if let Fault::Freeze = fault {
        let frozen_for = Duration::from_secs(3);
        tokio::time::sleep(frozen_for.saturating_sub(fault_at.elapsed())).await;
        cluster.resume(leader).unwrap();
    }

    // No renewal after expiry: once the cluster reports the probe expired (or already
    // reaped by nobody: the record stays until a reap), renewing it is refused.
    fleet::wait_until("the probe lease expires", DEADLINE, || async {
        matches!(
            probe_store.inspect(&probe_key).await,
            Ok(Some(info)) if info.status == LeaseStatus::Expired
        )
    })
    .await;
    let expired_at = Instant::now();
    let detection_delay = expired_at.saturating_duration_since(probe_due);
    // A request the client routes to a dead member fails with `Unavailable`: retried.
    fleet::assert_renewal_refused(&probe_store, &probe, DEADLINE).await;

    // While one member stays down, how many single reads fail: the client balances
    // over every endpoint of the URL, the dead one included (etcd-client does not set a
    // failed endpoint aside; see the README).
    let mut failed_reads = 0;
    for _ in 0..PROBE_READS {
        if let Err(Error::Unavailable { .. }) = probe_store.inspect(&probe_key).await {
            failed_reads += 1;
        }
    }

    // Which members rode through the failover on their lease: measured one ttl after
    // the new leader took over, when any member that was going to lose has lost.
    let kept = world.kept_after(&before_tokens, ttl).await;
    world.assert_all_completed_none_dead().await;
    world.assert_lost_before_requeue();
    let all = world.joined();
    assert_tokens_increase(&before, &all);
    let max_before = before.iter().map(|(_, t)| *t).max().unwrap();
    let first_after = all[before.len()..].iter().map(|(_, t)| *t).min();
    eprintln!(
        "FIGURES etcd cluster, leader {fault:?}: failover (new leader agreed) {failover:?}; \
         members kept their lease {kept}/3, lost {}; probe lease (ttl {:?}) reported expired \
         {detection_delay:?} after its nominal expiry; tokens: max before {max_before}, \
         first after {first_after:?}; items lost 0/{ITEMS}; reads failed after the fault \
         (a killed member stays down, a frozen one was resumed): {failed_reads}/{PROBE_READS}",
        3 - kept,
        ttl.duration()
    );
    world.shut_down().await;
    if let Fault::Kill = fault {
        // The killed member re-joins from its write-ahead log: the cluster is whole.
        tokio::task::block_in_place(|| cluster.restart(leader)).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_killed_mid_run_no_lease_outlives_its_expiry_and_no_item_is_lost() {
    run(Fault::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_frozen_mid_run_no_lease_outlives_its_expiry_and_no_item_is_lost() {
    run(Fault::Freeze).await;
}
