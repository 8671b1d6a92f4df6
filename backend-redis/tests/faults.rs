//! Fault scenarios against a real redis-server that each test starts for itself:
//! killed and restarted, or frozen (SIGSTOP) and resumed.
//!
//! What is asserted, and why (see also the README's "Faults" section):
//!
//! - **Restart with `appendonly yes` + `appendfsync always`** (the settings the README
//!   requires): every acknowledged write survives. The server's clock (`TIME`, the
//!   host's wall clock) keeps running while the server is down, so a lease whose
//!   expiry passed during the outage is expired when the server comes back, and one
//!   whose expiry did not is still live and renewable under the same token. The token
//!   counter survives, so new tokens are still greater than every old one. No item is
//!   lost: every item ends completed.
//! - **Restart without persistence**: the server forgets everything. The test pins the
//!   hazard the README warns about: holders learn it loudly (a renewal fails with
//!   `StoreLostState`, not a plain `Lost(Released)`: their token is above the wiped
//!   counter), but the items are gone and token numbers start again from 1.
//! - **Pause longer than the ttl**: the server's clock runs on while the process is
//!   frozen, so by the store's clock every lease really expired; that is no false
//!   death by the contract. What is guaranteed, and asserted: every member whose lease
//!   expired saw `Lost` (its local deadline, counted on its own monotonic clock, fires
//!   during the pause), and it saw it BEFORE any checker declared that token dead or
//!   requeued its items; no renewal is ever granted to an expired lease; every member
//!   re-joins with a newer token; every item ends completed. An `acquire` sent during
//!   the freeze may be executed after the client gave up on its answer: that "ghost"
//!   lease is held by nobody, owns no items, and simply expires (delaying the
//!   member's re-join by up to one ttl); the test checks it moved no items.
//! - **Pause shorter than the ttl's slack**: nobody is lost, no death is declared.

use std::sync::Arc;
use std::time::Duration;

use liveness_conformance::fixtures::acquire_member;
use liveness_conformance::fleet::{self, Fleet};
use liveness_conformance::fresh_namespace;
use liveness_core::{
    Checker, CheckerConfig, EnqueueOptions, Error, Event, FencingToken, ItemCounts, ItemState,
    ItemStore, LeaseStatus, LeaseStore, LostCause, Store, Ttl,
};
use liveness_redis::{RedisConfig, RedisStore};
use liveness_testkit::redis::{RedisOptions, RedisServer};
use tokio::time::Instant;

const READY: Duration = Duration::from_secs(10);
const DEADLINE: Duration = Duration::from_secs(60);

async fn connect(server: &RedisServer, timeout_ms: u64) -> RedisStore {
    let config = RedisConfig::from_url(server.url())
        .unwrap()
        .with_namespace(fresh_namespace())
        .with_response_timeout(Duration::from_millis(timeout_ms))
        .unwrap();
    RedisStore::connect(config).await.unwrap()
}

/// Retries `f` while it fails with a retryable error, up to [`DEADLINE`].
async fn retry<T, F, Fut>(mut f: F) -> liveness_core::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = liveness_core::Result<T>>,
{
    let until = Instant::now() + DEADLINE;
    loop {
        match f().await {
            Err(e) if e.is_retryable() && Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

/// Waits, polling, until `cond` holds; panics with `what` at [`DEADLINE`].
async fn wait_until<F, Fut>(what: &str, cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    fleet::wait_until(what, DEADLINE, cond).await
}

/// A fleet of `members` workers sharing one store handle, with a checker on it.
async fn start_fleet(store: RedisStore, ttl: Ttl, members: usize, items: usize) -> Fleet {
    let store: Arc<dyn Store> = Arc::new(store);
    Fleet::start(store.clone(), vec![store; members], ttl, items, DEADLINE).await
}

/// A private server on which every acknowledged write survives a restart (the
/// settings the README requires).
fn durable() -> Option<RedisServer> {
    RedisServer::spawn(RedisOptions {
        durable: true,
        ..RedisOptions::default()
    })
}

/// A fleet of 3 members (ttl 2 s) on `server` with 150 items, once 20 of them are
/// under way; also the ttl and the members' tokens at that moment.
async fn busy_fleet(server: &RedisServer) -> (Fleet, Ttl, Vec<FencingToken>) {
    let ttl = Ttl::from_secs(2).unwrap();
    let world = start_fleet(connect(server, 500).await, ttl, 3, 150).await;
    world.wait_working(130).await;
    let before = world.tokens();
    (world, ttl, before)
}

/// After an outage longer than the ttl: every item ends completed, every member
/// re-joined under a token newer than all of `before`, and each saw `Lost` before a
/// checker requeued its items.
async fn assert_recovered(world: &Fleet, before: &[FencingToken]) {
    world.wait_all_completed().await;
    world.assert_all_rejoined(before).await;
    world.assert_lost_before_requeue();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn durable_restart_keeps_live_leases_tokens_and_items() {
    let Some(mut server) = durable() else {
        return;
    };
    let store = connect(&server, 500).await;
    let keep = acquire_member(&store, "keep", "h", Ttl::from_secs(120).unwrap()).await;
    let short = acquire_member(&store, "short", "h", Ttl::from_millis(800).unwrap()).await;
    let mut ids = Vec::new();
    for i in 0..6u8 {
        ids.push(
            store
                .enqueue(&[i], EnqueueOptions::default())
                .await
                .unwrap(),
        );
    }
    let kept_items = store.claim(&keep, 2).await.unwrap();
    let short_items = store.claim(&short, 2).await.unwrap();
    assert_eq!((kept_items.len(), short_items.len()), (2, 2));

    server.process_mut().unwrap().kill();
    let down = store.renew(&keep).await.unwrap_err();
    assert!(
        down.is_retryable(),
        "a dead server must be Unavailable: {down:?}"
    );
    server.process_mut().unwrap().restart(READY).unwrap();

    // The live lease is still there, under the same token, and renewable.
    let renewed = retry(|| store.renew(&keep)).await.unwrap();
    assert_eq!(renewed.token, keep.token);
    // The short one expires by the server's clock (which ran on while it was down)
    // and is never renewed.
    let short_key = short.key.clone();
    wait_until("the short lease is expired", || async {
        matches!(
            store.inspect(&short_key).await,
            Ok(Some(info)) if info.status == LeaseStatus::Expired
        )
    })
    .await;
    assert_eq!(
        store.renew(&short).await.unwrap_err().lost_reason(),
        Some(LostCause::Expired)
    );
    // Item states survived: owned by their tokens, or pending.
    for item in &kept_items {
        let rec = store.item(item.id).await.unwrap().unwrap();
        assert_eq!(rec.state, ItemState::Owned(keep.token));
        assert_eq!(rec.item.attempts, 1);
    }
    // A checker round declares the short lease dead and hands its items back.
    let store: Arc<dyn Store> = Arc::new(store);
    let round = Checker::new(store.clone(), CheckerConfig::default())
        .round()
        .await
        .unwrap();
    assert_eq!(round.deaths.len(), 1);
    assert_eq!(round.deaths[0].lease.token, short.token);
    assert_eq!(
        round.deaths[0].sweep.requeued,
        short_items.iter().map(|i| i.id).collect::<Vec<_>>()
    );
    assert_eq!(store.item_counts().await.unwrap(), ItemCounts::new(4, 2, 0));
    for id in &ids {
        assert!(
            store.item(*id).await.unwrap().is_some(),
            "item {id} was lost"
        );
    }
    // The token counter survived: a new acquisition is newer than every old one.
    let again = acquire_member(&*store, "short", "h", Ttl::from_secs(10).unwrap()).await;
    assert!(again.token > keep.token.max(short.token));
    let next = store
        .enqueue(b"n", EnqueueOptions::default())
        .await
        .unwrap();
    assert!(next > ids[5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restart_without_persistence_forgets_everything() {
    let Some(mut server) = RedisServer::spawn(RedisOptions::default()) else {
        return;
    };
    let store = connect(&server, 500).await;
    let mut last = None;
    for _ in 0..3 {
        let lease = acquire_member(&store, "m", "h", Ttl::from_secs(60).unwrap()).await;
        store.release(&lease).await.unwrap();
        last = Some(lease);
    }
    let old = acquire_member(&store, "m", "h", Ttl::from_secs(60).unwrap()).await;
    let id = store
        .enqueue(b"x", EnqueueOptions::default())
        .await
        .unwrap();
    assert!(old.token > last.unwrap().token);

    server.process_mut().unwrap().restart(READY).unwrap();

    // The holder learns that the store lost its state — loudly, not as a plain
    // `Released`: its token is above the wiped counter...
    let err = retry(|| store.renew(&old)).await.unwrap_err();
    match &err {
        liveness_core::Error::Backend { source, .. } => assert_eq!(
            source.downcast_ref::<liveness_core::durability::StoreLostState>(),
            Some(&liveness_core::durability::StoreLostState::new(
                old.key.clone(),
                old.token
            )),
            "{err:?}"
        ),
        other => panic!("expected the store-lost-state error, got {other:?}"),
    }
    // ...but the item is gone, and token numbers start over: the fencing guarantee is
    // void without `appendonly yes` + `appendfsync always` (see the README).
    assert_eq!(store.item(id).await.unwrap(), None);
    let fresh = acquire_member(&store, "m", "h", Ttl::from_secs(60).unwrap()).await;
    assert!(
        fresh.token <= old.token,
        "a wiped counter hands out old numbers again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restart_longer_than_ttl_members_rejoin_and_no_item_is_lost() {
    let Some(mut server) = durable() else {
        return;
    };
    let (world, ttl, before) = busy_fleet(&server).await;

    server.process_mut().unwrap().kill();
    // The outage: longer than the ttl, so every lease expires by the server's clock
    // (which keeps running) and every member's local deadline passes.
    tokio::time::sleep(ttl.duration() * 3 / 2).await;
    server.process_mut().unwrap().restart(READY).unwrap();

    // The counter survived the restart: new tokens are newer than every old one.
    assert_recovered(&world, &before).await;
    world.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pause_longer_than_ttl_every_expired_member_sees_lost_first() {
    let Some(server) = RedisServer::spawn(RedisOptions::default()) else {
        return;
    };
    let (world, ttl, before) = busy_fleet(&server).await;
    let process = server.process().unwrap();

    process.pause().unwrap();
    let frozen = world.store().store_time().await.unwrap_err();
    assert!(
        frozen.is_retryable(),
        "a frozen server must be Unavailable: {frozen:?}"
    );
    tokio::time::sleep(ttl.duration() * 2).await;
    process.resume().unwrap();

    assert_recovered(&world, &before).await;
    // No renewal was granted to an expired lease: every old token is gone from the
    // store (no member key still holds it).
    for m in world.members() {
        let info = world.store().inspect(m.key()).await.unwrap().unwrap();
        assert!(!before.contains(&info.token));
    }
    world.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn short_pause_loses_nobody() {
    let Some(server) = RedisServer::spawn(RedisOptions::default()) else {
        return;
    };
    // ttl 6 s, renewals every 2 s, local deadline 4.8 s after the last renewal was
    // sent: a 300 ms freeze leaves seconds of slack.
    let ttl = Ttl::from_secs(6).unwrap();
    let world = start_fleet(connect(&server, 2000).await, ttl, 3, 30).await;
    let before = world.tokens();
    let process = server.process().unwrap();
    process.pause().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    process.resume().unwrap();
    let resumed = Instant::now();
    // Wait until each member has renewed after the resume (its lease shows nearly a
    // whole ttl left after at least one renewal interval).
    for m in world.members() {
        let key = m.key().clone();
        wait_until("a member renewed after the pause", || async {
            resumed.elapsed() > Duration::from_millis(2100)
                && matches!(
                    world.store().inspect(&key).await,
                    Ok(Some(info)) if matches!(info.status, LeaseStatus::Live { remaining } if remaining > Duration::from_millis(5500))
                )
        })
        .await;
    }
    world.wait_all_completed().await;
    assert_eq!(world.tokens(), before);
    assert!(world.lost_tokens().is_empty(), "{:?}", world.events());
    assert!(
        !world
            .events()
            .iter()
            .any(|e| matches!(e, Event::Died { .. })),
        "{:?}",
        world.events()
    );
    world.shut_down().await;
}

#[tokio::test]
async fn stale_owner_cannot_complete_after_requeue() {
    // Store-level fencing across an expiry by the server clock (no fault needed).
    let Some(server) = RedisServer::shared() else {
        return;
    };
    let store = connect(server, 2000).await;
    let lease = acquire_member(&store, "stale", "h", Ttl::from_millis(200).unwrap()).await;
    let id = store
        .enqueue(b"x", EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(store.claim(&lease, 1).await.unwrap().len(), 1);
    wait_until("the lease is expired", || async {
        matches!(store.inspect(&lease.key).await, Ok(Some(i)) if i.status == LeaseStatus::Expired)
    })
    .await;
    assert!(store.reap(&lease.key, lease.token).await.unwrap());
    let moved = store.sweep(lease.token).await.unwrap();
    assert_eq!(moved.requeued, vec![id]);
    assert!(matches!(
        store.complete(&lease, id).await,
        Err(Error::Fenced { item, token }) if item == id && token == lease.token
    ));
}
