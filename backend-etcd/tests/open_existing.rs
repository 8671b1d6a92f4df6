//! Opening existing stores only ([`EtcdConfig::with_existing_only`]): a namespace with
//! no key under its prefix is refused as bad input naming it and its prefix, and
//! nothing is written for it (a second look is refused too); a namespace that is there
//! opens.

use liveness_etcd::{EtcdConfig, EtcdStore};
use liveness_testkit::open_existing::{self, Refusal};

#[tokio::test]
async fn only_a_namespace_that_is_there_opens() {
    let Some(server) = liveness_testkit::etcd::shared() else {
        return;
    };
    open_existing::only_a_namespace_that_is_there_opens(
        server.url(),
        async |url, existing_only| {
            let config = EtcdConfig::from_url(url)?.with_existing_only(existing_only);
            EtcdStore::connect(config).await
        },
        async |_: &EtcdStore, refusal: &Refusal| {
            let text = &refusal.message;
            let prefix = format!("liveness/{}/", refusal.missing);
            assert!(text.contains(&prefix), "{text}");
        },
    )
    .await;
}
