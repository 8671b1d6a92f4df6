//! The durability check at connect (the kit's server runs with `fsync=off`
//! and `synchronous_commit=off`: refused unless the URL says `durability=relaxed`),
//! and a read-only transaction (SQLSTATE 25006, a standby reached during a failover)
//! being transient.

use liveness_core::{Error, HolderId, Key, Lease, LeaseStore, Store, Ttl};
use liveness_testkit::durability::{lost_state, refused_setting};
use sqlx::AssertSqlSafe;

fn ns() -> String {
    liveness_conformance::fresh_namespace().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_fsync_off_is_refused_unless_relaxed_and_left_unchanged() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    if std::env::var("LIVENESS_POSTGRES_URL").is_ok() {
        return; // an external server's settings are its own
    }
    let ns = ns();
    let strict = server
        .url_with(&format!("ns={ns}"))
        .replace("durability=relaxed", "durability=strict");
    let err = liveness_postgres::connect(&strict).await.unwrap_err();
    assert_eq!(refused_setting(&err), "fsync");
    assert!(err.to_string().contains("fsync = on"), "{err}");
    assert!(err.to_string().contains("durability=relaxed"), "{err}");
    // Accepted with the kit's URL (durability=relaxed); the refusal created nothing.
    let store = liveness_postgres::connect(&server.url_with("ns=default"))
        .await
        .unwrap();
    let schemas: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_namespace WHERE nspname = $1")
        .bind(format!("liveness_{ns}"))
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(schemas, 0, "a refused connect created the schema");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_transaction_is_unavailable_not_permanent() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    if std::env::var("LIVENESS_POSTGRES_URL").is_ok() {
        return; // creating roles on an external server is not ours to do
    }
    let ns = ns();
    let store = liveness_postgres::connect(&server.url_with(&format!("ns={ns}")))
        .await
        .unwrap();
    // A role whose every transaction is read-only: what a connection that reached a
    // standby sees (the schema exists, its writes fail with SQLSTATE 25006).
    let role = format!("ro_{ns}");
    for stmt in [
        format!("CREATE ROLE {role} LOGIN PASSWORD 'pw'"),
        format!("ALTER ROLE {role} SET default_transaction_read_only = on"),
        format!("GRANT ALL ON SCHEMA {} TO {role}", store.schema()),
        format!(
            "GRANT ALL ON ALL TABLES IN SCHEMA {} TO {role}",
            store.schema()
        ),
        format!(
            "GRANT ALL ON ALL SEQUENCES IN SCHEMA {} TO {role}",
            store.schema()
        ),
        format!("GRANT CREATE ON DATABASE postgres TO {role}"),
    ] {
        sqlx::query(AssertSqlSafe(stmt))
            .execute(store.pool())
            .await
            .unwrap();
    }
    let mut url = url::Url::parse(&server.url_with(&format!("ns={ns}"))).unwrap();
    url.set_username(&role).unwrap();
    url.set_password(Some("pw")).unwrap();
    let err = match liveness_postgres::connect(url.as_str()).await {
        Err(e) => e,
        Ok(ro) => ro
            .acquire(
                &Key::member("m").unwrap(),
                &HolderId::new("h").unwrap(),
                Ttl::from_secs(5).unwrap(),
            )
            .await
            .unwrap_err(),
    };
    assert!(
        err.is_retryable(),
        "a read-only transaction (a standby) must be retryable: {err:?}"
    );
}

/// A server that lost state (a restore from an older backup, a promoted
/// standby that lacked the last writes) forgot a live lease and rewound the token
/// sequence: the holder's renewal fails loudly with `StoreLostState`, never a plain
/// `Lost(Released)` that reads like a graceful release. A lease that really was
/// released stays `Lost(Released)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_after_the_server_lost_state_says_so() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    let ns = ns();
    let store = liveness_postgres::connect(&server.url_with(&format!("ns={ns}")))
        .await
        .unwrap();
    let ttl = Ttl::from_secs(60).unwrap();
    let released = grant(&store, "m/released", "a", ttl).await;
    assert!(store.release(&released).await.unwrap());
    let err = store.renew(&released).await.unwrap_err();
    assert_eq!(err.lost_reason(), Some(liveness_core::LostCause::Released));

    let lease = grant(&store, "m/w", "w", ttl).await;
    // The state as an older backup had it: no leases, the sequence back at its start.
    let wipe =
        format!("TRUNCATE liveness_{ns}.leases; ALTER SEQUENCE liveness_{ns}.tokens RESTART");
    sqlx::raw_sql(AssertSqlSafe(wipe))
        .execute(store.pool())
        .await
        .unwrap();
    let err = store.renew(&lease).await.unwrap_err();
    let lost = lost_state(&err);
    assert_eq!((&lost.key, lost.token), (&lease.key, lease.token));
    assert!(!err.is_retryable());
    // renew_many reports the same per lease.
    let many = store
        .renew_many(std::slice::from_ref(&lease))
        .await
        .unwrap();
    assert!(
        matches!(&many[0], Err(Error::Backend { source, .. }) if source.is::<liveness_core::durability::StoreLostState>()),
        "{many:?}"
    );
}

/// A lease on `key` (`space/name`) for `holder`.
async fn grant(store: &impl Store, key: &str, holder: &str, ttl: Ttl) -> Lease {
    store
        .acquire(
            &Key::parse(key).unwrap(),
            &HolderId::new(holder).unwrap(),
            ttl,
        )
        .await
        .unwrap()
}
