//! The bench kit on the example custom store, as the guide's `benches/bench.rs` runs
//! it: `cargo bench -p examples --bench custom_store` prints the figures;
//! `... -- --check-cost` judges a checker round's cost against live leases and exits
//! with status 1 when it grows.

use std::sync::Arc;

use examples::custom_store::MapStore;
use liveness_core::Store;

async fn factory() -> Option<Arc<dyn Store>> {
    let namespace = liveness_conformance::fresh_namespace();
    Some(Arc::new(MapStore::new(namespace)))
}

fn main() {
    liveness_conformance::bench::main(liveness_conformance::factory(factory));
}
