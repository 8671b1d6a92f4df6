//! A factory that gives no store must never look like a passing suite: every
//! generated test fails, unless skipping was asked for explicitly outside CI.
//!
//! One test in its own binary (its own process), because it sets environment
//! variables: nothing else runs beside it to see them change.

use std::panic::{catch_unwind, AssertUnwindSafe};

use liveness_conformance::skip::{NoStore, ALLOW_SKIP};
use liveness_conformance::{bench, factory, Factory};

fn none() -> Factory {
    factory(|| async { None })
}

/// The panic message of `f`, or `None` when it returned normally.
fn panic_of(f: impl FnOnce()) -> Option<String> {
    let err = catch_unwind(AssertUnwindSafe(f)).err()?;
    Some(
        err.downcast_ref::<String>()
            .cloned()
            .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default(),
    )
}

/// A named way into the suite.
type Entry = (&'static str, Box<dyn Fn()>);

/// Each entry point a `suite!` test or a cost check goes through.
fn entry_points() -> Vec<Entry> {
    vec![
        (
            "a scenario",
            Box::new(|| liveness_conformance::run("acquire_free_key", none())),
        ),
        (
            "the property test",
            Box::new(|| liveness_conformance::property::run(none(), 1)),
        ),
        (
            "the fault simulation",
            Box::new(|| liveness_conformance::sim::run_seeds(none())),
        ),
        (
            "the cost check",
            Box::new(|| {
                bench::assert_round_cost(none(), &bench::CostCheck::deterministic(vec![1], None))
            }),
        ),
    ]
}

#[test]
fn a_missing_store_fails_unless_skipping_is_asked_for_outside_ci() {
    // Outside CI, without the opt-in: a failure that says how to skip.
    std::env::remove_var("CI");
    std::env::remove_var(ALLOW_SKIP);
    assert_eq!(NoStore::from_env(), NoStore::Fail);
    for (what, run) in entry_points() {
        let msg = panic_of(run).unwrap_or_else(|| panic!("{what} passed without a store"));
        assert!(msg.contains("nothing was tested"), "{what}: {msg}");
        assert!(
            msg.contains(ALLOW_SKIP),
            "{what} does not say how to skip: {msg}"
        );
    }

    // Under CI, the opt-in changes nothing: still a failure.
    std::env::set_var("CI", "true");
    std::env::set_var(ALLOW_SKIP, "1");
    assert_eq!(NoStore::from_env(), NoStore::Fail);
    for (what, run) in entry_points() {
        let msg = panic_of(run).unwrap_or_else(|| panic!("{what} passed without a store in CI"));
        assert!(msg.contains("CI is set"), "{what}: {msg}");
    }

    // `CI=false` is not CI; with the opt-in, a skip (one uncaptured SKIP line).
    std::env::set_var("CI", "false");
    assert_eq!(NoStore::from_env(), NoStore::Skip);
    for (what, run) in entry_points() {
        assert_eq!(
            panic_of(run),
            None,
            "{what} failed although skipping was asked for"
        );
    }
    std::env::set_var(ALLOW_SKIP, "0");
    assert_eq!(NoStore::from_env(), NoStore::Fail);
}
