//! What the Redis bench binaries share.
#![allow(dead_code)] // every bench binary uses only part of it

use std::time::Duration;

use liveness_core::Namespace;
use liveness_redis::{RedisConfig, RedisStore};
use liveness_testkit::redis::RedisServer;

/// The server a bench runs against: `LIVENESS_REDIS_URL` when set, else a private
/// redis-server started here, whose handle (kept alive while the bench runs) comes
/// with its url. `None`, said on stderr as `{bench}: no redis-server (skipped)`,
/// when there is neither.
pub fn server(bench: &str) -> Option<(Option<RedisServer>, String)> {
    if let Ok(url) = std::env::var("LIVENESS_REDIS_URL") {
        return Some((None, url));
    }
    let Some(server) = RedisServer::start() else {
        eprintln!("{bench}: no redis-server (skipped)");
        return None;
    };
    let url = server.url().to_owned();
    Some((Some(server), url))
}

/// A store on a fresh namespace of the server at `url`, with a response timeout
/// long enough for the largest batches.
pub async fn store(url: &str) -> RedisStore {
    store_in(url, liveness_conformance::fresh_namespace()).await
}

/// A store on `namespace` of the server at `url` (a namespace another process
/// shares), with the response timeout of [`store`].
pub async fn store_in(url: &str, namespace: Namespace) -> RedisStore {
    let config = RedisConfig::from_url(url)
        .unwrap_or_else(|e| panic!("{e}"))
        .with_namespace(namespace)
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
