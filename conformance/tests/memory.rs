//! The memory store, the reference model, passes its own suite.

use std::sync::{Arc, OnceLock};

use liveness_core::{Capabilities, MemoryServer, Store};

fn server() -> &'static MemoryServer {
    static SERVER: OnceLock<MemoryServer> = OnceLock::new();
    // A small death retention, so that the suite fills it and checks the bound.
    SERVER.get_or_init(|| {
        MemoryServer::new().with_capabilities(
            Capabilities::default()
                .death_retention(20)
                .sessions(true)
                .error_text(true)
                .queues(true)
                .item_times(true)
                .delays(true)
                .key_retention(Some(liveness_core::DEFAULT_KEY_RETENTION))
                .dead_letter_retention(Some(liveness_core::DEFAULT_DEAD_LETTER_RETENTION)),
        )
    })
}

async fn factory() -> Option<Arc<dyn Store>> {
    Some(Arc::new(
        server().store(&liveness_conformance::fresh_namespace()),
    ))
}

liveness_conformance::suite!(factory);

/// With a retention of a second, the retention scenario waits it out: expired dead
/// letters are removed by the next dead-lettering, and nothing else is.
#[test]
fn dead_letters_outlive_a_short_retention_only_until_the_next_dead_letter() {
    let short = || async {
        let caps = server()
            .store(&liveness_conformance::fresh_namespace())
            .capabilities()
            .dead_letter_retention(Some(std::time::Duration::from_secs(1)));
        let server = MemoryServer::new().with_capabilities(caps);
        Some(Arc::new(server.store(&liveness_conformance::fresh_namespace())) as Arc<dyn Store>)
    };
    liveness_conformance::run(
        "a_dead_letter_is_kept_for_the_retention_then_removed",
        liveness_conformance::factory(short),
    );
}

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

/// The simulation can fail: workers and leaders that skip their "may I still act?"
/// check (careless) act after a freeze while their successors already work, and the
/// oracle says so. (The oracle's own unit tests cover every other check.)
#[test]
fn fault_simulation_catches_careless_workers() {
    use liveness_conformance::sim::{simulate, SimConfig};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let outcome = rt.block_on(async {
        let store: Arc<dyn Store> =
            Arc::new(server().store(&liveness_conformance::fresh_namespace()));
        let ttl = liveness_core::Ttl::from_millis(1500).unwrap();
        let config = SimConfig {
            careless: true,
            ..SimConfig::new(7, ttl)
        };
        simulate(store, config).await
    });
    outcome.assert_caught("careless workers", &["still acted"]);
}
