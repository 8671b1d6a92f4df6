//! URLs: the shared rules of `liveness_core::url` (through `from_url` and `connect`),
//! and the cases issue 10 found. No server is needed: every case is refused before a
//! connection is attempted.

use backend_redis::RedisConfig;
use liveness_conformance::url_rules::{self, Expect};

/// Nothing listens on port 1: a connection attempt would answer `Unavailable`.
const BASE: &str = "redis://127.0.0.1:1";

liveness_conformance::url_suite!(
    backend_redis::URL,
    BASE,
    RedisConfig::from_url,
    backend_redis::connect
);

#[test]
fn every_url_rule_with_tls() {
    url_rules::check(
        &backend_redis::URL,
        "rediss://127.0.0.1:1",
        RedisConfig::from_url,
    );
}

#[test]
fn a_repeated_namespace_is_refused() {
    // Before: the last one won.
    url_rules::refused(
        RedisConfig::from_url,
        &format!("{BASE}?ns=a&ns=b"),
        Expect::Repeated("ns"),
    );
}

#[test]
fn a_bad_database_number_is_refused() {
    // Before: accepted here, then an untyped `Backend` error from the client.
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
    // Before: accepted here, then an untyped `Backend` error from the client.
    url_rules::refused(
        RedisConfig::from_url,
        &format!("{BASE}?protocol=resp9"),
        Expect::BadValue("protocol"),
    );
}
