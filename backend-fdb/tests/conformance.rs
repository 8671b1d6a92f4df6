//! The conformance suite against the in-crate TEST DOUBLE of FoundationDB (not a real
//! cluster: see `tests/live.rs` for that). Runs in every `cargo test`.

use std::sync::{Arc, OnceLock};

use liveness_core::Store;
use liveness_fdb::DoubleDatabase;

/// One double for the whole test binary, like one cluster shared by many tests; each
/// store is on a fresh namespace (its own subspace).
fn double() -> &'static DoubleDatabase {
    static DB: OnceLock<DoubleDatabase> = OnceLock::new();
    DB.get_or_init(DoubleDatabase::new)
}

async fn factory() -> Option<Arc<dyn Store>> {
    // A small death retention, so that the suite fills it and checks the bound.
    Some(Arc::new(double().store_keeping_deaths(
        &liveness_conformance::fresh_namespace(),
        20,
    )))
}

liveness_conformance::suite!(factory, cases = 64);
