//! What the Redis bench binaries share.

use std::time::Duration;

use liveness_redis::{RedisConfig, RedisStore};

/// A store on a fresh namespace of the server at `url`, with a response timeout
/// long enough for the largest batches.
pub async fn store(url: &str) -> RedisStore {
    let config = RedisConfig::from_url(url)
        .unwrap_or_else(|e| panic!("{e}"))
        .with_namespace(liveness_conformance::fresh_namespace())
        .with_response_timeout(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    RedisStore::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

/// A plain client connection to the server at `url` (its query dropped): what the
/// benches read the server's own figures through, beside the store.
pub async fn connection(url: &str) -> redis::aio::MultiplexedConnection {
    let client =
        redis::Client::open(url.split('?').next().unwrap_or(url)).unwrap_or_else(|e| panic!("{e}"));
    client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}
