//! A database file restored from an older copy forgot the leases acquired
//! since: their holders' renewals fail loudly with `StoreLostState`, never a plain
//! `Lost(Released)` that reads like a graceful release.

use liveness_core::durability::StoreLostState;
use liveness_core::{Error, HolderId, Key, LeaseStore, LostCause, Store, Ttl};

mod common;

const NS: &str = "lost_state";

#[tokio::test]
async fn a_renewal_after_the_file_was_restored_from_an_older_copy_says_so() {
    let (dir, path) = common::scratch("s.db");
    let backup = dir.path().join("backup.db");
    let ttl = Ttl::from_secs(60).unwrap();
    let holder = HolderId::new("h").unwrap();

    let store = common::open(&path, NS).await;
    let early = store
        .acquire(&Key::member("early").unwrap(), &holder, ttl)
        .await
        .unwrap();
    assert!(store.release(&early).await.unwrap());
    store.close().await;
    std::fs::copy(&path, &backup).unwrap();

    let store = common::open(&path, NS).await;
    let lease = store
        .acquire(&Key::member("w").unwrap(), &holder, ttl)
        .await
        .unwrap();
    assert!(lease.token > early.token);
    store.renew(&lease).await.unwrap();
    store.close().await;

    // The operator restores yesterday's copy.
    std::fs::copy(&backup, &path).unwrap();
    let store = common::open(&path, NS).await;
    let err = store.renew(&lease).await.unwrap_err();
    match &err {
        Error::Backend { source, .. } => {
            let lost = source
                .downcast_ref::<StoreLostState>()
                .unwrap_or_else(|| panic!("not StoreLostState: {err:?}"));
            assert_eq!((&lost.key, lost.token), (&lease.key, lease.token));
        }
        other => panic!("expected StoreLostState, got {other:?}"),
    }
    assert!(!err.is_retryable());
    // A lease the copy knows was released is still just released.
    let err = store.renew(&early).await.unwrap_err();
    assert_eq!(err.lost_reason(), Some(LostCause::Released));
    store.close().await;
}
