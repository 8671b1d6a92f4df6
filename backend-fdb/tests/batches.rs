//! Issue 13: a batch is one transaction. `acquire_many` of many keys commits once on
//! the test double (counted by its commit version), not once per key; a commit that
//! reports an unknown result is retried and answers each entry with the lease the
//! applied commit took.

use backend_fdb::DoubleDatabase;
use liveness_conformance::fresh_namespace;
use liveness_core::{Acquire, HolderId, Key, LeaseStore, Ttl};

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
