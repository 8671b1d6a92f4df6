//! What the conformance suite cannot see: TLS, password authentication, the schema
//! version check, LISTEN/NOTIFY wake-ups and pending signals across handles, batched joins in opposite orders, an
//! error text with a NUL and the advisory-lock election, against the test binary's shared PostgreSQL. (The query
//! plans of `expired` and `leases` are checked in `src/tests.rs`, which sees the
//! statements.)

use std::time::Duration;

use liveness_conformance::fixtures::acquire_member;
use liveness_core::{
    EnqueueOptions, Error, HolderId, InputProblem, ItemState, ItemStore, LeaseStore, OperatorStore,
    Outcome, Store, Ttl,
};
use liveness_postgres::{AdvisoryElection, PostgresStore};

fn ns() -> String {
    liveness_conformance::fresh_namespace().to_string()
}

async fn store() -> Option<PostgresStore> {
    let server = liveness_testkit::postgres::shared()?;
    Some(
        liveness_postgres::connect(&server.url_with(&format!("ns={}", ns())))
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
        liveness_postgres::connect(&server.url_with(&format!("ns={}&sslmode=require", ns())))
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
    let err = liveness_postgres::connect(url.as_str()).await.unwrap_err();
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
    let err = liveness_postgres::connect(&format!(
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
                liveness_postgres::connect(bad).await,
                Err(Error::InvalidInput { .. })
            ),
            "{bad}"
        );
    }
    assert!(matches!(
        liveness_postgres::connect("postgres://h/db?notify=maybe").await,
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
    let store = liveness_postgres::connect(&url).await.unwrap();
    // Connecting again to a migrated schema is a no-op.
    liveness_postgres::connect(&url).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES ($1, 'from the future', true, '\\x00', 0)",
    )
    .bind(liveness_postgres::SCHEMA_VERSION + 1)
    .execute(store.pool())
    .await
    .unwrap();
    let err = liveness_postgres::connect(&url).await.unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("newer") && msg.contains(store.schema()),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_by_another_handle_wakes_the_checker() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    let url = server.url_with(&format!("ns={}", ns()));
    let watcher = liveness_postgres::connect(&url).await.unwrap();
    let other = liveness_postgres::connect(&url).await.unwrap();
    let mut rx = watcher.wakeups().expect("postgres has wake-ups");
    // The listener ticks once when its LISTEN is in place.
    ticked(&mut rx, Duration::from_secs(10)).await;
    let lease = acquire_member(&other, "w", "h", Ttl::from_secs(30).unwrap()).await;
    rx.borrow_and_update();
    assert!(other.release(&lease).await.unwrap());
    ticked(&mut rx, Duration::from_secs(10)).await;
}

/// A leadership whose cancellation fired (here through a clone of `cancelled()`) may
/// no longer act: `check` answers `Lost`, as the core `Leadership::check` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_advisory_leadership_cancelled_from_outside_is_lost() {
    let Some(store) = store().await else { return };
    let election = AdvisoryElection::new(&store, "cancelled", "a").unwrap();
    let leader = election.try_lead().await.unwrap().expect("free role");
    assert_eq!(leader.check().unwrap(), leader.token());
    leader.cancelled().cancel();
    let err = leader.check().unwrap_err();
    assert_eq!(
        err.lost_reason(),
        Some(liveness_core::LostCause::GaveUp),
        "{err:?}"
    );
    assert!(leader.is_lost());
    leader.resign().await.unwrap();
    assert_eq!(
        election.leader().await.unwrap(),
        None,
        "resign gives the role up"
    );
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
            liveness_postgres::connect(&url)
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

/// A namespace with a hyphen names a schema that must be quoted everywhere
/// (`liveness_my-app`): its migrations, its `search_path`, its statements and its
/// LISTEN all work, on a second handle too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_with_a_hyphen_holds_leases_items_and_wake_ups() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    let ns = format!("{}-app", ns());
    let url = server.url_with(&format!("ns={ns}"));
    let watcher = liveness_postgres::connect(&url).await.unwrap();
    let store = liveness_postgres::connect(&url).await.unwrap();
    let schemas: Vec<String> =
        sqlx::query_scalar("SELECT nspname::text FROM pg_namespace WHERE nspname = $1")
            .bind(format!("liveness_{ns}"))
            .fetch_all(store.pool())
            .await
            .unwrap();
    assert_eq!(schemas.len(), 1, "the schema liveness_{ns}");
    let mut rx = watcher.wakeups().expect("postgres has wake-ups");
    ticked(&mut rx, Duration::from_secs(10)).await;

    let lease = acquire_member(&store, "w", "h", Ttl::from_secs(30).unwrap()).await;
    let id = store
        .enqueue(b"job", EnqueueOptions::default())
        .await
        .unwrap();
    let claimed = store.claim(&lease, 1).await.unwrap();
    assert_eq!(claimed.iter().map(|i| i.id).collect::<Vec<_>>(), [id]);
    rx.borrow_and_update();
    assert!(store.release(&lease).await.unwrap());
    ticked(&mut rx, Duration::from_secs(10)).await;
}

/// Asserts that `rx` does not tick within half a second.
async fn quiet(rx: &mut tokio::sync::watch::Receiver<u64>, after: &str) {
    let ticked = tokio::time::timeout(Duration::from_millis(500), rx.changed()).await;
    assert!(ticked.is_err(), "the signal ticked after {after}");
}

/// The pending signal crosses processes: every write that makes an item pending on
/// one handle (a second handle, with its own connections, as another process has)
/// ticks the `pending()` receiver of another handle on the same namespace within 2 s,
/// through NOTIFY: an enqueue, a batch, a delayed enqueue, a keyed enqueue, a retry, a
/// dead letter retried (alone or in a batch), a sweep that requeued. Nothing on
/// another namespace makes it tick, nor does a write that makes nothing pending (a
/// repeated key, a dead letter); the lease wake-ups do not tick for item writes. The
/// namespace is as long as a namespace can be, so its pending channel is as long as
/// PostgreSQL takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_made_pending_by_another_handle_tick_the_pending_signal() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    let fresh = ns();
    let longest = format!(
        "{fresh}_{}",
        "p".repeat(liveness_core::MAX_NAMESPACE_LEN - fresh.len() - 1)
    );
    let url = server.url_with(&format!("ns={longest}"));
    let watcher = liveness_postgres::connect(&url).await.unwrap();
    let other = liveness_postgres::connect(&url).await.unwrap();
    let elsewhere = liveness_postgres::connect(&server.url_with(&format!("ns={}", ns())))
        .await
        .unwrap();
    assert_eq!(watcher.pending_channel().len(), 63, "the longest channel");
    assert_ne!(watcher.pending_channel(), elsewhere.pending_channel());
    let within = Duration::from_secs(2);
    let mut pending = watcher.pending().expect("postgres has a pending signal");
    // The listener ticks once when its LISTEN is in place.
    ticked(&mut pending, Duration::from_secs(10)).await;
    let mut wake = watcher.wakeups().expect("postgres has wake-ups");
    wake.borrow_and_update();

    let none = EnqueueOptions::default();
    elsewhere.enqueue(b"x", none).await.unwrap();
    elsewhere
        .enqueue_many(&[b"y".to_vec()], none)
        .await
        .unwrap();
    quiet(&mut pending, "enqueues on another namespace").await;

    let first = other.enqueue(b"a", none).await.unwrap();
    ticked(&mut pending, within).await;
    let batch = vec![b"b".to_vec(), b"c".to_vec(), b"d".to_vec()];
    other.enqueue_many(&batch, none).await.unwrap();
    ticked(&mut pending, within).await;
    let later = none.delay(Duration::from_secs(60));
    other.enqueue(b"later", later).await.unwrap();
    ticked(&mut pending, within).await;
    let key = liveness_core::RequestId::random();
    other.enqueue(b"k", none.key(key)).await.unwrap();
    ticked(&mut pending, within).await;

    let lease = acquire_member(&other, "w", "h", Ttl::from_secs(30).unwrap()).await;
    let ids: Vec<_> = other
        .claim(&lease, 3)
        .await
        .unwrap()
        .iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(ids[0], first);
    other.fail(&lease, ids[0], true).await.unwrap();
    ticked(&mut pending, within).await;
    other.fail(&lease, ids[1], false).await.unwrap();
    other.fail(&lease, ids[2], false).await.unwrap();
    other.enqueue(b"k", none.key(key)).await.unwrap();
    quiet(&mut pending, "dead letters and a repeated key").await;
    assert!(
        !wake.has_changed().unwrap(),
        "the lease wake-ups ticked for item writes"
    );

    other.retry_dead_letter(ids[1]).await.unwrap();
    ticked(&mut pending, within).await;
    assert_eq!(other.retry_dead_letters(10).await.unwrap(), [ids[2]]);
    ticked(&mut pending, within).await;

    assert_eq!(other.claim(&lease, 2).await.unwrap().len(), 2);
    assert!(other.release(&lease).await.unwrap());
    ticked(&mut wake, within).await;
    pending.borrow_and_update();
    let swept = other.sweep(lease.token).await.unwrap();
    assert_eq!(swept.requeued.len(), 2);
    ticked(&mut pending, within).await;
}

/// PostgreSQL's `text` cannot hold the character NUL: a failure whose text has one
/// still hands its item back, the NUL kept as U+FFFD and every other character as
/// given; the text is in the row's `last_error`, and a completed item takes it away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_text_with_a_nul_still_hands_the_item_back() {
    let Some(store) = store().await else {
        return;
    };
    assert!(store.capabilities().error_text);
    let id = store
        .enqueue(b"job", EnqueueOptions::default())
        .await
        .unwrap();
    let lease = acquire_member(&store, "w", "h", Ttl::from_secs(30).unwrap()).await;
    assert_eq!(store.claim(&lease, 1).await.unwrap().len(), 1);
    let state = store
        .finish_with_error(&lease, id, Outcome::RETRY, "bad\0byte 'q' \\ ✓")
        .await
        .unwrap();
    assert_eq!(state, Some(ItemState::Pending));
    let kept = "bad\u{FFFD}byte 'q' \\ ✓";
    let record = store.item(id).await.unwrap().expect("kept");
    assert_eq!(record.last_error.as_deref(), Some(kept));
    let column: Option<String> = sqlx::query_scalar("SELECT last_error FROM items WHERE id = $1")
        .bind(i64::try_from(id.0).unwrap())
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(column.as_deref(), Some(kept));

    assert_eq!(store.claim(&lease, 1).await.unwrap().len(), 1);
    let state = store
        .finish_with_error(&lease, id, Outcome::Completed, "ignored")
        .await
        .unwrap();
    assert_eq!(state, None);
    assert_eq!(store.item(id).await.unwrap(), None);
}
