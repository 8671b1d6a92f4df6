//! The pending signal across handles (as across processes): a handle's `pending()`
//! ticks when another handle on the same server and namespace makes items pending
//! (an enqueue, a batch, a delayed enqueue, a retry, a sweep that requeued, dead
//! letters retried), not for another namespace; it subscribes again after its
//! connection is killed, and unsubscribes when the handle is dropped.

use std::time::Duration;

use liveness_conformance::fixtures::acquire_member;
use liveness_conformance::fresh_namespace;
use liveness_core::{EnqueueOptions, ItemStore, LeaseStore, OperatorStore, RequestId, Store, Ttl};
use tokio::sync::watch;
use tokio::time::timeout;

mod common;
use common::{calls, fresh};
use liveness_testkit::redis::{RedisOptions, RedisServer};

/// Waits for a tick of `rx` since it was last read, failing after 2 s.
async fn ticks(rx: &mut watch::Receiver<u64>, after: &str) {
    let ticked = timeout(Duration::from_secs(2), rx.changed()).await;
    assert!(
        matches!(ticked, Ok(Ok(()))),
        "the pending signal did not tick within 2 s after {after}"
    );
    rx.borrow_and_update();
}

/// Checks that `rx` does not tick for 500 ms.
async fn stays_quiet(rx: &mut watch::Receiver<u64>, after: &str) {
    let ticked = timeout(Duration::from_millis(500), rx.changed()).await;
    assert!(ticked.is_err(), "the pending signal ticked after {after}");
}

/// The number of subscribers of the shard channel of namespace `ns` on the server.
async fn subscribers(conn: &mut redis::aio::MultiplexedConnection, ns: &str) -> u64 {
    let channel = format!("liveness:{{{ns}}}:pending-signal");
    let reply: (String, u64) = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(&channel)
        .query_async(conn)
        .await
        .unwrap();
    reply.1
}

/// Waits up to 2 s for the channel of namespace `ns` to have `n` subscribers.
async fn until_subscribers(conn: &mut redis::aio::MultiplexedConnection, ns: &str, n: u64) {
    for _ in 0..200 {
        if subscribers(conn, ns).await == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the channel never had {n} subscriber(s)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_handle_on_the_namespace_ticks_it_another_namespace_does_not() {
    let Some((server, store, mut conn)) = fresh().await else {
        return;
    };
    let ns = store.namespace().as_str().to_owned();
    let mut rx = store
        .pending()
        .expect("the Redis store has a pending signal");
    // The tick that follows the subscription: from here on, messages arrive.
    ticks(&mut rx, "subscribing").await;

    let other = liveness_redis::connect(&server.url_with(&format!("ns={}", fresh_namespace())))
        .await
        .unwrap();
    other
        .enqueue(b"elsewhere", EnqueueOptions::default())
        .await
        .unwrap();
    stays_quiet(&mut rx, "an enqueue on another namespace").await;

    let second = liveness_redis::connect(&server.url_with(&format!("ns={ns}")))
        .await
        .unwrap();
    second
        .enqueue(b"a", EnqueueOptions::default())
        .await
        .unwrap();
    ticks(&mut rx, "another handle's enqueue").await;
    // A repeated enqueue with a key adds nothing and says nothing.
    let keyed = EnqueueOptions::keyed(RequestId::next());
    second.enqueue(b"k", keyed).await.unwrap();
    ticks(&mut rx, "an enqueue with a key").await;
    second.enqueue(b"k", keyed).await.unwrap();
    stays_quiet(&mut rx, "a repeated enqueue with a key").await;

    // One message per call, not per item.
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .unwrap();
    second
        .enqueue_many(&[b"b".to_vec(), b"c".to_vec()], EnqueueOptions::default())
        .await
        .unwrap();
    ticks(&mut rx, "another handle's enqueue_many").await;
    assert_eq!(calls(&mut conn, &["spublish"]).await, 1);
    second
        .enqueue(
            b"later",
            EnqueueOptions::default().delay(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    ticks(&mut rx, "a delayed enqueue").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_sweeps_and_dead_letters_retried_tick_it() {
    let Some((server, store, _conn)) = fresh().await else {
        return;
    };
    let ns = store.namespace().as_str().to_owned();
    let second = liveness_redis::connect(&server.url_with(&format!("ns={ns}")))
        .await
        .unwrap();
    let ttl = Ttl::from_secs(30).unwrap();
    let one_attempt = EnqueueOptions::default().max_attempts(1);
    let retried = second
        .enqueue(b"r", EnqueueOptions::default())
        .await
        .unwrap();
    let dead = second.enqueue(b"d", one_attempt).await.unwrap();
    let mut rx = store.pending().unwrap();
    ticks(&mut rx, "subscribing").await;

    let lease = acquire_member(&second, "worker", "h", ttl).await;
    assert_eq!(second.claim(&lease, 10).await.unwrap().len(), 2);
    stays_quiet(&mut rx, "a claim").await;
    second.fail(&lease, dead, true).await.unwrap();
    stays_quiet(&mut rx, "a fail that dead-lettered").await;
    second.fail(&lease, retried, true).await.unwrap();
    ticks(&mut rx, "a fail with retry").await;

    second.retry_dead_letter(dead).await.unwrap();
    ticks(&mut rx, "a dead letter retried").await;
    let again = second.claim(&lease, 10).await.unwrap();
    assert_eq!(again.len(), 2);
    second.fail(&lease, dead, false).await.unwrap();
    stays_quiet(&mut rx, "a fail without retry").await;
    assert_eq!(second.retry_dead_letters(10).await.unwrap(), [dead]);
    ticks(&mut rx, "dead letters retried").await;
    assert!(second.retry_dead_letters(10).await.unwrap().is_empty());
    stays_quiet(&mut rx, "no dead letter retried").await;

    // The lease dies owning `retried`: the sweep requeues it.
    assert_eq!(second.claim(&lease, 10).await.unwrap().len(), 1);
    assert!(second.release(&lease).await.unwrap());
    stays_quiet(&mut rx, "a release").await;
    let swept = second.sweep(lease.token).await.unwrap();
    assert_eq!(swept.requeued.len(), 1);
    ticks(&mut rx, "a sweep that requeued").await;
    second.sweep(lease.token).await.unwrap();
    stays_quiet(&mut rx, "a sweep that moved nothing").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_subscribes_again_after_its_connection_is_killed() {
    let Some((server, store, mut conn)) = fresh().await else {
        return;
    };
    let ns = store.namespace().as_str().to_owned();
    let mut rx = store.pending().unwrap();
    ticks(&mut rx, "subscribing").await;
    // Another call, on a clone too, shares the subscription.
    let _also = store.clone().pending().unwrap();
    assert_eq!(subscribers(&mut conn, &ns).await, 1);

    assert_eq!(
        kill_shard_subscribers(&mut conn).await,
        1,
        "the subscription's connection was not found"
    );
    ticks(&mut rx, "subscribing again").await;
    until_subscribers(&mut conn, &ns, 1).await;
    let second = liveness_redis::connect(&server.url_with(&format!("ns={ns}")))
        .await
        .unwrap();
    second
        .enqueue(b"x", EnqueueOptions::default())
        .await
        .unwrap();
    ticks(&mut rx, "an enqueue after the reconnection").await;
}

/// Kills the server's clients subscribed to a shard channel (`ssub=` of `CLIENT
/// LIST` above 0); answers how many.
async fn kill_shard_subscribers(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(conn)
        .await
        .unwrap();
    let mut killed = 0;
    for line in list.lines() {
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                .map(str::to_owned)
        };
        if field("ssub").is_some_and(|n| n != "0") {
            let id = field("id").unwrap();
            let n: u64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(id)
                .query_async(conn)
                .await
                .unwrap();
            killed += n;
        }
    }
    killed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_last_clone_closes_the_subscription() {
    let Some((_server, store, mut conn)) = fresh().await else {
        return;
    };
    let ns = store.namespace().as_str().to_owned();
    assert_eq!(
        subscribers(&mut conn, &ns).await,
        0,
        "subscribed before pending()"
    );
    let mut rx = store.pending().unwrap();
    ticks(&mut rx, "subscribing").await;
    let clone = store.clone();
    drop(store);
    assert_eq!(subscribers(&mut conn, &ns).await, 1, "a clone keeps it");
    drop(clone);
    until_subscribers(&mut conn, &ns, 0).await;
    // The receiver outlives the handle: it never ticks again (workers poll).
    assert!(rx.changed().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_subscribes_over_tls_with_the_configured_ca() {
    let options = RedisOptions {
        tls: true,
        ..RedisOptions::default()
    };
    let Some(server) = RedisServer::spawn(options) else {
        return;
    };
    let url = server.url_with(&format!("ns={}", fresh_namespace()));
    let store = liveness_redis::connect(&url).await.unwrap();
    let mut rx = store.pending().unwrap();
    ticks(&mut rx, "subscribing over TLS").await;
    let second = liveness_redis::connect(&url).await.unwrap();
    second
        .enqueue(b"x", EnqueueOptions::default())
        .await
        .unwrap();
    ticks(&mut rx, "another handle's enqueue over TLS").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_channel_still_enqueues_and_its_workers_poll() {
    let Some((server, store, mut conn)) = fresh().await else {
        return;
    };
    // Redis 7's default for new users: no channel (`resetchannels`).
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("nochannel")
        .arg("on")
        .arg(">secret")
        .arg("~*")
        .arg("resetchannels")
        .arg("+@all")
        .query_async(&mut conn)
        .await
        .unwrap();
    let ns = store.namespace().as_str().to_owned();
    let url =
        server
            .url_with(&format!("ns={ns}"))
            .replacen("redis://", "redis://nochannel:secret@", 1);
    let refused = liveness_redis::connect(&url).await.unwrap();
    let mut rx = refused.pending().unwrap();
    rx.borrow_and_update();
    // Its publishes are refused, the writes stay and the calls answer.
    let id = refused
        .enqueue(b"x", EnqueueOptions::default())
        .await
        .unwrap();
    let ids = refused
        .enqueue_many(&[b"y".to_vec()], EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(store.item_counts().await.unwrap().pending, 2);
    assert!(store.item(id).await.unwrap().is_some() && ids.len() == 1);
    // Its subscription is refused too: no tick, and no subscriber on the server.
    stays_quiet(&mut rx, "a refused subscription").await;
    assert_eq!(subscribers(&mut conn, &ns).await, 0);
}
