//! The example custom store (the one `docs/custom-store.md` builds) runs the whole
//! conformance suite with one macro call, exactly as a user's own store would in its
//! CI; then the round-cost check of the `expired` bullet that no scenario can see, on
//! the store's own work counter, and the same check failing a store that reads every
//! lease where the index would read a few.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use examples::custom_store::MapStore;
use liveness_conformance::bench::{self, CostCheck, Measure, WorkMeter};
use liveness_conformance::fresh_namespace;
use liveness_core::layer::{Intercept, Next, Reply, Request, StoreBuilder};
use liveness_core::{async_trait, Key, Page, Result, Store};

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

/// In front of a store: every `expired` and `next_expiry` first reads every lease of
/// its space, a page at a time, as a store without an expiry index would, counting
/// what it read. Every answer stays the store's own, so every scenario would pass.
#[derive(Debug, Default)]
struct ReadsEveryLease {
    read: AtomicU64,
}

#[async_trait]
impl Intercept for ReadsEveryLease {
    async fn call(&self, req: Request, next: Next) -> Result<Reply> {
        if let Request::Expired { space, .. } | Request::NextExpiry { space } = &req {
            let mut after: Option<Key> = None;
            loop {
                let page = Page {
                    after: after.as_ref(),
                    limit: 1_000,
                };
                let rows = next.store().leases(space, page).await?;
                self.read.fetch_add(rows.len() as u64, Ordering::Relaxed);
                match rows.last() {
                    Some(last) => after = Some(last.key.clone()),
                    None => break,
                }
            }
        }
        next.run(req).await
    }
}

/// Without its expiry index, a store still gives every right answer, but the cost
/// check fails it: its rounds read every lease.
#[test]
fn round_cost_check_catches_a_store_that_scans_every_lease() {
    let scan = Arc::new(ReadsEveryLease::default());
    let layer = scan.clone();
    let factory = liveness_conformance::factory(move || {
        let store = Arc::new(MapStore::new(fresh_namespace()));
        let store = StoreBuilder::new(store).layer(layer.clone()).build();
        async move { Some(store) }
    });
    let meter: WorkMeter = Arc::new(move || scan.read.load(Ordering::Relaxed));
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
