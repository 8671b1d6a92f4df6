//! Many claimers at once through one handle: a claim that loses a race to another one
//! tries again within its deadline; it never answers `Unavailable` to its caller for
//! contention alone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use liveness_core::{EnqueueOptions, Error, HolderId, ItemStore, Key, Store, Ttl};
use liveness_etcd::{EtcdConfig, EtcdStore};

/// 64 members of one process, each claiming one item at a time and completing it,
/// drain 1,000 items: every claim answers (items or none), none `Unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_claimers_never_see_contention() {
    let Some(server) = liveness_testkit::etcd::shared() else {
        return;
    };
    let config = EtcdConfig::from_url(server.url())
        .unwrap()
        .with_namespace(liveness_conformance::fresh_namespace());
    let store = Arc::new(EtcdStore::connect(config).await.unwrap());
    let items = 1000;
    for i in 0..items {
        let payload = format!("job {i}");
        store
            .enqueue(payload.as_bytes(), EnqueueOptions::default())
            .await
            .unwrap();
    }
    let (done, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..64 {
        let (store, done, refused) = (store.clone(), done.clone(), refused.clone());
        tasks.spawn(async move {
            let key = Key::member(&format!("w{w}")).unwrap();
            let holder = HolderId::new(format!("w{w}")).unwrap();
            let lease = store
                .acquire(&key, &holder, Ttl::from_secs(60).unwrap())
                .await
                .unwrap();
            while done.load(Ordering::SeqCst) < items {
                match store.claim(&lease, 1).await {
                    Ok(claimed) if claimed.is_empty() => tokio::task::yield_now().await,
                    Ok(claimed) => {
                        for item in claimed {
                            store.complete(&lease, item.id).await.unwrap();
                            done.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    Err(Error::Unavailable { .. }) => {
                        refused.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => panic!("claim: {e}"),
                }
            }
        });
    }
    while let Some(task) = tasks.join_next().await {
        task.unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), items);
    assert_eq!(
        refused.load(Ordering::SeqCst),
        0,
        "claims answered Unavailable under contention"
    );
}
