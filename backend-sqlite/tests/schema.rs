//! Connecting: migrations applied once, a newer schema refused, a locked file is a
//! retryable fault, bad URLs change nothing.

use std::time::Duration;

use liveness_conformance::fixtures::acquire_member;
use liveness_core::{
    Error, HolderId, InputProblem, ItemState, ItemStore, ItemTimes, Key, LeaseStatus, LeaseStore,
    OperatorStore, SchemaTooNew, Space, Store, Ttl,
};
use liveness_sqlite::SqliteStore;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::SqlSafeStr;

mod common;

const NS: &str = "schema_test";

/// A new file at `path` holding the schema up to `version` alone, as a build of that
/// version left it; the caller adds its rows and closes the pool.
async fn file_at_version(path: &std::path::Path, version: i64) -> sqlx::SqlitePool {
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let mut old = Migrator::with_migrations(
        liveness_sqlite::MIGRATIONS
            .iter()
            .filter(|&&(v, _, _)| v <= version)
            .map(|&(v, d, sql)| {
                Migration::new(
                    v,
                    d.into(),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect(),
    );
    old.dangerous_set_table_name("liveness_migrations");
    old.run(&pool).await.unwrap();
    pool
}

/// Item 1 pending, item 2 dead-lettered, in the namespace [`NS`].
const PENDING_AND_DEAD: [&str; 3] = [
    "INSERT INTO liveness_counters (ns, next_token, next_item, next_death) \
     VALUES ('schema_test', 0, 2, 1)",
    "INSERT INTO liveness_items (ns, id, payload, attempts, max_attempts, state, owner) \
     VALUES ('schema_test', 1, x'6a6f62', 0, 5, 0, NULL)",
    "INSERT INTO liveness_items (ns, id, payload, attempts, max_attempts, state, owner) \
     VALUES ('schema_test', 2, x'6a6f62', 5, 5, 2, NULL)",
];

/// Runs each of `statements` on `pool`.
async fn insert(pool: &sqlx::SqlitePool, statements: &[&'static str]) {
    for &statement in statements {
        sqlx::query(statement).execute(pool).await.unwrap();
    }
}

/// Records the file as last opened under this host's boot (where the host has a boot
/// id): opening it then applies the upgrade alone, not the reboot rule.
async fn opened_under_this_boot(pool: &sqlx::SqlitePool) {
    if let Ok(boot) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
        sqlx::query("UPDATE liveness_boot SET boot_id = ?1")
            .bind(boot.trim())
            .execute(pool)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn reconnect_keeps_state_and_newer_schema_is_refused() {
    let (_dir, path) = common::scratch("s.db");
    let store = common::open(&path, NS).await;
    let key = Key::member("a").unwrap();
    let holder = HolderId::new("h").unwrap();
    let lease = store
        .acquire(&key, &holder, Ttl::from_secs(60).unwrap())
        .await
        .unwrap();
    store.close().await;

    // Connecting again applies nothing twice and sees the same lease.
    let again = common::open(&path, NS).await;
    assert_eq!(
        again.inspect(&key).await.unwrap().unwrap().token,
        lease.token
    );

    // A later build added migration 99: this build must refuse the file.
    sqlx::query(
        "INSERT INTO liveness_migrations (version, description, success, checksum, execution_time) \
         VALUES (99, 'from the future', 1, x'00', 0)",
    )
    .execute(again.pool())
    .await
    .unwrap();
    again.close().await;
    let err = SqliteStore::connect(common::config(&path, NS))
        .await
        .unwrap_err();
    match &err {
        Error::Backend { source, .. } => {
            let too_new = source
                .downcast_ref::<SchemaTooNew>()
                .expect("a SchemaTooNew source");
            assert_eq!((too_new.found, too_new.supported), (99, newest()));
        }
        other => panic!("expected Backend, got {other:?}"),
    }
    let says = format!(
        "database schema version 99 is newer than this build supports ({}); upgrade liveness",
        newest()
    );
    assert!(err.to_string().contains(&says), "{err}");
}

#[tokio::test]
async fn a_locked_database_is_unavailable() {
    let (_dir, path) = common::scratch("busy.db");
    let cfg = common::config(&path, NS)
        .with_busy_timeout(Duration::from_millis(50))
        .unwrap();
    let store = SqliteStore::connect(cfg).await.unwrap();

    // Another "process" holds the write lock.
    let mut other = common::raw_connection(&path).await;
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();

    let err = store
        .acquire(
            &Key::member("a").unwrap(),
            &HolderId::new("h").unwrap(),
            Ttl::from_secs(5).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "expected Unavailable, got {err:?}");

    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    assert!(store
        .inspect(&Key::member("a").unwrap())
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn bad_urls_are_invalid_input() {
    for url in [
        "sqlite://",
        "sqlite://x.db?ns=UPPER",
        "sqlite://x.db?what=1",
        "postgres://x",
    ] {
        let err = liveness_sqlite::connect(url).await.unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{url}: {err:?}");
    }
    assert!(matches!(
        liveness_sqlite::connect("sqlite://x.db?what=1").await,
        Err(Error::InvalidInput {
            what: "url",
            problem: InputProblem::UnknownParameter { name, .. }
        }) if name == "what"
    ));
    assert!(
        !std::path::Path::new("x.db").exists(),
        "a rejected URL creates nothing"
    );
}

/// Many handles opening one brand-new file at the same moment (processes starting
/// together): each open succeeds, the schema is applied once, and they share state.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_handles_open_a_new_file_at_once() {
    for round in 0..20 {
        let (_dir, path) = common::scratch(&format!("fresh{round}.db"));
        let opens: Vec<_> = (0..8)
            .map(|_| {
                let path = path.clone();
                tokio::spawn(async move { SqliteStore::connect(common::config(&path, NS)).await })
            })
            .collect();
        let mut stores = Vec::new();
        for open in opens {
            stores.push(
                open.await
                    .unwrap()
                    .unwrap_or_else(|e| panic!("round {round}: {e:?}")),
            );
        }
        let key = Key::member("first").unwrap();
        let holder = HolderId::new("h").unwrap();
        let lease = stores[0]
            .acquire(&key, &holder, Ttl::from_secs(60).unwrap())
            .await
            .unwrap();
        for s in &stores {
            assert_eq!(s.inspect(&key).await.unwrap().unwrap().token, lease.token);
        }
        for s in stores {
            s.close().await;
        }
    }
}

/// A file written by a build before the boot clock (schema version 1: expiries in
/// wall-clock milliseconds) with a lease 1 h from expiring, an item it owns and its
/// counters. Opened by this build, the file is migrated: the lease counts as expired
/// (its holder ran an older build, which cannot use the new schema and so cannot be
/// renewing it), its item is requeued by the usual reap, and tokens go on from the
/// old counter.
#[tokio::test]
async fn a_version_1_file_is_migrated_and_its_leases_are_expired() {
    let (_dir, path) = common::scratch("v1.db");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    {
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        let mut v1 = Migrator::with_migrations(vec![Migration::new(
            1,
            "initial".into(),
            MigrationType::Simple,
            include_str!("../migrations/0001_initial.sql").into_sql_str(),
            false,
        )]);
        v1.dangerous_set_table_name("liveness_migrations");
        v1.run(&pool).await.unwrap();
        insert(
            &pool,
            &[
                "INSERT INTO liveness_counters (ns, next_token, next_item) VALUES ('schema_test', 7, 1)",
                "INSERT INTO liveness_leases (ns, space, name, holder, token, ttl_ms, expires_at) \
                 VALUES ('schema_test', 'members', 'old', 'h', 7, 3600000, \
                 CAST(ROUND(unixepoch('subsec') * 1000.0) AS INTEGER) + 3600000)",
                "INSERT INTO liveness_items (ns, id, payload, attempts, max_attempts, state, owner) \
                 VALUES ('schema_test', 1, x'6a6f62', 1, 5, 1, 7)",
            ],
        )
        .await;
        pool.close().await;
    }

    let store = common::open(&path, NS).await;
    let old = Key::member("old").unwrap();
    let info = store.inspect(&old).await.unwrap().unwrap();
    assert_eq!(info.status, LeaseStatus::Expired);
    assert_eq!(info.token.0, 7);
    let expired = store.expired(&Space::members(), 10).await.unwrap();
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].token.0, 7);
    assert!(store.reap(&old, info.token).await.unwrap());
    let requeued = store.sweep(info.token).await.unwrap();
    assert_eq!(requeued.requeued.len(), 1);
    assert_eq!(
        store
            .item(requeued.requeued[0])
            .await
            .unwrap()
            .unwrap()
            .state,
        ItemState::Pending
    );
    let lease = acquire_member(&store, "old", "h2", Ttl::from_secs(60).unwrap()).await;
    assert_eq!(lease.token.0, 8, "tokens go on from the old counter");
    let version: i64 = sqlx::query_scalar("SELECT MAX(version) FROM liveness_migrations")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(version, newest());
    assert!(matches!(
        store.inspect(&old).await.unwrap().unwrap().status,
        LeaseStatus::Live { .. }
    ));

    // A process of the older build still running on the file fails loudly instead of
    // comparing its wall clock with boot-clock expiries: its statements name a column
    // that no longer exists.
    assert!(sqlx::query(
        "SELECT name FROM liveness_leases WHERE expires_at <= \
         CAST(ROUND(unixepoch('subsec') * 1000.0) AS INTEGER)"
    )
    .fetch_all(store.pool())
    .await
    .is_err());
}

/// A file at schema version 5 (before sessions), written under this boot: a live
/// lease, a dead token owning an item, its death record not yet swept. Opened by this
/// build, the file is migrated in place to the newest version: the lease keeps its token and
/// stays live (same boot), renews, the dead token's sweep fills in its record, and a
/// session can be ridden.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[tokio::test]
async fn a_version_5_file_is_upgraded_in_place_for_sessions() {
    let (_dir, path) = common::scratch("v5.db");
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).unwrap();
    let now = i64::try_from(Duration::from(now).as_millis()).unwrap();
    {
        let pool = file_at_version(&path, 5).await;
        sqlx::query("UPDATE liveness_boot SET boot_id = ?1")
            .bind(boot.trim())
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO liveness_leases (ns, space, name, holder, token, ttl_ms, expires_boot_ms) \
             VALUES ('schema_test', 'members', 'old', 'h', 7, 3600000, ?1)",
        )
        .bind(now + 3_600_000)
        .execute(&pool)
        .await
        .unwrap();
        insert(
            &pool,
            &[
                "INSERT INTO liveness_counters (ns, next_token, next_item, next_death) \
                 VALUES ('schema_test', 7, 1, 1)",
                "INSERT INTO liveness_items (ns, id, payload, attempts, max_attempts, state, owner) \
                 VALUES ('schema_test', 1, x'6a6f62', 1, 5, 1, 5)",
                "INSERT INTO liveness_dead (ns, token, space, name) \
                 VALUES ('schema_test', 5, 'members', 'gone')",
                "INSERT INTO liveness_deaths (ns, seq, space, name, holder, token, at_ms, cause) \
                 VALUES ('schema_test', 1, 'members', 'gone', 'h', 5, 1, 0)",
            ],
        )
        .await;
        pool.close().await;
    }

    let store = common::open(&path, NS).await;
    let version: i64 = sqlx::query_scalar("SELECT MAX(version) FROM liveness_migrations")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(version, newest());
    let old = Key::member("old").unwrap();
    let info = store.inspect(&old).await.unwrap().unwrap();
    assert!(info.is_live(), "{info:?}");
    assert_eq!((info.token.0, info.session), (7, None));
    let lease = liveness_core::Lease::granted(
        &store.info().issuer,
        old.clone(),
        HolderId::new("h").unwrap(),
        info.token,
        Ttl::from_secs(60).unwrap(),
    );
    store.renew(&lease).await.unwrap();
    assert_eq!(store.expired(&Space::members(), 10).await.unwrap(), vec![]);

    let swept = store.sweep(liveness_core::FencingToken(5)).await.unwrap();
    assert_eq!(swept.requeued.len(), 1);
    let deaths = store.deaths(None, 10).await.unwrap();
    assert_eq!(deaths.len(), 1);
    let counts = deaths[0].swept.expect("swept");
    assert_eq!((counts.members, counts.requeued), (0, 1));

    let holder = HolderId::new("p").unwrap();
    let session = store
        .acquire(
            &Key::new(Space::sessions(), liveness_core::Name::new("p").unwrap()),
            &holder,
            Ttl::from_secs(60).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(session.token.0, 8, "tokens go on from the old counter");
    let member = store
        .join_session(&session, &Key::member("rider").unwrap(), &holder)
        .await
        .unwrap();
    let info = store.inspect(&member.key).await.unwrap().unwrap();
    assert!(info.is_live());
    assert_eq!(info.session, Some(session.key));
}

/// A file at schema version 7 (before error texts) holding a pending item: opened by
/// this build, the item is kept with no error text, and its failure keeps the text
/// given (a NUL among it), read back by `item` and `items` alike.
#[tokio::test]
async fn a_version_7_file_gains_error_texts() {
    let (_dir, path) = common::scratch("v7.db");
    {
        let pool = file_at_version(&path, 7).await;
        insert(
            &pool,
            &[
                "INSERT INTO liveness_counters (ns, next_token, next_item, next_death) \
                 VALUES ('schema_test', 0, 1, 1)",
                "INSERT INTO liveness_items (ns, id, payload, attempts, max_attempts, state, owner) \
                 VALUES ('schema_test', 1, x'6a6f62', 0, 5, 0, NULL)",
            ],
        )
        .await;
        pool.close().await;
    }

    let store = common::open(&path, NS).await;
    let id = liveness_core::ItemId(1);
    let record = store.item(id).await.unwrap().expect("kept");
    assert_eq!(
        (record.state, record.last_error),
        (ItemState::Pending, None)
    );
    assert!(store.capabilities().error_text);

    let lease = acquire_member(&store, "w", "h", Ttl::from_secs(60).unwrap()).await;
    let claimed = store.claim(&lease, 1).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let text = "it's \"broken\"\nsee: C:\\logs\0 ✓";
    let state = store
        .finish_with_error(&lease, id, liveness_core::Outcome::DeadLetter, text)
        .await
        .unwrap();
    assert_eq!(state, Some(ItemState::DeadLettered));
    let record = store.item(id).await.unwrap().expect("kept");
    assert_eq!(record.last_error.as_deref(), Some(text));
    let listed = store
        .items(
            liveness_core::ItemStateKind::DeadLettered,
            liveness_core::Page::first(10),
        )
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].last_error.as_deref(), Some(text));
}

/// A file at schema version 8 (keys kept for good) holding an enqueue key: opened by
/// this build, the key gets the store's now as its recording time, so it is kept one
/// retention from the upgrade and a repeat still answers its id.
#[tokio::test]
async fn a_version_8_file_keeps_its_keys_one_retention_from_the_upgrade() {
    let (_dir, path) = common::scratch("v8.db");
    let key = liveness_core::RequestId::random();
    {
        let pool = file_at_version(&path, 8).await;
        insert(
            &pool,
            &[
                "INSERT INTO liveness_counters (ns, next_token, next_item, next_death) \
                 VALUES ('schema_test', 0, 1, 1)",
                "INSERT INTO liveness_items (ns, id, payload, attempts, max_attempts, state, owner) \
                 VALUES ('schema_test', 1, x'6a6f62', 0, 5, 0, NULL)",
            ],
        )
        .await;
        sqlx::query(
            "INSERT INTO liveness_enqueue_keys (ns, key, id) VALUES ('schema_test', ?1, 1)",
        )
        .bind(key.to_hex())
        .execute(&pool)
        .await
        .unwrap();
        // Last opened under this boot (where the host has a boot id): only the
        // upgrade dates the key, not the reboot rule.
        opened_under_this_boot(&pool).await;
        pool.close().await;
    }

    let store = common::open(&path, NS).await;
    let recorded: Option<i64> = sqlx::query_scalar(
        "SELECT recorded_boot_ms FROM liveness_enqueue_keys WHERE ns = 'schema_test'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    let now = store.store_time().await.unwrap().since_epoch();
    let now = i64::try_from(now.as_millis()).unwrap();
    assert!(
        recorded.is_some_and(|at| at <= now && at > now - 60_000),
        "recorded {recorded:?}, now {now}"
    );
    let id = store
        .enqueue(b"job", liveness_core::EnqueueOptions::keyed(key))
        .await
        .unwrap();
    assert_eq!(id, liveness_core::ItemId(1), "the key is kept");
}

/// A file at schema version 10 (before named queues) holding a pending item and a
/// dead letter: opened by this build, both are in the default queue, counted there,
/// the pending one claimed from it and the dead letter, retried, too; a new item of
/// another queue stays apart.
#[tokio::test]
async fn a_version_10_file_keeps_its_items_in_the_default_queue() {
    let (_dir, path) = common::scratch("v10.db");
    {
        let pool = file_at_version(&path, 10).await;
        insert(&pool, &PENDING_AND_DEAD).await;
        pool.close().await;
    }

    let store = common::open(&path, NS).await;
    assert!(store.capabilities().queues);
    let default = liveness_core::QueueName::DEFAULT;
    let (pending, dead) = (liveness_core::ItemId(1), liveness_core::ItemId(2));
    for id in [pending, dead] {
        let record = store.item(id).await.unwrap().expect("kept");
        assert_eq!(record.item.queue, default);
    }
    let mail = liveness_core::QueueName::new("mail").unwrap();
    let options = liveness_core::EnqueueOptions::default().queue(mail);
    let new = store.enqueue(b"m", options).await.unwrap();
    let counts = store.queue_counts().await.unwrap();
    let counts: Vec<_> = counts
        .iter()
        .map(|c| (c.queue, c.counts.pending, c.counts.dead_lettered))
        .collect();
    assert_eq!(counts, [(default, 1, 1), (mail, 1, 0)]);

    let lease = acquire_member(&store, "w", "h", Ttl::from_secs(60).unwrap()).await;
    let claimed = store.claim(&lease, 5).await.unwrap();
    let claimed: Vec<_> = claimed.iter().map(|i| (i.id, i.queue)).collect();
    assert_eq!(claimed, [(pending, default)]);
    store.retry_dead_letter(dead).await.unwrap();
    let req = liveness_core::RequestId::next();
    let claimed = store
        .claim_from(&lease, &[default, mail], 5, req)
        .await
        .unwrap();
    let claimed: Vec<_> = claimed.iter().map(|i| (i.id, i.queue)).collect();
    assert_eq!(claimed, [(dead, default), (new, mail)]);
}

/// A file at schema version 11 (before item times) holding a pending item and a dead
/// letter: opened by this build, neither has a time (when it came is not known); a
/// claim stamps the pending one's attempt alone, the dead letter's retry leaves it
/// without any, and an item enqueued now has its enqueue time.
#[tokio::test]
async fn a_version_11_file_s_items_have_no_times() {
    let (_dir, path) = common::scratch("v11.db");
    {
        let pool = file_at_version(&path, 11).await;
        insert(&pool, &PENDING_AND_DEAD).await;
        // Last opened under this boot (where the host has a boot id): the upgrade
        // alone leaves the items without times, not the reboot rule.
        opened_under_this_boot(&pool).await;
        pool.close().await;
    }

    let store = common::open(&path, NS).await;
    assert!(store.capabilities().item_times);
    let (pending, dead) = (liveness_core::ItemId(1), liveness_core::ItemId(2));
    for id in [pending, dead] {
        let record = store.item(id).await.unwrap().expect("kept");
        assert_eq!(record.times, ItemTimes::default(), "{id:?}");
    }

    let lease = acquire_member(&store, "w", "h", Ttl::from_secs(60).unwrap()).await;
    let before = store.store_time().await.unwrap();
    let claimed = store.claim(&lease, 5).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let after = store.store_time().await.unwrap();
    let times = store.item(pending).await.unwrap().expect("kept").times;
    assert_eq!((times.enqueued, times.finished), (None, None));
    assert!(
        times.attempted.is_some_and(|t| before <= t && t <= after),
        "{times:?}"
    );
    store.retry_dead_letter(dead).await.unwrap();
    let times = store.item(dead).await.unwrap().expect("kept").times;
    assert_eq!(times, ItemTimes::default());

    let new = store
        .enqueue(b"new", liveness_core::EnqueueOptions::default())
        .await
        .unwrap();
    let enqueued = store.item(new).await.unwrap().expect("kept").times.enqueued;
    let now = store.store_time().await.unwrap();
    assert!(
        enqueued.is_some_and(|t| after <= t && t <= now),
        "{enqueued:?}"
    );
}

/// A file at schema version 12 (dead letters kept for good) holding a dead letter:
/// opened by this build, the dead letter's retention counts from the upgrade (the
/// store's now), its item times stay as they were (none), and one retention later a
/// dead-lettering removes it.
#[tokio::test]
async fn a_version_12_file_s_dead_letters_expire_one_retention_after_the_upgrade() {
    let (_dir, path) = common::scratch("v12.db");
    {
        let pool = file_at_version(&path, 12).await;
        insert(&pool, &PENDING_AND_DEAD).await;
        // Last opened under this boot (where the host has a boot id): the upgrade
        // alone dates the dead letter, not the reboot rule.
        opened_under_this_boot(&pool).await;
        pool.close().await;
    }

    let url = format!(
        "sqlite://{}?ns={NS}&dead_letter_retention_s=1",
        path.display()
    );
    let store = liveness_sqlite::connect(&url).await.unwrap();
    let dead_at = |id: i64| {
        sqlx::query_scalar::<_, Option<i64>>(
            "SELECT dead_at FROM liveness_items WHERE ns = 'schema_test' AND id = ?1",
        )
        .bind(id)
        .fetch_one(store.pool())
    };
    let now = store.store_time().await.unwrap().since_epoch();
    let now = i64::try_from(now.as_millis()).unwrap();
    let dated = dead_at(2).await.unwrap();
    assert!(
        dated.is_some_and(|at| at <= now && at > now - 60_000),
        "dead_at {dated:?}, now {now}"
    );
    assert_eq!(dead_at(1).await.unwrap(), None, "a pending item has none");
    let (pending, dead) = (liveness_core::ItemId(1), liveness_core::ItemId(2));
    assert_eq!(
        store.item(dead).await.unwrap().expect("kept").times,
        ItemTimes::default()
    );

    // One retention after the upgrade, a dead-lettering removes it: not kept for good.
    let lease = acquire_member(&store, "w", "h", Ttl::from_secs(60).unwrap()).await;
    assert_eq!(store.claim(&lease, 1).await.unwrap()[0].id, pending);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let state = store
        .finish(&lease, pending, liveness_core::Outcome::DeadLetter)
        .await
        .unwrap();
    assert_eq!(state, Some(ItemState::DeadLettered));
    assert!(store.item(dead).await.unwrap().is_none(), "removed");
    assert_eq!(store.item_counts().await.unwrap().dead_lettered, 1);
}

/// The newest schema version this build applies.
fn newest() -> i64 {
    liveness_sqlite::MIGRATIONS
        .iter()
        .map(|(version, _, _)| *version)
        .max()
        .unwrap()
}
