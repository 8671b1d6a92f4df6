//! What the etcd bench binaries share.
#![allow(dead_code)] // every bench binary uses only part of it

use std::time::Duration;

use liveness_core::Namespace;
use liveness_etcd::{EtcdConfig, EtcdStore};

/// A store on a fresh namespace of the member at `url`, with a timeout long enough
/// for the largest batches.
pub async fn store(url: &str) -> EtcdStore {
    store_in(url, liveness_conformance::fresh_namespace()).await
}

/// A store on `namespace` of the member at `url` (a namespace another process
/// shares), with the timeout of [`store`].
pub async fn store_in(url: &str, namespace: Namespace) -> EtcdStore {
    let config = EtcdConfig::from_url(url)
        .unwrap_or_else(|e| panic!("{e}"))
        .with_namespace(namespace)
        .with_timeout(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    EtcdStore::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}
