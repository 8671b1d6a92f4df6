//! Members riding a session on Redis: while the session lives, its members cost the
//! server nothing (no field written, no entry in the expiry index), and a dead
//! session larger than `max_batch` is swept in pages of at most `max_batch` members, the
//! session's token staying in the dead set until the last one.

use std::time::Duration;

use liveness_core::{
    FencingToken, HolderId, ItemStore, Key, Lease, LeaseStore, OperatorStore, Space, Store, Ttl,
};

mod common;
use common::{calls, fresh};

/// A session lease of `ttl` and `n` members riding it.
async fn session_with(
    store: &liveness_redis::RedisStore,
    n: usize,
    ttl: Ttl,
) -> (Lease, Vec<Lease>) {
    let key = Key::new(Space::sessions(), liveness_core::Name::new("p").unwrap());
    let session = store
        .acquire(&key, &HolderId::new("p").unwrap(), ttl)
        .await
        .unwrap();
    let holder = HolderId::new("r").unwrap();
    let mut members = Vec::with_capacity(n);
    for i in 0..n {
        let key = Key::member(&format!("r{i}")).unwrap();
        members.push(store.join_session(&session, &key, &holder).await.unwrap());
    }
    (session, members)
}

/// The keys of the server matching `pattern`.
async fn keys(conn: &mut redis::aio::MultiplexedConnection, pattern: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(pattern)
        .query_async(conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn riding_members_cost_the_server_nothing_while_they_live() {
    let Some((_server, store, mut conn)) = fresh().await else {
        return;
    };
    let ttl = Ttl::new(Duration::from_millis(900)).unwrap();
    let (session, members) = session_with(&store, 20, ttl).await;
    // Not one member in the expiry index: only the session is ever listed.
    let indexed: Vec<String> = redis::cmd("ZRANGE")
        .arg(keys(&mut conn, "liveness:*:x:members").await)
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    assert!(indexed.is_empty(), "members indexed: {indexed:?}");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .unwrap();
    // The session alone, renewed past the ttl, keeps every member live; renewing a
    // member writes nothing and answers the session's time left.
    for _ in 0..6 {
        store.renew(&session).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let writes_by_session = calls(&mut conn, &["hset", "zadd"]).await;
    for m in &members {
        let renewed = store.renew(m).await.unwrap();
        assert!(renewed.expires_in <= ttl.duration(), "{renewed:?}");
        assert!(store.inspect(&m.key).await.unwrap().unwrap().is_live());
    }
    let writes = calls(&mut conn, &["hset", "zadd"]).await - writes_by_session;
    assert_eq!(writes, 0, "renewing riding members wrote {writes} times");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_session_above_max_batch_is_swept_in_pages() {
    let Some((_server, store, mut conn)) = fresh().await else {
        return;
    };
    let batch = store.info().caps.max_batch;
    let n = 2 * batch + batch / 2;
    let ttl = Ttl::from_secs(30).unwrap();
    let (session, members) = session_with(&store, n, ttl).await;
    assert!(store.release(&session).await.unwrap());
    let dead = |store: &liveness_redis::RedisStore, token: FencingToken| {
        let store = store.clone();
        async move {
            let dead = store.dead_tokens(100_000).await.unwrap();
            dead.iter().any(|d| d.token == token)
        }
    };
    // Through the batch call first: it declares at most max_batch members of each token dead.
    let first = store.sweep_many(&[session.token]).await.unwrap();
    let first = first.into_iter().next().unwrap().unwrap();
    assert_eq!(first.members.len(), batch);
    assert!(dead(&store, session.token).await, "the session left early");
    let second = store.sweep(session.token).await.unwrap();
    assert_eq!(second.members.len(), batch);
    assert!(dead(&store, session.token).await, "the session left early");
    let last = store.sweep(session.token).await.unwrap();
    assert_eq!(last.members.len(), n - 2 * batch);
    assert!(
        !dead(&store, session.token).await,
        "the swept session stayed"
    );
    let mut swept: Vec<FencingToken> = [first, second, last]
        .iter()
        .flat_map(|r| r.members.iter().map(|m| m.token))
        .collect();
    swept.sort();
    let want: Vec<FencingToken> = members.iter().map(|m| m.token).collect();
    assert_eq!(swept, want, "each member exactly once");
    for m in members.iter().step_by(97) {
        assert!(
            dead(&store, m.token).await,
            "{:?} not in the dead set",
            m.key
        );
        assert!(store.inspect(&m.key).await.unwrap().is_none());
    }
    assert!(
        keys(&mut conn, "liveness:*:sm:*").await.is_empty(),
        "a member set outlived its sweep"
    );
    let page = store
        .leases(&Space::members(), liveness_core::Page::first(10))
        .await
        .unwrap();
    assert!(
        page.is_empty(),
        "members declared dead still listed: {page:?}"
    );
}
