//! A process hosting many members is SIGKILLed, on PostgreSQL: how long until every
//! one of its members is declared dead and its item requeued, whether any is declared
//! twice, the death records it left, and what the other processes' renewals saw
//! meanwhile. Once with the members riding one session, once with a lease each, in one
//! run.
//!
//! `cargo bench -p liveness-postgres --bench session_death -- [--members 10000]
//! [--others 20] [--other-members 500] [--ttl-ms 5000] [--no-leases]`. Uses
//! `LIVENESS_POSTGRES_URL` when set, else starts a private server through the test kit
//! (stopped when the bench ends).
//!
//! The body is the bench kit's ([`liveness_conformance::bench::session_death`], where
//! the victim child, the other sessions, the probe and the printed figures are
//! described); this file says how to find the server and connect to it: each process
//! a pool of 20 connections on the namespace the parent chose.

use liveness_conformance::bench::session_death::{self, connect};
use liveness_testkit::postgres::PgServer;
use liveness_testkit::with_query;

/// The server: `LIVENESS_POSTGRES_URL`, or a private one (kept alive with its handle).
fn server() -> Option<(Option<PgServer>, String)> {
    if let Ok(url) = std::env::var("LIVENESS_POSTGRES_URL") {
        return Some((None, url));
    }
    let server = PgServer::start()?;
    let url = server.url().to_owned();
    Some((Some(server), url))
}

fn main() {
    session_death::main(
        server,
        connect(|url: String, namespace| async move {
            let url = with_query(&url, &format!("ns={namespace}&max_connections=20"));
            liveness_postgres::connect(&url)
                .await
                .unwrap_or_else(|e| panic!("connect: {e}"))
        }),
    );
}
