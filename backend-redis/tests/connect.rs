//! Connecting: TLS (`rediss://`), AUTH (ACL user + password), unreachable servers, the
//! key layout (one hash tag per namespace) and the reload of flushed scripts.

use std::time::Duration;

use liveness_conformance::fixtures::acquire_member;
use liveness_conformance::fresh_namespace;
use liveness_core::{EnqueueOptions, Error, ItemStore, LeaseStore, Store, Ttl};
use liveness_redis::{RedisConfig, RedisStore};
use liveness_testkit::redis::{RedisOptions, RedisServer};

fn with_ns(url: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}ns={}", fresh_namespace())
}

/// What `server` answers `command` (its words), sent on a connection of the test's
/// own beside the store's.
async fn server_says<T: redis::FromRedisValue>(server: &RedisServer, command: &[&str]) -> T {
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd(command[0])
        .arg(&command[1..])
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// A few operations of each kind, through `store`.
async fn exercise(store: &RedisStore) {
    let lease = acquire_member(store, "w1", "h1", Ttl::from_secs(30).unwrap()).await;
    let renewed = store.renew(&lease).await.unwrap();
    assert_eq!(renewed.token, lease.token);
    assert!(store.inspect(&lease.key).await.unwrap().unwrap().is_live());
    let id = store
        .enqueue(b"payload", EnqueueOptions::default())
        .await
        .unwrap();
    let claimed = store.claim(&lease, 10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, id);
    assert_eq!(claimed[0].payload, b"payload");
    store.complete(&lease, id).await.unwrap();
    assert!(store.release(&lease).await.unwrap());
}

/// Connects to `url` in a fresh namespace and runs [`exercise`] through it.
async fn exercise_at(url: &str) {
    let store = liveness_redis::connect(&with_ns(url)).await.unwrap();
    exercise(&store).await;
}

/// A private server that serves only TLS, with a certificate from a throw-away CA.
fn tls_server() -> Option<RedisServer> {
    RedisServer::spawn(RedisOptions {
        tls: true,
        ..RedisOptions::default()
    })
}

/// Whether `err` is the permanent `Backend` error of this backend.
fn permanent(err: &Error) -> bool {
    matches!(
        err,
        Error::Backend {
            backend: "redis",
            ..
        }
    )
}

#[tokio::test]
async fn tls_with_a_private_ca() {
    let Some(server) = tls_server() else {
        return;
    };
    assert!(server.url().starts_with("rediss://"));
    exercise_at(server.url()).await;

    // The same CA given as PEM bytes instead of a file.
    let pem = std::fs::read(server.ca_pem().unwrap()).unwrap();
    let port = server.process().unwrap().port();
    // (The kit's server does not persist: durability=relaxed accepts it.)
    let config = RedisConfig::from_url(&format!("rediss://127.0.0.1:{port}?durability=relaxed"))
        .unwrap()
        .with_namespace(fresh_namespace())
        .with_root_cert_pem(pem);
    exercise(&RedisStore::connect(config).await.unwrap()).await;
}

#[tokio::test]
async fn tls_refuses_an_untrusted_certificate() {
    let Some(server) = tls_server() else {
        return;
    };
    let port = server.process().unwrap().port();
    // No `ca`: the system roots do not know the test CA.
    let err = liveness_redis::connect(&format!("rediss://127.0.0.1:{port}?ns=x"))
        .await
        .unwrap_err();
    assert!(permanent(&err), "expected a permanent error, got {err:?}");
}

#[tokio::test]
async fn auth_with_user_and_password() {
    let Some(server) = RedisServer::spawn(RedisOptions {
        user: Some(("worker".into(), "s3cret pass".replace(' ', "_"))),
        ..RedisOptions::default()
    }) else {
        return;
    };
    assert!(server.url().contains("worker:s3cret_pass@"));
    exercise_at(server.url()).await;

    let port = server.process().unwrap().port();
    for url in [
        format!("redis://worker:wrong@127.0.0.1:{port}?ns=x"),
        format!("redis://127.0.0.1:{port}?ns=x"),
    ] {
        let err = liveness_redis::connect(&url).await.unwrap_err();
        assert!(
            permanent(&err),
            "{url}: expected a permanent error, got {err:?}"
        );
        assert!(!err.is_retryable());
        assert!(
            !err.to_string().contains("wrong"),
            "the password leaked: {err}"
        );
    }
}

#[tokio::test]
async fn unreachable_server_is_unavailable() {
    let port = liveness_testkit::free_port().unwrap();
    let err = liveness_redis::connect(&format!(
        "redis://127.0.0.1:{port}?ns=x&connect_timeout_ms=300"
    ))
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Unavailable {
                backend: "redis",
                ..
            }
        ),
        "expected Unavailable, got {err:?}"
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn every_key_carries_the_namespace_hash_tag_and_purge_removes_them() {
    let Some(server) = RedisServer::shared() else {
        return;
    };
    let ns = fresh_namespace();
    let config = RedisConfig::from_url(server.url())
        .unwrap()
        .with_namespace(ns.clone());
    let store = RedisStore::connect(config).await.unwrap();
    let short = acquire_member(&store, "a{b}c:d/e", "h", Ttl::from_millis(1).unwrap()).await;
    let (key, holder) = (short.key.clone(), short.holder.clone());
    let lease = loop {
        match store
            .acquire(&key, &holder, Ttl::from_secs(30).unwrap())
            .await
        {
            Ok(l) => break l,
            Err(Error::Held { .. }) => tokio::time::sleep(Duration::from_millis(2)).await,
            Err(e) => panic!("{e}"),
        }
    };
    assert!(lease.token > short.token);
    for _ in 0..3 {
        store
            .enqueue(b"x", EnqueueOptions::default())
            .await
            .unwrap();
    }
    let items = store.claim(&lease, 2).await.unwrap();
    store.fail(&lease, items[0].id, false).await.unwrap();

    let keys: Vec<String> = server_says(server, &["KEYS", &format!("*{ns}*")]).await;
    assert!(keys.len() >= 8, "{keys:?}");
    let tag = format!("liveness:{{{ns}}}:");
    for k in &keys {
        assert!(
            k.starts_with(&tag),
            "{k} is outside the namespace's hash tag"
        );
    }
    let slots: std::collections::BTreeSet<u16> = keys.iter().map(|k| hash_slot(k)).collect();
    assert_eq!(slots.len(), 1, "keys span several cluster slots");

    assert_eq!(store.purge().await.unwrap(), keys.len() as u64);
    assert_eq!(store.inspect(&key).await.unwrap(), None);
}

#[tokio::test]
async fn flushed_scripts_are_reloaded() {
    let Some(server) = RedisServer::shared() else {
        return;
    };
    let store = liveness_redis::connect(&with_ns(server.url()))
        .await
        .unwrap();
    let () = server_says(server, &["SCRIPT", "FLUSH"]).await;
    exercise(&store).await;
}

/// Connect loads every script: even the batch operations, which a member runs only
/// later, find theirs loaded (no `NOSCRIPT` answer, no load on first use).
#[tokio::test]
async fn connect_loads_every_script() {
    let Some(server) = RedisServer::spawn(RedisOptions::default()) else {
        return;
    };
    let store = liveness_redis::connect(&with_ns(server.url()))
        .await
        .unwrap();
    let () = server_says(&server, &["CONFIG", "RESETSTAT"]).await;
    let lease = acquire_member(&store, "w1", "h1", Ttl::from_secs(30).unwrap()).await;
    let renewed = store
        .renew_many(std::slice::from_ref(&lease))
        .await
        .unwrap();
    assert_eq!(renewed[0].as_ref().unwrap().token, lease.token);
    let errors: String = server_says(&server, &["INFO", "errorstats"]).await;
    assert!(
        !errors.contains("NOSCRIPT"),
        "a script was not loaded: {errors}"
    );
}

/// The Redis Cluster slot of a key (CRC16/XMODEM of the hash tag, mod 16384).
fn hash_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let close = bytes[open + 1..].iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &bytes[open + 1..open + 1 + close])
    });
    let mut crc: u16 = 0;
    for &b in tagged.unwrap_or(bytes) {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}
