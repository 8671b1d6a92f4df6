//! The bench kit on the in-memory reference store.

use liveness_core::MemoryServer;

fn main() {
    liveness_conformance::bench::main(liveness_conformance::memory_factory(MemoryServer::new()));
}
