//! URLs: the shared rules of `liveness_core::url` (through `from_url` and `connect`),
//! and the cases issue 10 found. No server is needed: every case is refused before a
//! connection is attempted.

use std::time::Duration;

use backend_redis::RedisConfig;
use liveness_conformance::url_rules::{self, Expect};

/// Nothing listens on port 1: a connection attempt would answer `Unavailable`.
const BASE: &str = "redis://127.0.0.1:1";

fn refused(url: &str, expect: Expect) {
    match RedisConfig::from_url(url) {
        Err(e) if expect.matches(&e) => {}
        other => panic!("{url}: expected {expect:?}, got {other:?}"),
    }
}

#[test]
fn every_url_rule() {
    url_rules::check(&backend_redis::URL, BASE, RedisConfig::from_url);
    url_rules::check(
        &backend_redis::URL,
        "rediss://127.0.0.1:1",
        RedisConfig::from_url,
    );
}

#[tokio::test]
async fn connect_refuses_every_bad_url_without_connecting() {
    url_rules::check_connect(
        &backend_redis::URL,
        BASE,
        Duration::from_secs(60),
        |url| async move { backend_redis::connect(&url).await },
    )
    .await;
}

#[test]
fn a_repeated_namespace_is_refused() {
    // Before: the last one won.
    refused(&format!("{BASE}?ns=a&ns=b"), Expect::Repeated("ns"));
}

#[test]
fn a_bad_database_number_is_refused() {
    // Before: accepted here, then an untyped `Backend` error from the client.
    for db in ["abc", "-1", "+1", "16", "4294967296"] {
        refused(&format!("{BASE}/{db}"), Expect::OutOfRange("db"));
    }
}

#[test]
fn an_unknown_protocol_is_refused() {
    // Before: accepted here, then an untyped `Backend` error from the client.
    refused(
        &format!("{BASE}?protocol=resp9"),
        Expect::BadValue("protocol"),
    );
}
