//! The store written against the public API runs the whole conformance suite, and the
//! user's program runs to its end on it.

use std::sync::{Arc, OnceLock};

use liveness::{MemoryServer, Store};
use liveness_api_stability::{program, Rebuilt};

fn server() -> &'static MemoryServer {
    static SERVER: OnceLock<MemoryServer> = OnceLock::new();
    SERVER.get_or_init(MemoryServer::new)
}

async fn rebuilt() -> Option<Arc<dyn Store>> {
    let namespace = liveness_conformance::fresh_namespace();
    Some(Arc::new(Rebuilt::new(server().store(&namespace))))
}

liveness_conformance::suite!(rebuilt, cases = 32);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_program_completes_its_item() {
    let store = rebuilt().await.unwrap();
    assert_eq!(program(store).await.unwrap(), 1);
}
