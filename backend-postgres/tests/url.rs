//! URLs: the shared rules of `liveness_core::url` (through `from_url` and `connect`),
//! and the cases the driver once let through (a misspelt or repeated parameter, a URL
//! without a host). No server is needed: every case is refused before a connection is
//! attempted.

use liveness_conformance::url_rules::{self, Expect};
use liveness_postgres::PostgresConfig;

/// Nothing listens on port 1: a connection attempt would answer `Unavailable`.
const BASE: &str = "postgres://u@127.0.0.1:1/db";

liveness_conformance::url_suite!(
    liveness_postgres::URL,
    BASE,
    PostgresConfig::from_url,
    liveness_postgres::connect
);

#[test]
fn a_misspelt_namespace_parameter_is_refused() {
    // Before: passed to sqlx, which ignored it and connected to `default`.
    url_rules::refused(
        PostgresConfig::from_url,
        &format!("{BASE}?namespace=typo"),
        Expect::Unknown("namespace".into()),
    );
    url_rules::refused(
        PostgresConfig::from_url,
        &format!("{BASE}?NS=x"),
        Expect::Unknown("NS".into()),
    );
    url_rules::refused(
        PostgresConfig::from_url,
        &format!("{BASE}?connect_timeout=3"),
        Expect::Unknown("connect_timeout".into()),
    );
}

#[test]
fn a_repeated_namespace_is_refused() {
    // Before: the last one won.
    url_rules::refused(
        PostgresConfig::from_url,
        &format!("{BASE}?ns=a&ns=b"),
        Expect::Repeated("ns"),
    );
}

#[test]
fn a_url_without_a_host_is_refused() {
    // Before: waited 5 s for localhost and answered `Unavailable`.
    url_rules::refused(
        PostgresConfig::from_url,
        "postgres:///db?ns=a",
        Expect::Malformed,
    );
    url_rules::refused(PostgresConfig::from_url, "postgresql://", Expect::Malformed);
}
