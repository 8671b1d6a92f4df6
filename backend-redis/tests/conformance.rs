//! The conformance suite and the property test against a real redis-server (the
//! binary's shared one, or `LIVENESS_REDIS_URL`), each scenario on a fresh namespace.

use std::sync::Arc;

use liveness_redis::{RedisConfig, RedisStore};
use liveness_testkit::redis::RedisServer;

async fn factory() -> Option<Arc<dyn liveness_core::Store>> {
    let server = RedisServer::shared()?;
    let config = RedisConfig::from_url(server.url())
        .unwrap_or_else(|e| panic!("test server URL: {e}"))
        .with_namespace(liveness_conformance::fresh_namespace())
        // Small, so that the suite fills it and checks the bound.
        .with_death_retention(20)
        .unwrap_or_else(|e| panic!("death retention: {e}"));
    let store = RedisStore::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connect to the test server: {e}"));
    Some(Arc::new(store))
}

liveness_conformance::suite!(factory);
