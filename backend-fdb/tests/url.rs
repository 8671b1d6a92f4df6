//! URLs: the shared rules of `liveness_core::url`, through `from_url` and `connect`.

use backend_fdb::FdbConfig;
use liveness_conformance::url_rules;

liveness_conformance::url_suite!(
    backend_fdb::URL,
    "fdb://",
    FdbConfig::from_url,
    backend_fdb::connect
);

#[test]
fn every_url_rule_with_a_cluster_file() {
    url_rules::check(
        &backend_fdb::URL,
        "fdb:///etc/foundationdb/fdb.cluster",
        FdbConfig::from_url,
    );
}
