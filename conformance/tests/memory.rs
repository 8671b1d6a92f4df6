//! The memory store, the reference model, passes its own suite.

use std::sync::{Arc, OnceLock};

use liveness_core::{MemoryServer, Store};

fn server() -> &'static MemoryServer {
    static SERVER: OnceLock<MemoryServer> = OnceLock::new();
    SERVER.get_or_init(MemoryServer::new)
}

async fn factory() -> Option<Arc<dyn Store>> {
    Some(Arc::new(
        server().store(&liveness_conformance::fresh_namespace()),
    ))
}

liveness_conformance::suite!(factory);
