//! Members riding sessions on the in-crate TEST DOUBLE, beyond the conformance
//! scenarios: the sweep of a dead session of 2,000 members declares them dead in
//! batches of at most `max_batch`, one commit each, every member exactly once, under
//! one death record counting them
//! all (and what their items' sweeps moved); renewing a session writes only its own
//! record and index entry, renewing a member writes nothing, and a join writes
//! nothing of its session; `sweep_many` declares one batch of a session's members
//! dead per call and still serves the other tokens; a page of `leases` reads their
//! session's record once. (That a member's claim or join does not conflict with its session's
//! renewal, and does conflict with its end, is tested inside the crate, in
//! `src/session.rs`: it needs an open transaction.)

use std::collections::HashSet;
use std::time::Duration;

use liveness_conformance::fixtures::swept_session_record;
use liveness_core::{
    EnqueueOptions, FencingToken, HolderId, ItemStore, Key, Lease, LeaseStore, Name, Namespace,
    OperatorStore, Space, Store, Ttl,
};
use liveness_fdb::{DoubleDatabase, FdbStore};

fn key(space: Space, name: &str) -> Key {
    Key::new(space, Name::new(name).unwrap())
}

fn ttl() -> Ttl {
    Ttl::new(Duration::from_secs(60)).unwrap()
}

fn holder() -> HolderId {
    HolderId::new("proc").unwrap()
}

/// A session lease on `name` and `n` members riding it, named `prefix0`…
async fn session_of(store: &FdbStore, name: &str, prefix: &str, n: usize) -> (Lease, Vec<Lease>) {
    let session = store
        .acquire(&key(Space::sessions(), name), &holder(), ttl())
        .await
        .unwrap();
    let mut members = Vec::with_capacity(n);
    for i in 0..n {
        let k = key(Space::members(), &format!("{prefix}{i}"));
        members.push(store.join_session(&session, &k, &holder()).await.unwrap());
    }
    (session, members)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn two_thousand_members_are_swept_in_batches_each_once() {
    let db = DoubleDatabase::new();
    let store = db.store(&Namespace::new("sweep").unwrap());
    assert!(store.capabilities().sessions);
    let batch = store.capabilities().max_batch;
    for _ in 0..3 {
        store
            .enqueue(b"job", EnqueueOptions::default())
            .await
            .unwrap();
    }
    let (session, members) = session_of(&store, "big", "m", 2_000).await;
    for m in &members[..3] {
        assert_eq!(store.claim(m, 1).await.unwrap().len(), 1);
    }
    assert!(store.release(&session).await.unwrap());

    let mut seen: HashSet<FencingToken> = HashSet::new();
    let mut sizes = Vec::new();
    loop {
        let before = db.version();
        let moved = store.sweep(session.token).await.unwrap();
        assert!(db.version() - before <= 1, "one commit per call");
        assert!(moved.members.len() <= batch, "a batch above max_batch");
        sizes.push(moved.members.len());
        for m in &moved.members {
            assert!(seen.insert(m.token), "{} declared dead twice", m.key);
        }
        let dead = store.dead_tokens(batch).await.unwrap();
        if !dead.iter().any(|d| d.token == session.token) {
            break;
        }
        assert!(sizes.len() < 10, "the sweep does not end: {sizes:?}");
    }
    assert_eq!(sizes, vec![batch, batch, batch, batch, 0]);
    let want: HashSet<FencingToken> = members.iter().map(|m| m.token).collect();
    assert_eq!(seen, want, "each member exactly once");
    assert!(store.sweep(session.token).await.unwrap().is_empty());

    // Each member's token is in the dead set: sweeping them all puts the three items
    // back, counted in the session's one death record.
    let mut requeued = 0;
    for m in &members {
        assert!(
            store.inspect(&m.key).await.unwrap().is_none(),
            "declared dead"
        );
        requeued += store.sweep(m.token).await.unwrap().requeued.len();
    }
    assert_eq!(requeued, 3);
    let tokens: Vec<FencingToken> = members.iter().map(|m| m.token).collect();
    assert_eq!(tokens.len(), 2_000);
    swept_session_record(&store, session.token, &tokens, 3).await;
}

#[tokio::test]
async fn a_session_s_renewal_writes_no_member_key_and_a_member_s_writes_nothing() {
    let db = DoubleDatabase::new();
    let store = db.store(&Namespace::new("writes").unwrap());
    let (session, members) = session_of(&store, "proc-a", "rider-", 20).await;
    db.keep_written();

    store.renew(&session).await.unwrap();
    let written = db.take_written();
    assert_eq!(written.len(), 1, "one commit");
    // Its record, its old index entry (cleared) and its new one.
    assert_eq!(written[0].len(), 3, "{:?}", written[0]);
    for k in &written[0] {
        assert!(contains(k, b"proc-a"), "a key of the session's own");
        assert!(!contains(k, b"rider-"), "a member's key");
    }

    for m in &members {
        store.renew(m).await.unwrap();
    }
    assert!(db.take_written().is_empty(), "a member's renewal wrote");

    let joined = store
        .join_session(&session, &key(Space::members(), "late"), &holder())
        .await
        .unwrap();
    assert_eq!(joined.ttl, session.ttl);
    let written = db.take_written();
    assert_eq!(written.len(), 1, "one commit");
    assert!(
        written[0].iter().all(|k| !contains(k, b"proc-a")),
        "a join wrote a key of its session"
    );
}

#[tokio::test]
async fn sweep_many_declares_one_batch_of_a_session_dead_per_call() {
    let db = DoubleDatabase::new();
    let store = db.store(&Namespace::new("many").unwrap());
    let batch = store.capabilities().max_batch;
    let (session, members) = session_of(&store, "s", "m", batch + 100).await;
    let (other, riders) = session_of(&store, "t", "r", 2).await;
    assert!(store.release(&session).await.unwrap());
    assert!(store.release(&other).await.unwrap());
    let tokens = [session.token, other.token];
    let first = store.sweep_many(&tokens).await.unwrap();
    let first: Vec<_> = first.into_iter().map(Result::unwrap).collect();
    assert_eq!(first[0].members.len(), batch);
    assert_eq!(
        first[1].members.len(),
        2,
        "the next token still gets its turn"
    );
    let second = store.sweep_many(&tokens).await.unwrap();
    let second: Vec<_> = second.into_iter().map(Result::unwrap).collect();
    assert_eq!(second[0].members.len(), 100);
    assert!(second[1].is_empty());
    let all: HashSet<FencingToken> = first
        .iter()
        .chain(&second)
        .flat_map(|r| r.members.iter().map(|m| m.token))
        .collect();
    assert_eq!(all.len(), members.len() + riders.len(), "each member once");
    let dead = store.dead_tokens(batch).await.unwrap();
    assert!(dead.iter().all(|d| d.token != session.token), "swept");
}

#[tokio::test]
async fn a_page_of_leases_reads_their_session_once() {
    let db = DoubleDatabase::new();
    let store = db.store(&Namespace::new("page").unwrap());
    let (session, _) = session_of(&store, "s", "m", 100).await;
    let before = db.rows_read();
    let page = store
        .leases(&Space::members(), liveness_core::Page::first(100))
        .await
        .unwrap();
    assert_eq!(page.len(), 100);
    assert!(page
        .iter()
        .all(|m| m.session.as_ref() == Some(&session.key)));
    assert!(page.iter().all(|m| m.is_live()));
    // The 100 records, then the session's record once (not once per member).
    assert_eq!(db.rows_read() - before, 101);
}
