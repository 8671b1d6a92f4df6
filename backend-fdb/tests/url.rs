//! URLs: the shared rules of `liveness_core::url`, through `from_url` and `connect`.

use std::time::Duration;

use backend_fdb::FdbConfig;
use liveness_conformance::url_rules;

#[test]
fn every_url_rule() {
    url_rules::check(&backend_fdb::URL, "fdb://", FdbConfig::from_url);
    url_rules::check(
        &backend_fdb::URL,
        "fdb:///etc/foundationdb/fdb.cluster",
        FdbConfig::from_url,
    );
}

#[tokio::test]
async fn connect_refuses_every_bad_url() {
    url_rules::check_connect(
        &backend_fdb::URL,
        "fdb://",
        Duration::from_secs(60),
        |url| async move { backend_fdb::connect(&url).await },
    )
    .await;
}
