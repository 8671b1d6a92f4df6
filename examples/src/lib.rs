//! Small programs per use case, the demo (`src/bin/demo`), and [`custom_store`]: a store
//! written from scratch as a user would, which passes the whole conformance suite
//! (`tests/custom_store.rs`; walk-through in `docs/custom-store.md`).

pub mod custom_store;
