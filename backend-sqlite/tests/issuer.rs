//! A lease names the database file and namespace that issued it:
//! every handle on the same file and namespace accepts it, also one opened through
//! another path to the file; the same namespace in another file refuses it (behind
//! the core's input checks, as every caller gets a store).

use std::sync::Arc;

use liveness_conformance::fixtures::acquire_member;
use liveness_core::{Error, InputProblem, Key, LeaseStore, Store, Ttl};

mod common;

const NS: &str = "issuer_test";

#[tokio::test]
async fn handles_on_one_file_agree_and_another_file_refuses() {
    let (dir, path) = common::scratch("a.db");
    let one = common::open(&path, NS).await;
    // The same file through another path: the issuer uses the canonical one.
    let two = common::open(&dir.path().join(".").join("a.db"), NS).await;
    let other = common::open(&dir.path().join("b.db"), NS).await;
    assert_eq!(one.issuer(), two.issuer());
    assert_ne!(one.issuer(), other.issuer());

    let key = Key::member("w").unwrap();
    let ttl = Ttl::from_secs(60).unwrap();
    let lease = acquire_member(&one, "w", "a", ttl).await;
    let theirs = acquire_member(&other, "w", "a", ttl).await;
    assert_eq!(lease.token, theirs.token, "each file counts from 1");

    let other_checked = liveness_core::checked(Arc::new(other.clone()));
    match other_checked.renew(&lease).await {
        Err(Error::InvalidInput {
            what: "lease",
            problem: InputProblem::ForeignLease,
        }) => {}
        r => panic!("another file renewed the lease: {r:?}"),
    }
    assert!(matches!(
        other_checked.claim(&lease, 1).await,
        Err(Error::InvalidInput { .. })
    ));
    assert!(other.inspect(&key).await.unwrap().unwrap().is_live());
    let lease = two
        .renew(&lease)
        .await
        .expect("a second handle on the file");
    assert!(two.release(&lease).await.unwrap());
    other.renew(&theirs).await.unwrap();
}
