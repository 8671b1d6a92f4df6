//! Opening existing stores only ([`PostgresConfig::with_existing_only`]): a namespace
//! whose schema is not there is refused as bad input naming it and the namespaces the
//! database holds, and no schema is created; a namespace that is there opens.

use liveness_conformance::fixtures::acquire_member;
use liveness_conformance::fresh_namespace;
use liveness_core::{Error, InputProblem, LeaseStore, Ttl};
use liveness_postgres::{PostgresConfig, PostgresStore};

#[tokio::test]
async fn only_a_namespace_that_is_there_opens() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    let config = |ns: &str| {
        PostgresConfig::from_url(&server.url_with(&format!("ns={ns}")))
            .unwrap()
            .with_existing_only(true)
    };
    let held = fresh_namespace();
    let store = liveness_postgres::connect(&server.url_with(&format!("ns={held}")))
        .await
        .unwrap();
    let lease = acquire_member(&store, "w", "h", Ttl::from_secs(60).unwrap()).await;

    let missing = fresh_namespace();
    let err = PostgresStore::connect(config(missing.as_str()))
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
    let created: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(format!("liveness_{missing}"))
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert!(!created, "the schema was created by looking");

    let reader = PostgresStore::connect(config(held.as_str())).await.unwrap();
    assert_eq!(
        reader.inspect(&lease.key).await.unwrap().unwrap().token,
        lease.token
    );
}
