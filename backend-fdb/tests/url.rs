//! URLs: the shared rules of `liveness_core::url`, through `from_url` and `connect`.

use liveness_conformance::url_rules;
use liveness_fdb::FdbConfig;

liveness_conformance::url_suite!(
    liveness_fdb::URL,
    "fdb://",
    FdbConfig::from_url,
    liveness_fdb::connect
);

/// FoundationDB has no clock to count a key retention by: the parameter is not
/// taken (keys are kept for good), rather than taken and ignored.
#[test]
fn key_retention_is_refused() {
    url_rules::refused(
        FdbConfig::from_url,
        "fdb://?key_retention_s=3600",
        url_rules::Expect::Unknown("key_retention_s".to_owned()),
    );
}

#[test]
fn every_url_rule_with_a_cluster_file() {
    url_rules::check(
        &liveness_fdb::URL,
        "fdb:///etc/foundationdb/fdb.cluster",
        FdbConfig::from_url,
    );
}
