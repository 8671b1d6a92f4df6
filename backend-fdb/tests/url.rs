//! URLs: the shared rules of `liveness_core::url`, through `from_url` and `connect`.

use liveness_conformance::url_rules;
use liveness_fdb::FdbConfig;

liveness_conformance::url_suite!(
    liveness_fdb::URL,
    "fdb://",
    FdbConfig::from_url,
    liveness_fdb::connect
);

#[test]
fn every_url_rule_with_a_cluster_file() {
    url_rules::check(
        &liveness_fdb::URL,
        "fdb:///etc/foundationdb/fdb.cluster",
        FdbConfig::from_url,
    );
}
