//! Opening existing stores only ([`PostgresConfig::with_existing_only`]): a namespace
//! whose schema is not there is refused as bad input naming it and the namespaces the
//! database holds, and no schema is created; a namespace that is there opens.

use liveness_postgres::{PostgresConfig, PostgresStore};
use liveness_testkit::open_existing::{self, Refusal};

#[tokio::test]
async fn only_a_namespace_that_is_there_opens() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    open_existing::only_a_namespace_that_is_there_opens(
        server.url(),
        async |url, existing_only| {
            let config = PostgresConfig::from_url(url)?.with_existing_only(existing_only);
            PostgresStore::connect(config).await
        },
        async |store: &PostgresStore, refusal: &Refusal| {
            let text = &refusal.message;
            assert!(text.contains(&refusal.held), "{text}");
            let created: bool =
                sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                    .bind(format!("liveness_{}", refusal.missing))
                    .fetch_one(store.pool())
                    .await
                    .unwrap();
            assert!(!created, "the schema was created by looking");
        },
    )
    .await;
}
