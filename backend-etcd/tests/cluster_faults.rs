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
use liveness_conformance::{fresh_namespace, member_key};
use liveness_core::{
    Error, Event, FencingToken, HolderId, LeaseStatus, LeaseStore, Namespace, Store, Ttl,
};
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
    let ns = fresh_namespace();
    let checker = connect(cluster, ns.clone()).await;
    let mut member_stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..3 {
        member_stores.push(Arc::new(connect(cluster, ns.clone()).await));
    }
    Fleet::start(Arc::new(checker), member_stores, ttl, ITEMS, DEADLINE).await
}

/// The tokens of every `Joined` event so far, in bus order, with the member key.
fn joined(world: &Fleet) -> Vec<(String, FencingToken)> {
    world
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::Joined { key, token, .. } => Some((key.to_string(), *token)),
            _ => None,
        })
        .collect()
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
    let probe_key = member_key("probe");
    let probe = probe_store
        .acquire(&probe_key, &HolderId::new("probe").unwrap(), ttl)
        .await
        .unwrap();
    let probe_due = Instant::now() + ttl.duration();

    let before_tokens = world.tokens();
    let before = joined(&world);
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
    let until = Instant::now() + DEADLINE;
    let refused = loop {
        match probe_store.renew(&probe).await {
            Err(Error::Unavailable { .. }) if Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            other => break other,
        }
    };
    match refused {
        Err(Error::Lost { .. }) => {}
        other => panic!("an expired lease was renewed: {other:?}"),
    }

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
    tokio::time::sleep(ttl.duration()).await;
    let lost = world.lost_tokens();
    let kept = before_tokens.iter().filter(|t| !lost.contains(t)).count();

    world.wait_all_completed().await;
    let dead_letters = loop {
        match world.store().dead_letters(10).await {
            Err(Error::Unavailable { .. }) => tokio::time::sleep(Duration::from_millis(20)).await,
            other => break other.unwrap(),
        }
    };
    assert!(dead_letters.is_empty(), "dead-lettered: {dead_letters:?}");
    world.assert_lost_before_requeue();
    let all = joined(&world);
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

#[ignore = "flaky under load (issue 12): inspect's Expired comes from LeaseTimeToLive, which a resumed ex-leader can answer before it steps down, and a leader killed on a loaded 2-core machine left items unfinished after 90 s; run with --ignored"]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_killed_mid_run_no_lease_outlives_its_expiry_and_no_item_is_lost() {
    run(Fault::Kill).await;
}

#[ignore = "flaky under load (issue 12): inspect's Expired comes from LeaseTimeToLive, which a resumed ex-leader can answer before it steps down, and a leader killed on a loaded 2-core machine left items unfinished after 90 s; run with --ignored"]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_frozen_mid_run_no_lease_outlives_its_expiry_and_no_item_is_lost() {
    run(Fault::Freeze).await;
}
