//! Small programs per use case, the demo (`src/bin/demo`), and [`custom_store`]: a store
//! written from scratch as a user would, exactly the one `docs/custom-store.md` builds,
//! which passes the whole conformance suite (`tests/custom_store.rs`).

pub mod custom_store;

use std::sync::Arc;

use liveness::Store;

/// The store named by the program's first argument (a URL [`liveness::connect`]
/// takes), or the in-process `memory://` store when there is none.
///
/// # Errors
///
/// What [`liveness::connect`] answers for that URL.
pub async fn store_from_args() -> liveness::Result<Arc<dyn Store>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://".to_owned());
    liveness::connect(&url).await
}
