//! The scale bench on the in-memory reference store:
//! `cargo run --release -p liveness-conformance --example scale_memory -- --members 10000,100000 --ttl 10s --seconds 60 [--overload]`.

use std::sync::Arc;

use liveness_core::{MemoryServer, Store};

fn main() {
    let server = MemoryServer::new();
    liveness_conformance::scale::main(liveness_conformance::factory(move || {
        let store: Arc<dyn Store> =
            Arc::new(server.store(&liveness_conformance::fresh_namespace()));
        async move { Some(store) }
    }));
}
