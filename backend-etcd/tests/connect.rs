//! Connecting: TLS and user/password auth against real etcd members started for
//! each test, refused credentials, unreachable members, and the ttl floor etcd
//! imposes.

use std::sync::Arc;
use std::time::Duration;

use liveness_conformance::fresh_namespace;
use liveness_core::{
    Checker, CheckerConfig, EnqueueOptions, Error, HolderId, InputProblem, Key, LeaseStatus, Store,
    Ttl,
};
use liveness_etcd::{EtcdConfig, EtcdStore};

/// A short round of everything through `store`: lease life cycle, expiry seen by the
/// watch and reaped by a checker, items claimed, requeued and completed.
async fn exercise(store: EtcdStore) {
    let store: Arc<dyn Store> = Arc::new(store);
    let holder = HolderId::new("h").unwrap();
    let key = Key::member("x").unwrap();
    let min = store.capabilities().min_ttl;
    let ttl = Ttl::new(min).unwrap();
    let lease = store.acquire(&key, &holder, ttl).await.unwrap();
    let renewed = store.renew(&lease).await.unwrap();
    assert_eq!(renewed.token, lease.token);
    let id = store
        .enqueue(b"payload", EnqueueOptions::default())
        .await
        .unwrap();
    let items = store.claim(&lease, 5).await.unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].payload, b"payload");
    // Stop renewing: etcd expires the lease, the watch wakes a checker, the checker
    // reaps it and requeues the item.
    let mut wake = store.wakeups().expect("etcd pushes expiry events");
    let until = tokio::time::Instant::now() + min * 4 + Duration::from_secs(5);
    let death = loop {
        let round = Checker::new(store.clone(), CheckerConfig::default())
            .round()
            .await
            .unwrap();
        if let Some(d) = round.deaths.into_iter().next() {
            break d;
        }
        assert!(tokio::time::Instant::now() < until, "the lease never died");
        let _ = tokio::time::timeout(Duration::from_secs(1), wake.changed()).await;
    };
    assert_eq!(death.lease.token, lease.token);
    assert_eq!(death.sweep.requeued, vec![id]);
    let again = store.acquire(&key, &holder, ttl).await.unwrap();
    assert!(again.token > lease.token);
    let items = store.claim(&again, 5).await.unwrap();
    assert_eq!(items[0].attempts, 2);
    store.complete(&again, id).await.unwrap();
    assert!(store.release(&again).await.unwrap());
    assert!(store.inspect(&key).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_private_ca() {
    let Some(server) = liveness_testkit::etcd::start_tls() else {
        return;
    };
    let tls = server.tls().unwrap();
    let url = format!("{}?ca={}", server.url(), tls.ca.display());
    assert!(url.starts_with("etcds://"));
    let config = EtcdConfig::from_url(&url)
        .unwrap()
        .with_namespace(fresh_namespace());
    exercise(EtcdStore::connect(config).await.unwrap()).await;

    // A CA that did not sign the server's certificate: the handshake fails.
    let wrong = format!("{}?ca={}", server.url(), tls.cert.display());
    let err = liveness_etcd::connect(&wrong).await.unwrap_err();
    assert!(
        matches!(err, Error::Unavailable { .. } | Error::Backend { .. }),
        "{err:?}"
    );
    // Plain gRPC to a TLS member fails too.
    let plain = server.url().replacen("etcds://", "etcd://", 1);
    let config = EtcdConfig::from_url(&plain)
        .unwrap()
        .with_timeout(Duration::from_millis(500))
        .unwrap();
    assert!(EtcdStore::connect(config).await.is_err());
    // A missing CA file is a permanent error.
    let missing = format!("{}?ca=/nonexistent/ca.pem", server.url());
    assert!(matches!(
        liveness_etcd::connect(&missing).await.unwrap_err(),
        Error::Backend { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_and_password_auth() {
    let Some(server) = liveness_testkit::etcd::start_with_auth("s3cr:t/pw") else {
        return;
    };
    let host = server.url().trim_start_matches("etcd://").to_owned();
    let url = format!("etcd://root:s3cr%3At%2Fpw@{host}");
    let config = EtcdConfig::from_url(&url)
        .unwrap()
        .with_namespace(fresh_namespace());
    exercise(EtcdStore::connect(config).await.unwrap()).await;

    // A wrong password and no credentials at all are refused, permanently.
    for bad in [format!("etcd://root:nope@{host}"), format!("etcd://{host}")] {
        let err = liveness_etcd::connect(&bad).await.unwrap_err();
        assert!(!err.is_retryable(), "{bad}: {err:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_member_is_unavailable() {
    let port = liveness_testkit::free_port().unwrap();
    let url = format!("etcd://127.0.0.1:{port}?connect_timeout_ms=300&timeout_ms=300");
    let err = liveness_etcd::connect(&url).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttls_below_etcds_minimum_are_refused_and_others_round_up() {
    let Some(server) = liveness_testkit::etcd::shared() else {
        return;
    };
    let config = EtcdConfig::from_url(server.url())
        .unwrap()
        .with_namespace(fresh_namespace());
    // Behind the input checks, as every caller gets a store: they refuse a ttl under
    // the minimum this store probed from etcd.
    let store = liveness_core::checked(Arc::new(EtcdStore::connect(config).await.unwrap()));
    let min = store.capabilities().min_ttl;
    assert!(
        min >= Duration::from_secs(1),
        "etcd's minimum is whole seconds: {min:?}"
    );
    let key = Key::member("m").unwrap();
    let holder = HolderId::new("h").unwrap();
    let short = Ttl::new(min - Duration::from_millis(1)).unwrap();
    match store.acquire(&key, &holder, short).await {
        Err(Error::InvalidInput {
            what: "ttl",
            problem: InputProblem::TooShort { min: m, got },
        }) => assert_eq!((m, got), (min, short.duration())),
        other => panic!("expected TooShort, got {other:?}"),
    }
    // A ttl that is no whole number of seconds: etcd counts the next whole second.
    let odd = Ttl::new(min + Duration::from_millis(500)).unwrap();
    let lease = store.acquire(&key, &holder, odd).await.unwrap();
    assert_eq!(lease.expires_in, odd.duration());
    let info = store.inspect(&key).await.unwrap().unwrap();
    assert_eq!(info.ttl, odd);
    match info.status {
        LeaseStatus::Live { remaining } => assert!(remaining <= odd.duration()),
        LeaseStatus::Expired => panic!("fresh lease reported expired"),
        other => panic!("unexpected status {other:?}"),
    }
    // Renewing with another ttl keeps the token and takes the new ttl.
    let longer = Ttl::new(min * 3).unwrap();
    let renewed = store
        .renew(&{
            let mut l = lease.clone();
            l.ttl = longer;
            l
        })
        .await
        .unwrap();
    assert_eq!(renewed.token, lease.token);
    assert_eq!(store.inspect(&key).await.unwrap().unwrap().ttl, longer);
    assert!(store.renew(&renewed).await.is_ok());
    assert!(store.release(&renewed).await.unwrap());
}
