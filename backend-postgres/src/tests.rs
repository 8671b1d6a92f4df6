//! Tests that need the crate's insides (the count of statements a handle sent),
//! against the test binary's shared PostgreSQL.

use std::time::Duration;

use liveness_conformance::fresh_namespace;
use liveness_core::{Acquire, DeathCause, Error, HolderId, Key, LeaseStore, Ttl};

use crate::PostgresStore;

async fn store() -> Option<PostgresStore> {
    let server = liveness_testkit::postgres::shared()?;
    let url = server.url_with(&format!("ns={}", fresh_namespace()));
    Some(
        crate::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connect: {e}")),
    )
}

fn holder(name: &str) -> HolderId {
    HolderId::new(name).unwrap()
}

/// Issue 13 (3): `acquire_many` is one statement (one round trip, one commit) for the
/// whole batch, not one per entry, and still answers each entry as `acquire` would:
/// free keys taken with tokens growing in entry order, an expired lease taken over
/// (its token in the dead set, its death recorded as superseded), a live one `Held`,
/// a second entry on a key the batch took `Held` by that lease, a bad ttl
/// `InvalidInput` without being sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_many_is_one_statement_for_the_batch() {
    let Some(store) = store().await else { return };
    let long = Ttl::from_secs(60).unwrap();
    let short = Ttl::from_millis(50).unwrap();
    let held = store
        .acquire(&Key::member("held").unwrap(), &holder("o"), long)
        .await
        .unwrap();
    let old = store
        .acquire(&Key::member("old").unwrap(), &holder("o"), short)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while store.inspect(&old.key).await.unwrap().unwrap().is_live() {
        assert!(tokio::time::Instant::now() < deadline, "never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut asks: Vec<Acquire> = (0..20)
        .map(|i| Acquire::new(Key::member(&format!("k{i}")).unwrap(), holder("h"), long))
        .collect();
    asks.push(Acquire::new(held.key.clone(), holder("h"), long));
    asks.push(Acquire::new(old.key.clone(), holder("h"), long));
    asks.push(Acquire::new(asks[0].key.clone(), holder("again"), long));
    let too_long = Ttl::new(store.capabilities().max_ttl + Duration::from_millis(1)).ok();
    if let Some(bad) = too_long {
        asks.push(Acquire::new(Key::member("bad").unwrap(), holder("h"), bad));
    }
    let before = store.statements();
    let answers = store.acquire_many(&asks).await.unwrap();
    let sent = store.statements() - before;
    assert_eq!(
        sent,
        1,
        "acquire_many of {} entries sent {sent} statements",
        asks.len()
    );
    assert_eq!(answers.len(), asks.len());
    let mut last = old.token.max(held.token);
    for (i, answer) in answers[..20].iter().enumerate() {
        let lease = answer.as_ref().unwrap_or_else(|e| panic!("entry {i}: {e}"));
        assert!(lease.token > last, "tokens grow in entry order");
        last = lease.token;
    }
    match &answers[20] {
        Err(Error::Held { holder, token, .. }) => {
            assert_eq!((holder, *token), (&held.holder, held.token));
        }
        other => panic!("a live key answered {other:?}"),
    }
    let took_over = answers[21].as_ref().unwrap();
    assert!(took_over.token > last);
    match &answers[22] {
        Err(Error::Held { holder, token, .. }) => {
            let first = answers[0].as_ref().unwrap();
            assert_eq!((holder, *token), (&first.holder, first.token));
        }
        other => panic!("a second entry on a key the batch took answered {other:?}"),
    }
    if too_long.is_some() {
        assert!(matches!(answers[23], Err(Error::InvalidInput { .. })));
        assert!(store.inspect(&asks[23].key).await.unwrap().is_none());
    }
    let dead = store.dead_tokens(100).await.unwrap();
    assert!(dead
        .iter()
        .any(|d| d.token == old.token && d.key == old.key));
    let deaths = store.deaths(None, 10).await.unwrap();
    let death = deaths
        .iter()
        .find(|d| d.token == old.token)
        .expect("the superseded lease's death record");
    assert_eq!(death.cause, DeathCause::Superseded);
    assert_eq!(death.holder, old.holder);
}

/// A batch holds no lock on a lease it answers `Held`: while its transaction is
/// still open, the holder's renewal goes through (with a lock timeout, so a lock
/// shows as an error rather than a hang).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_many_locks_no_lease_it_leaves_alone() {
    let Some(store) = store().await else { return };
    let long = Ttl::from_secs(60).unwrap();
    let key = Key::member("busy").unwrap();
    let held = store.acquire(&key, &holder("o"), long).await.unwrap();
    let mut batch = store.pool().begin().await.unwrap();
    let rows = sqlx::query(crate::sql::ACQUIRE_MANY)
        .bind(vec![key.space().as_str().to_owned()])
        .bind(vec![key.name().as_str().to_owned()])
        .bind(vec!["h".to_owned()])
        .bind(vec![60_000i64])
        .bind(store.channel())
        .bind(100i64)
        .fetch_all(&mut *batch)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    let mut other = store.pool().acquire().await.unwrap();
    sqlx::query("SET lock_timeout = '5s'")
        .execute(&mut *other)
        .await
        .unwrap();
    let renewed = sqlx::query(crate::sql::RENEW)
        .bind(key.space().as_str())
        .bind(key.name().as_str())
        .bind(i64::try_from(held.token.0).unwrap())
        .bind(60_000i64)
        .bind(true)
        .execute(&mut *other)
        .await
        .unwrap_or_else(|e| panic!("the renewal waited on the batch's lock: {e}"));
    assert_eq!(renewed.rows_affected(), 1);
    batch.rollback().await.unwrap();
}

/// A batch taking over many expired leases records one death each (cause
/// superseded), numbered in the order of the entries, and keeps only the newest
/// `death_retention` records, as that many single acquires would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_many_records_each_takeover_within_the_retention() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    let url = server.url_with(&format!("ns={}", fresh_namespace()));
    let mut config = crate::PostgresConfig::from_url(&url).unwrap();
    config.death_retention = 5;
    let store = PostgresStore::connect(config).await.unwrap();
    let short = Ttl::from_millis(50).unwrap();
    let long = Ttl::from_secs(60).unwrap();
    let mut old = Vec::new();
    for i in 0..12 {
        let key = Key::member(&format!("e{i}")).unwrap();
        old.push(store.acquire(&key, &holder("o"), short).await.unwrap());
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    for lease in &old {
        while store.inspect(&lease.key).await.unwrap().unwrap().is_live() {
            assert!(tokio::time::Instant::now() < deadline, "never expired");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let asks: Vec<Acquire> = old
        .iter()
        .map(|l| Acquire::new(l.key.clone(), holder("h"), long))
        .collect();
    let answers = store.acquire_many(&asks).await.unwrap();
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    let deaths = store.deaths(None, 100).await.unwrap();
    let seqs: Vec<u64> = deaths.iter().map(|d| d.seq).collect();
    assert_eq!(seqs, vec![12, 11, 10, 9, 8], "the newest 5, newest first");
    for (death, lease) in deaths.iter().zip(old.iter().rev()) {
        assert_eq!((death.token, &death.key), (lease.token, &lease.key));
        assert_eq!(death.cause, DeathCause::Superseded);
    }
    let dead = store.dead_tokens(100).await.unwrap();
    assert_eq!(dead.len(), 12, "every lease taken over is in the dead set");
}
