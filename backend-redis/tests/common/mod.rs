//! What the Redis test files share: a private server, and reading its own command
//! counts.

use liveness_conformance::fresh_namespace;
use liveness_testkit::redis::{RedisOptions, RedisServer};

/// How many times the server ran the `commands` (those run inside scripts included)
/// since the last `CONFIG RESETSTAT`.
pub async fn calls(conn: &mut redis::aio::MultiplexedConnection, commands: &[&str]) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .filter(|line| {
            commands
                .iter()
                .any(|c| line.starts_with(&format!("cmdstat_{c}:")))
        })
        .map(|line| {
            let calls = line.split("calls=").nth(1).unwrap();
            calls.split(',').next().unwrap().parse::<u64>().unwrap()
        })
        .sum()
}

/// A server of this test's own (nothing else runs scripts on it), a store on a fresh
/// namespace of it, and a plain connection to it; `None` where no server can start.
pub async fn fresh() -> Option<(
    RedisServer,
    liveness_redis::RedisStore,
    redis::aio::MultiplexedConnection,
)> {
    fresh_with("").await
}

/// As [`fresh`], with the store's URL given the further parameters `query` (`""`:
/// none).
pub async fn fresh_with(
    query: &str,
) -> Option<(
    RedisServer,
    liveness_redis::RedisStore,
    redis::aio::MultiplexedConnection,
)> {
    let server = RedisServer::spawn(RedisOptions::default())?;
    let params = match query {
        "" => format!("ns={}", fresh_namespace()),
        query => format!("ns={}&{query}", fresh_namespace()),
    };
    let store = liveness_redis::connect(&server.url_with(&params))
        .await
        .unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    Some((server, store, conn))
}
