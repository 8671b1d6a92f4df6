//! Members riding a session on PostgreSQL, beyond what the conformance scenarios
//! show: a reaped session of 2,000 members is swept in batches of at most `max_batch`,
//! each member exactly once, under the session's one death record, which counts
//! them; renewing the session (or a member) writes no member's row; a member a
//! concurrent claim holds is skipped, not lost, and the session's token waits for it;
//! `acquire_many` and `reap_many` judge a member by its session.

use std::time::Duration;

use futures::stream::{self, StreamExt};
use liveness_conformance::fixtures::{renew_with_ttl, swept_session_record};
use liveness_core::{
    Acquire, DeathCause, Error, FencingToken, HolderId, ItemStore, Key, Lease, LeaseStore, Name,
    OperatorStore, Page, Space, Store, Ttl,
};
use liveness_postgres::PostgresStore;
use liveness_testkit::fixtures::enqueue_jobs;

async fn store() -> Option<PostgresStore> {
    let server = liveness_testkit::postgres::shared()?;
    let ns = liveness_conformance::fresh_namespace();
    Some(
        liveness_postgres::connect(&server.url_with(&format!("ns={ns}&max_connections=4")))
            .await
            .unwrap_or_else(|e| panic!("connect: {e}")),
    )
}

/// A session lease of `ttl` and `n` members riding it (`m00000`, `m00001`, …), joined
/// 4 at a time (each new connection costs a SCRAM exchange, slow in a debug build on
/// a loaded machine); the members in name order.
async fn session_with(store: &PostgresStore, n: usize, ttl: Ttl) -> (Lease, Vec<Lease>) {
    let key = Key::new(Space::sessions(), Name::new("p").unwrap());
    let session = store
        .acquire(&key, &HolderId::new("p").unwrap(), ttl)
        .await
        .unwrap();
    let holder = HolderId::new("r").unwrap();
    let mut members: Vec<Lease> = stream::iter(0..n)
        .map(|i| {
            let (store, session, holder) = (store.clone(), session.clone(), holder.clone());
            async move {
                let key = Key::member(&format!("m{i:05}")).unwrap();
                store.join_session(&session, &key, &holder).await.unwrap()
            }
        })
        .buffer_unordered(4)
        .collect()
        .await;
    members.sort_by(|a, b| a.key.cmp(&b.key));
    (session, members)
}

/// Whether `token` is in the dead set.
async fn is_dead(store: &PostgresStore, token: FencingToken) -> bool {
    let dead = store.dead_tokens(1_000_000).await.unwrap();
    dead.iter().any(|d| d.token == token)
}

/// Renews `session` with a ttl of 200 ms and waits until the server judges it
/// expired.
async fn let_expire(store: &PostgresStore, session: &Lease) {
    renew_with_ttl(store, session, Ttl::from_millis(200).unwrap()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while store
        .inspect(&session.key)
        .await
        .unwrap()
        .unwrap()
        .is_live()
    {
        assert!(tokio::time::Instant::now() < deadline, "never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Each riding member's row (name, its row version's `xmin` and `ctid`), in name
/// order: a write to a row changes both.
async fn member_rows(store: &PostgresStore, session: &Lease) -> Vec<(String, String, String)> {
    sqlx::query_as(
        "SELECT name, xmin::text, ctid::text FROM leases \
         WHERE session_token = $1 ORDER BY name",
    )
    .bind(i64::try_from(session.token.0).unwrap())
    .fetch_all(store.pool())
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reaped_session_of_2000_members_is_swept_in_batches_under_one_record() {
    let Some(store) = store().await else { return };
    let n = 2000;
    let with_items = 20;
    enqueue_jobs(&store, with_items).await;
    let (session, members) = session_with(&store, n, Ttl::from_secs(60).unwrap()).await;
    for m in &members[..with_items] {
        assert_eq!(store.claim(m, 1).await.unwrap().len(), 1);
    }
    let_expire(&store, &session).await;
    // Expired through its session, yet never listed: the session is.
    assert!(!store
        .inspect(&members[0].key)
        .await
        .unwrap()
        .unwrap()
        .is_live());
    let listed = store.expired(&Space::members(), 1000).await.unwrap();
    assert!(listed.is_empty(), "riding members listed: {}", listed.len());
    assert!(store.reap(&session.key, session.token).await.unwrap());

    let batch = store.capabilities().max_batch;
    let mut declared = Vec::new();
    let mut calls = 0;
    while is_dead(&store, session.token).await {
        calls += 1;
        assert!(calls <= n, "the sweep never ended");
        let moved = store.sweep(session.token).await.unwrap();
        assert!(
            moved.members.len() <= batch,
            "one call declared {} members dead, above max_batch {batch}",
            moved.members.len()
        );
        declared.extend(moved.members.iter().map(|m| m.token));
    }
    assert!(calls >= n.div_ceil(batch), "{calls} calls for {n} members");
    declared.sort();
    let want: Vec<FencingToken> = members.iter().map(|m| m.token).collect();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    assert_eq!(declared, want_sorted, "each member exactly once");
    let page = store
        .leases(&Space::members(), Page::first(10))
        .await
        .unwrap();
    assert!(
        page.is_empty(),
        "members declared dead still listed: {page:?}"
    );

    // Every member's token is in the dead set; their sweeps hand the items back.
    let dead = store.dead_tokens(1_000_000).await.unwrap();
    assert!(want.iter().all(|t| dead.iter().any(|d| d.token == *t)));
    let mut requeued = 0;
    for chunk in want.chunks(batch) {
        for answer in store.sweep_many(chunk).await.unwrap() {
            requeued += answer.unwrap().requeued.len();
        }
    }
    assert_eq!(requeued, with_items);

    swept_session_record(&store, session.token, &want, with_items as u64).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewing_a_session_writes_no_member_row() {
    let Some(store) = store().await else { return };
    let ttl = Ttl::from_secs(60).unwrap();
    let (session, members) = session_with(&store, 300, ttl).await;
    let before = member_rows(&store, &session).await;
    assert_eq!(before.len(), members.len());
    let session_row = |store: PostgresStore| async move {
        let row: (String, String) = sqlx::query_as(
            "SELECT xmin::text, ctid::text FROM leases WHERE space = 'sessions' AND name = 'p'",
        )
        .fetch_one(store.pool())
        .await
        .unwrap();
        row
    };
    let session_before = session_row(store.clone()).await;
    for _ in 0..3 {
        store.renew(&session).await.unwrap();
    }
    // A member renews as its session stands, writing nothing: alone and in a batch.
    for m in &members[..10] {
        let renewed = store.renew(m).await.unwrap();
        assert!(renewed.expires_in <= ttl.duration(), "{renewed:?}");
        assert!(renewed.expires_in > Duration::ZERO);
    }
    for answer in store.renew_many(&members[..100]).await.unwrap() {
        assert!(answer.unwrap().expires_in > Duration::ZERO);
    }
    assert_ne!(
        session_row(store.clone()).await,
        session_before,
        "the session's row was renewed"
    );
    assert_eq!(
        member_rows(&store, &session).await,
        before,
        "a member's row was written"
    );
    // No expiry of their own: the space's next expiry is none.
    assert_eq!(store.next_expiry(&Space::members()).await.unwrap(), None);
    let info = store.inspect(&members[0].key).await.unwrap().unwrap();
    assert_eq!(info.session.as_ref(), Some(&session.key));
    assert!(info.is_live());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_waits_for_a_member_a_claim_holds() {
    let Some(store) = store().await else { return };
    let (session, members) = session_with(&store, 5, Ttl::from_secs(60).unwrap()).await;
    assert!(store.release(&session).await.unwrap());
    // An open transaction holds the first member's row as a claim does.
    let mut claim = store.pool().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM leases WHERE space = 'members' AND name = $1 FOR KEY SHARE")
        .bind(members[0].key.name().as_str())
        .fetch_one(&mut *claim)
        .await
        .unwrap();
    let first = store.sweep(session.token).await.unwrap();
    let took: Vec<FencingToken> = first.members.iter().map(|m| m.token).collect();
    assert_eq!(took.len(), 4, "every member but the held one");
    assert!(!took.contains(&members[0].token));
    assert!(
        is_dead(&store, session.token).await,
        "the session's token left the dead set while a member remained"
    );
    claim.commit().await.unwrap();
    let last = store.sweep(session.token).await.unwrap();
    let took: Vec<FencingToken> = last.members.iter().map(|m| m.token).collect();
    assert_eq!(took, vec![members[0].token]);
    assert!(!is_dead(&store, session.token).await, "the sweep ended");
    assert!(store.inspect(&members[0].key).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_judge_a_riding_member_by_its_session() {
    let Some(store) = store().await else { return };
    let long = Ttl::from_secs(60).unwrap();
    let (session, members) = session_with(&store, 3, long).await;
    let asks = vec![Acquire::new(
        members[0].key.clone(),
        HolderId::new("o").unwrap(),
        long,
    )];
    let reaps = vec![(members[1].key.clone(), members[1].token)];
    // Live through its session: held, and not reaped.
    match &store.acquire_many(&asks).await.unwrap()[0] {
        Err(Error::Held { token, .. }) => assert_eq!(*token, members[0].token),
        other => panic!("a riding member's key in a batch answered {other:?}"),
    }
    assert!(!store.reap_many(&reaps).await.unwrap()[0].as_ref().unwrap());
    let_expire(&store, &session).await;
    // Expired through its session: a batch takes the key over, another reaps.
    let taken = store.acquire_many(&asks).await.unwrap().remove(0).unwrap();
    assert!(taken.token > members[0].token);
    assert!(*store.reap_many(&reaps).await.unwrap()[0].as_ref().unwrap());
    let deaths = store.deaths(None, 10).await.unwrap();
    let cause = |token| deaths.iter().find(|d| d.token == token).map(|d| d.cause);
    assert_eq!(cause(members[0].token), Some(DeathCause::Superseded));
    assert_eq!(cause(members[1].token), Some(DeathCause::Reaped));
    // What the batch took is a lease of its own, renewed by the ordinary statement.
    let info = store.inspect(&taken.key).await.unwrap().unwrap();
    assert_eq!((info.session, info.token), (None, taken.token));
    store.renew(&taken).await.unwrap();
    assert!(store
        .next_expiry(&Space::members())
        .await
        .unwrap()
        .is_some());
}
