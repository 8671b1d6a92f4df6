//! Issue 13: a batch is one round trip. `acquire_many` of many keys is one `EVALSHA`
//! on the server (counted by the server's own `INFO commandstats`, on a server of this
//! test's own so that nothing else runs scripts on it), not one per key.

use liveness_conformance::fresh_namespace;
use liveness_core::{Acquire, HolderId, Key, LeaseStore, Ttl};
use liveness_testkit::redis::{RedisOptions, RedisServer};

/// How many scripts the server has run (`EVALSHA` and `EVAL` calls) since the last
/// `CONFIG RESETSTAT`.
async fn scripts_run(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .filter(|line| line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:"))
        .map(|line| {
            let calls = line.split("calls=").nth(1).unwrap();
            calls.split(',').next().unwrap().parse::<u64>().unwrap()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_many_is_one_script_for_the_batch() {
    let Some(server) = RedisServer::spawn(RedisOptions::default()) else {
        return;
    };
    let store = backend_redis::connect(&server.url_with(&format!("ns={}", fresh_namespace())))
        .await
        .unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let ttl = Ttl::from_secs(30).unwrap();
    let ask = |i: usize| {
        Acquire::new(
            Key::member(&format!("m{i}")).unwrap(),
            HolderId::new(format!("h{i}")).unwrap(),
            ttl,
        )
    };
    // A first batch loads the script (a NOSCRIPT answer and a retry on a fresh server).
    let warm = store.acquire_many(&[ask(1000)]).await.unwrap();
    assert!(warm[0].is_ok());
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .unwrap();
    let asks: Vec<Acquire> = (0..50).map(ask).collect();
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
