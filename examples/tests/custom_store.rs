//! The example custom store runs the whole conformance suite with one macro call,
//! exactly as a user's own store would in its CI.

use std::sync::Arc;

use examples::custom_store::TableStore;
use liveness_core::Store;

async fn factory() -> Option<Arc<dyn Store>> {
    // Each call is a fresh, empty store: the equivalent of a fresh namespace.
    Some(Arc::new(TableStore::new()))
}

liveness_conformance::suite!(factory);
