//! The scale bench on the in-memory reference store:
//! `cargo run --release -p liveness-conformance --example scale_memory -- --members 10000,100000 --ttl 10s --seconds 60 [--overload]`.

use liveness_core::MemoryServer;

fn main() {
    liveness_conformance::scale::main(liveness_conformance::memory_factory(MemoryServer::new()));
}
