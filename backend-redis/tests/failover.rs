//! Failover of a replicated Redis Cluster (three primaries, one replica each, with the
//! recommended `appendonly yes` + `appendfsync always`) while a [`Fleet`] (three
//! members, one checker, 150 items) works in one namespace — all of whose keys live
//! on one primary, the one the fault hits.
//!
//! - **Primary killed** (SIGKILL): its replica is promoted once the others mark it
//!   failed (`cluster-node-timeout` 1 s); the client follows the new slot map; the
//!   killed node is restarted and re-joins as the new primary's replica.
//!
//! Every store connects with `wait=1`: an acquire answers only once the replica has
//! it, so no token a caller holds can be handed out again by the promoted replica.
//! - **Replica clock ahead / behind** (libfaketime shifts the replicas' wall clock
//!   by ±10 s), then a graceful `CLUSTER FAILOVER` (the replica catches up with every
//!   write before it takes over: nothing is lost): the backend stores each expiry as
//!   absolute microseconds of the primary's `TIME`, so the promoted replica judges
//!   the old primary's expiries by its own clock.
//!
//! Asserted in every run: every item completes (none lost, none dead-lettered); a
//! probe lease nobody renews is refused (`Lost`) once it is reported expired; tokens
//! handed out after the failover exceed every token before it; no member's work is
//! handed on before the member saw `Lost` — with the replica's clock AHEAD too: the
//! first time the promoted replica judges an expiry it opens a new expiry epoch, and
//! a lease written under the old primary's clock expires no earlier than one full ttl
//! after that (see the README's "Durability and failover").
//!
//! Figures (`FIGURES ...` lines, recorded in `docs/measurements/redis.md`): failover
//! duration, members that kept their lease, the probe's detection delay, the tokens
//! before and after.

use std::sync::Arc;
use std::time::Duration;

use liveness_conformance::fleet::{self, Fleet};
use liveness_conformance::fresh_namespace;
use liveness_core::{Acquire, Error, HolderId, Key, LeaseStore, Namespace, Store, Ttl};
use liveness_redis::{RedisConfig, RedisStore};
use liveness_testkit::durability::refused_setting;
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
        .unwrap()
        // Replicated: each acquire answers once the replica has it (without it a
        // strict connect is refused).
        .with_wait(1)
        .unwrap();
    RedisStore::connect(config).await.unwrap()
}

/// Waits until `INFO replication` on node `node` says `says`, failing with `never`
/// after 30 s.
fn wait_replication(cluster: &FailoverCluster, node: usize, says: &str, never: &str) {
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while !cluster
        .cli(node, &["info", "replication"])
        .is_ok_and(|s| s.contains(says))
    {
        assert!(std::time::Instant::now() < until, "{never}");
        std::thread::sleep(Duration::from_millis(50));
    }
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
    let (on, in_ns) = (&cluster, &ns);
    let world = Fleet::start_connected(
        move || async move { Arc::new(connect(on, in_ns.clone()).await) as Arc<dyn Store> },
        3,
        ttl,
        ITEMS,
        DEADLINE,
    )
    .await;
    world.wait_working(ITEMS as u64 - 20).await;
    let primary = tokio::task::block_in_place(|| cluster.primary_of(ns.as_str(), 0)).unwrap();
    let replica = cluster.partner(primary);

    // The probe: a lease nobody renews, in the same namespace (hence on the same
    // primary), acquired just before the fault.
    let probe_store = connect(&cluster, ns.clone()).await;
    let (probe_key, probe, probe_due) = fleet::acquire_probe(&probe_store, ttl).await;

    let before_tokens = world.tokens();
    let before = world.joined();
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
        // The killed primary comes back as the new primary's replica: until it has
        // synced, acquires (`wait=1`) answer Unavailable and members retry (a retry
        // of an acquire that was applied answers `Held` naming its own holder, the
        // contract's ghost, which members adopt; the fresh-token probe below does
        // not, so it starts once the replica is in sync).
        if fault == Fault::KillPrimary {
            cluster.restart(primary).unwrap();
            wait_replication(
                &cluster,
                primary,
                "master_link_status:up",
                "the restarted node never synced with the new primary",
            );
        }
    });
    let failover = fault_at.elapsed();

    // A lease acquired after the failover: its token exceeds every token before it,
    // the probe's included.
    let (fresh, max_before_fault) =
        fleet::assert_fresh_token_above(&probe_store, &before_tokens, &probe, ttl, DEADLINE).await;

    // The probe is refused once it is reported expired (or a checker reaped it).
    fleet::wait_expired_or_gone(&probe_store, &probe_key, DEADLINE).await;
    let detection = Instant::now().saturating_duration_since(probe_due);
    let early_probe = probe_due.saturating_duration_since(Instant::now());
    fleet::assert_renewal_refused(&probe_store, &probe, DEADLINE).await;

    let kept = world.kept_after(&before_tokens, ttl).await;
    world.assert_all_completed_none_dead().await;
    let tokens = world.tokens_since(&before);
    let (all, after) = (&tokens.all, &tokens.after);
    let max_before = tokens.max_before.unwrap();
    let early = world.early_reaps();
    eprintln!(
        "FIGURES redis failover, {fault:?}: failover (replica primary, cluster ok) \
         {failover:?}; members kept their lease {kept}/3, lost {}; probe lease (ttl {:?}) \
         reported expired {detection:?} after its nominal expiry ({early_probe:?} before \
         it); tokens: max before {max_before_fault}, first fresh lease after the failover {}, members' after {after:?}, handed out twice {}; \
         items lost 0/{ITEMS}; member leases reaped before their holder saw Lost: {}",
        3 - kept,
        ttl.duration(),
        fresh.token,
        tokens.twice,
        early.len()
    );
    assert_eq!(tokens.twice, 0, "a token was handed out twice: {all:?}");
    for t in after {
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

/// Replication is asynchronous: without `wait=N` a failover can hand a token out
/// twice, so a strict connect to a primary with a replica is refused naming the risk
/// and the fix; with `wait=1` an acquire answers only once the replica has its
/// writes, and fails with `Unavailable` while the replica does not acknowledge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_need_wait_and_wait_answers_only_acknowledged_tokens() {
    let Some(cluster) = FailoverCluster::start(FailoverOptions::default()) else {
        return;
    };
    let ns = fresh_namespace();
    let url = |more: &str| format!("{}&ns={ns}{more}", cluster.url());
    let err = liveness_redis::connect(&url("")).await.unwrap_err();
    assert_eq!(refused_setting(&err), "replication");
    let text = err.to_string();
    assert!(text.contains("wait=N"), "no fix named: {text}");
    assert!(text.contains("handed out twice"), "no risk named: {text}");
    liveness_redis::connect(&url("&durability=relaxed"))
        .await
        .unwrap();

    let store = liveness_redis::connect(&url("&wait=1&timeout_ms=1000"))
        .await
        .unwrap();
    let holder = HolderId::new("h").unwrap();
    let ttl = Ttl::from_secs(30).unwrap();
    store
        .acquire(&Key::member("a").unwrap(), &holder, ttl)
        .await
        .unwrap();
    let primary = tokio::task::block_in_place(|| cluster.primary_of(ns.as_str(), 0)).unwrap();
    let replica = &cluster.nodes()[cluster.partner(primary)];
    replica.pause().unwrap();
    let answer = store
        .acquire(&Key::member("b").unwrap(), &holder, ttl)
        .await;
    let many = store
        .acquire_many(&[Acquire::new(Key::member("c").unwrap(), holder.clone(), ttl)])
        .await;
    replica.resume().unwrap();
    match answer {
        Err(Error::Unavailable { .. }) => {}
        other => panic!("acquire unacknowledged by the replica answered {other:?}"),
    }
    match many {
        Err(Error::Unavailable { .. }) => {}
        other => panic!("acquire_many unacknowledged by the replica answered {other:?}"),
    }
    // Acknowledged again once the replica runs.
    store
        .acquire(&Key::member("d").unwrap(), &holder, ttl)
        .await
        .unwrap();
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

/// A failover to a server whose clock runs ahead never expires a lease earlier than
/// the old primary would have (without the expiry epochs, the promoted replica would
/// read every live lease as expired and a checker would reap all three members while
/// they worked).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replica_clock_ahead_failover_never_expires_a_lease_early() {
    let Some(figures) = run(Fault::ClockOffset(OFFSET)).await else {
        return;
    };
    assert_eq!(
        figures.early_reaps, 0,
        "work was handed on before its holder saw Lost"
    );
}

/// Asynchronous replication without `wait=N` (allowed under `durability=relaxed`):
/// the replica is paused while the primary hands out forty tokens, then the primary
/// is killed and the replica, which lacks them, is promoted. Its token counter is
/// behind every one of those tokens; the tokens it hands out must still sort above
/// them (a new server starts a new token epoch), so none is handed out twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_lacked_the_last_tokens_never_hands_one_out_twice() {
    let Some(mut cluster) = FailoverCluster::start(FailoverOptions::default()) else {
        return;
    };
    let ns = fresh_namespace();
    let url = format!(
        "{}&ns={ns}&durability=relaxed&timeout_ms=500",
        cluster.url()
    );
    let store = liveness_redis::connect(&url).await.unwrap();
    let holder = HolderId::new("h").unwrap();
    let ttl = Ttl::from_secs(30).unwrap();
    let key = |i: usize| Key::member(&format!("k{i}")).unwrap();
    let first = store.acquire(&key(0), &holder, ttl).await.unwrap();
    let primary = tokio::task::block_in_place(|| cluster.primary_of(ns.as_str(), 0)).unwrap();
    let replica = cluster.partner(primary);
    // The replica has the first lease, then stops receiving: paused, it reads nothing;
    // a 16 MB write fills the socket buffers and the primary drops the link (a 1 KiB
    // output-buffer limit), so what follows never reaches the replica.
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.nodes()[replica].pause().unwrap();
    tokio::task::block_in_place(|| {
        let limit = [
            "config",
            "set",
            "client-output-buffer-limit",
            "replica 1024 1024 0",
        ];
        cluster.cli(primary, &limit).unwrap();
        let junk = format!("liveness:{{{ns}}}:junk");
        let fill = "redis.call('SET', KEYS[1], string.rep('x', 16000000)) return 1";
        cluster.cli(primary, &["eval", fill, "1", &junk]).unwrap();
        wait_replication(
            &cluster,
            primary,
            "connected_slaves:0",
            "the primary kept the replica",
        );
    });
    let mut before = vec![first.token];
    for i in 1..=40 {
        let lease = store.acquire(&key(i), &holder, ttl).await.unwrap();
        before.push(lease.token);
        store.release(&lease).await.unwrap();
    }
    let max_before = *before.iter().max().unwrap();
    tokio::task::block_in_place(|| {
        cluster.kill(primary);
        cluster.nodes()[replica].resume().unwrap();
        cluster
            .wait_primary(replica, &[primary], Duration::from_secs(30))
            .unwrap();
    });
    let fresh = key(100);
    let after = fleet::retry_unavailable(DEADLINE, || store.acquire(&fresh, &holder, ttl))
        .await
        .unwrap();
    assert!(
        after.token > max_before,
        "token {} after the failover, not above {max_before}: {before:?}",
        after.token
    );
}
