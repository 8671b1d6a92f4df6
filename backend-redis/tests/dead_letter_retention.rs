//! Dead-letter retention on the server (`dead_letter_retention_s`, 30 days by
//! default): every dead letter is in `dl` by id and in `dlt` by when it was
//! dead-lettered (µs of the server clock, its `tf`); a script that dead-letters (a
//! failure's `finish`, a dead owner's sweep) removes up to `DEAD_LETTER_TRIM` of the
//! oldest expired ones in the same script, as `cancel` removes a dead letter; a
//! retry or a discard takes an item out of `dlt`. A dead letter from before the
//! upgrade (not in `dlt`) is kept; a completion and a retry cost what they did.

use std::sync::Arc;
use std::time::Duration;

use liveness_core::{
    EnqueueOptions, HolderId, ItemCounts, ItemId, ItemState, ItemStateKind, ItemStore, Key, Lease,
    LeaseStore, OperatorStore, Outcome, Page, QueueName, RequestId, Store, Ttl, DEAD_LETTER_TRIM,
    DEFAULT_DEAD_LETTER_RETENTION,
};
use liveness_redis::{RedisConfig, RedisStore};
use liveness_testkit::redis::RedisServer;
use redis::aio::MultiplexedConnection;

mod common;
use common::{calls, fresh, fresh_with};

/// The conformance scenario, on a store that keeps dead letters a second: it waits
/// the retention out and checks the removal (the suite runs it with the default
/// retention, which checks the keeping only).
#[test]
fn the_conformance_scenario_removes_dead_letters_kept_a_second() {
    let short = || async {
        let server = RedisServer::shared()?;
        let config = RedisConfig::from_url(&server.url_with("dead_letter_retention_s=1"))
            .unwrap()
            .with_namespace(liveness_conformance::fresh_namespace());
        let store = RedisStore::connect(config).await.unwrap();
        assert_eq!(
            store.capabilities().dead_letter_retention,
            Some(Duration::from_secs(1))
        );
        Some(Arc::new(store) as Arc<dyn Store>)
    };
    liveness_conformance::run(
        "a_dead_letter_is_kept_for_the_retention_then_removed",
        liveness_conformance::factory(short),
    );
}

/// Runs `cmd` on the namespace's key `name` (`liveness:{ns}:<name>`) with `args`.
async fn on_key<T: redis::FromRedisValue>(
    conn: &mut MultiplexedConnection,
    store: &RedisStore,
    cmd: &str,
    name: &str,
    args: &[&str],
) -> T {
    redis::cmd(cmd)
        .arg(format!(
            "liveness:{{{}}}:{name}",
            store.namespace().as_str()
        ))
        .arg(args)
        .query_async(conn)
        .await
        .unwrap()
}

/// The score of `id` in the dead letters' times `dlt` (µs of the server clock), if
/// it is there.
async fn dead_at(conn: &mut MultiplexedConnection, store: &RedisStore, id: ItemId) -> Option<u64> {
    on_key(conn, store, "ZSCORE", "dlt", &[&id.0.to_string()]).await
}

async fn lease(store: &RedisStore, name: &str) -> Lease {
    store
        .acquire(
            &Key::member(name).unwrap(),
            &HolderId::new(name).unwrap(),
            Ttl::from_secs(60).unwrap(),
        )
        .await
        .unwrap()
}

fn other() -> QueueName {
    QueueName::new("other").unwrap()
}

/// Enqueues one item of `queue` with one attempt, claims it (alone pending) under `w`
/// and fails it for good with `finish`.
async fn fail_one(store: &RedisStore, w: &Lease, queue: QueueName) -> ItemId {
    let once = EnqueueOptions::default().max_attempts(1).queue(queue);
    let id = store.enqueue(b"x", once).await.unwrap();
    let got = store
        .claim_from(w, &[queue], 1, RequestId::next())
        .await
        .unwrap();
    assert_eq!(got.iter().map(|i| i.id).collect::<Vec<_>>(), [id]);
    let state = store.finish(w, id, Outcome::DeadLetter).await.unwrap();
    assert_eq!(state, Some(ItemState::DeadLettered));
    id
}

/// Claims every pending item of both queues under a lease of its own, releases it and
/// sweeps its token: the items, out of attempts, are dead-lettered in one script.
async fn dead_letter_by_sweep(store: &RedisStore, n: usize) -> Vec<ItemId> {
    let dead = lease(store, "dead").await;
    let got = store
        .claim_from(&dead, &[QueueName::DEFAULT, other()], n, RequestId::next())
        .await
        .unwrap();
    assert_eq!(got.len(), n);
    store.release(&dead).await.unwrap();
    let mut swept = store.sweep(dead.token).await.unwrap().dead_lettered;
    swept.sort();
    swept
}

/// Checks that the namespace keeps `n` dead letters and that every index agrees: the
/// dead-letter zset `dl`, its times `dlt` (no stale entry), `item_counts`, the dead
/// letters' page and the per-queue counts (`qdl`). Answers the dead letters' ids.
async fn dead_letters(
    conn: &mut MultiplexedConnection,
    store: &RedisStore,
    n: u64,
    why: &str,
) -> Vec<ItemId> {
    let dl: u64 = on_key(conn, store, "ZCARD", "dl", &[]).await;
    let dlt: u64 = on_key(conn, store, "ZCARD", "dlt", &[]).await;
    assert_eq!((dl, dlt), (n, n), "dl and dlt: {why}");
    assert_eq!(
        store.item_counts().await.unwrap().dead_lettered,
        n,
        "item_counts: {why}"
    );
    let page = store
        .items(ItemStateKind::DeadLettered, Page::first(1000))
        .await
        .unwrap();
    assert_eq!(page.len() as u64, n, "the page: {why}");
    let in_other = page.iter().filter(|r| r.item.queue == other()).count() as u64;
    let counts = store.queue_counts().await.unwrap();
    let dead_of = |q: QueueName| {
        counts
            .iter()
            .find(|c| c.queue == q)
            .map_or(0, |c| c.counts.dead_lettered)
    };
    assert_eq!(
        dead_of(other()),
        in_other,
        "queue counts: {why}: {counts:?}"
    );
    assert_eq!(
        dead_of(QueueName::DEFAULT),
        n - in_other,
        "{why}: {counts:?}"
    );
    page.iter().map(|r| r.item.id).collect()
}

/// 150 dead letters of one instant, expired: the next dead-lettering removes 100 of
/// them (`DEAD_LETTER_TRIM`), the one after the other 50 and then the oldest of the
/// rest; a dead letter within the retention, and the newest, stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_dead_letters_go_a_trim_per_dead_lettering_oldest_first() {
    let Some((_server, store, mut conn)) = fresh_with("dead_letter_retention_s=1").await else {
        return;
    };
    assert_eq!(DEAD_LETTER_TRIM, 100);
    let once = EnqueueOptions::default().max_attempts(1);
    let mut old = store
        .enqueue_many(&vec![b"old".to_vec(); 100], once)
        .await
        .unwrap();
    let of_other = store
        .enqueue_many(&vec![b"old".to_vec(); 50], once.queue(other()))
        .await
        .unwrap();
    old.extend(&of_other);
    assert_eq!(dead_letter_by_sweep(&store, 150).await, old);
    dead_letters(&mut conn, &store, 150, "150 swept").await;

    // Within the retention: nothing is removed.
    let w = lease(&store, "w").await;
    let first = fail_one(&store, &w, QueueName::DEFAULT).await;
    dead_letters(&mut conn, &store, 151, "within the retention").await;

    tokio::time::sleep(Duration::from_millis(1300)).await;
    // All 151 have expired: a trim of the oldest goes, `first` (newer) stays.
    let second = fail_one(&store, &w, other()).await;
    let kept = dead_letters(&mut conn, &store, 151 + 1 - 100, "one trim").await;
    assert!(kept.contains(&first) && kept.contains(&second), "{kept:?}");
    let mut gone = 0;
    for id in &old {
        match store.item(*id).await.unwrap() {
            None => gone += 1,
            Some(rec) => assert_eq!(rec.state, ItemState::DeadLettered),
        }
    }
    assert_eq!(gone, 100, "the hashes of the removed ones");

    // The rest of the old ones, and `first`: 51 within one trim.
    let third = fail_one(&store, &w, QueueName::DEFAULT).await;
    let kept = dead_letters(&mut conn, &store, 2, "the rest").await;
    assert_eq!(kept, [second, third]);
    for id in old.iter().chain([&first]) {
        assert_eq!(store.item(*id).await.unwrap(), None, "{id:?}");
    }
    let qdl: Option<i64> = on_key(&mut conn, &store, "HGET", "qdl", &["other"]).await;
    assert_eq!(
        qdl,
        Some(1),
        "`second` is the other queue's one dead letter"
    );
    assert_eq!(store.item_counts().await.unwrap(), ItemCounts::new(0, 0, 2));
}

/// The capability is the default 30 days, or the URL's or the builder's; a dead
/// letter's entry in `dlt` is its `tf`, the time its record answers as `finished`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retention_is_30_days_by_default_and_set_by_the_url_or_the_builder() {
    let Some((server, store, mut conn)) = fresh_with("").await else {
        return;
    };
    assert_eq!(
        store.capabilities().dead_letter_retention,
        Some(DEFAULT_DEAD_LETTER_RETENTION)
    );
    assert_eq!(
        DEFAULT_DEAD_LETTER_RETENTION,
        Duration::from_secs(30 * 86_400)
    );
    let w = lease(&store, "w").await;
    let id = fail_one(&store, &w, QueueName::DEFAULT).await;
    let finished = store.item(id).await.unwrap().unwrap().times.finished;
    let finished = finished.unwrap().since_epoch().as_micros();
    assert_eq!(dead_at(&mut conn, &store, id).await, Some(finished as u64));

    let config = RedisConfig::from_url(&server.url_with("dead_letter_retention_s=7"))
        .unwrap()
        .with_namespace(liveness_conformance::fresh_namespace());
    let store = RedisStore::connect(config.clone()).await.unwrap();
    assert_eq!(
        store.capabilities().dead_letter_retention,
        Some(Duration::from_secs(7))
    );
    let config = config
        .with_dead_letter_retention(Duration::from_millis(1500))
        .unwrap();
    let store = RedisStore::connect(config).await.unwrap();
    assert_eq!(
        store.capabilities().dead_letter_retention,
        Some(Duration::from_millis(1500))
    );
}

/// A retry (one, or many) and a discard take a dead letter out of `dlt` too: no
/// stale entry is left, whichever way the item was dead-lettered; a dead letter
/// retried and dead-lettered again is in it once, at its new time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_or_a_discard_takes_a_dead_letter_out_of_its_times() {
    let Some((_server, store, mut conn)) = fresh_with("").await else {
        return;
    };
    let once = EnqueueOptions::default().max_attempts(1);
    store
        .enqueue_many(&[b"s1".to_vec(), b"s2".to_vec()], once)
        .await
        .unwrap();
    let swept = dead_letter_by_sweep(&store, 2).await;
    let w = lease(&store, "w").await;
    let a = fail_one(&store, &w, QueueName::DEFAULT).await;
    let b = fail_one(&store, &w, other()).await;
    let c = fail_one(&store, &w, other()).await;
    dead_letters(&mut conn, &store, 5, "five").await;
    let a_was = dead_at(&mut conn, &store, a).await.unwrap();

    store.retry_dead_letter(a).await.unwrap();
    assert_eq!(dead_at(&mut conn, &store, a).await, None);
    dead_letters(&mut conn, &store, 4, "one retried").await;
    assert_eq!(
        store.cancel(b).await.unwrap(),
        Some(ItemState::DeadLettered)
    );
    assert_eq!(dead_at(&mut conn, &store, b).await, None);
    dead_letters(&mut conn, &store, 3, "one discarded").await;
    // The two swept ones, lowest ids first.
    assert_eq!(store.retry_dead_letters(2).await.unwrap(), swept);
    for id in &swept {
        assert_eq!(dead_at(&mut conn, &store, *id).await, None);
    }
    assert_eq!(dead_letters(&mut conn, &store, 1, "two retried").await, [c]);

    // `a`, retried, fails for good again: one entry, at its new time.
    let got = store.claim(&w, 10).await.unwrap();
    assert_eq!(got.len(), 3);
    for item in &got {
        store
            .finish(&w, item.id, Outcome::DeadLetter)
            .await
            .unwrap();
    }
    dead_letters(&mut conn, &store, 4, "dead-lettered again").await;
    assert!(dead_at(&mut conn, &store, a).await.unwrap() > a_was);

    assert_eq!(store.retry_dead_letters(10).await.unwrap().len(), 4);
    dead_letters(&mut conn, &store, 0, "all retried").await;
    let exists: u64 = on_key(&mut conn, &store, "EXISTS", "dlt", &[]).await;
    assert_eq!(exists, 0, "an empty zset is no key");
}

/// A dead letter from before the upgrade (in `dl`, not in `dlt`) is kept past the
/// retention, until an operator acts; an entry of `dlt` whose item is no dead letter
/// (an earlier version's retry left it) is dropped and its item left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_from_before_is_kept_and_a_stale_entry_touches_nothing() {
    let Some((_server, store, mut conn)) = fresh_with("dead_letter_retention_s=1").await else {
        return;
    };
    let w = lease(&store, "w").await;
    let legacy = fail_one(&store, &w, QueueName::DEFAULT).await;
    let removed: u64 = on_key(&mut conn, &store, "ZREM", "dlt", &[&legacy.0.to_string()]).await;
    assert_eq!(removed, 1);
    let pending = store
        .enqueue(b"p", EnqueueOptions::default())
        .await
        .unwrap();
    let _: u64 = on_key(
        &mut conn,
        &store,
        "ZADD",
        "dlt",
        &["1", &pending.0.to_string()],
    )
    .await;

    tokio::time::sleep(Duration::from_millis(1300)).await;
    let w2 = lease(&store, "w2").await;
    let once = EnqueueOptions::default().max_attempts(1);
    // `pending` is the lowest id pending: claimed with the fresh one, it goes back.
    let fresh_id = store.enqueue(b"f", once).await.unwrap();
    let got = store.claim(&w2, 2).await.unwrap();
    assert_eq!(got.len(), 2);
    store.finish(&w2, pending, Outcome::RETRY).await.unwrap();
    let state = store.finish(&w2, fresh_id, Outcome::DeadLetter).await;
    assert_eq!(state.unwrap(), Some(ItemState::DeadLettered));

    let rec = store.item(legacy).await.unwrap().unwrap();
    assert_eq!(rec.state, ItemState::DeadLettered, "kept: not in dlt");
    let rec = store.item(pending).await.unwrap().unwrap();
    assert_eq!(rec.state, ItemState::Pending, "left alone");
    assert_eq!(dead_at(&mut conn, &store, pending).await, None, "dropped");
    assert!(dead_at(&mut conn, &store, fresh_id).await.is_some());
    assert_eq!(store.item_counts().await.unwrap(), ItemCounts::new(1, 0, 2));
    // An operator's discard removes it as before.
    assert_eq!(
        store.cancel(legacy).await.unwrap(),
        Some(ItemState::DeadLettered)
    );
    dead_letters(&mut conn, &store, 1, "the fresh one").await;
}

/// A completion and a retry run the commands they ran before the retention (no read
/// of `dlt`, no clock for a completion); a dead-lettering adds one `ZADD` and one
/// `ZRANGEBYSCORE` to its one script. (`tests/times.rs` counts a claim's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completing_and_retrying_cost_what_they_did() {
    let Some((_server, store, mut conn)) = fresh().await else {
        return;
    };
    store
        .enqueue_many(&vec![b"x".to_vec(); 3], EnqueueOptions::default())
        .await
        .unwrap();
    let w = lease(&store, "w").await;
    let got = store.claim(&w, 3).await.unwrap();
    let reset = async |conn: &mut MultiplexedConnection| {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(conn)
            .await
            .unwrap();
    };
    let dead_letter_work = ["zrangebyscore", "zadd", "time"];

    reset(&mut conn).await;
    store.complete(&w, got[0].id).await.unwrap();
    assert_eq!(calls(&mut conn, &["evalsha", "eval"]).await, 1);
    assert_eq!(calls(&mut conn, &["hmget", "zrem", "decr", "del"]).await, 4);
    assert_eq!(calls(&mut conn, &dead_letter_work).await, 0);

    reset(&mut conn).await;
    store.finish(&w, got[1].id, Outcome::RETRY).await.unwrap();
    assert_eq!(calls(&mut conn, &["evalsha", "eval"]).await, 1);
    assert_eq!(calls(&mut conn, &["zrangebyscore"]).await, 0);
    assert_eq!(calls(&mut conn, &["zadd"]).await, 1, "into pending");

    reset(&mut conn).await;
    store
        .finish(&w, got[2].id, Outcome::DeadLetter)
        .await
        .unwrap();
    assert_eq!(calls(&mut conn, &["evalsha", "eval"]).await, 1);
    assert_eq!(calls(&mut conn, &["zadd"]).await, 2, "dl and dlt");
    assert_eq!(calls(&mut conn, &["zrangebyscore"]).await, 1, "the trim");
    assert_eq!(calls(&mut conn, &["time"]).await, 1, "one clock");
}
