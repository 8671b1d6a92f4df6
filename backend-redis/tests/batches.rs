//! A batch is one round trip. `acquire_many` of many keys is one `EVALSHA`
//! on the server (counted by the server's own `INFO commandstats`, on a server of this
//! test's own so that nothing else runs scripts on it), not one per key. And a
//! renewal is cheap on the server: it moves its lease in the expiry index only when the
//! index would otherwise lag its expiry by half a ttl or more.

use std::time::Duration;

use liveness_core::{Acquire, HolderId, Key, LeaseStore, Space, Ttl};

mod common;
use common::{calls, fresh};

/// How many scripts the server has run (`EVALSHA` and `EVAL` calls) since the last
/// `CONFIG RESETSTAT`.
async fn scripts_run(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    calls(conn, &["evalsha", "eval"]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_many_is_one_script_for_the_batch() {
    let Some((_server, store, mut conn)) = fresh().await else {
        return;
    };
    let ttl = Ttl::from_secs(30).unwrap();
    // A first batch before the counters are reset: only the measured batch counts.
    let warm = store.acquire_many(&[ask(1000, ttl)]).await.unwrap();
    assert!(warm[0].is_ok());
    reset_stats(&mut conn).await;
    let asks: Vec<Acquire> = (0..50).map(|i| ask(i, ttl)).collect();
    let answers = store.acquire_many(&asks).await.unwrap();
    assert_eq!(answers.len(), asks.len());
    for (ask, answer) in asks.iter().zip(&answers) {
        let lease = answer.as_ref().unwrap();
        assert_eq!((&lease.key, &lease.holder), (&ask.key, &ask.holder));
    }
    let run = scripts_run(&mut conn).await;
    assert_eq!(
        run,
        1,
        "acquire_many of {} keys ran {run} scripts",
        asks.len()
    );
}

/// The acquire of member `m<i>` by holder `h<i>`.
fn ask(i: usize, ttl: Ttl) -> Acquire {
    Acquire::new(
        Key::member(&format!("m{i}")).unwrap(),
        HolderId::new(format!("h{i}")).unwrap(),
        ttl,
    )
}

/// A batch's answers, every one of which must be `Ok`.
fn each_ok<T>(answers: Vec<liveness_core::Result<T>>) -> Vec<T> {
    answers.into_iter().map(Result::unwrap).collect()
}

async fn reset_stats(conn: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_move_the_expiry_index_at_most_every_half_ttl() {
    let Some((_server, store, mut conn)) = fresh().await else {
        return;
    };
    let ttl = Ttl::new(Duration::from_millis(1200)).unwrap();
    let asks: Vec<Acquire> = (0..50).map(|i| ask(i, ttl)).collect();
    let leases = each_ok(store.acquire_many(&asks).await.unwrap());
    // The lease names' scores in the space's expiry index.
    let index = format!("{}x:members", store_prefix(&mut conn).await);
    let scores = |mut conn: redis::aio::MultiplexedConnection| {
        let index = index.clone();
        async move {
            let all: Vec<(String, f64)> = redis::cmd("ZRANGE")
                .arg(&index)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut conn)
                .await
                .unwrap();
            all.into_iter()
                .collect::<std::collections::HashMap<String, f64>>()
        }
    };
    // Renewed at once: the index is less than half a ttl behind, and stays put.
    let _ = store.renew_many(&leases).await.unwrap();
    let before = scores(conn.clone()).await;
    assert_eq!(before.len(), 50);
    reset_stats(&mut conn).await;
    let renewed = store.renew_many(&leases).await.unwrap();
    assert!(renewed.iter().all(|r| r.is_ok()), "{renewed:?}");
    assert_eq!(
        scores(conn.clone()).await,
        before,
        "early renewals moved the index"
    );
    let zadds = calls(&mut conn, &["zadd"]).await;
    assert_eq!(zadds, 0, "early renewals ran ZADD {zadds} times");
    // Renewed more than half a ttl after the index was written: each moves it, all in
    // one ZADD.
    tokio::time::sleep(Duration::from_millis(700)).await;
    reset_stats(&mut conn).await;
    let leases = each_ok(store.renew_many(&leases).await.unwrap());
    let after = scores(conn.clone()).await;
    assert!(
        before.iter().all(|(name, score)| after[name] > *score),
        "late renewals left the index behind"
    );
    let zadds = calls(&mut conn, &["zadd"]).await;
    assert_eq!(zadds, 1, "one batch's index moves ran ZADD {zadds} times");
    // A renewal that left the index behind: the lease is still listed expired only
    // once its real expiry passed, and next_expiry never answers later than it.
    let _ = store.renew_many(&leases).await.unwrap();
    let space = Space::new("members").unwrap();
    let left = store.next_expiry(&space).await.unwrap().unwrap();
    assert!(left <= ttl.duration(), "{left:?}");
    let listed = store.expired(&space, 1000).await.unwrap();
    assert!(listed.is_empty(), "live leases listed expired: {listed:?}");
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let expired = store.expired(&space, 1000).await.unwrap();
        for lease in &expired {
            let seen = store.inspect(&lease.key).await.unwrap().unwrap();
            assert!(!seen.is_live(), "{:?} listed expired while live", lease.key);
        }
        if expired.len() == 50 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "only {} of 50 listed",
            expired.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The namespace prefix (`liveness:{ns}:`) of the only namespace on this server.
async fn store_prefix(conn: &mut redis::aio::MultiplexedConnection) -> String {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("liveness:*:tokens")
        .query_async(conn)
        .await
        .unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    keys[0].trim_end_matches("tokens").to_string()
}
