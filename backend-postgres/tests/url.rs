//! URLs: the shared rules of `liveness_core::url` (through `from_url` and `connect`),
//! and the cases issue 10 found. No server is needed: every case is refused before a
//! connection is attempted.

use std::time::Duration;

use backend_postgres::PostgresConfig;
use liveness_conformance::url_rules::{self, Expect};

/// Nothing listens on port 1: a connection attempt would answer `Unavailable`.
const BASE: &str = "postgres://u@127.0.0.1:1/db";

fn refused(url: &str, expect: Expect) {
    match PostgresConfig::from_url(url) {
        Err(e) if expect.matches(&e) => {}
        other => panic!("{url}: expected {expect:?}, got {other:?}"),
    }
}

#[test]
fn every_url_rule() {
    url_rules::check(&backend_postgres::URL, BASE, PostgresConfig::from_url);
}

#[tokio::test]
async fn connect_refuses_every_bad_url_without_connecting() {
    url_rules::check_connect(
        &backend_postgres::URL,
        BASE,
        Duration::from_secs(60),
        |url| async move { backend_postgres::connect(&url).await },
    )
    .await;
}

#[test]
fn a_misspelt_namespace_parameter_is_refused() {
    // Before: passed to sqlx, which ignored it and connected to `default`.
    refused(
        &format!("{BASE}?namespace=typo"),
        Expect::Unknown("namespace".into()),
    );
    refused(&format!("{BASE}?NS=x"), Expect::Unknown("NS".into()));
    refused(
        &format!("{BASE}?connect_timeout=3"),
        Expect::Unknown("connect_timeout".into()),
    );
}

#[test]
fn a_repeated_namespace_is_refused() {
    // Before: the last one won.
    refused(&format!("{BASE}?ns=a&ns=b"), Expect::Repeated("ns"));
}

#[test]
fn a_url_without_a_host_is_refused() {
    // Before: waited 5 s for localhost and answered `Unavailable`.
    refused("postgres:///db?ns=a", Expect::Malformed);
    refused("postgresql://", Expect::Malformed);
}
