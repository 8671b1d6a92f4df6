//! Opening existing stores only ([`EtcdConfig::with_existing_only`]): a namespace with
//! no key under its prefix is refused as bad input naming it, and nothing is written
//! for it; a namespace that is there opens.

use liveness_conformance::fresh_namespace;
use liveness_core::{EnqueueOptions, Error, InputProblem, ItemStore};
use liveness_etcd::{EtcdConfig, EtcdStore};

#[tokio::test]
async fn only_a_namespace_that_is_there_opens() {
    let Some(server) = liveness_testkit::etcd::shared() else {
        return;
    };
    let url = |ns: &str| {
        let sep = if server.url().contains('?') { '&' } else { '?' };
        format!("{}{sep}ns={ns}", server.url())
    };
    let config = |ns: &str| {
        EtcdConfig::from_url(&url(ns))
            .unwrap()
            .with_existing_only(true)
    };
    let held = fresh_namespace();
    let store = liveness_etcd::connect(&url(held.as_str())).await.unwrap();
    let id = store
        .enqueue(b"x", EnqueueOptions::default())
        .await
        .unwrap();

    let missing = fresh_namespace();
    for _ in 0..2 {
        // Refused, and refused again: the first look wrote nothing.
        let err = EtcdStore::connect(config(missing.as_str()))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidInput {
                    what: "namespace",
                    problem: InputProblem::BadValue { .. }
                }
            ),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains(&format!("ns={missing}")), "{text}");
        assert!(text.contains(&format!("liveness/{missing}/")), "{text}");
    }

    let reader = EtcdStore::connect(config(held.as_str())).await.unwrap();
    assert!(reader.item(id).await.unwrap().is_some());
}
