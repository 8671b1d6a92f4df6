//! What the conformance suite cannot see: TLS, password authentication, the schema
//! version check, the expiry index, LISTEN/NOTIFY wake-ups and the advisory-lock
//! election, against the test binary's shared PostgreSQL.

use liveness_core::Page;
use std::time::Duration;

use backend_postgres::{AdvisoryElection, PostgresStore};
use liveness_conformance::fixtures::acquire_member;
use liveness_core::{Error, HolderId, InputProblem, LeaseStore, Ttl};
use sqlx::{AssertSqlSafe, Row};

fn ns() -> String {
    liveness_conformance::fresh_namespace().to_string()
}

async fn store() -> Option<PostgresStore> {
    let server = liveness_testkit::postgres::shared()?;
    Some(
        backend_postgres::connect(&server.url_with(&format!("ns={}", ns())))
            .await
            .unwrap_or_else(|e| panic!("connect: {e}")),
    )
}

/// Waits for the watch to tick, failing at the deadline.
async fn ticked(rx: &mut tokio::sync::watch::Receiver<u64>, within: Duration) {
    tokio::time::timeout(within, rx.changed())
        .await
        .unwrap_or_else(|_| panic!("no wake-up within {within:?}"))
        .unwrap_or_else(|e| panic!("wake-up channel closed: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_sslmode_require_encrypts() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    if !server.tls() {
        liveness_testkit::missing::<()>("a TLS-enabled postgresql", "install openssl");
        return;
    }
    let store =
        backend_postgres::connect(&server.url_with(&format!("ns={}&sslmode=require", ns())))
            .await
            .unwrap_or_else(|e| panic!("connect with sslmode=require: {e}"));
    let ssl: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert!(ssl, "the connection is not encrypted");
    let lease = acquire_member(&store, "tls", "h", Ttl::from_secs(30).unwrap()).await;
    assert!(store.release(&lease).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_is_checked() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    if std::env::var("LIVENESS_POSTGRES_URL").is_ok() {
        return; // an external server's authentication is its own business
    }
    // The right password (in the kit's URL) works: every other test relies on it.
    let mut url = url::Url::parse(server.url()).unwrap();
    url.set_password(Some("not-the-password")).unwrap();
    let err = backend_postgres::connect(url.as_str()).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Backend {
                backend: "postgres",
                ..
            }
        ),
        "a refused password is permanent, not retryable: {err:?}"
    );
    assert!(err.to_string().contains("password"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_is_unavailable() {
    let port = liveness_testkit::free_port().unwrap();
    let err = backend_postgres::connect(&format!(
        "postgres://u:p@127.0.0.1:{port}/db?acquire_timeout_ms=2000"
    ))
    .await
    .unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_urls_are_invalid_input() {
    for bad in [
        "postgres://h/db?ns=UPPER",
        "postgres://h/db?max_connections=x",
        "mysql://h/db",
    ] {
        assert!(
            matches!(
                backend_postgres::connect(bad).await,
                Err(Error::InvalidInput { .. })
            ),
            "{bad}"
        );
    }
    assert!(matches!(
        backend_postgres::connect("postgres://h/db?notify=maybe").await,
        Err(Error::InvalidInput {
            problem: InputProblem::BadValue { name: "notify", .. },
            ..
        })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_schema_is_refused() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    let ns = ns();
    let url = server.url_with(&format!("ns={ns}"));
    let store = backend_postgres::connect(&url).await.unwrap();
    // Connecting again to a migrated schema is a no-op.
    backend_postgres::connect(&url).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES ($1, 'from the future', true, '\\x00', 0)",
    )
    .bind(backend_postgres::SCHEMA_VERSION + 1)
    .execute(store.pool())
    .await
    .unwrap();
    let err = backend_postgres::connect(&url).await.unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("newer") && msg.contains(store.schema()),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_reads_only_the_expiry_index_prefix() {
    let Some(store) = store().await else { return };
    // Many live leases, then ask the planner how it finds the expired ones.
    insert_live_members(&store, 5000).await;
    sqlx::query("ANALYZE leases")
        .execute(store.pool())
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query(AssertSqlSafe(format!(
        "EXPLAIN {}",
        backend_postgres::sql::EXPIRED
    )))
    .bind("members")
    .bind(100i64)
    .fetch_all(store.pool())
    .await
    .unwrap()
    .iter()
    .map(|r| r.get::<String, _>(0))
    .collect();
    let plan = plan.join("\n");
    assert!(plan.contains("leases_expiry"), "{plan}");
    assert!(
        plan.contains("Index Cond") && plan.contains("expires_at <="),
        "the expiry bound must be an index condition, not a filter:\n{plan}"
    );
    assert!(store
        .expired(&liveness_core::Space::members(), 10)
        .await
        .unwrap()
        .is_empty());
}

/// `members` reads one page of an index in name-byte order, whatever the database's
/// collation and whatever the planner's statistics: right after 20,000 leases were
/// inserted (never analyzed), the first page of 100 fetches about 100 rows of
/// `leases`, not the whole space (counted by the server in the transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_reads_a_page_of_the_name_index() {
    let Some(store) = store().await else { return };
    // The test server's database collation is C, under which the primary key alone
    // would serve the byte order: give the column a linguistic collation (ICU's root
    // locale, when the server has ICU), as a database created with a locale has.
    let icu: Option<String> =
        sqlx::query_scalar("SELECT collname::text FROM pg_collation WHERE collname = 'und-x-icu'")
            .fetch_optional(store.pool())
            .await
            .unwrap();
    match icu {
        Some(_) => {
            sqlx::query(r#"ALTER TABLE leases ALTER COLUMN name TYPE text COLLATE "und-x-icu""#)
                .execute(store.pool())
                .await
                .unwrap();
        }
        None => eprintln!("no ICU collation on this server: checking under the C collation only"),
    }
    insert_live_members(&store, 20000).await;
    let mut tx = store.pool().begin().await.unwrap();
    let rows = sqlx::query(backend_postgres::sql::MEMBERS)
        .bind("members")
        .bind("")
        .bind(100i64)
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    let touched: i64 = sqlx::query_scalar(
        "SELECT pg_stat_get_xact_tuples_fetched('leases'::regclass) \
              + pg_stat_get_xact_tuples_returned('leases'::regclass)",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(rows.len(), 100);
    assert!(
        touched <= 1000,
        "a page of 100 read {touched} rows of leases: it must walk an index in name order, \
         not collect and sort the space"
    );
    let page = store
        .members(&liveness_core::Space::members(), Page::first(3))
        .await
        .unwrap();
    let names: Vec<String> = page.iter().map(|i| i.key.name().to_string()).collect();
    assert_eq!(names, vec!["m1", "m10", "m100"], "byte order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_by_another_handle_wakes_the_checker() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    let url = server.url_with(&format!("ns={}", ns()));
    let watcher = backend_postgres::connect(&url).await.unwrap();
    let other = backend_postgres::connect(&url).await.unwrap();
    let mut rx = watcher.wakeups().expect("postgres has wake-ups");
    // The listener ticks once when its LISTEN is in place.
    ticked(&mut rx, Duration::from_secs(10)).await;
    let lease = acquire_member(&other, "w", "h", Ttl::from_secs(30).unwrap()).await;
    rx.borrow_and_update();
    assert!(other.release(&lease).await.unwrap());
    ticked(&mut rx, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisory_election_one_leader_with_fencing_tokens() {
    let Some(store) = store().await else { return };
    let a = AdvisoryElection::new(&store, "dispatcher", "a").unwrap();
    let b = AdvisoryElection::new(&store, "dispatcher", "b")
        .unwrap()
        .retry_every(Duration::from_millis(50));
    let lease = acquire_member(&store, "x", "x", Ttl::from_secs(30).unwrap()).await;
    let first = a.try_lead().await.unwrap().expect("free role");
    assert!(
        first.token() > lease.token,
        "leaderships draw from the lease token sequence"
    );
    assert!(b.try_lead().await.unwrap().is_none(), "two leaders at once");
    assert_eq!(
        b.leader().await.unwrap(),
        Some((HolderId::new("a").unwrap(), first.token()))
    );
    // Another role is independent.
    let other = AdvisoryElection::new(&store, "scheduler", "b").unwrap();
    let other_lead = other
        .try_lead()
        .await
        .unwrap()
        .expect("another role is free");

    let campaign = tokio::spawn(async move { b.campaign().await });
    let cancelled = first.cancelled();
    let first_token = first.token();
    first.resign().await.unwrap();
    assert!(cancelled.is_cancelled());
    let second = tokio::time::timeout(Duration::from_secs(10), campaign)
        .await
        .expect("the campaign did not win after the resignation")
        .unwrap()
        .unwrap();
    assert!(second.token() > first_token);
    assert!(!second.is_lost());
    assert_eq!(
        a.leader().await.unwrap(),
        Some((HolderId::new("b").unwrap(), second.token()))
    );
    other_lead.resign().await.unwrap();
    second.resign().await.unwrap();
    assert_eq!(a.leader().await.unwrap(), None);
}

/// Inserts `n` live leases (`members/m1` … `members/mN`, 60 s) straight into the table.
async fn insert_live_members(store: &PostgresStore, n: i64) {
    sqlx::query(
        "INSERT INTO leases (space, name, holder, token, ttl_ms, expires_at) \
         SELECT 'members', 'm' || g, 'h', nextval('tokens'), 60000, clock_timestamp() + interval '60 s' \
         FROM generate_series(1, $1) g",
    )
    .bind(n)
    .execute(store.pool())
    .await
    .unwrap();
}

/// Two processes joining the same keys through their batchers, one in ascending key
/// order, the other in descending: `acquire_many` locks lease rows entry by entry
/// and holds them to the end of its statement, so two batches that meet in opposite
/// orders wait on each other, PostgreSQL breaks the cycle by aborting one (after its
/// `deadlock_timeout`), and every entry of that batch answers `Unavailable`. The
/// batcher sends a batch's acquires in key order, so concurrent batches lock in one
/// order and only wait: every key is taken exactly once and every other answer is
/// `Held`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_joins_in_opposite_orders_do_not_deadlock() {
    use liveness_core::{Batcher, Key, Store};
    use std::sync::Arc;
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    let url = server.url_with(&format!("ns={}", ns()));
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..2 {
        stores.push(Arc::new(
            backend_postgres::connect(&url)
                .await
                .unwrap_or_else(|e| panic!("connect: {e}")),
        ));
    }
    let ttl = Ttl::from_secs(60).unwrap();
    for round in 0..3 {
        let keys: Vec<Key> = (0..300)
            .map(|i| Key::parse(&format!("shards/r{round}-s{i:03}")).unwrap())
            .collect();
        let join = |store: &Arc<dyn Store>, holder: &str, keys: Vec<Key>| {
            let batcher = Batcher::new(store.clone(), Duration::from_millis(20));
            let holder = HolderId::new(holder).unwrap();
            // join_all polls the acquires in order at once: the batcher queues them
            // in this order, as one batch.
            async move {
                futures::future::join_all(keys.into_iter().map(|key| {
                    let (batcher, holder) = (batcher.clone(), holder.clone());
                    async move {
                        let answer = batcher.acquire(&key, &holder, ttl).await;
                        (key, answer)
                    }
                }))
                .await
            }
        };
        let mut descending = keys.clone();
        descending.reverse();
        let (up, down) = tokio::join!(
            join(&stores[0], "ascending", keys.clone()),
            join(&stores[1], "descending", descending)
        );
        let mut taken = std::collections::BTreeMap::new();
        for (key, answer) in up.into_iter().chain(down) {
            match answer {
                Ok(lease) => {
                    assert!(
                        taken.insert(key.clone(), lease.holder).is_none(),
                        "round {round}: {key} taken twice"
                    );
                }
                Err(Error::Held { .. }) => {}
                Err(e) => panic!("round {round}: {key}: {e}"),
            }
        }
        assert_eq!(taken.len(), keys.len(), "round {round}: a key nobody took");
    }
}
