//! URLs: the shared rules of `liveness_core::url` (through `from_url` and `connect`),
//! and this backend's own cases (a repeated namespace, the database number, the
//! protocol). No server is needed: every case is refused before a connection is
//! attempted.

use liveness_conformance::url_rules::{self, Expect};
use liveness_redis::RedisConfig;

/// Nothing listens on port 1: a connection attempt would answer `Unavailable`.
const BASE: &str = "redis://127.0.0.1:1";

liveness_conformance::url_suite!(
    liveness_redis::URL,
    BASE,
    RedisConfig::from_url,
    liveness_redis::connect
);

#[test]
fn every_url_rule_with_tls() {
    url_rules::check(
        &liveness_redis::URL,
        "rediss://127.0.0.1:1",
        RedisConfig::from_url,
    );
}

#[test]
fn a_repeated_namespace_is_refused() {
    // Neither wins silently: the URL is refused.
    url_rules::refused(
        RedisConfig::from_url,
        &format!("{BASE}?ns=a&ns=b"),
        Expect::Repeated("ns"),
    );
}

#[test]
fn a_bad_database_number_is_refused() {
    // Refused here, naming the parameter, not later as an untyped `Backend` error
    // from the client.
    for db in ["abc", "-1", "+1", "16", "4294967296"] {
        url_rules::refused(
            RedisConfig::from_url,
            &format!("{BASE}/{db}"),
            Expect::OutOfRange("db"),
        );
    }
}

#[test]
fn an_unknown_protocol_is_refused() {
    // Refused here, naming the parameter, not later as an untyped `Backend` error
    // from the client.
    url_rules::refused(
        RedisConfig::from_url,
        &format!("{BASE}?protocol=resp9"),
        Expect::BadValue("protocol"),
    );
}
