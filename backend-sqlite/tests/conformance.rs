//! The conformance suite against one SQLite file shared by every scenario of this
//! test binary (each scenario on its own fresh namespace, through its own handle).

use std::sync::{Arc, OnceLock};

use liveness_core::Store;
use liveness_sqlite::{SqliteConfig, SqliteStore};

/// One database file for the whole test binary, so the scenarios, running in
/// parallel, also exercise many handles (pools) on one file.
fn db_path() -> std::path::PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("temp dir"))
        .path()
        .join("conformance.db")
}

async fn factory() -> Option<Arc<dyn Store>> {
    // A small death retention, so that the suite fills it and checks the bound.
    let config = SqliteConfig::new(db_path(), liveness_conformance::fresh_namespace())
        .with_death_retention(20)
        .expect("a death retention of 20");
    let store = SqliteStore::connect(config)
        .await
        .expect("open the sqlite store");
    Some(Arc::new(store))
}

liveness_conformance::suite!(factory, cases = 64);
