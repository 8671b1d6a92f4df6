//! Tests that need the crate's insides (the count of statements a handle sent, the
//! statements themselves), against the test binary's shared PostgreSQL.

use std::sync::Arc;
use std::time::Duration;

use liveness_conformance::fixtures::{acquire_member, owners_with_items, wait_expired};
use liveness_conformance::fresh_namespace;
use liveness_core::{
    Acquire, DeathCause, Error, FencingToken, HolderId, ItemId, ItemState, ItemStore, Key, Lease,
    LeaseStore, OperatorStore, Page, Store, Ttl,
};
use sqlx::{AssertSqlSafe, Row};

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

/// What `op` answers, asserting that it sent exactly one statement to the server
/// (`what` names the call in the failure).
async fn in_one_statement<T>(
    store: &PostgresStore,
    what: &str,
    op: impl std::future::Future<Output = liveness_core::Result<T>>,
) -> T {
    let before = store.statements();
    let answer = op.await.unwrap();
    let sent = store.statements() - before;
    assert_eq!(sent, 1, "{what} sent {sent} statements");
    answer
}

fn holder(name: &str) -> HolderId {
    HolderId::new(name).unwrap()
}

/// `acquire_many` is one statement (one round trip, one commit) for the
/// whole batch, not one per entry, and still answers each entry as `acquire` would:
/// free keys taken with tokens growing in entry order, an expired lease taken over
/// (its token in the dead set, its death recorded as superseded), a live one `Held`,
/// a second entry on a key the batch took `Held` by that lease, a bad ttl
/// `InvalidInput` without being sent (the store behind the core's input checks, as
/// every caller gets it: the others still go as one statement).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_many_is_one_statement_for_the_batch() {
    let Some(store) = store().await else { return };
    let long = Ttl::from_secs(60).unwrap();
    let held = store
        .acquire(&Key::member("held").unwrap(), &holder("o"), long)
        .await
        .unwrap();
    let old = expired_leases(&store, "old", 1).await.remove(0);
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
    let checked = liveness_core::checked(Arc::new(store.clone()));
    let what = format!("acquire_many of {} entries", asks.len());
    let answers = in_one_statement(&store, &what, checked.acquire_many(&asks)).await;
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
    let rows = sqlx::query(crate::batch::ACQUIRE_MANY)
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
    let renewed = sqlx::query(crate::lease::RENEW)
        .bind(key.space().as_str())
        .bind(key.name().as_str())
        .bind(i64::try_from(held.token.0).unwrap())
        .bind(60_000i64)
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
    let config = crate::PostgresConfig::from_url(&url)
        .unwrap()
        .with_death_retention(5)
        .unwrap();
    let store = PostgresStore::connect(config).await.unwrap();
    let long = Ttl::from_secs(60).unwrap();
    let old = expired_leases(&store, "e", 12).await;
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

/// Acquires `n` leases with a short ttl on keys `prefix<i>` and waits until every one
/// has expired by the server's clock.
async fn expired_leases(store: &PostgresStore, prefix: &str, n: usize) -> Vec<Lease> {
    let short = Ttl::from_millis(50).unwrap();
    let mut leases = Vec::new();
    for i in 0..n {
        let key = Key::member(&format!("{prefix}{i}")).unwrap();
        leases.push(store.acquire(&key, &holder("w"), short).await.unwrap());
    }
    wait_expired(store, &leases).await;
    leases
}

/// A checker round's deaths are one statement (one round trip, one
/// commit under `synchronous_commit`), not one per lease: a statement and a commit
/// per death made a round with deaths take seconds at 100,000 members. Each entry is
/// still answered as `reap` would: true for each
/// expired lease, false for a live one, a wrong token and a repeat; every reaped
/// token is in the dead set with a death record of its own (cause `Reaped`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reap_many_is_one_statement_for_the_batch() {
    let Some(store) = store().await else { return };
    let dead = expired_leases(&store, "dead", 20).await;
    let live = liveness_conformance::live_lease(&store, "live").await;
    let mut entries: Vec<(Key, FencingToken)> =
        dead.iter().map(|l| (l.key.clone(), l.token)).collect();
    entries.push((live.key.clone(), live.token));
    entries.push((
        dead[0].key.clone(),
        FencingToken(dead[0].token.0 + 1_000_000),
    ));
    entries.push((dead[1].key.clone(), dead[1].token));
    let what = format!("reap_many of {} entries", entries.len());
    let answers = in_one_statement(&store, &what, store.reap_many(&entries)).await;
    let answers: Vec<bool> = answers.into_iter().map(|a| a.unwrap()).collect();
    let mut expected = vec![true; 20];
    expected.extend([false, false, false]);
    assert_eq!(answers, expected);
    assert!(store.inspect(&live.key).await.unwrap().unwrap().is_live());
    let tokens = store.dead_tokens(1000).await.unwrap();
    let deaths = store.deaths(None, 1000).await.unwrap();
    let mut seqs = Vec::new();
    for lease in &dead {
        assert!(store.inspect(&lease.key).await.unwrap().is_none());
        assert!(tokens
            .iter()
            .any(|d| d.token == lease.token && d.key == lease.key));
        let death = deaths
            .iter()
            .find(|d| d.token == lease.token)
            .unwrap_or_else(|| panic!("no death record for {}", lease.token));
        assert_eq!(
            (&death.key, &death.holder, death.cause),
            (&lease.key, &lease.holder, DeathCause::Reaped)
        );
        seqs.push(death.seq);
    }
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), 20, "death records share a sequence number");
}

/// Sweeping a round's dead tokens is one statement, not one per
/// token, and answers each token as `sweep` would: its items back to
/// pending once (a repeat moves nothing), a token not in the dead set moves nothing;
/// each death record gets its swept counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_many_is_one_statement_for_the_batch() {
    let Some(store) = store().await else { return };
    let long = Ttl::from_secs(60).unwrap();
    let (holders, items): (Vec<Lease>, Vec<ItemId>) = owners_with_items(&store, "h", 10, long)
        .await
        .into_iter()
        .unzip();
    for lease in &holders[..9] {
        assert!(store.release(lease).await.unwrap());
    }
    let live = &holders[9];
    let mut tokens: Vec<FencingToken> = holders[..9].iter().map(|l| l.token).collect();
    tokens.push(live.token);
    tokens.push(holders[0].token);
    let what = format!("sweep_many of {} tokens", tokens.len());
    let answers = in_one_statement(&store, &what, store.sweep_many(&tokens)).await;
    let answers: Vec<_> = answers.into_iter().map(|a| a.unwrap()).collect();
    for (i, answer) in answers[..9].iter().enumerate() {
        assert_eq!(answer.requeued, vec![items[i]], "token {i}");
        assert!(answer.dead_lettered.is_empty());
    }
    assert!(answers[9].is_empty(), "a live token's items moved");
    assert!(answers[10].is_empty(), "a token's items moved twice");
    let owned = store.item(items[9]).await.unwrap().unwrap();
    assert_eq!(owned.state, ItemState::Owned(live.token));
    let deaths = store.deaths(None, 1000).await.unwrap();
    for lease in &holders[..9] {
        let death = deaths.iter().find(|d| d.token == lease.token).unwrap();
        let swept = death
            .swept
            .unwrap_or_else(|| panic!("{} not swept", lease.token));
        assert_eq!((swept.requeued, swept.dead_lettered), (1, 0));
    }
    assert!(store.dead_tokens(1000).await.unwrap().is_empty());
}

/// A batch of joins that names a key twice, which its one statement cannot take, is
/// joined entry by entry (`JOIN_SESSION`, one statement each), and answers each entry
/// as the batch would: the first entry on the key joins, the second answers `Held`
/// naming it, an expired lease on another key is declared dead (dead set, death record
/// superseded) and taken; once the session is released, every entry answers `Lost`
/// and nothing is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_batch_naming_a_key_twice_joins_each_entry_alone() {
    let Some(store) = store().await else { return };
    let long = Ttl::from_secs(60).unwrap();
    let session_key = Key::new(
        liveness_core::Space::sessions(),
        liveness_core::Name::new("p").unwrap(),
    );
    let session = store
        .acquire(&session_key, &holder("p"), long)
        .await
        .unwrap();
    let old = expired_leases(&store, "old", 1).await.remove(0);
    let key = Key::member("twice").unwrap();
    let asks = vec![
        (key.clone(), holder("a")),
        (key.clone(), holder("b")),
        (old.key.clone(), holder("c")),
    ];
    let before = store.statements();
    let answers = store.join_session_many(&session, &asks).await.unwrap();
    assert_eq!(store.statements() - before, 3, "one statement per entry");
    let first = answers[0].as_ref().unwrap();
    assert_eq!((&first.key, &first.holder), (&key, &holder("a")));
    match &answers[1] {
        Err(Error::Held { holder, token, .. }) => {
            assert_eq!((holder, *token), (&first.holder, first.token));
        }
        other => panic!("a second entry on a key the batch took answered {other:?}"),
    }
    let took_over = answers[2].as_ref().unwrap();
    assert!(took_over.token > first.token, "tokens grow in entry order");
    for lease in [first, took_over] {
        let info = store.inspect(&lease.key).await.unwrap().unwrap();
        assert_eq!(info.token, lease.token);
        assert_eq!(info.session.as_ref(), Some(&session.key), "{info:?}");
        assert!(info.is_live());
    }
    let dead = store.dead_tokens(100).await.unwrap();
    assert!(dead.iter().any(|d| d.token == old.token));
    let deaths = store.deaths(None, 10).await.unwrap();
    let death = deaths.iter().find(|d| d.token == old.token).unwrap();
    assert_eq!(death.cause, DeathCause::Superseded);

    assert!(store.release(&session).await.unwrap());
    let late = vec![
        (Key::member("late").unwrap(), holder("a")),
        (Key::member("late").unwrap(), holder("b")),
    ];
    for answer in store.join_session_many(&session, &late).await.unwrap() {
        assert!(matches!(answer, Err(Error::Lost { .. })), "{answer:?}");
    }
    assert!(store.inspect(&late[0].0).await.unwrap().is_none());
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_reads_only_the_expiry_index_prefix() {
    let Some(store) = store().await else { return };
    // Many live leases, then ask the planner how it finds the expired ones.
    insert_live_members(&store, 5000).await;
    sqlx::query("ANALYZE leases")
        .execute(store.pool())
        .await
        .unwrap();
    let plan: Vec<String> =
        sqlx::query(AssertSqlSafe(format!("EXPLAIN {}", crate::deaths::EXPIRED)))
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

/// `leases` reads one page of an index in name-byte order, whatever the database's
/// collation and whatever the planner's statistics: right after 20,000 leases were
/// inserted (never analyzed), the first page of 100 fetches about 100 rows of
/// `leases`, not the whole space (counted by the server in the transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_reads_a_page_of_the_name_index() {
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
    let rows = sqlx::query(crate::operator::LEASES)
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
        .leases(&liveness_core::Space::members(), Page::first(3))
        .await
        .unwrap();
    let names: Vec<String> = page.iter().map(|i| i.key.name().to_string()).collect();
    assert_eq!(names, vec!["m1", "m10", "m100"], "byte order");
}

/// The plan of `statement` (its `EXPLAIN`) with `bind` applied, as one text.
async fn plan_of(
    store: &PostgresStore,
    statement: &str,
    bind: impl FnOnce(
        sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
) -> String {
    let explain = format!("EXPLAIN {statement}");
    bind(sqlx::query(AssertSqlSafe(explain)))
        .fetch_all(store.pool())
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<String, _>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Items held back are kept out of the claim's path: with 5,000 items not due for an
/// hour, both below and above the ids of the items due at once, a claim reads the
/// items it takes and not the held-back ones (the entries of the table and its
/// indexes, counted by the server), on `items_ready_queue` and on the due prefix of `items_held_queue`
/// (the server's now an index condition), and `next_due` reads the first entry of
/// `items_held_queue` after now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_reads_no_item_that_is_not_due() {
    use liveness_core::EnqueueOptions;
    let Some(store) = store().await else { return };
    let hour = EnqueueOptions::default().delay(Duration::from_secs(3600));
    let batch: Vec<Vec<u8>> = (0..1000).map(|i| format!("h{i}").into_bytes()).collect();
    for _ in 0..3 {
        store.enqueue_many(&batch, hour).await.unwrap();
    }
    let now: Vec<Vec<u8>> = (0..10).map(|i| format!("n{i}").into_bytes()).collect();
    let ready = store
        .enqueue_many(&now, EnqueueOptions::default())
        .await
        .unwrap();
    for _ in 0..2 {
        store.enqueue_many(&batch, hour).await.unwrap();
    }
    let left = store.next_due().await.unwrap().expect("held back");
    assert!(left > Duration::from_secs(3590) && left <= Duration::from_secs(3600));

    let long = Ttl::from_secs(60).unwrap();
    let lease = store
        .acquire(&Key::member("w").unwrap(), &holder("w"), long)
        .await
        .unwrap();
    let mut tx = store.pool().begin().await.unwrap();
    let before = items_read(&mut tx).await;
    let q = crate::core::on_key(crate::items::CLAIM, &lease.key)
        .bind(crate::core::db_token(lease.token))
        .bind(5i64)
        .bind(liveness_core::RequestId(1).to_hex())
        .bind("default");
    let rows = q.fetch_all(&mut *tx).await.unwrap();
    let touched = items_read(&mut tx).await - before;
    tx.commit().await.unwrap();
    let got: Vec<i64> = rows.iter().map(|r| r.get::<i64, _>(2)).collect();
    let want: Vec<i64> = ready[..5].iter().map(|id| id.0 as i64).collect();
    assert_eq!(got, want, "the items due at once, lowest id first");
    assert!(
        touched <= 50,
        "a claim of 5 read {touched} rows of items: it must not walk the held-back ones"
    );

    for analyzed in [false, true] {
        if analyzed {
            sqlx::query("ANALYZE items")
                .execute(store.pool())
                .await
                .unwrap();
        }
        let claim = plan_of(&store, crate::items::CLAIM, |q| {
            q.bind("members")
                .bind("w")
                .bind(1i64)
                .bind(5i64)
                .bind(liveness_core::RequestId(2).to_hex())
                .bind("default")
        })
        .await;
        let bound = |plan: &str, op: &str| {
            plan.lines()
                .any(|l| l.contains("Index Cond") && l.contains(&format!("due_at {op}")))
        };
        assert!(claim.contains("items_ready_queue"), "{claim}");
        assert!(
            claim.contains("items_held_queue") && bound(&claim, "<="),
            "the claim reads the due prefix of items_held_queue, the now bound an index \
             condition:\n{claim}"
        );
        let next = plan_of(&store, crate::items::NEXT_DUE, |q| q).await;
        assert!(
            next.contains("items_held_queue") && bound(&next, ">"),
            "the now bound must be an index condition of items_held_queue:\n{next}"
        );
        let pending = plan_of(&store, crate::operator::PENDING_ITEMS, |q| {
            q.bind(2995i64).bind(10i64)
        })
        .await;
        assert!(
            pending.contains("items_ready_queue") && pending.contains("items_held_id"),
            "a page of pending items reads a page of each index in id order:\n{pending}"
        );
    }
    // The operator's page of pending items merges the two in id order.
    let page = store
        .items(
            liveness_core::ItemStateKind::Pending,
            Page::first(10).next(ItemId(2995)),
        )
        .await
        .unwrap();
    let listed: Vec<u64> = page.iter().map(|r| r.item.id.0).collect();
    let mut want: Vec<u64> = (2996..=3000).collect();
    want.extend(ready[5..].iter().map(|id| id.0));
    assert_eq!(listed, want);
    assert!(page.iter().all(|r| r.state == ItemState::Pending));
}

/// The entries of `items` and of its indexes this connection's backend read so far
/// (rows scanned and fetched, index entries), as its server counts them: an index
/// scan is counted on the index, not the table. Counts not yet reported may go back to
/// earlier transactions, so a statement's reads are the difference around it.
async fn items_read(conn: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT (pg_stat_get_xact_tuples_fetched('items'::regclass) \
               + pg_stat_get_xact_tuples_returned('items'::regclass) \
               + (SELECT sum(pg_stat_get_xact_tuples_fetched(indexrelid) \
                           + pg_stat_get_xact_tuples_returned(indexrelid)) \
                  FROM pg_index WHERE indrelid = 'items'::regclass))::bigint",
    )
    .fetch_one(conn)
    .await
    .unwrap()
}

/// The rows of `items` a claim's statement read, with the rows it answered (id and
/// queue).
async fn claim_reading(
    store: &PostgresStore,
    lease: &Lease,
    queues: &[&str],
    n: i64,
    req: u128,
) -> (Vec<(i64, String)>, i64) {
    let statement = match queues {
        [_] => crate::items::CLAIM,
        _ => crate::items::CLAIM_FROM,
    };
    let mut tx = store.pool().begin().await.unwrap();
    let before = items_read(&mut tx).await;
    let q = crate::core::on_key(statement, &lease.key)
        .bind(crate::core::db_token(lease.token))
        .bind(n)
        .bind(liveness_core::RequestId(req).to_hex());
    let q = match queues {
        [only] => q.bind(*only),
        _ => q.bind(queues.to_vec()),
    };
    let rows = q.fetch_all(&mut *tx).await.unwrap();
    let touched = items_read(&mut tx).await - before;
    tx.commit().await.unwrap();
    let got = rows
        .iter()
        .map(|r| (r.get::<i64, _>(2), r.get::<String, _>(7)))
        .collect();
    (got, touched)
}

/// A claim from one queue reads that queue's ranges of `items_ready_queue` and
/// `items_held_queue` (the queue and, for the held-back ones, the server's now index
/// conditions), before and after `ANALYZE`: beside 3,000 items due at once and 1,000
/// held-back ones that came due in another queue, a claim of 5 reads a few dozen rows,
/// the queue's items that came due first, then its lowest ids. A claim naming several
/// queues reads them in the order given, on the same ranges, and takes from a later
/// queue only what the earlier ones lacked. The operator's page of pending items and
/// `next_due` read every queue's range, `queue_counts` counts each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_from_one_queue_reads_only_its_ranges() {
    use liveness_core::{EnqueueOptions, QueueName};
    let Some(store) = store().await else { return };
    let on = |name: &str| EnqueueOptions::default().queue(QueueName::new(name).unwrap());
    let hour = Duration::from_secs(3600);
    let batch: Vec<Vec<u8>> = (0..1000).map(|i| format!("b{i}").into_bytes()).collect();
    for _ in 0..3 {
        store.enqueue_many(&batch, on("bulk")).await.unwrap();
    }
    store
        .enqueue_many(&batch, on("bulk").delay(hour))
        .await
        .unwrap();
    let mail = store.enqueue_many(&batch[..10], on("mail")).await.unwrap();
    let held = store
        .enqueue_many(&batch[..3], on("mail").delay(hour))
        .await
        .unwrap();
    // Every held-back item came due an hour ago; one more is held back for a minute.
    sqlx::query("UPDATE items SET due_at = due_at - interval '2 hours' WHERE due_at IS NOT NULL")
        .execute(store.pool())
        .await
        .unwrap();
    let minute = on("later").delay(Duration::from_secs(60));
    store.enqueue(b"later", minute).await.unwrap();

    let lease = store
        .acquire(
            &Key::member("w").unwrap(),
            &holder("w"),
            Ttl::from_secs(60).unwrap(),
        )
        .await
        .unwrap();
    let ids = |ids: &[ItemId]| -> Vec<(i64, String)> {
        ids.iter()
            .map(|id| (id.0 as i64, "mail".to_owned()))
            .collect()
    };
    let (got, touched) = claim_reading(&store, &lease, &["mail"], 5, 1).await;
    let mut want = ids(&mail[..2]);
    want.extend(ids(&held));
    assert_eq!(
        got, want,
        "the queue's items that came due, then its lowest ids"
    );
    assert!(
        touched <= 50,
        "a claim of 5 from one queue read {touched} rows of items"
    );
    let (got, touched) = claim_reading(&store, &lease, &["mail", "bulk"], 10, 2).await;
    let mut want = ids(&mail[2..]);
    // Then bulk's, the held-back ones that came due first.
    let bulk_held: Vec<(i64, String)> = (3001..=3002).map(|id| (id, "bulk".to_owned())).collect();
    want.extend(bulk_held);
    assert_eq!(got, want, "mail's items, then bulk's");
    assert!(
        touched <= 100,
        "a claim of 10 from two queues read {touched} rows of items"
    );

    for analyzed in [false, true] {
        if analyzed {
            sqlx::query("ANALYZE items")
                .execute(store.pool())
                .await
                .unwrap();
        }
        let on_queue = |plan: &str, index: &str| {
            let lines: Vec<&str> = plan.lines().collect();
            lines.windows(2).any(|w| {
                w[0].contains(&format!("using {index} on items"))
                    && w[1].contains("Index Cond")
                    && w[1].contains("queue = ")
            })
        };
        let one = plan_of(&store, crate::items::CLAIM, |q| {
            q.bind("members")
                .bind("w")
                .bind(1i64)
                .bind(5i64)
                .bind(liveness_core::RequestId(3).to_hex())
                .bind("mail")
        })
        .await;
        let several = plan_of(&store, crate::items::CLAIM_FROM, |q| {
            q.bind("members")
                .bind("w")
                .bind(1i64)
                .bind(5i64)
                .bind(liveness_core::RequestId(3).to_hex())
                .bind(vec!["mail", "bulk"])
        })
        .await;
        for plan in [&one, &several] {
            assert!(
                on_queue(plan, "items_ready_queue") && on_queue(plan, "items_held_queue"),
                "a claim reads its queues' ranges of both indexes:\n{plan}"
            );
        }
        let next = plan_of(&store, crate::items::NEXT_DUE, |q| q).await;
        assert!(on_queue(&next, "items_held_queue"), "{next}");
        let pending = plan_of(&store, crate::operator::PENDING_ITEMS, |q| {
            q.bind(0i64).bind(10i64)
        })
        .await;
        assert!(on_queue(&pending, "items_ready_queue"), "{pending}");
    }

    let left = store.next_due().await.unwrap().expect("one held back");
    assert!(left > Duration::from_secs(50) && left <= Duration::from_secs(60));
    let page = store
        .items(liveness_core::ItemStateKind::Pending, Page::first(3))
        .await
        .unwrap();
    let page: Vec<(u64, &str)> = page
        .iter()
        .map(|r| (r.item.id.0, r.item.queue.as_str()))
        .collect();
    assert_eq!(page, [(1, "bulk"), (2, "bulk"), (3, "bulk")]);
    let page = store
        .items(
            liveness_core::ItemStateKind::Pending,
            Page::first(3).next(ItemId(4000)),
        )
        .await
        .unwrap();
    let page: Vec<(u64, &str)> = page
        .iter()
        .map(|r| (r.item.id.0, r.item.queue.as_str()))
        .collect();
    assert_eq!(page, [(4014, "later")]);
    let counts: Vec<(String, [u64; 3])> = store
        .queue_counts()
        .await
        .unwrap()
        .iter()
        .map(|c| {
            let n = c.counts;
            (c.queue.to_string(), [n.pending, n.owned, n.dead_lettered])
        })
        .collect();
    let want = |q: &str, n: [u64; 3]| (q.to_owned(), n);
    assert_eq!(
        counts,
        [
            want("bulk", [3998, 2, 0]),
            want("later", [1, 0, 0]),
            want("mail", [0, 13, 0])
        ]
    );
}

/// A fresh namespace migrated up to schema `version` only, as an older build leaves
/// it: its URL, and a one-connection pool on its schema to write rows as that build
/// would. `None` without a server.
async fn namespace_at(version: i64) -> Option<(String, sqlx::PgPool)> {
    use sqlx::migrate::{Migration, MigrationType, Migrator};
    use sqlx::SqlSafeStr;
    let server = liveness_testkit::postgres::shared()?;
    let url = server.url_with(&format!("ns={}", fresh_namespace()));
    let config = crate::PostgresConfig::from_url(&url).unwrap();
    let schema = config.schema();
    let options = config.servers()[0]
        .clone()
        .options([("search_path", schema.as_str())]);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let older = crate::core::MIGRATIONS
        .iter()
        .filter(|(v, _, _)| *v <= version)
        .map(|&(version, description, sql)| {
            Migration::new(
                version,
                description.into(),
                MigrationType::Simple,
                sql.into_sql_str(),
                false,
            )
        })
        .collect();
    let mut migrator = Migrator::with_migrations(older);
    let quoted = format!("\"{schema}\"");
    migrator.create_schema(quoted.clone());
    migrator.dangerous_set_table_name(format!("{quoted}._sqlx_migrations"));
    migrator.run(&pool).await.unwrap();
    Some((url, pool))
}

/// A namespace at schema version 12 (before named queues) holding an item due at
/// once, a held-back one that came due and a dead letter: opened by this build, all
/// three are in the default queue, counted there, and claimed from it (the dead
/// letter once retried); a new item of another queue stays apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_12_namespace_keeps_its_items_in_the_default_queue() {
    use liveness_core::{EnqueueOptions, QueueName};
    let Some((url, pool)) = namespace_at(12).await else {
        return;
    };
    let ids: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO items (payload, max_attempts, state, due_at) \
         VALUES ('a', 5, 0, NULL), ('b', 5, 0, clock_timestamp() - interval '1 minute'), \
                ('c', 5, 2, NULL) \
         RETURNING id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;

    let store = crate::connect(&url).await.unwrap();
    assert!(store.capabilities().queues);
    let default = QueueName::DEFAULT;
    for id in &ids {
        let record = store.item(ItemId(*id as u64)).await.unwrap().expect("kept");
        assert_eq!(record.item.queue, default);
    }
    let mail = QueueName::new("mail").unwrap();
    let new = store
        .enqueue(b"m", EnqueueOptions::default().queue(mail))
        .await
        .unwrap();
    let counts: Vec<_> = store
        .queue_counts()
        .await
        .unwrap()
        .iter()
        .map(|c| (c.queue, c.counts.pending, c.counts.dead_lettered))
        .collect();
    assert_eq!(counts, [(default, 2, 1), (mail, 1, 0)]);

    let lease = store
        .acquire(
            &Key::member("w").unwrap(),
            &holder("w"),
            Ttl::from_secs(60).unwrap(),
        )
        .await
        .unwrap();
    let claimed = store.claim(&lease, 5).await.unwrap();
    let claimed: Vec<_> = claimed.iter().map(|i| (i.id.0 as i64, i.queue)).collect();
    assert_eq!(claimed, [(ids[0], default), (ids[1], default)]);
    store
        .retry_dead_letter(ItemId(ids[2] as u64))
        .await
        .unwrap();
    let req = liveness_core::RequestId::next();
    let claimed = store
        .claim_from(&lease, &[default, mail], 5, req)
        .await
        .unwrap();
    let claimed: Vec<_> = claimed.iter().map(|i| (i.id, i.queue)).collect();
    assert_eq!(claimed, [(ItemId(ids[2] as u64), default), (new, mail)]);
}

/// A namespace at schema version 13 (before item times) holding a pending item, one
/// a claim owns and a dead letter: opened by this build, none has a time (when it
/// came is not known); the owned one's failure stamps its end alone, a claim of the
/// pending one its attempt alone, the dead letter's retry leaves it without any, and
/// an item enqueued now has its enqueue time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_13_namespace_s_items_have_no_times() {
    use liveness_core::{EnqueueOptions, ItemTimes, Outcome};
    let Some((url, pool)) = namespace_at(13).await else {
        return;
    };
    let ids: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO items (payload, max_attempts, state, owner) \
         VALUES ('a', 5, 0, NULL), ('b', 5, 1, 1), ('c', 5, 2, NULL) \
         RETURNING id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    let [pending, owned, dead] = [ids[0], ids[1], ids[2]].map(|id| ItemId(id as u64));

    let store = crate::connect(&url).await.unwrap();
    assert!(store.capabilities().item_times);
    let times = |id| {
        let store = store.clone();
        async move { store.item(id).await.unwrap().expect("kept").times }
    };
    for id in [pending, owned, dead] {
        assert_eq!(times(id).await, ItemTimes::default(), "{id:?}");
    }
    let listed = store
        .items(liveness_core::ItemStateKind::Owned, Page::first(10))
        .await
        .unwrap();
    assert_eq!(listed[0].times, ItemTimes::default());

    // The owned item's token, as its lease: fenced by the store only through it.
    let owner = Lease::granted(
        &store.info().issuer,
        Key::member("old").unwrap(),
        holder("old"),
        FencingToken(1),
        Ttl::from_secs(60).unwrap(),
    );
    let before = store.store_time().await.unwrap();
    store.finish(&owner, owned, Outcome::RETRY).await.unwrap();
    let after = store.store_time().await.unwrap();
    let failed = times(owned).await;
    assert_eq!((failed.enqueued, failed.attempted), (None, None));
    assert!(
        failed.finished.is_some_and(|t| before <= t && t <= after),
        "{failed:?}"
    );

    let lease = acquire_member(&store, "w", "w", Ttl::from_secs(60).unwrap()).await;
    let before = store.store_time().await.unwrap();
    let claimed = store.claim(&lease, 1).await.unwrap();
    let after = store.store_time().await.unwrap();
    assert_eq!(claimed[0].id, pending);
    let claimed = times(pending).await;
    assert_eq!((claimed.enqueued, claimed.finished), (None, None));
    assert!(
        claimed.attempted.is_some_and(|t| before <= t && t <= after),
        "{claimed:?}"
    );
    store.retry_dead_letter(dead).await.unwrap();
    assert_eq!(times(dead).await, ItemTimes::default());

    let before = store.store_time().await.unwrap();
    let new = store
        .enqueue(b"new", EnqueueOptions::default())
        .await
        .unwrap();
    let after = store.store_time().await.unwrap();
    let enqueued = times(new).await.enqueued;
    assert!(
        enqueued.is_some_and(|t| before <= t && t <= after),
        "{enqueued:?}"
    );
}

/// The rows of `enqueue_keys` in the store's namespace.
async fn key_rows(store: &PostgresStore) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM enqueue_keys")
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// With `key_retention_s=1`: a keyed repeat within the retention answers the first
/// id; after it, a repeat adds a new item; keyed enqueues (repeats too) delete
/// expired keys, at most 100 each, so the table shrinks to the live keys. A repeat is one statement, as
/// before. (A new item's enqueue is followed by the handle's pending notification, a
/// statement of its own sent in the background: only a repeat, which notifies
/// nothing, is counted, once that notification went.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_is_kept_for_the_retention_then_forgotten() {
    use liveness_core::{EnqueueOptions, RequestId};
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    let url = server.url_with(&format!("ns={}&key_retention_s=1", fresh_namespace()));
    let store = crate::connect(&url).await.unwrap();
    assert_eq!(
        store.capabilities().key_retention,
        Some(Duration::from_secs(1))
    );
    let key = RequestId::random();
    let keyed = || EnqueueOptions::keyed(key);
    let first = store.enqueue(b"a", keyed()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let again = in_one_statement(&store, "keyed repeat", store.enqueue(b"a", keyed())).await;
    assert_eq!(again, first, "a repeat within the retention");
    for _ in 0..150 {
        store
            .enqueue(b"b", EnqueueOptions::keyed(RequestId::random()))
            .await
            .unwrap();
    }
    assert_eq!(key_rows(&store).await, 151);

    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let later = store.enqueue(b"a", keyed()).await.unwrap();
    assert_ne!(later, first, "after the retention: a new item");
    assert_eq!(
        key_rows(&store).await,
        51,
        "100 other expired keys deleted, a's record replaced"
    );
    // A repeat's statement deletes its share of expired keys too.
    assert_eq!(store.enqueue(b"a", keyed()).await.unwrap(), later);
    assert_eq!(key_rows(&store).await, 1, "the expired keys are gone");
    store
        .enqueue(b"c", EnqueueOptions::keyed(RequestId::random()))
        .await
        .unwrap();
    assert_eq!(key_rows(&store).await, 2);
}

/// A keyed enqueue finds the expired keys it deletes on `enqueue_keys_recorded`, the
/// server's now less the retention an index condition: its work does not grow with
/// the keys kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_enqueue_finds_expired_keys_on_the_time_index() {
    let Some(store) = store().await else { return };
    sqlx::query(
        "INSERT INTO enqueue_keys (key, id, recorded_at) \
         SELECT 'k' || i, i, clock_timestamp() FROM generate_series(1, 5000) AS i",
    )
    .execute(store.pool())
    .await
    .unwrap();
    sqlx::query("ANALYZE enqueue_keys")
        .execute(store.pool())
        .await
        .unwrap();
    let plan = plan_of(&store, crate::items::ENQUEUE_KEYED, |q| {
        q.bind(b"p".to_vec())
            .bind(5i64)
            .bind("key")
            .bind(None::<i64>)
            .bind(86_400_000_000i64)
            .bind(100i64)
            .bind("default")
    })
    .await;
    assert!(
        plan.lines().any(|l| l.contains("enqueue_keys_recorded")),
        "{plan}"
    );
    assert!(
        plan.lines()
            .any(|l| l.contains("Index Cond") && l.contains("recorded_at <")),
        "{plan}"
    );
}

/// Makes every item of the store's namespace look an hour longer claimable (and due):
/// what a claim after a move to pending must not count.
async fn an_hour_ago(store: &PostgresStore) {
    sqlx::query(
        "UPDATE items SET ready_at = ready_at - interval '1 hour', \
         due_at = due_at - interval '1 hour'",
    )
    .execute(store.pool())
    .await
    .unwrap();
}

/// A claim says how long each item waited, by the server's clock, in its one
/// statement: from its enqueue, then from each later move to pending (a retry's
/// hand-back, the sweep of its dead owner's items, a dead letter's retry), never from
/// an earlier one; from the end of a retry's backoff. A repeat answers no wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_s_wait_counts_from_the_item_s_last_move_to_pending() {
    use liveness_core::{EnqueueOptions, Outcome, RequestId};
    let Some(store) = store().await else { return };
    let hour = Duration::from_secs(3600);
    let minute = Duration::from_secs(60);
    let waits = |items: &[liveness_core::Item]| -> Vec<Duration> {
        items.iter().map(|i| i.waited.expect("measured")).collect()
    };
    let options = EnqueueOptions::default().max_attempts(10);
    let a = store.enqueue(b"a", options).await.unwrap();
    let b = store.enqueue(b"b", options).await.unwrap();
    an_hour_ago(&store).await;
    let long = Ttl::from_secs(120).unwrap();
    let lease = acquire_member(&store, "w", "w", long).await;
    let req = RequestId::next();
    let got = in_one_statement(&store, "claim", store.claim_request(&lease, 2, req)).await;
    assert_eq!(got.iter().map(|i| i.id).collect::<Vec<_>>(), [a, b]);
    assert!(
        waits(&got).iter().all(|w| *w >= hour && *w < hour + minute),
        "{got:?}"
    );
    let again = store.claim_request(&lease, 2, req).await.unwrap();
    assert!(
        again.iter().all(|i| i.waited.is_none()),
        "a repeat: {again:?}"
    );

    // Handed back at once: from the hand-back.
    store.finish(&lease, a, Outcome::RETRY).await.unwrap();
    let got = store.claim(&lease, 1).await.unwrap();
    assert!(waits(&got)[0] < minute, "{got:?}");

    // Its owner died; swept: from the sweep, not from the hand-back before.
    let dead = acquire_member(&store, "dead", "dead", long).await;
    store.finish(&lease, a, Outcome::RETRY).await.unwrap();
    assert_eq!(store.claim(&dead, 1).await.unwrap()[0].id, a);
    assert!(store.release(&dead).await.unwrap());
    an_hour_ago(&store).await;
    let swept = Store::sweep(&store, dead.token).await.unwrap();
    assert_eq!(swept.requeued, [a]);
    let got = store.claim(&lease, 1).await.unwrap();
    assert!(waits(&got)[0] < minute, "{got:?}");

    // Dead letters retried: from their retry.
    store.finish(&lease, a, Outcome::DeadLetter).await.unwrap();
    store.finish(&lease, b, Outcome::DeadLetter).await.unwrap();
    an_hour_ago(&store).await;
    store.retry_dead_letter(a).await.unwrap();
    assert_eq!(store.retry_dead_letters(10).await.unwrap(), [b]);
    let got = store.claim(&lease, 2).await.unwrap();
    assert!(waits(&got).iter().all(|w| *w < minute), "{got:?}");

    // Held back 500 ms, claimed over a second later: from the end of the backoff.
    let started = std::time::Instant::now();
    let backoff = Duration::from_millis(500);
    store
        .finish(&lease, a, Outcome::Retry { after: backoff })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let got = store.claim(&lease, 1).await.unwrap();
    let w = waits(&got)[0];
    assert!(w >= Duration::from_secs(1), "{got:?}");
    assert!(w <= started.elapsed() - backoff, "{got:?}");
}

/// Ages every dead letter of the store's namespace by `days` days: what waiting that
/// long, by the server's clock, would do to their dead-lettering times.
async fn age_dead_letters(store: &PostgresStore, days: i32) {
    sqlx::query("UPDATE items SET dead_at = dead_at - $1 * interval '1 day' WHERE state = 2")
        .bind(days)
        .execute(store.pool())
        .await
        .unwrap();
}

/// The dead letters of the store's namespace: `item_counts`' count, and the sum of
/// `queue_counts`', which must agree.
async fn dead_letter_count(store: &PostgresStore) -> u64 {
    let counted = store.item_counts().await.unwrap().dead_lettered;
    let queues = store.queue_counts().await.unwrap();
    let by_queue: u64 = queues.iter().map(|q| q.counts.dead_lettered).sum();
    assert_eq!(counted, by_queue, "{queues:?}");
    counted
}

/// Whether item `id` is still there.
async fn kept(store: &PostgresStore, id: ItemId) -> bool {
    store.item(id).await.unwrap().is_some()
}

/// The default dead-letter retention is 30 days. Once 150 dead letters are past it,
/// each later dead-lettering removes at most 100 of them, the oldest first, in its own
/// one statement: a failure's (100 go), then a dead owner's sweep (the other 50); a
/// failure handed back to pending removes none; the counts agree throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_dead_letters_go_a_trim_per_dead_lettering() {
    use liveness_core::{EnqueueOptions, Outcome, DEAD_LETTER_TRIM, DEFAULT_DEAD_LETTER_RETENTION};
    let Some(store) = store().await else { return };
    assert_eq!(
        store.capabilities().dead_letter_retention,
        Some(DEFAULT_DEAD_LETTER_RETENTION)
    );
    assert_eq!(DEFAULT_DEAD_LETTER_RETENTION.as_secs(), 30 * 24 * 3600);
    let once = EnqueueOptions::default().max_attempts(1);
    let long = Ttl::from_secs(120).unwrap();
    let lease = acquire_member(&store, "w", "w", long).await;
    let batch: Vec<Vec<u8>> = (0..DEAD_LETTER_TRIM + 50)
        .map(|i| format!("old{i}").into_bytes())
        .collect();
    let old = store.enqueue_many(&batch, once).await.unwrap();
    assert_eq!(store.claim(&lease, batch.len()).await.unwrap().len(), 150);
    for id in &old {
        let state = store
            .finish(&lease, *id, Outcome::DeadLetter)
            .await
            .unwrap();
        assert_eq!(state, Some(ItemState::DeadLettered));
    }
    assert_eq!(dead_letter_count(&store).await, 150, "none expired yet");
    age_dead_letters(&store, 31).await;

    // A failure retried: nothing dead-lettered, nothing removed.
    let retried = store
        .enqueue(b"r", EnqueueOptions::default().max_attempts(5))
        .await
        .unwrap();
    assert_eq!(store.claim(&lease, 1).await.unwrap()[0].id, retried);
    let state = store.finish(&lease, retried, Outcome::RETRY).await.unwrap();
    assert_eq!(state, Some(ItemState::Pending));
    assert_eq!(dead_letter_count(&store).await, 150, "a retry removes none");
    assert_eq!(store.claim(&lease, 1).await.unwrap()[0].id, retried);
    store.complete(&lease, retried).await.unwrap();
    // The retry's pending notification goes in a statement of its own: let it go.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let fresh = store
        .enqueue_many(&[b"f1".to_vec(), b"f2".to_vec()], once)
        .await
        .unwrap();
    assert_eq!(store.claim(&lease, 1).await.unwrap()[0].id, fresh[0]);
    let state = in_one_statement(
        &store,
        "a failure that dead-letters",
        store.finish(&lease, fresh[0], Outcome::DeadLetter),
    )
    .await;
    assert_eq!(state, Some(ItemState::DeadLettered));
    assert_eq!(dead_letter_count(&store).await, 50 + 1, "a trim of 100");
    assert!(
        !kept(&store, old[DEAD_LETTER_TRIM - 1]).await,
        "the oldest go"
    );
    assert!(kept(&store, old[DEAD_LETTER_TRIM]).await);
    assert!(kept(&store, fresh[0]).await);

    // A dead owner's sweep that dead-letters removes the rest.
    let dead = acquire_member(&store, "dead", "dead", long).await;
    assert_eq!(store.claim(&dead, 1).await.unwrap()[0].id, fresh[1]);
    assert!(store.release(&dead).await.unwrap());
    let swept = in_one_statement(
        &store,
        "a sweep that dead-letters",
        Store::sweep(&store, dead.token),
    )
    .await;
    assert_eq!(swept.dead_lettered, [fresh[1]]);
    assert_eq!(dead_letter_count(&store).await, 2, "the other 50 expired");
    for id in &old {
        assert!(!kept(&store, *id).await, "{id:?}");
    }
    assert!(kept(&store, fresh[0]).await && kept(&store, fresh[1]).await);
}

/// The removal of expired dead letters finds them on `items_dead_at`, the server's
/// now less the retention an index condition, in the failure's statement and in the
/// sweep's: its work does not grow with the dead letters kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_dead_letters_are_found_on_their_time_index() {
    let Some(store) = store().await else { return };
    sqlx::query(
        "INSERT INTO items (payload, max_attempts, state, dead_at) \
         SELECT 'p', 1, 2, clock_timestamp() FROM generate_series(1, 5000)",
    )
    .execute(store.pool())
    .await
    .unwrap();
    sqlx::query("ANALYZE items")
        .execute(store.pool())
        .await
        .unwrap();
    // The lines of the plan of the CTE `forgot`: up to the next line as indented.
    let on_index = |plan: &str| {
        let mut lines = plan.lines().skip_while(|l| l.trim() != "CTE forgot");
        let head = lines.next().expect("a CTE forgot");
        let depth = head.len() - head.trim_start().len();
        let forgot: Vec<&str> = lines
            .take_while(|l| l.len() - l.trim_start().len() > depth)
            .collect();
        let has = |what: &str| forgot.iter().any(|l| l.contains(what));
        assert!(has("Index Scan using items_dead_at"), "{plan}");
        assert!(
            forgot
                .iter()
                .any(|l| l.contains("Index Cond") && l.contains("dead_at <=")),
            "{plan}"
        );
        assert!(has("Index Scan using items_pkey"), "{plan}");
        assert!(!has("Seq Scan"), "{plan}");
    };
    let month = 30 * 86_400_000_000i64;
    let fail = plan_of(&store, crate::items::FAIL, |q| {
        q.bind(1i64)
            .bind(1i64)
            .bind(false)
            .bind(None::<i64>)
            .bind("")
            .bind(month)
            .bind(100i64)
    })
    .await;
    on_index(&fail);
    let sweep = plan_of(&store, crate::deaths::SWEEP, |q| {
        q.bind(vec![1i64])
            .bind(1000i64)
            .bind("channel")
            .bind(month)
            .bind(100i64)
    })
    .await;
    on_index(&sweep);
}

/// The server's now in µs since the Unix epoch.
const NOW_US: &str = "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint";
/// Item $1's `dead_at` in µs since the Unix epoch.
const DEAD_AT_US: &str =
    "SELECT (extract(epoch FROM dead_at) * 1000000)::bigint FROM items WHERE id = $1";

/// A namespace at schema version 14 (before dead-letter retention) holding a dead
/// letter and a pending item: opened by this build, the dead letter counts as
/// dead-lettered at the upgrade, so it is kept one retention from then, not for good;
/// the pending item dead-lettered later counts from then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_14_namespace_s_dead_letters_are_kept_one_retention_from_the_upgrade() {
    use liveness_core::{EnqueueOptions, Outcome};
    let Some((url, pool)) = namespace_at(14).await else {
        return;
    };
    let ids: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO items (payload, max_attempts, state) VALUES ('old', 1, 2), ('p', 1, 0) \
         RETURNING id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let before: i64 = sqlx::query_scalar(NOW_US).fetch_one(&pool).await.unwrap();
    pool.close().await;
    let [old, pending] = [ids[0], ids[1]];

    let store = crate::connect(&url).await.unwrap();
    let after: i64 = sqlx::query_scalar(NOW_US)
        .fetch_one(store.pool())
        .await
        .unwrap();
    let dead_at = |id: i64| {
        let pool = store.pool().clone();
        async move {
            sqlx::query_scalar::<_, Option<i64>>(DEAD_AT_US)
                .bind(id)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let stamped = dead_at(old).await.expect("stamped by the migration");
    assert!(
        before <= stamped && stamped <= after,
        "{before} {stamped} {after}"
    );

    // Dead-lettered by this build: from then, not from the upgrade.
    let lease = acquire_member(&store, "w", "w", Ttl::from_secs(60).unwrap()).await;
    assert_eq!(
        store.claim(&lease, 1).await.unwrap()[0].id.0,
        pending as u64
    );
    store
        .finish(&lease, ItemId(pending as u64), Outcome::DeadLetter)
        .await
        .unwrap();
    assert!(dead_at(pending).await.is_some_and(|t| t >= after));
    assert!(
        kept(&store, ItemId(old as u64)).await,
        "within the retention"
    );

    // A handle with a retention of a second: once it passed, both go.
    let short = crate::connect(&format!("{url}&dead_letter_retention_s=1"))
        .await
        .unwrap();
    assert_eq!(
        short.capabilities().dead_letter_retention,
        Some(Duration::from_secs(1))
    );
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let once = EnqueueOptions::default().max_attempts(1);
    let last = short.enqueue(b"last", once).await.unwrap();
    let lease = acquire_member(&short, "w2", "w2", Ttl::from_secs(60).unwrap()).await;
    assert_eq!(short.claim(&lease, 1).await.unwrap()[0].id, last);
    short
        .finish(&lease, last, Outcome::DeadLetter)
        .await
        .unwrap();
    for id in [old, pending] {
        assert!(!kept(&short, ItemId(id as u64)).await, "{id}");
    }
    assert_eq!(dead_letter_count(&short).await, 1);
}
