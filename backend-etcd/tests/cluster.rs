//! The conformance suite and the property test against a three-member etcd cluster
//! (the binary's shared one, started by the test kit), through a URL that names all
//! three members: the client balances over them, so scenarios run against followers
//! as much as against the leader (followers forward writes and serve linearizable
//! reads through the leader).

use std::sync::Arc;

use liveness_etcd::{EtcdConfig, EtcdStore};

async fn factory() -> Option<Arc<dyn liveness_core::Store>> {
    let cluster = liveness_testkit::etcd_cluster::shared()?;
    let config = EtcdConfig::from_url(&cluster.url())
        .unwrap_or_else(|e| panic!("cluster URL: {e}"))
        .with_namespace(liveness_conformance::fresh_namespace());
    assert_eq!(config.endpoints().len(), 3, "the URL names every member");
    let store = EtcdStore::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connect to the test cluster: {e}"));
    Some(Arc::new(store))
}

liveness_conformance::suite!(factory, cases = 32);
