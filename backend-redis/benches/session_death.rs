//! A process hosting many members is SIGKILLed: how long until every one of its
//! members is declared dead and its item requeued, whether any is declared twice, and
//! what the other processes' renewals saw meanwhile. Once with the members riding one
//! session, once with a lease each, on one redis-server, in one run.
//!
//! `cargo bench -p liveness-redis --bench session_death -- [--members 10000]
//! [--others 20] [--other-members 500] [--ttl-ms 5000] [--no-leases]`. Uses
//! `LIVENESS_REDIS_URL` when set, else starts a private redis-server.
//!
//! The body is the bench kit's
//! ([`liveness_conformance::bench::session_death`], where the victim child, the other
//! sessions, the probe and the printed figures are described); this file says how to
//! find the server and connect to it.

use liveness_conformance::bench::session_death::{self, connect};

mod common;
use common::{server, store_in};

fn main() {
    session_death::main(
        || server("session_death"),
        connect(|url: String, namespace| async move { store_in(&url, namespace).await }),
    );
}
