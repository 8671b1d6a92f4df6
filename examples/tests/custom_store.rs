//! The example custom store runs the whole conformance suite with one macro call,
//! exactly as a user's own store would in its CI; then the round-cost check of the
//! `expired` bullet that no scenario can see; then a check that the snippets of
//! `docs/custom-store.md` are this compiled code.

use std::sync::Arc;

use examples::custom_store::TableStore;
use liveness_core::Store;

async fn factory() -> Option<Arc<dyn Store>> {
    // Each call is a fresh, empty store: the equivalent of a fresh namespace.
    Some(Arc::new(TableStore::new()))
}

liveness_conformance::suite!(factory);

// ----- The cost of a checker round ------------------------------------------------

use std::sync::Mutex;

use liveness_conformance::bench::{self, CostCheck, Measure, WorkMeter};
use liveness_conformance::Factory;

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

// ----- The guide's snippets --------------------------------------------------------

/// Every ```` ```rust ```` block of `docs/custom-store.md` starts with `// <path>` and
/// appears, line for line, in that file of the workspace: the guide shows code that
/// compiles and runs here.
#[test]
fn docs_snippets_are_compiled_code() {
    let guide = include_str!("../../docs/custom-store.md");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut checked = 0;
    for block in guide.split("```rust\n").skip(1) {
        let snippet = block.split("```").next().unwrap();
        let (first, body) = snippet.split_once('\n').unwrap();
        let path = first
            .strip_prefix("// ")
            .unwrap_or_else(|| panic!("a rust snippet without its file: {first}"));
        let file = std::fs::read_to_string(root.join(path))
            .unwrap_or_else(|e| panic!("{path}, named by a snippet: {e}"));
        assert!(
            file.contains(body.trim_end()),
            "docs/custom-store.md shows code that is not in {path}:\n{body}"
        );
        checked += 1;
    }
    assert_eq!(checked, 3, "the guide's rust snippets");
}
