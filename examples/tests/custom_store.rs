//! The example custom store (the one `docs/custom-store.md` builds) runs the whole
//! conformance suite with one macro call, exactly as a user's own store would in its
//! CI; then the round-cost check of the `expired` bullet that no scenario can see, on
//! the store's own work counter, and the same check failing the store built without
//! its expiry index.

use std::sync::Arc;

use examples::custom_store::MapStore;
use liveness_conformance::bench::{self, CostCheck, Measure};
use liveness_conformance::fresh_namespace;
use liveness_core::Store;

/// A fresh store on a fresh namespace for every call: scenarios run in parallel.
async fn factory() -> Option<Arc<dyn Store>> {
    Some(Arc::new(MapStore::new(fresh_namespace())))
}

liveness_conformance::suite!(factory);

/// With its expiry index, a checker round reads as many leases over 10,000 live
/// members as over 1,000: the `expired` bullet holds, checked deterministically.
#[test]
fn round_cost_does_not_grow_with_live_leases() {
    let make = || MapStore::new(fresh_namespace());
    let (factory, meter) = bench::metered(make, MapStore::rows_visited);
    let check = CostCheck::deterministic(vec![1_000, 10_000], Some(meter));
    bench::assert_round_cost(factory, &check);
}

/// Without it, the store still gives every right answer (so the scenarios pass it),
/// but the cost check fails it: its rounds read every lease.
#[test]
fn round_cost_check_catches_a_store_that_scans_every_lease() {
    let make = || MapStore::scanning(fresh_namespace());
    let (factory, meter) = bench::metered(make, MapStore::rows_visited);
    let check = CostCheck::deterministic(vec![1_000, 10_000], Some(meter));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let report = rt.block_on(bench::check_round_cost(factory, &check));
    println!("{report}");
    assert!(!report.passed(), "a scanning store passed:\n{report}");
    assert!(
        report.growth.iter().any(|g| g.measure == Measure::Work),
        "{report}"
    );
}
