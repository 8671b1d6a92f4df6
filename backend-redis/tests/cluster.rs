//! The backend on a real Redis Cluster (three primaries started by the test kit, or
//! `LIVENESS_REDIS_CLUSTER_URL`): the whole conformance suite and the property test,
//! namespaces spread over the nodes with each one whole on the node that owns its
//! slot, a node going down is a retryable fault, not a false answer, and
//! `cluster=true` against a standalone server is refused at connect.

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use liveness_conformance::fixtures::acquire_member;
use liveness_core::{EnqueueOptions, ItemStore, Namespace, OperatorStore, RequestId, Store, Ttl};
use liveness_redis::{RedisConfig, RedisStore};
use liveness_testkit::redis::RedisCluster;

/// One cluster for the whole test binary (the fault test starts its own).
fn shared() -> Option<&'static RedisCluster> {
    static SHARED: OnceLock<Option<RedisCluster>> = OnceLock::new();
    SHARED.get_or_init(RedisCluster::start).as_ref()
}

async fn connect(cluster: &RedisCluster, ns: Namespace) -> RedisStore {
    let config = RedisConfig::from_url(cluster.url())
        .unwrap_or_else(|e| panic!("cluster URL: {e}"))
        .with_namespace(ns);
    assert!(config.is_cluster());
    RedisStore::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connect to the test cluster: {e}"))
}

async fn factory() -> Option<Arc<dyn Store>> {
    let cluster = shared()?;
    let store = connect(cluster, liveness_conformance::fresh_namespace()).await;
    assert!(store.is_cluster());
    Some(Arc::new(store))
}

liveness_conformance::suite!(factory, cases = 64);

/// The keys of `ns` that one node holds (SCAN sees only the node's own keys).
async fn keys_on(node: &str, ns: &Namespace) -> Vec<String> {
    let client = redis::Client::open(node).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut cursor = 0u64;
    let mut keys = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("liveness:{{{}}}:*", ns.as_str()))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .unwrap();
        keys.extend(batch);
        if next == 0 {
            return keys;
        }
        cursor = next;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_spread_over_nodes_each_whole_on_one() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let nodes = cluster.node_urls();
    if nodes.is_empty() {
        eprintln!("SKIP: node-level checks need the test kit's own cluster");
        return;
    }
    let mut used = BTreeSet::new();
    let mut spaces = Vec::new();
    for _ in 0..12 {
        let ns = liveness_conformance::fresh_namespace();
        let store = connect(&cluster, ns.clone()).await;
        let lease = acquire_member(&store, "m", "h", Ttl::from_secs(30).unwrap()).await;
        store
            .enqueue(b"x", EnqueueOptions::default())
            .await
            .unwrap();
        assert_eq!(store.claim(&lease, 1).await.unwrap().len(), 1);
        store.store_time().await.unwrap();
        spaces.push((ns, store));
    }
    for (ns, _) in &spaces {
        let mut holding = Vec::new();
        for (i, node) in nodes.iter().enumerate() {
            if !keys_on(node, ns).await.is_empty() {
                holding.push(i);
            }
        }
        assert_eq!(holding.len(), 1, "namespace {ns} is on nodes {holding:?}");
        used.insert(holding[0]);
    }
    assert!(
        used.len() >= 2,
        "12 namespaces all landed on one node: {used:?}"
    );
    // Clean-up goes to the node that owns the namespace.
    let (ns, store) = &spaces[0];
    assert!(store.purge().await.unwrap() > 0);
    for node in &nodes {
        assert!(keys_on(node, ns).await.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pending_signal_is_heard_on_the_node_of_the_namespace() {
    let Some(cluster) = shared() else {
        return;
    };
    let ns = liveness_conformance::fresh_namespace();
    let store = connect(cluster, ns.clone()).await;
    let mut rx = store
        .pending()
        .expect("the Redis store has a pending signal");
    // The tick that follows the subscription: from here on, messages arrive.
    let subscribed = tokio::time::timeout(Duration::from_secs(2), rx.changed()).await;
    assert!(
        matches!(subscribed, Ok(Ok(()))),
        "no tick after subscribing"
    );
    rx.borrow_and_update();
    let second = connect(cluster, ns.clone()).await;
    second
        .enqueue(b"x", EnqueueOptions::default())
        .await
        .unwrap();
    let ticked = tokio::time::timeout(Duration::from_secs(2), rx.changed()).await;
    assert!(
        matches!(ticked, Ok(Ok(()))),
        "no tick within 2 s after another handle's enqueue"
    );
    // The one subscription is on the node that holds the namespace (sharded pub/sub
    // counts only a node's own subscribers).
    let channel = format!("liveness:{{{}}}:pending-signal", ns.as_str());
    let mut on = Vec::new();
    for (i, node) in cluster.node_urls().iter().enumerate() {
        let client = redis::Client::open(node.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let (_, n): (String, u64) = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(&channel)
            .query_async(&mut conn)
            .await
            .unwrap();
        if n > 0 {
            on.push((i, n));
        }
        if !keys_on(node, &ns).await.is_empty() {
            on.push((i, 0));
        }
    }
    if !on.is_empty() {
        assert!(
            on.len() == 2 && on[0].0 == on[1].0 && on[0].1 == 1,
            "subscribers and keys by node: {on:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_key_expires_on_the_node_of_the_namespace() {
    let Some(cluster) = shared() else {
        return;
    };
    let ns = liveness_conformance::fresh_namespace();
    let config = RedisConfig::from_url(&format!("{}&key_retention_s=1", cluster.url()))
        .unwrap()
        .with_namespace(ns.clone());
    let store = RedisStore::connect(config).await.unwrap();
    assert_eq!(
        store.capabilities().key_retention,
        Some(Duration::from_secs(1))
    );
    let key = RequestId::random();
    let first = store
        .enqueue(b"x", EnqueueOptions::keyed(key))
        .await
        .unwrap();
    let again = store
        .enqueue(b"x", EnqueueOptions::keyed(key))
        .await
        .unwrap();
    assert_eq!(again, first, "a repeat within the retention");
    // The key's string is on the namespace's node, with its expiry.
    let name = format!("liveness:{{{}}}:ek:{}", ns.as_str(), key.to_hex());
    let mut seen = 0;
    for node in cluster.node_urls() {
        if !keys_on(&node, &ns).await.contains(&name) {
            continue;
        }
        let client = redis::Client::open(node.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&name)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!((1..=1000).contains(&ttl), "PTTL {ttl} ms");
        seen += 1;
    }
    assert!(
        seen == 1 || cluster.node_urls().is_empty(),
        "the key on {seen} nodes"
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let later = store
        .enqueue(b"x", EnqueueOptions::keyed(key))
        .await
        .unwrap();
    assert_ne!(later, first, "a repeat after the retention adds an item");
    assert_eq!(store.item_counts().await.unwrap().pending, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_down_is_unavailable() {
    let Some(mut cluster) = RedisCluster::start() else {
        return;
    };
    if cluster.nodes().is_empty() {
        eprintln!("SKIP: stopping a node needs the test kit's own cluster");
        return;
    }
    let nodes = cluster.node_urls();
    let ns = liveness_conformance::fresh_namespace();
    let config = RedisConfig::from_url(&format!("{}&timeout_ms=500", cluster.url()))
        .unwrap()
        .with_namespace(ns.clone());
    let store = RedisStore::connect(config).await.unwrap();
    let lease = acquire_member(&store, "m", "h", Ttl::from_secs(30).unwrap()).await;
    let mut owner = None;
    for (i, node) in nodes.iter().enumerate() {
        if !keys_on(node, &ns).await.is_empty() {
            owner = Some(i);
        }
    }
    let owner = owner.expect("some node holds the namespace");
    cluster.kill_node(owner);
    let err = tokio::time::timeout(Duration::from_secs(30), store.renew(&lease))
        .await
        .expect("renew answers within its timeouts")
        .unwrap_err();
    assert!(err.is_retryable(), "expected Unavailable, got {err:?}");
}

#[tokio::test]
async fn cluster_mode_against_a_standalone_server_is_refused() {
    let Some(server) = liveness_testkit::redis::RedisServer::start() else {
        return;
    };
    let url = server.url_with("cluster=true");
    let err = liveness_redis::connect(&url).await.unwrap_err();
    assert!(
        matches!(err, liveness_core::Error::Backend { .. }),
        "expected a permanent Backend error, got {err:?}"
    );
}

#[tokio::test]
async fn cluster_nodes_without_aof_are_refused_unless_relaxed() {
    let Some(cluster) = shared() else {
        return;
    };
    // The kit's nodes do not persist; its URL says durability=relaxed.
    let config = RedisConfig::from_url(cluster.url())
        .unwrap()
        .with_namespace(liveness_conformance::fresh_namespace())
        .with_durability(liveness_core::durability::Durability::Strict);
    let err = RedisStore::connect(config).await.unwrap_err();
    assert!(
        err.to_string().contains("`appendonly` = `no`"),
        "expected the appendonly refusal, got {err:?}"
    );
}
