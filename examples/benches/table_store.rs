//! The bench kit on the example custom store, as a user's `benches/bench.rs` would run
//! it: `cargo bench -p examples --bench table_store` prints the figures;
//! `... -- --check-cost` judges a checker round's cost against live leases and exits
//! with status 1 when it grows.

use std::sync::Arc;

use examples::custom_store::TableStore;
use liveness_core::Store;

async fn factory() -> Option<Arc<dyn Store>> {
    Some(Arc::new(TableStore::new()))
}

fn main() {
    liveness_conformance::bench::main(liveness_conformance::factory(factory));
}
