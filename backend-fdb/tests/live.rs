//! The conformance suite against a REAL FoundationDB cluster (feature `native`).
//!
//! Needs libfdb_c to link and `FDB_CLUSTER_FILE` pointing at a running cluster's
//! cluster file. Without `FDB_CLUSTER_FILE`, every test here FAILS (never passes
//! silently): the live suite did not run. Never built in this workspace's CI (it
//! needs libfdb_c); run it with
//! `FDB_CLUSTER_FILE=/etc/foundationdb/fdb.cluster cargo test -p liveness-fdb --features native --test live`.

use std::sync::Arc;

use liveness_core::Store;

async fn factory() -> Option<Arc<dyn Store>> {
    let Ok(path) = std::env::var("FDB_CLUSTER_FILE") else {
        panic!("FDB_CLUSTER_FILE not set: the live suite did not run");
    };
    let ns = liveness_conformance::fresh_namespace();
    let url = format!("fdb://{path}?ns={ns}");
    match liveness_fdb::connect(&url).await {
        Ok(store) => Some(Arc::new(store)),
        Err(e) => panic!("cannot open the cluster at {path}: {e}: the live suite did not run"),
    }
}

liveness_conformance::suite!(factory, cases = 64);
