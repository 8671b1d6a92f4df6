//! A batch is one transaction. `acquire_many` of many keys, `reap_many` of
//! many deaths and `sweep_many` of many dead tokens each commit once
//! (counted by SQLite's own commit hook on the pool's only connection), not once per
//! entry.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use liveness_conformance::fixtures::{
    owners_with_items, renew_with_ttl, session_with_members, swept_session_record, wait_expired,
};
use liveness_conformance::fresh_namespace;
use liveness_sqlite::{SqliteConfig, SqliteStore};

mod common;

use liveness_core::{
    Acquire, DeathCause, EnqueueOptions, FencingToken, HolderId, ItemId, ItemStore, Key, Lease,
    LeaseStore, OperatorStore, Store, Ttl,
};

/// A store on a fresh file with one connection, and the count of its commits (a
/// hook on that connection sees every commit of the handle).
async fn counted() -> (tempfile::TempDir, SqliteStore, Arc<AtomicU64>) {
    let dir = tempfile::tempdir().unwrap();
    let config = SqliteConfig::new(dir.path().join("batches.db"), fresh_namespace())
        .with_max_connections(1)
        .unwrap();
    let store = SqliteStore::connect(config).await.unwrap();
    let commits = common::commit_counter(&store).await;
    (dir, store, commits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_many_is_one_commit_for_the_batch() {
    let (_dir, store, commits) = counted().await;
    let ttl = Ttl::from_secs(30).unwrap();
    let asks: Vec<Acquire> = (0..50)
        .map(|i| {
            Acquire::new(
                Key::member(&format!("m{i}")).unwrap(),
                HolderId::new(format!("h{i}")).unwrap(),
                ttl,
            )
        })
        .collect();
    let answers = store.acquire_many(&asks).await.unwrap();
    assert_eq!(answers.len(), asks.len());
    for (ask, answer) in asks.iter().zip(&answers) {
        let lease = answer.as_ref().unwrap();
        assert_eq!((&lease.key, &lease.holder), (&ask.key, &ask.holder));
    }
    let n = commits.load(Ordering::SeqCst);
    assert_eq!(
        n,
        1,
        "acquire_many of {} keys committed {n} times",
        asks.len()
    );
}

/// Awaits `batch`, asserts that it committed exactly once, and returns its answers
/// (each of them a success).
async fn in_one_commit<T>(
    commits: &AtomicU64,
    what: &str,
    batch: impl std::future::Future<Output = liveness_core::Result<Vec<liveness_core::Result<T>>>>,
) -> Vec<T> {
    let before = commits.load(Ordering::SeqCst);
    let answers = batch.await.unwrap();
    let n = commits.load(Ordering::SeqCst) - before;
    assert_eq!(n, 1, "{what} committed {n} times");
    answers.into_iter().map(|a| a.unwrap()).collect()
}

/// `n` leases with a short ttl on keys `prefix<i>`, each holding one claimed item,
/// waited on until every one has expired by the store clock.
async fn expired_owners(store: &SqliteStore, prefix: &str, n: usize) -> Vec<(Lease, ItemId)> {
    // Long while they claim, made short only once every claim is in: however slow a
    // loaded machine, no lease expires before its claim (a 600 ms lease once did).
    let long = Ttl::from_secs(60).unwrap();
    let short = Ttl::from_millis(50).unwrap();
    let mut out = Vec::with_capacity(n);
    for (lease, id) in owners_with_items(store, prefix, n, long).await {
        out.push((renew_with_ttl(store, &lease, short).await, id));
    }
    wait_expired(store, out.iter().map(|(lease, _)| lease)).await;
    out
}

/// A checker round's deaths commit once, not once per lease, and each entry is
/// answered as `reap` would: true for each expired lease, false for a live one and a
/// repeat; each reaped token is in the dead set with a death record of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reap_many_is_one_commit_for_the_batch() {
    let (_dir, store, commits) = counted().await;
    let dead = expired_owners(&store, "dead", 20).await;
    let live = liveness_conformance::live_lease(&store, "live").await;
    let mut entries: Vec<(Key, FencingToken)> =
        dead.iter().map(|(l, _)| (l.key.clone(), l.token)).collect();
    entries.push((live.key.clone(), live.token));
    entries.push((dead[0].0.key.clone(), dead[0].0.token));
    let what = format!("reap_many of {} entries", entries.len());
    let answers = in_one_commit(&commits, &what, store.reap_many(&entries)).await;
    let mut expected = vec![true; 20];
    expected.extend([false, false]);
    assert_eq!(answers, expected);
    let tokens = store.dead_tokens(1000).await.unwrap();
    let deaths = store.deaths(None, 1000).await.unwrap();
    for (lease, _) in &dead {
        assert!(tokens.iter().any(|d| d.token == lease.token));
        let death = deaths.iter().find(|d| d.token == lease.token).unwrap();
        assert_eq!(death.cause, DeathCause::Reaped);
    }
}

/// Sweeping a round's dead tokens commits once, not once per token, and answers
/// each token as `sweep` would (a repeat and a live token move nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_many_is_one_commit_for_the_batch() {
    let (_dir, store, commits) = counted().await;
    let dead = expired_owners(&store, "dead", 10).await;
    let entries: Vec<(Key, FencingToken)> =
        dead.iter().map(|(l, _)| (l.key.clone(), l.token)).collect();
    assert!(store
        .reap_many(&entries)
        .await
        .unwrap()
        .into_iter()
        .all(|a| a.unwrap()));
    let mut tokens: Vec<FencingToken> = dead.iter().map(|(l, _)| l.token).collect();
    tokens.push(dead[0].0.token);
    tokens.push(FencingToken(dead[9].0.token.0 + 1_000));
    let what = format!("sweep_many of {} tokens", tokens.len());
    let answers = in_one_commit(&commits, &what, store.sweep_many(&tokens)).await;
    for (i, (_, id)) in dead.iter().enumerate() {
        assert_eq!(answers[i].requeued, vec![*id]);
    }
    assert!(answers[10].is_empty(), "a token's items moved twice");
    assert!(
        answers[11].is_empty(),
        "a token not in the dead set moved items"
    );
    assert!(store.dead_tokens(1000).await.unwrap().is_empty());
    let deaths = store.deaths(None, 1000).await.unwrap();
    for (lease, _) in &dead {
        let death = deaths.iter().find(|d| d.token == lease.token).unwrap();
        let swept = death.swept.expect("the record is swept");
        assert_eq!((swept.requeued, swept.dead_lettered), (1, 0), "{death:?}");
    }
}

/// The members a dead session's sweep declared dead, swept in one `sweep_many`
/// (with a repeat), each hand their item back once, and their session's one death
/// record sums what they moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_many_sums_members_declared_dead_into_their_session_s_record() {
    let (_dir, store, _commits) = counted().await;
    let ttl = Ttl::from_secs(60).unwrap();
    let (session, members) = session_with_members(&store, "p", "m", ttl, 3).await;
    for member in &members {
        store
            .enqueue(b"job", EnqueueOptions::default())
            .await
            .unwrap();
        assert_eq!(store.claim(member, 1).await.unwrap().len(), 1);
    }
    assert!(store.release(&session).await.unwrap());
    let mut declared = Vec::new();
    while store
        .dead_tokens(1000)
        .await
        .unwrap()
        .iter()
        .any(|d| d.token == session.token)
    {
        let moved = store.sweep(session.token).await.unwrap();
        declared.extend(moved.members.into_iter().map(|m| m.token));
    }
    assert_eq!(declared.len(), 3);
    let mut tokens = declared.clone();
    tokens.push(declared[0]);
    let answers = store.sweep_many(&tokens).await.unwrap();
    let moved: Vec<usize> = answers
        .into_iter()
        .map(|a| a.unwrap().requeued.len())
        .collect();
    assert_eq!(moved, vec![1, 1, 1, 0], "each member's item once");
    swept_session_record(&store, session.token, &declared, 3).await;
}
