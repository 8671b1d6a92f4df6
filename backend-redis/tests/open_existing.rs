//! Opening existing stores only ([`RedisConfig::with_existing_only`]): a namespace
//! that has handed out no token and no item id is refused as bad input naming it and
//! the namespaces the server holds, and not one key is written for it; a namespace that
//! is there opens.

use liveness_conformance::fixtures::acquire_member;
use liveness_conformance::fresh_namespace;
use liveness_core::{Error, InputProblem, LeaseStore, Ttl};
use liveness_redis::{RedisConfig, RedisStore};
use liveness_testkit::redis::RedisServer;

#[tokio::test]
async fn only_a_namespace_that_is_there_opens() {
    let Some(server) = RedisServer::shared() else {
        return;
    };
    let config = |ns: &str| {
        RedisConfig::from_url(&server.url_with(&format!("ns={ns}")))
            .unwrap()
            .with_existing_only(true)
    };
    let held = fresh_namespace();
    let store = liveness_redis::connect(&server.url_with(&format!("ns={held}")))
        .await
        .unwrap();
    let lease = acquire_member(&store, "w", "h", Ttl::from_secs(60).unwrap()).await;

    let missing = fresh_namespace();
    let err = RedisStore::connect(config(missing.as_str()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidInput {
                what: "namespace",
                problem: InputProblem::BadValue { .. }
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains(&format!("ns={missing}")), "{text}");
    assert!(text.contains(held.as_str()), "{text}");
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("liveness:{{{missing}}}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(keys.is_empty(), "written by looking: {keys:?}");

    let reader = RedisStore::connect(config(held.as_str())).await.unwrap();
    assert_eq!(
        reader.inspect(&lease.key).await.unwrap().unwrap().token,
        lease.token
    );
    store.purge().await.unwrap();
}
