//! How long a claimed item waited (`Item::waited`), measured by the server's clock
//! from the item hash's `w`: the moment it last became claimable, which every script
//! that makes it pending writes. Each wait is bounded by instants the test takes on
//! its own clock around the calls, so that a wait counted from an earlier moment (the
//! enqueue) fails whatever the machine's load. A claim stays one script that reads
//! `w` with the fields it read before.

use std::time::{Duration, Instant};

use liveness_core::{
    EnqueueOptions, HolderId, Item, ItemId, ItemStore, Key, Lease, LeaseStore, OperatorStore,
    Outcome, RequestId, Store, Ttl,
};

mod common;
use common::{calls, fresh};

/// How long the test lets an item wait between two steps.
const GAP: Duration = Duration::from_millis(500);

/// What the server's clock and the test's may drift apart over a test (the server's
/// `TIME` is the wall clock, the test's `Instant` the monotonic one).
const DRIFT: Duration = Duration::from_millis(20);

/// An instant window: from before a call was sent to after it was answered.
struct Window {
    start: Instant,
    end: Instant,
}

/// Runs `f`, the window around it, and its answer.
async fn timed<T>(f: impl std::future::Future<Output = T>) -> (Window, T) {
    let start = Instant::now();
    let out = f.await;
    (
        Window {
            start,
            end: Instant::now(),
        },
        out,
    )
}

/// Asserts that `item` waited from some moment within `ready` (shifted by `due`, the
/// hold) to some moment within `claim`.
fn waited_between(item: &Item, ready: &Window, due: Duration, claim: &Window) {
    let waited = item
        .waited
        .unwrap_or_else(|| panic!("item {:?} without a wait", item.id));
    let least = claim.start.saturating_duration_since(ready.end + due);
    let most = claim.end.saturating_duration_since(ready.start + due);
    assert!(
        waited + DRIFT >= least && waited <= most + DRIFT,
        "item {:?} waited {waited:?}, not within {least:?}..={most:?}",
        item.id
    );
}

async fn lease(store: &liveness_redis::RedisStore, name: &str) -> Lease {
    store
        .acquire(
            &Key::member(name).unwrap(),
            &HolderId::new(name).unwrap(),
            Ttl::from_secs(30).unwrap(),
        )
        .await
        .unwrap()
}

fn ids(items: &[Item]) -> Vec<ItemId> {
    items.iter().map(|i| i.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeue_and_a_dead_letter_retry_count_from_then() {
    let Some((_server, store, _conn)) = fresh().await else {
        return;
    };
    let (enqueued, ids_ab) = timed(store.enqueue_many(
        &[b"a".to_vec(), b"b".to_vec()],
        EnqueueOptions::default().max_attempts(5),
    ))
    .await;
    let ids_ab = ids_ab.unwrap();
    let (a, b) = (ids_ab[0], ids_ab[1]);
    tokio::time::sleep(GAP).await;
    let owner = lease(&store, "owner").await;
    let (claimed, items) = timed(store.claim(&owner, 2)).await;
    let items = items.unwrap();
    assert_eq!(ids(&items), [a, b]);
    for item in &items {
        waited_between(item, &enqueued, Duration::ZERO, &claimed);
    }

    // b dead-lettered, a requeued by the sweep after its owner's death.
    store.finish(&owner, b, Outcome::DeadLetter).await.unwrap();
    tokio::time::sleep(GAP).await;
    assert!(store.release(&owner).await.unwrap());
    let (swept, sweep) = timed(store.sweep(owner.token)).await;
    assert_eq!(sweep.unwrap().requeued, [a]);
    tokio::time::sleep(GAP).await;
    let (retried, r) = timed(store.retry_dead_letter(b)).await;
    r.unwrap();
    tokio::time::sleep(GAP).await;

    let next = lease(&store, "next").await;
    let (claimed, items) = timed(store.claim(&next, 2)).await;
    let items = items.unwrap();
    assert_eq!(ids(&items), [a, b]);
    waited_between(&items[0], &swept, Duration::ZERO, &claimed);
    waited_between(&items[1], &retried, Duration::ZERO, &claimed);

    // The batch retry of dead letters counts from then too.
    for id in [a, b] {
        store.finish(&next, id, Outcome::DeadLetter).await.unwrap();
    }
    tokio::time::sleep(GAP).await;
    let (retried, r) = timed(store.retry_dead_letters(10)).await;
    assert_eq!(r.unwrap(), [a, b]);
    tokio::time::sleep(GAP).await;
    let (claimed, items) = timed(store.claim(&next, 2)).await;
    let items = items.unwrap();
    assert_eq!(ids(&items), [a, b]);
    for item in &items {
        waited_between(item, &retried, Duration::ZERO, &claimed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_back_item_waits_from_its_due_time() {
    let Some((_server, store, _conn)) = fresh().await else {
        return;
    };
    let held = EnqueueOptions::default().max_attempts(5).delay(GAP);
    let (one, a) = timed(store.enqueue(b"a", held)).await;
    let a = a.unwrap();
    let (many, b) = timed(store.enqueue_many(&[b"b".to_vec()], held)).await;
    let b = b.unwrap()[0];
    tokio::time::sleep(GAP * 2).await;
    let owner = lease(&store, "owner").await;
    let (claimed, items) = timed(store.claim(&owner, 2)).await;
    let items = items.unwrap();
    assert_eq!(ids(&items), [a, b]);
    waited_between(&items[0], &one, GAP, &claimed);
    waited_between(&items[1], &many, GAP, &claimed);

    // A retry's backoff: counted from its due time; one at once: from the hand-back.
    let (backoff, r) = timed(store.finish(&owner, a, Outcome::Retry { after: GAP })).await;
    r.unwrap();
    let (at_once, r) = timed(store.finish(&owner, b, Outcome::RETRY)).await;
    r.unwrap();
    tokio::time::sleep(GAP * 2).await;
    let (claimed, items) = timed(store.claim(&owner, 2)).await;
    let items = items.unwrap();
    assert_eq!(ids(&items), [a, b]);
    waited_between(&items[0], &backoff, GAP, &claimed);
    waited_between(&items[1], &at_once, Duration::ZERO, &claimed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_claim_or_an_item_from_before_answers_no_wait() {
    let Some((_server, store, mut conn)) = fresh().await else {
        return;
    };
    let ns = store.namespace().as_str().to_owned();
    let (enqueued, both) =
        timed(store.enqueue_many(&[b"a".to_vec(), b"b".to_vec()], EnqueueOptions::default())).await;
    let both = both.unwrap();
    // b as an earlier version wrote it: no `w`.
    let removed: u64 = redis::cmd("HDEL")
        .arg(format!("liveness:{{{ns}}}:i:{}", both[1].0))
        .arg("w")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(removed, 1, "the item hash keeps `w`");
    let owner = lease(&store, "owner").await;
    let req = RequestId::random();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .unwrap();
    let (claimed, items) = timed(store.claim_request(&owner, 2, req)).await;
    let items = items.unwrap();
    assert_eq!(ids(&items), both);
    // One script, reading each item's `w` with the fields it read before: one HMGET
    // per item, and one of the lease.
    assert_eq!(calls(&mut conn, &["evalsha", "eval"]).await, 1);
    assert_eq!(calls(&mut conn, &["hmget", "hget"]).await, 1 + 2);
    waited_between(&items[0], &enqueued, Duration::ZERO, &claimed);
    assert_eq!(items[1].waited, None);

    let again = store.claim_request(&owner, 2, req).await.unwrap();
    assert_eq!(ids(&again), both);
    assert!(again.iter().all(|i| i.waited.is_none()), "{again:?}");
}
