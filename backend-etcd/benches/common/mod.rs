//! What the etcd bench binaries share.

use std::time::Duration;

use liveness_etcd::{EtcdConfig, EtcdStore};

/// A store on a fresh namespace of the member at `url`, with a timeout long enough
/// for the largest batches.
pub async fn store(url: &str) -> EtcdStore {
    let config = EtcdConfig::from_url(url)
        .unwrap_or_else(|e| panic!("{e}"))
        .with_namespace(liveness_conformance::fresh_namespace())
        .with_timeout(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    EtcdStore::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}
