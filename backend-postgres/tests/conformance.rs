//! The conformance suite and the property test against a real PostgreSQL (the test
//! binary's shared server from the test kit, or `LIVENESS_POSTGRES_URL`).

use std::sync::Arc;

use liveness_core::Store;

async fn factory() -> Option<Arc<dyn Store>> {
    let server = liveness_testkit::postgres::shared()?;
    let ns = liveness_conformance::fresh_namespace();
    let url = server.url_with(&format!("ns={ns}&max_connections=8"));
    // A small death retention, so that the suite fills it and checks the bound.
    let config = liveness_postgres::PostgresConfig::from_url(&url)
        .and_then(|c| c.with_death_retention(20))
        .expect("test url");
    match liveness_postgres::PostgresStore::connect(config).await {
        Ok(store) => Some(Arc::new(store)),
        Err(e) => panic!("connecting to the test server failed: {e}"),
    }
}

liveness_conformance::suite!(factory, cases = 64);

/// A store on a fresh namespace opened with `dead_letter_retention_s=1`.
async fn short_dead_letter_retention() -> Option<Arc<dyn Store>> {
    let server = liveness_testkit::postgres::shared()?;
    let ns = liveness_conformance::fresh_namespace();
    let url = server.url_with(&format!("ns={ns}&dead_letter_retention_s=1"));
    match liveness_postgres::connect(&url).await {
        Ok(store) => Some(Arc::new(store)),
        Err(e) => panic!("connecting to the test server failed: {e}"),
    }
}

/// With a dead-letter retention of a second, the retention scenario waits it out: a
/// later dead-lettering (a failure's, a dead owner's sweep) removes the expired dead
/// letters by the server's clock, and nothing else.
#[test]
fn dead_letters_outlive_a_short_retention_only_until_the_next_dead_letter() {
    liveness_conformance::run(
        "a_dead_letter_is_kept_for_the_retention_then_removed",
        liveness_conformance::factory(short_dead_letter_retention),
    );
}
