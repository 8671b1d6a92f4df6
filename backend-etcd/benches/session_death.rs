//! A process hosting many members is SIGKILLed, on one etcd member: how long until
//! every one of its members is declared dead and its item requeued, whether any is
//! declared twice, the death records it left, and what the other processes' renewals
//! saw meanwhile. Once with the members riding one session, once with a lease each, in
//! one run.
//!
//! `cargo bench -p liveness-etcd --bench session_death -- [--members 10000]
//! [--others 20] [--other-members 500] [--ttl-ms 5000] [--no-leases]`. Uses
//! `LIVENESS_ETCD_URL` when set, else starts a private etcd member through the test
//! kit (stopped when the bench ends).
//!
//! The body is the bench kit's ([`liveness_conformance::bench::session_death`], where
//! the victim child, the other sessions, the probe and the printed figures are
//! described); this file says how to find the member and connect to it.

use liveness_conformance::bench::session_death::{self, connect};
use liveness_testkit::etcd::{EtcdServer, URL_ENV};

mod common;
use common::store_in;

/// The member: `LIVENESS_ETCD_URL`, or a private one (kept alive with its handle).
fn server() -> Option<(Option<EtcdServer>, String)> {
    if let Ok(url) = std::env::var(URL_ENV) {
        if !url.is_empty() {
            return Some((None, url));
        }
    }
    let server = liveness_testkit::etcd::start()?;
    let url = server.url().to_owned();
    Some((Some(server), url))
}

fn main() {
    session_death::main(
        server,
        connect(|url: String, namespace| async move { store_in(&url, namespace).await }),
    );
}
