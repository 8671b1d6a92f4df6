//! URLs: the shared rules of `liveness_core::url` (through `from_url` and `connect`),
//! and the values that would break an unchecked `connect`: a huge pool, a busy timeout
//! beyond the range.

use std::time::Duration;

use liveness_conformance::url_rules;
use liveness_core::{Error, InputProblem};
use liveness_sqlite::SqliteConfig;

/// Only turns a hang into a failure; a refused URL answers in microseconds.
const HANG: Duration = Duration::from_secs(60);

#[test]
fn every_url_rule() {
    url_rules::check(
        &liveness_sqlite::URL,
        "sqlite:///tmp/liveness-url-rules/live.db",
        SqliteConfig::from_url,
    );
}

#[tokio::test]
async fn connect_refuses_every_bad_url_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let base = format!("sqlite://{}", dir.path().join("live.db").display());
    url_rules::check_connect(&liveness_sqlite::URL, &base, HANG, |url| async move {
        liveness_sqlite::connect(&url).await
    })
    .await;
    let created: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(created.is_empty(), "created {created:?}");
}

/// `connect` with a bad URL answers `InvalidInput` naming `name` and creates no file.
async fn refused_without_a_file(query: &str, name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.db");
    let url = format!("sqlite://{}?{query}", path.display());
    let answer = tokio::time::timeout(HANG, liveness_sqlite::connect(&url))
        .await
        .unwrap_or_else(|_| panic!("{url}: connect hung"));
    assert!(
        matches!(
            &answer,
            Err(Error::InvalidInput {
                what: "url",
                problem: InputProblem::OutOfRange { name: n, .. },
            }) if *n == name
        ),
        "{url}: {:?}",
        answer.map(|_| ())
    );
    assert!(!path.exists(), "{url}: created the database file");
}

#[tokio::test]
async fn a_huge_pool_is_refused_before_anything_is_opened() {
    // Unchecked, the pool would try a 300 GB allocation and abort the process.
    refused_without_a_file("max_connections=4294967295", "max_connections").await;
    refused_without_a_file("max_connections=65", "max_connections").await;
}

#[tokio::test]
async fn a_busy_timeout_beyond_the_range_is_refused_instead_of_hanging() {
    // Unchecked, `connect` would hang while sqlx threads panic in a loop.
    refused_without_a_file("busy_timeout_ms=2147483648", "busy_timeout_ms").await;
    refused_without_a_file("busy_timeout_ms=600001", "busy_timeout_ms").await;
}
