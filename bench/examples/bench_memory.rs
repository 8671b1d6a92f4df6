//! The bench kit on the in-memory reference store.

use liveness_core::MemoryServer;

fn main() {
    liveness_bench::main(liveness_bench::memory_factory(MemoryServer::new()));
}
