//! Opening existing stores only ([`RedisConfig::with_existing_only`]): a namespace
//! that has handed out no token and no item id is refused as bad input naming it and
//! the namespaces the server holds, and not one key is written for it; a namespace that
//! is there opens.

use liveness_redis::{RedisConfig, RedisStore};
use liveness_testkit::open_existing::{self, Refusal};
use liveness_testkit::redis::RedisServer;

#[tokio::test]
async fn only_a_namespace_that_is_there_opens() {
    let Some(server) = RedisServer::shared() else {
        return;
    };
    let store = open_existing::only_a_namespace_that_is_there_opens(
        server.url(),
        async |url, existing_only| {
            let config = RedisConfig::from_url(url)?.with_existing_only(existing_only);
            RedisStore::connect(config).await
        },
        async |_: &RedisStore, refusal: &Refusal| {
            let text = &refusal.message;
            assert!(text.contains(&refusal.held), "{text}");
            let client = redis::Client::open(server.url()).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("liveness:{{{}}}:*", refusal.missing))
                .query_async(&mut conn)
                .await
                .unwrap();
            assert!(keys.is_empty(), "written by looking: {keys:?}");
        },
    )
    .await;
    store.purge().await.unwrap();
}
