//! The conformance suite and the property test against a real etcd (the binary's
//! shared member, or `LIVENESS_ETCD_URL`), each scenario on a fresh namespace.

use std::sync::Arc;

use liveness_etcd::{EtcdConfig, EtcdStore};

async fn factory() -> Option<Arc<dyn liveness_core::Store>> {
    let server = liveness_testkit::etcd::shared()?;
    let config = EtcdConfig::from_url(server.url())
        .unwrap_or_else(|e| panic!("test server URL: {e}"))
        .with_namespace(liveness_conformance::fresh_namespace())
        // Small, so that the suite fills it and checks the bound.
        .with_death_retention(20)
        .unwrap_or_else(|e| panic!("death retention: {e}"));
    let store = EtcdStore::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connect to the test server: {e}"));
    Some(Arc::new(store))
}

liveness_conformance::suite!(factory, cases = 64);
