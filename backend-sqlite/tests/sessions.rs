//! Members riding sessions, beyond the conformance scenarios: the sweep of a dead
//! session of 2,000 members declares them dead in batches of at most `max_batch`, one
//! commit each, every member exactly once, under one death record counting them all; renewing a session writes
//! its one row and renewing a member writes nothing; two handles on one file each
//! host a session, and one session's death leaves the other's members live; a reboot
//! expires sessions, and their members die with them.
#![cfg(any(target_os = "linux", target_os = "android"))]

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use liveness_conformance::fixtures::renew_with_ttl;
use liveness_core::{
    DeathCause, FencingToken, HolderId, ItemCounts, ItemStore, Key, Lease, LeaseStatus, LeaseStore,
    Name, OperatorStore, Space, Store, Ttl,
};
use liveness_sqlite::{SqliteStore, Synchronous};
use liveness_testkit::fixtures::enqueue_jobs;

mod common;

const NS: &str = "sessions_test";

fn session_key(name: &str) -> Key {
    Key::new(Space::sessions(), Name::new(name).unwrap())
}

/// A store on `path` with `synchronous=normal` (no fsync per commit: these tests
/// count rows and commits, not what a power loss keeps) and `connections` in its pool.
async fn open(path: &Path, connections: u32) -> SqliteStore {
    let config = common::config(path, NS)
        .with_synchronous(Synchronous::Normal)
        .with_max_connections(connections)
        .unwrap();
    SqliteStore::connect(config).await.unwrap()
}

/// A session lease on `name` (ttl 60 s) and `n` members riding it, named `prefix0`…
async fn session_of(
    store: &SqliteStore,
    name: &str,
    prefix: &str,
    n: usize,
) -> (Lease, Vec<Lease>) {
    let ttl = Ttl::from_secs(60).unwrap();
    let holder = HolderId::new(format!("process-{name}")).unwrap();
    let session = store
        .acquire(&session_key(name), &holder, ttl)
        .await
        .unwrap();
    let mut members = Vec::with_capacity(n);
    for i in 0..n {
        let key = Key::member(&format!("{prefix}{i}")).unwrap();
        let member = store.join_session(&session, &key, &holder).await.unwrap();
        assert!(member.token > session.token);
        members.push(member);
    }
    (session, members)
}

/// Makes `session` expire within a millisecond: renewed with a 1 ms ttl (the store
/// takes the ttl the lease value carries), then waited out.
async fn expire(store: &SqliteStore, session: &Lease) {
    renew_with_ttl(store, session, Ttl::from_millis(1).unwrap()).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
}

async fn in_dead_set(store: &SqliteStore, token: FencingToken) -> bool {
    let dead = store.dead_tokens(1000).await.unwrap();
    dead.iter().any(|d| d.token == token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_of_2000_members_is_swept_in_batches_under_one_death_record() {
    let (_dir, path) = common::scratch("sweep.db");
    let store = open(&path, 1).await;
    let batch = store.capabilities().max_batch;
    assert_eq!(batch, 1000);
    enqueue_jobs(&store, 10).await;
    let (session, members) = session_of(&store, "big", "m", 2000).await;
    for m in &members[..10] {
        assert_eq!(store.claim(m, 1).await.unwrap().len(), 1);
    }
    let info = store.inspect(&members[1999].key).await.unwrap().unwrap();
    assert!(matches!(info.status, LeaseStatus::Live { .. }));
    assert_eq!(info.session, Some(session.key.clone()));

    expire(&store, &session).await;
    let info = store.inspect(&members[0].key).await.unwrap().unwrap();
    assert_eq!(info.status, LeaseStatus::Expired, "dead with its session");
    assert!(store
        .expired(&Space::members(), 1000)
        .await
        .unwrap()
        .is_empty());
    let listed = store.expired(&Space::sessions(), 1000).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].token, session.token);
    assert!(store.reap(&session.key, session.token).await.unwrap());

    // Each call is one commit and declares at most a batch dead; the session's token stays
    // in the dead set until the call that finds no member left.
    let commits = common::commit_counter(&store).await;
    let mut declared = Vec::new();
    let mut calls = 0;
    loop {
        let before = commits.load(Ordering::SeqCst);
        let moved = store.sweep(session.token).await.unwrap();
        assert_eq!(commits.load(Ordering::SeqCst) - before, 1, "one commit");
        assert!(moved.members.len() <= batch, "a batch above max_batch");
        calls += 1;
        declared.extend(moved.members.iter().map(|m| m.token));
        if !in_dead_set(&store, session.token).await {
            break;
        }
        assert_eq!(
            moved.members.len(),
            batch,
            "a full batch while members remain"
        );
        assert!(calls < 10, "the sweep never ended");
    }
    assert_eq!(calls, 2, "2,000 members: two batches of 1,000");
    let mut want: Vec<FencingToken> = members.iter().map(|m| m.token).collect();
    declared.sort();
    want.sort();
    assert_eq!(declared, want, "each member exactly once");
    assert!(store.inspect(&members[0].key).await.unwrap().is_none());

    // Every member's token is in the dead set; their sweeps give the items back, and
    // a second sweep of any of them moves nothing.
    for chunk in want.chunks(batch) {
        for moved in store.sweep_many(chunk).await.unwrap() {
            assert!(moved.unwrap().members.is_empty());
        }
    }
    assert!(store.sweep(want[0]).await.unwrap().is_empty());
    assert!(store.dead_tokens(10).await.unwrap().is_empty());
    assert_eq!(
        store.item_counts().await.unwrap(),
        ItemCounts::new(10, 0, 0)
    );

    // One death record, for the session, counting its 2,000 members and their items.
    let deaths = store.deaths(None, 100).await.unwrap();
    assert_eq!(deaths.len(), 1, "no record per member: {deaths:?}");
    assert_eq!(deaths[0].token, session.token);
    assert_eq!(deaths[0].cause, DeathCause::Reaped);
    let swept = deaths[0].swept.expect("swept");
    assert_eq!(
        (swept.members, swept.requeued, swept.dead_lettered),
        (2000, 10, 0)
    );
}

/// Records every row write to `liveness_leases` (triggers: SQLite's update hook does
/// not see WITHOUT ROWID tables) into `test_writes`, as `op:name`.
async fn record_lease_writes(store: &SqliteStore) {
    for statement in [
        "CREATE TABLE test_writes (what TEXT NOT NULL)",
        "CREATE TRIGGER test_w_ins AFTER INSERT ON liveness_leases \
         BEGIN INSERT INTO test_writes VALUES ('insert:' || new.name); END",
        "CREATE TRIGGER test_w_upd AFTER UPDATE ON liveness_leases \
         BEGIN INSERT INTO test_writes VALUES ('update:' || new.name); END",
        "CREATE TRIGGER test_w_del AFTER DELETE ON liveness_leases \
         BEGIN INSERT INTO test_writes VALUES ('delete:' || old.name); END",
    ] {
        sqlx::query(statement).execute(store.pool()).await.unwrap();
    }
}

async fn lease_writes(store: &SqliteStore) -> Vec<String> {
    let writes = sqlx::query_scalar("SELECT what FROM test_writes")
        .fetch_all(store.pool())
        .await
        .unwrap();
    sqlx::query("DELETE FROM test_writes")
        .execute(store.pool())
        .await
        .unwrap();
    writes
}

#[tokio::test]
async fn renewing_a_session_writes_its_row_only_and_a_member_writes_nothing() {
    let (_dir, path) = common::scratch("writes.db");
    let store = open(&path, 2).await;
    let (session, members) = session_of(&store, "p", "m", 100).await;
    record_lease_writes(&store).await;

    store.renew(&session).await.unwrap();
    assert_eq!(lease_writes(&store).await, vec!["update:p".to_owned()]);

    let renewed = store.renew(&members[7]).await.unwrap();
    assert!(renewed.expires_in <= session.ttl.duration());
    assert!(renewed.expires_in > Duration::ZERO);
    assert_eq!(lease_writes(&store).await, Vec::<String>::new());

    let mut all = vec![session.clone()];
    all.extend(members.iter().cloned());
    for r in store.renew_many(&all).await.unwrap() {
        r.unwrap();
    }
    assert_eq!(lease_writes(&store).await, vec!["update:p".to_owned()]);

    // The riding members have no expiry of their own, so none in the expiry index.
    let own: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM liveness_leases WHERE ns = ?1 AND expires_boot_ms IS NOT NULL",
    )
    .bind(NS)
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(own, 1, "the session alone has an expiry");
}

/// Two handles on one file (two pools: as two processes of the host have), each
/// hosting a session with members. One session dies and is swept by the other
/// handle; the other session's members stay live throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_dies_while_another_handle_s_members_stay_live() {
    let (_dir, path) = common::scratch("two.db");
    let a = open(&path, 2).await;
    let b = open(&path, 2).await;
    let (sa, ma) = session_of(&a, "a", "a", 300).await;
    let (sb, mb) = session_of(&b, "b", "b", 300).await;

    expire(&a, &sa).await;
    b.renew(&sb).await.unwrap();
    let dead = b.expired(&Space::sessions(), 10).await.unwrap();
    assert_eq!(dead.len(), 1, "only a's session: {dead:?}");
    assert_eq!(dead[0].token, sa.token);
    assert!(b.reap(&sa.key, sa.token).await.unwrap());
    let mut declared = Vec::new();
    while in_dead_set(&b, sa.token).await {
        let moved = b.sweep(sa.token).await.unwrap();
        declared.extend(moved.members.into_iter().map(|m| m.token));
    }
    declared.sort();
    let want: Vec<FencingToken> = ma.iter().map(|m| m.token).collect();
    assert_eq!(declared, want, "a's members, each once");

    for m in &mb {
        let info = a.inspect(&m.key).await.unwrap().unwrap();
        assert!(info.is_live(), "{info:?}");
        assert_eq!(info.session, Some(sb.key.clone()));
    }
    for r in b.renew_many(&mb).await.unwrap() {
        r.unwrap();
    }
    assert_eq!(a.claim(&mb[0], 1).await.unwrap().len(), 0);
    assert!(matches!(
        a.claim(&ma[0], 1).await,
        Err(liveness_core::Error::Lost { .. })
    ));
    let listed = a
        .leases(&Space::members(), liveness_core::Page::first(1000))
        .await
        .unwrap();
    assert_eq!(listed.len(), mb.len(), "b's members, and nothing of a's");
    assert!(listed.iter().all(|l| l.session == Some(sb.key.clone())));
}

/// A reboot (another boot id in the file) expires every session, and with them their
/// members, which the sweep of the session then declares dead; no member is listed expired
/// on its own.
#[tokio::test]
async fn a_reboot_expires_sessions_and_their_members_with_them() {
    let (_dir, path) = common::scratch("reboot.db");
    let store = open(&path, 2).await;
    let (session, members) = session_of(&store, "p", "m", 3).await;
    sqlx::query("UPDATE liveness_boot SET boot_id = 'a-boot-before'")
        .execute(store.pool())
        .await
        .unwrap();
    store.close().await;

    let store = open(&path, 2).await;
    let info = store.inspect(&members[0].key).await.unwrap().unwrap();
    assert_eq!(info.status, LeaseStatus::Expired);
    assert!(store
        .expired(&Space::members(), 10)
        .await
        .unwrap()
        .is_empty());
    assert!(store.reap(&session.key, session.token).await.unwrap());
    let moved = store.sweep(session.token).await.unwrap();
    assert_eq!(moved.members.len(), 3);
    assert!(!in_dead_set(&store, session.token).await);
}
