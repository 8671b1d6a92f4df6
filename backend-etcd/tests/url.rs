//! URLs: the shared rules of `liveness_core::url` (through `from_url` and `connect`),
//! and the cases issue 10 found. No server is needed: every case is refused before a
//! connection is attempted.

use backend_etcd::EtcdConfig;
use liveness_conformance::url_rules::{self, Expect};

/// Nothing listens on port 1: a connection attempt would answer `Unavailable`.
const BASE: &str = "etcd://127.0.0.1:1";

liveness_conformance::url_suite!(
    backend_etcd::URL,
    BASE,
    EtcdConfig::from_url,
    backend_etcd::connect
);

#[test]
fn every_url_rule_with_several_members() {
    url_rules::check(
        &backend_etcd::URL,
        "etcd://127.0.0.1:1,[::1]:2/",
        EtcdConfig::from_url,
    );
}

#[test]
fn a_repeated_namespace_is_refused() {
    // Before: the last one won.
    url_rules::refused(
        EtcdConfig::from_url,
        &format!("{BASE}?ns=a&ns=b"),
        Expect::Repeated("ns"),
    );
}
