//! Enqueue idempotency keys on the server: each its own string `ek:<hex>`, the id of
//! the item its enqueue added, written with a `PX` expiry of the key retention
//! (`key_retention_s`, a day by default), which the server's clock counts down. A keyed
//! repeat within the retention answers the first id, one after it adds a new item, and
//! no key is left without an expiry. A key in the hash that earlier versions kept for
//! good still answers its id, and that hash is never written.

use std::time::Duration;

use liveness_core::{EnqueueOptions, ItemId, ItemStore, OperatorStore, RequestId, Store};
use liveness_redis::{RedisConfig, RedisStore};
use liveness_testkit::redis::RedisServer;

/// A server of this test's own (or `LIVENESS_REDIS_URL`), a store on a fresh namespace
/// of it with the URL's parameters and `query` (`""`: none more), and a plain
/// connection to it; `None` where no server can start.
async fn open(query: &str) -> Option<(RedisServer, RedisStore, redis::aio::MultiplexedConnection)> {
    let server = RedisServer::start()?;
    let url = match query {
        "" => server.url().to_owned(),
        query => server.url_with(query),
    };
    let config = RedisConfig::from_url(&url)
        .unwrap()
        .with_namespace(liveness_conformance::fresh_namespace());
    let store = RedisStore::connect(config).await.unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    Some((server, store, conn))
}

/// Every idempotency key string of the store's namespace with its `PTTL` (ms; `-1`:
/// no expiry), sorted by name.
async fn key_ttls(
    conn: &mut redis::aio::MultiplexedConnection,
    store: &RedisStore,
) -> Vec<(String, i64)> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("liveness:{{{}}}:ek:*", store.namespace().as_str()))
        .query_async(conn)
        .await
        .unwrap();
    keys.sort();
    let mut out = Vec::new();
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap();
        out.push((key, ttl));
    }
    out
}

/// The name of key `key`'s string in the store's namespace.
fn key_name(store: &RedisStore, key: RequestId) -> String {
    format!(
        "liveness:{{{}}}:ek:{}",
        store.namespace().as_str(),
        key.to_hex()
    )
}

/// The hash earlier versions kept every key in, for good.
fn legacy_hash(store: &RedisStore) -> String {
    format!("liveness:{{{}}}:ekeys", store.namespace().as_str())
}

async fn pending(store: &RedisStore) -> u64 {
    store.item_counts().await.unwrap().pending
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_is_kept_for_the_retention_then_forgotten() {
    let Some((_server, store, mut conn)) = open("key_retention_s=1").await else {
        return;
    };
    let retention = Duration::from_secs(1);
    assert_eq!(store.capabilities().key_retention, Some(retention));
    let (a, b) = (RequestId::random(), RequestId::random());
    let first = store.enqueue(b"a", EnqueueOptions::keyed(a)).await.unwrap();
    let again = store.enqueue(b"a", EnqueueOptions::keyed(a)).await.unwrap();
    assert_eq!(again, first, "a repeat within the retention");
    store.enqueue(b"b", EnqueueOptions::keyed(b)).await.unwrap();
    // An enqueue without a key writes no key.
    store
        .enqueue(b"c", EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(pending(&store).await, 3);

    // One string per key, each expiring within the retention; the hash of earlier
    // versions is not written.
    let ttls = key_ttls(&mut conn, &store).await;
    let mut names = vec![key_name(&store, a), key_name(&store, b)];
    names.sort();
    assert_eq!(
        ttls.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        names
    );
    for (key, ttl) in &ttls {
        assert!(
            (1..=1000).contains(ttl),
            "{key}: PTTL {ttl} ms, not within the 1 s retention"
        );
    }
    let value: Option<String> = redis::cmd("GET")
        .arg(key_name(&store, a))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(value, Some(first.0.to_string()));
    let legacy: bool = redis::cmd("EXISTS")
        .arg(legacy_hash(&store))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!legacy, "the hash of earlier versions was written");

    // After the retention, by the server's clock: forgotten, and a repeat adds a new
    // item under a fresh key.
    tokio::time::sleep(retention + Duration::from_millis(200)).await;
    assert!(key_ttls(&mut conn, &store).await.is_empty());
    let later = store.enqueue(b"a", EnqueueOptions::keyed(a)).await.unwrap();
    assert_ne!(later, first, "a repeat after the retention adds an item");
    assert_eq!(pending(&store).await, 4);
    let again = store.enqueue(b"a", EnqueueOptions::keyed(a)).await.unwrap();
    assert_eq!(again, later, "the new item's key is kept in its turn");
    let ttls = key_ttls(&mut conn, &store).await;
    assert_eq!(ttls.len(), 1);
    assert!((1..=1000).contains(&ttls[0].1), "{ttls:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retention_is_a_day_by_default_and_set_by_the_builder() {
    let Some((server, store, mut conn)) = open("").await else {
        return;
    };
    let day = liveness_core::DEFAULT_KEY_RETENTION;
    assert_eq!(store.capabilities().key_retention, Some(day));
    let key = RequestId::random();
    store
        .enqueue(b"x", EnqueueOptions::keyed(key))
        .await
        .unwrap();
    let ttls = key_ttls(&mut conn, &store).await;
    let day_ms = i64::try_from(day.as_millis()).unwrap();
    assert_eq!(ttls.len(), 1);
    assert!((day_ms - 60_000..=day_ms).contains(&ttls[0].1), "{ttls:?}");

    // The builder's retention, in whole milliseconds.
    let config = RedisConfig::from_url(server.url())
        .unwrap()
        .with_namespace(liveness_conformance::fresh_namespace())
        .with_key_retention(Duration::from_millis(1500))
        .unwrap();
    let store = RedisStore::connect(config).await.unwrap();
    assert_eq!(
        store.capabilities().key_retention,
        Some(Duration::from_millis(1500))
    );
    store
        .enqueue(b"x", EnqueueOptions::keyed(key))
        .await
        .unwrap();
    let ttls = key_ttls(&mut conn, &store).await;
    assert_eq!(ttls.len(), 1);
    assert!((1..=1500).contains(&ttls[0].1), "{ttls:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_an_earlier_version_kept_still_answers_its_id() {
    let Some((_server, store, mut conn)) = open("key_retention_s=1").await else {
        return;
    };
    // What an earlier version left: the item, and its key in the namespace's hash.
    let key = RequestId::random();
    let first: ItemId = store
        .enqueue(b"x", EnqueueOptions::default())
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(legacy_hash(&store))
        .arg(key.to_hex())
        .arg(first.0)
        .query_async(&mut conn)
        .await
        .unwrap();
    // A retry of that enqueue, after the upgrade.
    let again = store
        .enqueue(b"x", EnqueueOptions::keyed(key))
        .await
        .unwrap();
    assert_eq!(again, first);
    assert_eq!(pending(&store).await, 1, "no second item");
    assert!(key_ttls(&mut conn, &store).await.is_empty());
    // The hash is read, never written: its one entry, no expiry set.
    let len: u64 = redis::cmd("HLEN")
        .arg(legacy_hash(&store))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(len, 1);
    let ttl: i64 = redis::cmd("PTTL")
        .arg(legacy_hash(&store))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(ttl, -1);
}
