//! A batch is one transaction. `acquire_many` of many keys, `join_session_many` of
//! many members and `reap_many` of many deaths each commit once on the test double
//! (counted by its commit version), not once per entry; a commit that reports an
//! unknown result is retried and answers each entry with what the applied commit did.

use liveness_conformance::fresh_namespace;
use liveness_fdb::DoubleDatabase;
use std::time::Duration;

use liveness_core::{
    Acquire, EnqueueOptions, FencingToken, HolderId, ItemStore, Key, LeaseStore, Name,
    OperatorStore, Space, Store, Ttl,
};

fn asks(prefix: &str, n: usize) -> Vec<Acquire> {
    let ttl = Ttl::from_secs(30).unwrap();
    (0..n)
        .map(|i| {
            Acquire::new(
                Key::member(&format!("{prefix}{i}")).unwrap(),
                HolderId::new(format!("h{i}")).unwrap(),
                ttl,
            )
        })
        .collect()
}

#[tokio::test]
async fn acquire_many_is_one_commit_for_the_batch() {
    let db = DoubleDatabase::new();
    let store = db.store(&fresh_namespace());
    let asks = asks("m", 50);
    let before = db.version();
    let answers = store.acquire_many(&asks).await.unwrap();
    let commits = db.version() - before;
    assert_eq!(answers.len(), asks.len());
    for (ask, answer) in asks.iter().zip(&answers) {
        let lease = answer.as_ref().unwrap();
        assert_eq!((&lease.key, &lease.holder), (&ask.key, &ask.holder));
    }
    assert_eq!(
        commits,
        1,
        "acquire_many of {} keys made {commits} commits",
        asks.len()
    );
}

#[tokio::test]
async fn acquire_many_after_an_unknown_result_answers_what_the_commit_took() {
    let db = DoubleDatabase::new();
    let store = db.store(&fresh_namespace());
    let mut asks = asks("u", 20);
    // A second entry on the first key: Held by the first entry's lease, also when the
    // retry finds that lease already written.
    asks.push(Acquire::new(
        asks[0].key.clone(),
        HolderId::new("late").unwrap(),
        asks[0].ttl,
    ));
    db.inject_unknown_results(1);
    let answers = store.acquire_many(&asks).await.unwrap();
    let first = answers[0].as_ref().unwrap().clone();
    for (ask, answer) in asks.iter().zip(&answers).take(20) {
        let lease = answer.as_ref().unwrap();
        assert_eq!((&lease.key, &lease.holder), (&ask.key, &ask.holder));
        let info = store.inspect(&ask.key).await.unwrap().unwrap();
        assert_eq!(
            (info.token, &info.holder),
            (lease.token, &lease.holder),
            "the answer is the lease the applied commit wrote"
        );
        assert!(info.is_live());
    }
    match &answers[20] {
        Err(liveness_core::Error::Held { holder, token, .. }) => {
            assert_eq!((holder, *token), (&first.holder, first.token));
        }
        got => panic!("second entry on one key: expected Held, got {got:?}"),
    }
}

/// Joining many members into a session commits once, not once per member, also when
/// the commit reports an unknown result and is retried: each entry answers the
/// member the applied commit wrote (riding the session), and a second entry on one
/// key answers `Held` by the first.
#[tokio::test]
async fn join_session_many_is_one_commit_for_the_batch() {
    for unknown in [false, true] {
        let db = DoubleDatabase::new();
        let store = db.store(&fresh_namespace());
        let ttl = Ttl::from_secs(30).unwrap();
        let session = store
            .acquire(
                &Key::new(Space::sessions(), Name::new("p").unwrap()),
                &HolderId::new("p").unwrap(),
                ttl,
            )
            .await
            .unwrap();
        let mut joins: Vec<(Key, HolderId)> = asks("j", 50)
            .into_iter()
            .map(|ask| (ask.key, ask.holder))
            .collect();
        joins.push((joins[0].0.clone(), HolderId::new("late").unwrap()));
        if unknown {
            db.inject_unknown_results(1);
        }
        let before = db.version();
        let answers = store.join_session_many(&session, &joins).await.unwrap();
        let commits = db.version() - before;
        assert_eq!(
            commits, 1,
            "join_session_many of 50 keys made {commits} commits"
        );
        assert_eq!(answers.len(), joins.len());
        for ((key, holder), answer) in joins.iter().zip(&answers).take(50) {
            let lease = answer.as_ref().unwrap();
            assert_eq!((&lease.key, &lease.holder), (key, holder));
            let info = store.inspect(key).await.unwrap().unwrap();
            assert_eq!(info.token, lease.token, "unknown result: {unknown}");
            assert_eq!(info.session.as_ref(), Some(&session.key));
        }
        match &answers[50] {
            Err(liveness_core::Error::Held { holder, token, .. }) => {
                let first = answers[0].as_ref().unwrap();
                assert_eq!((holder, *token), (&first.holder, first.token));
            }
            got => panic!("second entry on one key: expected Held, got {got:?}"),
        }
    }
}

/// A checker round's deaths commit once, not once per lease; each entry is answered
/// as `reap` would (true for each expired lease, false for a live one and a repeat),
/// also when the commit reports an unknown result and is retried.
#[tokio::test(start_paused = true)]
async fn reap_many_is_one_commit_for_the_batch() {
    for unknown in [false, true] {
        let db = DoubleDatabase::new();
        let ns = fresh_namespace();
        let holder = db.store(&ns);
        let checker = db.store(&ns);
        let mut dead = Vec::new();
        for i in 0..20 {
            let key = Key::member(&format!("d{i}")).unwrap();
            let ttl = Ttl::from_secs(1).unwrap();
            dead.push(
                holder
                    .acquire(&key, &HolderId::new("w").unwrap(), ttl)
                    .await
                    .unwrap(),
            );
        }
        let live = liveness_conformance::live_lease(&holder, "live").await;
        // The checker watches every lease for a ttl of its own.
        assert!(checker
            .expired(&Space::members(), 100)
            .await
            .unwrap()
            .is_empty());
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(
            checker.expired(&Space::members(), 100).await.unwrap().len(),
            20
        );
        let mut entries: Vec<(Key, FencingToken)> =
            dead.iter().map(|l| (l.key.clone(), l.token)).collect();
        entries.push((live.key.clone(), live.token));
        entries.push((dead[0].key.clone(), dead[0].token));
        if unknown {
            db.inject_unknown_results(1);
        }
        let before = db.version();
        let answers = checker.reap_many(&entries).await.unwrap();
        let commits = db.version() - before;
        let answers: Vec<bool> = answers.into_iter().map(|a| a.unwrap()).collect();
        let mut expected = vec![true; 20];
        expected.extend([false, false]);
        assert_eq!(answers, expected, "unknown result: {unknown}");
        let most = if unknown { 2 } else { 1 };
        assert!(
            commits <= most,
            "reap_many of {} entries made {commits} commits",
            entries.len()
        );
        let tokens = checker.dead_tokens(100).await.unwrap();
        assert_eq!(tokens.len(), 20);
        assert!(checker.inspect(&live.key).await.unwrap().unwrap().is_live());
    }
}

/// Sweeping a round's dead tokens commits once for them all (their items fit one
/// transaction), not once per token, and answers each token as `sweep`
/// would: its items back to pending once (a repeat moves nothing), a token not in the
/// dead set moves nothing.
#[tokio::test]
async fn sweep_many_is_one_commit_for_the_batch() {
    let db = DoubleDatabase::new();
    let store = db.store(&fresh_namespace());
    let mut owners = Vec::new();
    for i in 0..10 {
        let lease = liveness_conformance::live_lease(&store, &format!("o{i}")).await;
        let id = store
            .enqueue(format!("item {i}").as_bytes(), EnqueueOptions::default())
            .await
            .unwrap();
        assert_eq!(store.claim(&lease, 1).await.unwrap().len(), 1);
        owners.push((lease, id));
    }
    for (lease, _) in &owners[..9] {
        assert!(store.release(lease).await.unwrap());
    }
    let mut tokens: Vec<FencingToken> = owners[..9].iter().map(|(l, _)| l.token).collect();
    tokens.push(owners[9].0.token);
    tokens.push(owners[0].0.token);
    let before = db.version();
    let answers = store.sweep_many(&tokens).await.unwrap();
    let commits = db.version() - before;
    assert_eq!(
        commits,
        1,
        "sweep_many of {} tokens made {commits} commits",
        tokens.len()
    );
    let answers: Vec<_> = answers.into_iter().map(|a| a.unwrap()).collect();
    for (i, (_, id)) in owners[..9].iter().enumerate() {
        assert_eq!(answers[i].requeued, vec![*id], "token {i}");
    }
    assert!(answers[9].is_empty(), "a live token's items moved");
    assert!(answers[10].is_empty(), "a token's items moved twice");
    assert!(store.dead_tokens(100).await.unwrap().is_empty());
}

/// A token with more items than one transaction moves goes on in the next one, within
/// the same call: every item is requeued, and the token after it too.
#[tokio::test]
async fn sweep_many_carries_a_large_token_over_transactions() {
    let db = DoubleDatabase::new();
    let store = db.store(&fresh_namespace());
    let big = liveness_conformance::live_lease(&store, "big").await;
    let small = liveness_conformance::live_lease(&store, "small").await;
    let mut ids = Vec::new();
    for i in 0..650 {
        ids.push(
            store
                .enqueue(format!("item {i}").as_bytes(), EnqueueOptions::default())
                .await
                .unwrap(),
        );
    }
    let mut claimed = 0;
    while claimed < 649 {
        claimed += store.claim(&big, 649 - claimed).await.unwrap().len();
    }
    assert_eq!(store.claim(&small, 1).await.unwrap().len(), 1);
    assert!(store.release(&big).await.unwrap());
    assert!(store.release(&small).await.unwrap());
    let answers = store.sweep_many(&[big.token, small.token]).await.unwrap();
    let answers: Vec<_> = answers.into_iter().map(|a| a.unwrap()).collect();
    let mut got = answers[0].requeued.clone();
    got.sort();
    assert_eq!(got, ids[..649].to_vec());
    assert_eq!(answers[1].requeued, vec![ids[649]]);
    assert!(store.dead_tokens(100).await.unwrap().is_empty());
    assert_eq!(store.item_counts().await.unwrap().pending, 650);
}
