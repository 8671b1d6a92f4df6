//! Leases carry their issuer (store instance and namespace); every other store and
//! namespace refuses them. The conformance scenario
//! `foreign_lease_refused_unchanged` checks two namespaces of one store; these tests
//! check the same namespace of two stores, and handles that must agree.

use liveness_core::Store;
use std::sync::Arc;

use liveness_core::{
    checked, EnqueueOptions, Error, HolderId, InputProblem, Issuer, ItemState, Key, Lease,
    LeaseStore, MemoryServer, Namespace, Ttl,
};

fn ns(name: &str) -> Namespace {
    Namespace::new(name).unwrap()
}

/// A lease on member `w` for `holder`, 60 s.
async fn acquire_w(store: &dyn Store, holder: &str) -> Lease {
    let ttl = Ttl::from_secs(60).unwrap();
    store
        .acquire(
            &Key::member("w").unwrap(),
            &HolderId::new(holder).unwrap(),
            ttl,
        )
        .await
        .unwrap()
}

fn is_foreign<T: std::fmt::Debug>(r: liveness_core::Result<T>) {
    match r {
        Err(Error::InvalidInput {
            what: "lease",
            problem: InputProblem::ForeignLease,
        }) => {}
        other => panic!("expected InvalidInput(lease, ForeignLease), got {other:?}"),
    }
}

#[tokio::test]
async fn the_same_namespace_of_another_server_refuses_the_lease() {
    let (one, two) = (MemoryServer::new(), MemoryServer::new());
    // As every caller gets a store: behind the input checks.
    let a = checked(Arc::new(one.store(&ns("default"))));
    let b = checked(Arc::new(two.store(&ns("default"))));
    let key = Key::member("w").unwrap();
    let la = acquire_w(&*a, "a").await;
    let lb = acquire_w(&*b, "b").await;
    assert_eq!(la.token, lb.token, "both servers start counting at 1");
    let id = b
        .enqueue(b"x", EnqueueOptions::default().max_attempts(3))
        .await
        .unwrap();
    b.claim(&lb, 1).await.unwrap();
    let mut lookalike = la.clone();
    lookalike.holder = lb.holder.clone();
    is_foreign(b.renew(&lookalike).await);
    is_foreign(b.claim(&lookalike, 1).await);
    is_foreign(b.complete(&lookalike, id).await);
    is_foreign(b.fail(&lookalike, id, false).await);
    is_foreign(b.release(&lookalike).await);
    assert_eq!(
        b.item(id).await.unwrap().map(|r| r.state),
        Some(ItemState::Owned(lb.token))
    );
    assert!(b.inspect(&key).await.unwrap().unwrap().is_live());
    b.renew(&lb).await.unwrap();
    a.renew(&la).await.unwrap();
}

#[tokio::test]
async fn handles_on_the_same_server_and_namespace_accept_each_others_leases() {
    let server = MemoryServer::new();
    let a = server.store(&ns("default"));
    let b = server.clone().store(&ns("default"));
    assert_eq!(a.issuer(), b.issuer());
    assert_ne!(a.issuer(), server.store(&ns("other")).issuer());
    let lease = acquire_w(&a, "a").await;
    assert_eq!(&lease.issuer, a.issuer());
    let lease = b.renew(&lease).await.unwrap();
    assert!(b.release(&lease).await.unwrap());
}

#[test]
fn located_issuers_agree_on_the_same_location_only() {
    let at = |backend, location, namespace| Issuer::located(backend, location, ns(namespace));
    assert_eq!(
        at("redis", "127.0.0.1:6379/0", "a"),
        at("redis", "127.0.0.1:6379/0", "a")
    );
    assert_ne!(
        at("redis", "127.0.0.1:6379/0", "a"),
        at("redis", "127.0.0.1:6380/0", "a")
    );
    assert_ne!(
        at("redis", "127.0.0.1:6379/0", "a"),
        at("redis", "127.0.0.1:6379/0", "b")
    );
    assert_ne!(at("redis", "x", "a"), at("postgres", "x", "a"));
}
