//! The bench kit on the in-memory reference store.

use std::sync::Arc;

use liveness_core::{MemoryServer, Store};

fn main() {
    let server = MemoryServer::new();
    liveness_conformance::bench::main(liveness_conformance::factory(move || {
        let store: Arc<dyn Store> =
            Arc::new(server.store(&liveness_conformance::fresh_namespace()));
        async move { Some(store) }
    }));
}
