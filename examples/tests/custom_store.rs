//! The example custom store runs the whole conformance suite with one macro call,
//! exactly as a user's own store would in its CI, and the round-cost check of the
//! `expired` bullet that no scenario can see.

use std::sync::{Arc, Mutex};

use examples::custom_store::TableStore;
use liveness_conformance::bench::{self, CostCheck, Measure, WorkMeter};
use liveness_conformance::Factory;
use liveness_core::Store;

async fn factory() -> Option<Arc<dyn Store>> {
    // Each call is a fresh, empty store: the equivalent of a fresh namespace.
    Some(Arc::new(TableStore::new()))
}

liveness_conformance::suite!(factory);

/// A factory of `make()` stores, and a meter reading the rows the latest one visited.
fn metered(make: fn() -> TableStore) -> (Factory, WorkMeter) {
    let latest: Arc<Mutex<Option<TableStore>>> = Arc::default();
    let made = latest.clone();
    let factory = liveness_conformance::factory(move || {
        let store = make();
        *made.lock().unwrap() = Some(store.clone());
        async move { Some(Arc::new(store) as Arc<dyn Store>) }
    });
    let meter: WorkMeter = Arc::new(move || {
        latest
            .lock()
            .unwrap()
            .as_ref()
            .map_or(0, TableStore::rows_visited)
    });
    (factory, meter)
}

/// With its expiry index, a checker round reads as many rows over 10,000 live members
/// as over 1,000: the `expired` bullet holds, checked deterministically.
#[test]
fn round_cost_does_not_grow_with_live_leases() {
    let (factory, meter) = metered(TableStore::new);
    bench::assert_round_cost(
        factory,
        &CostCheck::deterministic(vec![1_000, 10_000], Some(meter)),
    );
}

/// Without it, the store still gives every right answer (so the scenarios pass it),
/// but the cost check fails it: its rounds read every lease row.
#[test]
fn round_cost_check_catches_a_store_that_scans_every_lease() {
    let (factory, meter) = metered(TableStore::without_expiry_index);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let report = rt.block_on(bench::check_round_cost(
        factory,
        &CostCheck::deterministic(vec![1_000, 10_000], Some(meter)),
    ));
    println!("{report}");
    assert!(!report.passed(), "a scanning store passed:\n{report}");
    assert!(
        report.growth.iter().any(|g| g.measure == Measure::Work),
        "{report}"
    );
}
