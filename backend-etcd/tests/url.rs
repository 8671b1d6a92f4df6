//! URLs: the shared rules of `liveness_core::url` (through `from_url` and `connect`),
//! with several members, and a repeated parameter. No server is needed: every case
//! is refused before a connection is attempted.

use liveness_conformance::url_rules::{self, Expect};
use liveness_etcd::EtcdConfig;

/// Nothing listens on port 1: a connection attempt would answer `Unavailable`.
const BASE: &str = "etcd://127.0.0.1:1";

liveness_conformance::url_suite!(
    liveness_etcd::URL,
    BASE,
    EtcdConfig::from_url,
    liveness_etcd::connect
);

#[test]
fn every_url_rule_with_several_members() {
    url_rules::check(
        &liveness_etcd::URL,
        "etcd://127.0.0.1:1,[::1]:2/",
        EtcdConfig::from_url,
    );
}

#[test]
fn a_repeated_namespace_is_refused() {
    // Refused rather than letting the last one win: a repeat is a typo or a
    // conflict, not a choice.
    url_rules::refused(
        EtcdConfig::from_url,
        &format!("{BASE}?ns=a&ns=b"),
        Expect::Repeated("ns"),
    );
}
