//! Failover of a replicated Redis Cluster (three primaries, one replica each, with the
//! recommended `appendonly yes` + `appendfsync always`) while a [`Fleet`] (three
//! members, one checker, 150 items) works in one namespace — all of whose keys live
//! on one primary, the one the fault hits.
//!
//! - **Primary killed** (SIGKILL): its replica is promoted once the others mark it
//!   failed (`cluster-node-timeout` 1 s); the client follows the new slot map.
//! - **Replica clock ahead / behind** (libfaketime shifts the replicas' wall clock
//!   by ±10 s), then a graceful `CLUSTER FAILOVER` (the replica catches up with every
//!   write before it takes over: nothing is lost): the backend stores each expiry as
//!   absolute microseconds of the primary's `TIME`, so the promoted replica judges
//!   the old primary's expiries by its own clock.
//!
//! Asserted in every run: every item completes (none lost, none dead-lettered); a
//! probe lease nobody renews is refused (`Lost`) once it is reported expired; tokens
//! handed out after the failover exceed every token before it. With the primary
//! killed, and with the replica's clock behind, also: no member's work is handed on
//! before the member saw `Lost`. With the replica's clock AHEAD that last guarantee
//! breaks today (the new primary reads every live lease as expired, and a checker
//! reaps leases whose holders still work): the run counts those early reaps and
//! prints them; the strict test asserting none is `#[ignore]`d until the backend
//! bounds the offset (see the README's "Replication and failover").
//!
//! Figures (`FIGURES ...` lines, summarised in the README): failover duration,
//! members that kept their lease, the probe's detection delay, tokens before/after.

use std::sync::Arc;
use std::time::Duration;

use backend_redis::{RedisConfig, RedisStore};
use liveness_conformance::fleet::{self, Fleet};
use liveness_conformance::{fresh_namespace, member_key};
use liveness_core::{
    Error, Event, FencingToken, HolderId, LeaseStatus, LeaseStore, Namespace, Store, Ttl,
};
use liveness_testkit::redis_failover::{FailoverCluster, FailoverOptions};
use tokio::time::Instant;

const DEADLINE: Duration = Duration::from_secs(90);
const ITEMS: usize = 150;
/// The replicas' clock offset in the clock tests, in seconds.
const OFFSET: i64 = 10;

async fn connect(cluster: &FailoverCluster, ns: Namespace) -> RedisStore {
    let config = RedisConfig::from_url(cluster.url())
        .unwrap()
        .with_namespace(ns)
        .with_response_timeout(Duration::from_millis(500))
        .unwrap();
    RedisStore::connect(config).await.unwrap()
}

/// Retries `op` while it answers `Unavailable`, up to [`DEADLINE`].
async fn retry<T, F, Fut>(mut op: F) -> liveness_core::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = liveness_core::Result<T>>,
{
    let until = Instant::now() + DEADLINE;
    loop {
        match op().await {
            Err(Error::Unavailable { .. }) if Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            other => return other,
        }
    }
}

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

/// Tokens a checker declared dead (or swept) that a member held and had not yet seen
/// as `Lost`: work handed on while its holder still acted.
fn early_reaps(world: &Fleet) -> Vec<FencingToken> {
    let events = world.events();
    let mut early = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let token = match e {
            Event::Died { token, .. } | Event::OrphansRequeued { token, .. } => *token,
            _ => continue,
        };
        let held = events
            .iter()
            .any(|e| matches!(e, Event::Joined { token: t, .. } if *t == token));
        let lost_before = events[..i]
            .iter()
            .any(|e| matches!(e, Event::Lost { token: t, .. } if *t == token));
        if held && !lost_before {
            early.push(token);
        }
    }
    early
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// SIGKILL the namespace's primary.
    KillPrimary,
    /// Replicas' clock shifted by this many seconds; graceful failover.
    ClockOffset(i64),
}

struct Figures {
    early_reaps: usize,
}

async fn run(fault: Fault) -> Option<Figures> {
    let options = FailoverOptions {
        replica_clock_offset: match fault {
            Fault::ClockOffset(s) => Some(s),
            Fault::KillPrimary => None,
        },
    };
    let mut cluster = FailoverCluster::start(options)?;
    let ttl = Ttl::from_secs(3).unwrap();
    let ns = fresh_namespace();
    let checker = connect(&cluster, ns.clone()).await;
    let mut member_stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..3 {
        member_stores.push(Arc::new(connect(&cluster, ns.clone()).await));
    }
    let world = Fleet::start(Arc::new(checker), member_stores, ttl, ITEMS, DEADLINE).await;
    world.wait_working(ITEMS as u64 - 20).await;
    let primary = tokio::task::block_in_place(|| cluster.primary_of(ns.as_str(), 0)).unwrap();
    let replica = cluster.partner(primary);

    // The probe: a lease nobody renews, in the same namespace (hence on the same
    // primary), acquired just before the fault.
    let probe_store = connect(&cluster, ns.clone()).await;
    let probe_key = member_key("probe");
    let probe = probe_store
        .acquire(&probe_key, &HolderId::new("probe").unwrap(), ttl)
        .await
        .unwrap();
    let probe_due = Instant::now() + ttl.duration();

    let before_tokens = world.tokens();
    let before = joined(&world);
    let fault_at = Instant::now();
    tokio::task::block_in_place(|| {
        match fault {
            Fault::KillPrimary => cluster.kill(primary),
            Fault::ClockOffset(_) => {
                cluster.cli(replica, &["cluster", "failover"]).unwrap();
            }
        }
        let down: &[usize] = match fault {
            Fault::KillPrimary => &[primary],
            Fault::ClockOffset(_) => &[],
        };
        cluster
            .wait_primary(replica, down, Duration::from_secs(30))
            .unwrap();
    });
    let failover = fault_at.elapsed();

    // A lease acquired after the failover: its token exceeds every token before it,
    // the probe's included.
    let (after_key, after_holder) = (member_key("after"), HolderId::new("after").unwrap());
    let fresh = retry(|| probe_store.acquire(&after_key, &after_holder, ttl))
        .await
        .unwrap();
    let max_before_fault = before_tokens
        .iter()
        .copied()
        .chain([probe.token])
        .max()
        .unwrap();
    assert!(
        fresh.token > max_before_fault,
        "token {} after the failover, not above {max_before_fault}",
        fresh.token
    );

    // The probe is refused once it is reported expired (or a checker reaped it).
    fleet::wait_until("the probe lease expires", DEADLINE, || async {
        match probe_store.inspect(&probe_key).await {
            Ok(Some(info)) => info.status == LeaseStatus::Expired,
            Ok(None) => true,
            Err(_) => false,
        }
    })
    .await;
    let detection = Instant::now().saturating_duration_since(probe_due);
    let early_probe = probe_due.saturating_duration_since(Instant::now());
    match retry(|| probe_store.renew(&probe)).await {
        Err(Error::Lost { .. }) => {}
        other => panic!("an expired lease was renewed: {other:?}"),
    }

    tokio::time::sleep(ttl.duration()).await;
    let lost = world.lost_tokens();
    let kept = before_tokens.iter().filter(|t| !lost.contains(t)).count();

    world.wait_all_completed().await;
    let dead_letters = retry(|| world.store().dead_letters(10)).await.unwrap();
    assert!(dead_letters.is_empty(), "dead-lettered: {dead_letters:?}");
    let all = joined(&world);
    let max_before = before.iter().map(|(_, t)| *t).max().unwrap();
    let after: Vec<FencingToken> = all[before.len()..].iter().map(|(_, t)| *t).collect();
    let mut distinct: Vec<FencingToken> = all.iter().map(|(_, t)| *t).collect();
    distinct.sort();
    distinct.dedup();
    let early = early_reaps(&world);
    eprintln!(
        "FIGURES redis failover, {fault:?}: failover (replica primary, cluster ok) \
         {failover:?}; members kept their lease {kept}/3, lost {}; probe lease (ttl {:?}) \
         reported expired {detection:?} after its nominal expiry ({early_probe:?} before \
         it); tokens: max before {max_before_fault}, first fresh lease after the failover {}, members' after {after:?}, handed out twice {}; \
         items lost 0/{ITEMS}; member leases reaped before their holder saw Lost: {}",
        3 - kept,
        ttl.duration(),
        fresh.token,
        all.len() - distinct.len(),
        early.len()
    );
    assert_eq!(
        distinct.len(),
        all.len(),
        "a token was handed out twice: {all:?}"
    );
    for t in &after {
        assert!(
            *t > max_before,
            "token {t} after the failover, not above {max_before}"
        );
    }
    world.shut_down().await;
    Some(Figures {
        early_reaps: early.len(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn primary_killed_mid_run_no_item_lost_and_tokens_increase() {
    let Some(figures) = run(Fault::KillPrimary).await else {
        return;
    };
    assert_eq!(
        figures.early_reaps, 0,
        "work was handed on before its holder saw Lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replica_clock_behind_failover_only_delays_expiry() {
    let Some(figures) = run(Fault::ClockOffset(-OFFSET)).await else {
        return;
    };
    assert_eq!(
        figures.early_reaps, 0,
        "work was handed on before its holder saw Lost"
    );
}

/// Measures what a replica whose clock runs ahead does today: the run asserts
/// everything but the early reaps, and prints how many there were.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replica_clock_ahead_failover_is_measured() {
    run(Fault::ClockOffset(OFFSET)).await;
}

/// The guarantee the backend must give: a failover to a server whose clock runs ahead
/// never expires a lease earlier than the old primary would have. Fails today.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "issue 12: the backend stores absolute expiries of the primary's TIME; a promoted replica whose clock runs ahead expires live leases (see the README)"]
async fn replica_clock_ahead_failover_never_expires_a_lease_early() {
    let Some(figures) = run(Fault::ClockOffset(OFFSET)).await else {
        return;
    };
    assert_eq!(
        figures.early_reaps, 0,
        "work was handed on before its holder saw Lost"
    );
}
