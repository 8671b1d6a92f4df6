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

/// The reference model's checker round costs the same store calls over 10,000 live
/// members as over 1,000 (deterministic: round trips, not time).
#[test]
fn checker_round_cost_does_not_grow_with_live_leases() {
    use liveness_conformance::bench::{assert_round_cost, CostCheck};
    assert_round_cost(
        liveness_conformance::factory(factory),
        &CostCheck::deterministic(vec![1_000, 10_000], None),
    );
}
