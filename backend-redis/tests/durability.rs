//! The durability check at connect: a server whose settings can
//! lose acknowledged writes is refused with an error naming the setting and the fix,
//! unless the URL says `durability=relaxed`; where `CONFIG` is denied or renamed away
//! the check judges what `INFO` shows and warns that `appendfsync` could not be
//! checked.

use liveness_conformance::fixtures::acquire_member;
use liveness_conformance::fresh_namespace;
use liveness_core::durability::Durability;
use liveness_core::{HolderId, Key, LeaseStore, Store, Ttl};
use liveness_redis::RedisConfig;
use liveness_testkit::durability::{lost_state, refused_setting};
use liveness_testkit::redis::{RedisOptions, RedisServer};

/// A strict connect to `url` (whatever its `durability` parameter says).
async fn connect_strict(url: &str) -> liveness_core::Result<liveness_redis::RedisStore> {
    let config = RedisConfig::from_url(url)
        .unwrap()
        .with_namespace(fresh_namespace())
        .with_durability(Durability::Strict);
    liveness_redis::RedisStore::connect(config).await
}

async fn config_set(server: &RedisServer, name: &str, value: &str) {
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query_async(&mut conn)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_aof_is_refused_unless_relaxed() {
    let Some(server) = RedisServer::spawn(RedisOptions::default()) else {
        return;
    };
    let err = connect_strict(server.url()).await.unwrap_err();
    assert_eq!(refused_setting(&err), "appendonly");
    let text = err.to_string();
    assert!(text.contains("appendonly yes"), "no fix named: {text}");
    assert!(text.contains("durability=relaxed"), "{text}");
    // The kit's URL for this server says `durability=relaxed`: accepted.
    assert!(server.url().contains("durability=relaxed"));
    let store = liveness_redis::connect(&server.url_with(&format!("ns={}", fresh_namespace())))
        .await
        .unwrap();
    let lease = acquire_member(&store, "m", "h", Ttl::from_secs(5).unwrap()).await;
    assert!(store.release(&lease).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aof_always_and_noeviction_are_accepted_and_each_weaker_setting_refused() {
    let Some(server) = RedisServer::spawn(RedisOptions {
        durable: true,
        ..RedisOptions::default()
    }) else {
        return;
    };
    assert!(!server.url().contains("durability"));
    connect_strict(server.url()).await.unwrap();

    config_set(&server, "appendfsync", "everysec").await;
    let err = connect_strict(server.url()).await.unwrap_err();
    assert_eq!(refused_setting(&err), "appendfsync");
    config_set(&server, "appendfsync", "always").await;

    config_set(&server, "maxmemory-policy", "allkeys-lru").await;
    let err = connect_strict(server.url()).await.unwrap_err();
    assert_eq!(refused_setting(&err), "maxmemory-policy");
    // Accepting weaker guarantees explicitly.
    liveness_redis::connect(&server.url_with("durability=relaxed"))
        .await
        .unwrap();
    config_set(&server, "maxmemory-policy", "noeviction").await;
    connect_strict(server.url()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_config_permission_info_is_judged() {
    let Some(server) = RedisServer::spawn(RedisOptions::default()) else {
        return;
    };
    // A user who may do everything but CONFIG (as on managed services).
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "noconf", "on", ">pw", "~*", "&*", "+@all", "-config",
        ])
        .query_async(&mut conn)
        .await
        .unwrap();
    let as_user = |user: &str| {
        server
            .url()
            .replacen("redis://", &format!("redis://{user}:pw@"), 1)
            .replace("durability=relaxed", "durability=strict")
    };
    // CONFIG denied: INFO persistence shows AOF off, refused.
    let err = connect_strict(&as_user("noconf")).await.unwrap_err();
    assert_eq!(refused_setting(&err), "appendonly");
    assert!(
        err.to_string().contains("could not check appendfsync"),
        "{err}"
    );
    // The same user accepting weaker guarantees connects (CONFIG is not needed).
    let relaxed = RedisConfig::from_url(&as_user("noconf"))
        .unwrap()
        .with_namespace(fresh_namespace())
        .with_durability(Durability::Relaxed);
    liveness_redis::RedisStore::connect(relaxed).await.unwrap();
}

/// A private server started as managed services run Redis: `CONFIG` renamed away.
fn server_without_config(durable: bool) -> Option<RedisServer> {
    RedisServer::spawn(RedisOptions {
        durable,
        extra_args: vec!["--rename-command".into(), "CONFIG".into(), String::new()],
        ..RedisOptions::default()
    })
}

/// Captures what the crate logs through `tracing` while `f` runs on this thread.
async fn logged<T>(f: impl std::future::Future<Output = T>) -> (T, String) {
    #[derive(Clone, Default)]
    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    let out = {
        let _guard = tracing::subscriber::set_default(subscriber);
        f.await
    };
    let text = String::from_utf8_lossy(&sink.0.lock().unwrap()).into_owned();
    (out, text)
}

#[tokio::test(flavor = "current_thread")]
async fn config_renamed_away_aof_off_is_refused_naming_appendonly() {
    let Some(server) = server_without_config(false) else {
        return;
    };
    let (answer, log) = logged(connect_strict(server.url())).await;
    let err = answer.unwrap_err();
    assert_eq!(refused_setting(&err), "appendonly");
    let text = err.to_string();
    assert!(text.contains("aof_enabled"), "where it was read: {text}");
    assert!(text.contains("appendfsync"), "what was not checked: {text}");
    assert!(log.contains("appendfsync"), "no warning: {log}");
    // Relaxed: accepted, with the warnings.
    liveness_redis::connect(&server.url_with(&format!("ns={}", fresh_namespace())))
        .await
        .unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn config_renamed_away_aof_on_connects_and_warns_appendfsync_unchecked() {
    let Some(server) = server_without_config(true) else {
        return;
    };
    assert!(!server.url().contains("durability"));
    let (answer, log) = logged(connect_strict(server.url())).await;
    answer.unwrap();
    assert!(
        log.contains("WARN") && log.contains("could not check appendfsync"),
        "no warning that appendfsync was not checked: {log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_after_the_server_lost_its_data_says_so() {
    let Some(server) = RedisServer::shared() else {
        return;
    };
    let ns = fresh_namespace();
    let store = liveness_redis::connect(&server.url_with(&format!("ns={ns}")))
        .await
        .unwrap();
    let key = Key::member("m").unwrap();
    let holder = HolderId::new("h").unwrap();
    let ttl = Ttl::from_secs(30).unwrap();
    let lease = store.acquire(&key, &holder, ttl).await.unwrap();
    // A plain release is still `Lost(Released)`.
    let released = store
        .acquire(&Key::member("r").unwrap(), &holder, ttl)
        .await
        .unwrap();
    assert!(store.release(&released).await.unwrap());
    let err = store.renew(&released).await.unwrap_err();
    assert_eq!(err.lost_reason(), Some(liveness_core::LostCause::Released));
    // The server loses the namespace's data (as a restart without AOF does).
    let n = store.purge().await.unwrap();
    assert!(n > 0);
    let err = store.renew(&lease).await.unwrap_err();
    let lost = lost_state(&err);
    assert_eq!((&lost.key, lost.token), (&key, lease.token));
    assert!(err.to_string().contains("store lost state"), "{err}");
    // The batched renewal (what members sharing a Batcher send) says the same, lease
    // by lease (both tokens are above the wiped counter).
    let batch = [lease.clone(), released.clone()];
    let answers = store.renew_many(&batch).await.unwrap();
    for (asked, answer) in batch.iter().zip(&answers) {
        let err = answer
            .as_ref()
            .expect_err("renew_many on a wiped store renewed a lease");
        let lost = lost_state(err);
        assert_eq!((&lost.key, lost.token), (&asked.key, asked.token));
    }
}
