//! URLs: the shared rules of `liveness_core::url` (through `from_url` and `connect`),
//! and the cases issue 10 found. No server is needed: every case is refused before a
//! connection is attempted.

use std::time::Duration;

use backend_etcd::EtcdConfig;
use liveness_conformance::url_rules::{self, Expect};

/// Nothing listens on port 1: a connection attempt would answer `Unavailable`.
const BASE: &str = "etcd://127.0.0.1:1";

#[test]
fn every_url_rule() {
    url_rules::check(&backend_etcd::URL, BASE, EtcdConfig::from_url);
    url_rules::check(
        &backend_etcd::URL,
        "etcd://127.0.0.1:1,[::1]:2/",
        EtcdConfig::from_url,
    );
}

#[tokio::test]
async fn connect_refuses_every_bad_url_without_connecting() {
    url_rules::check_connect(
        &backend_etcd::URL,
        BASE,
        Duration::from_secs(60),
        |url| async move { backend_etcd::connect(&url).await },
    )
    .await;
}

#[test]
fn a_repeated_namespace_is_refused() {
    // Before: the last one won.
    let url = format!("{BASE}?ns=a&ns=b");
    match EtcdConfig::from_url(&url) {
        Err(e) if Expect::Repeated("ns").matches(&e) => {}
        other => panic!("{url}: {other:?}"),
    }
}
