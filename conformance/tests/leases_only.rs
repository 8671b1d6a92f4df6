//! A store of elections alone: the memory store with no work items and no operator's
//! views (its input checks refuse them), run through the lease scenarios only, and a
//! full scenario refused with a message that says why.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

use liveness_core::{Capabilities, Error, InputProblem, MemoryServer, Page, Space, Store};

fn server() -> &'static MemoryServer {
    static SERVER: OnceLock<MemoryServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        MemoryServer::new()
            .with_capabilities(Capabilities::default().items(false).operator_views(false))
    })
}

async fn leases_only() -> Option<Arc<dyn Store>> {
    let store: Arc<dyn Store> = Arc::new(server().store(&liveness_conformance::fresh_namespace()));
    Some(store)
}

liveness_conformance::suite!(leases_only: leases_only);

#[tokio::test]
async fn item_and_operator_calls_answer_unsupported() {
    let store = liveness_core::checked(leases_only().await.unwrap());
    let items = store.enqueue(b"x", Default::default()).await;
    assert!(
        matches!(
            items,
            Err(Error::InvalidInput {
                what: "enqueue",
                problem: InputProblem::Unsupported
            })
        ),
        "{items:?}"
    );
    let views = store.leases(&Space::members(), Page::first(10)).await;
    assert!(
        matches!(
            views,
            Err(Error::InvalidInput {
                what: "leases",
                problem: InputProblem::Unsupported
            })
        ),
        "{views:?}"
    );
}

#[test]
fn a_scenario_of_work_items_is_refused_with_the_reason() {
    let refused = catch_unwind(AssertUnwindSafe(|| {
        liveness_conformance::run(
            "enqueue_claim_complete",
            liveness_conformance::factory(leases_only),
        )
    }))
    .expect_err("a store without items ran an item scenario");
    let message = refused
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(message.contains("suite!(leases_only"), "{message}");
}
