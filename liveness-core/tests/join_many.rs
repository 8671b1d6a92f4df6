//! `Session::join_many` on the memory model under tokio's paused time: members joined
//! in batches of the store's `max_batch`, each answered alone and in order, riding the
//! session exactly as members joined one by one; a lost reply adopted, a dropped call
//! leaving nothing behind, a lost session's next lease waited for.

use std::sync::atomic::Ordering;
use std::time::Duration;

use liveness_core::{Error, Key, Member, MemberConfig, Result, Session, SessionConfig, Space};

mod common;
use common::probe::{
    a_dropped_join_leaves_nothing, open, probed, suspendable, tasks, tokio_clock, Mishap, TTL_MS,
};
use common::{live, ttl};

/// The names `m0` … `m{n-1}`.
fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("m{i}")).collect()
}

/// `join_many` joins N members in about N / max_batch store calls, in order, and each
/// is a member as `join` builds it: announced, no task of its own, riding the
/// session, lost with it, re-joined with it.
#[tokio::test(start_paused = true)]
async fn join_many_joins_in_batches_members_that_ride_as_joined_ones() {
    const MEMBERS: u64 = 50;
    const MAX_BATCH: u64 = 10;
    let (store, probe, session, suspend) = suspendable(MAX_BATCH as usize).await;
    let mut events = session.events().subscribe();
    let before = tasks();
    let answers = session.join_many(names(MEMBERS as usize)).await;
    let members: Vec<Member> = answers.into_iter().map(|a| a.unwrap()).collect();
    assert_eq!(tasks(), before, "joining riders started tasks");
    assert_eq!(probe.joined.load(Ordering::SeqCst), MEMBERS);
    let calls = probe.join_calls.load(Ordering::SeqCst);
    assert_eq!(
        calls,
        MEMBERS / MAX_BATCH,
        "{MEMBERS} joined in {calls} calls"
    );
    assert_eq!(session.members(), MEMBERS as usize);
    let mut joined = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let liveness_core::Event::Joined { key, token, .. } = event {
            joined.push((key, token));
        }
    }
    for (i, member) in members.iter().enumerate() {
        assert_eq!(member.key().name().as_str(), format!("m{i}"));
        assert!(joined.contains(&(member.key().clone(), member.token())));
        let info = store.inspect(member.key()).await.unwrap().unwrap();
        assert_eq!(
            (info.token, info.session.as_ref()),
            (member.token(), Some(session.key()))
        );
    }
    tokio::time::sleep(Duration::from_millis(3 * TTL_MS)).await;
    assert!(members.iter().all(|m| m.check().is_ok()));
    assert_eq!(probe.member_renewals.load(Ordering::SeqCst), 0);

    // Lost with the session, re-joined with it.
    let old: Vec<_> = members.iter().map(Member::token).collect();
    suspend.advance(Duration::from_millis(TTL_MS));
    assert!(members.iter().all(|m| m.check().is_err()));
    tokio::time::sleep(Duration::from_millis(3 * TTL_MS)).await;
    let mut lost = 0;
    while let Ok(event) = events.try_recv() {
        if let liveness_core::Event::Lost { key, .. } = event {
            lost += usize::from(*key.space() == Space::members());
        }
    }
    assert_eq!(lost, MEMBERS as usize, "each member's loss announced");
    for (member, old) in members.iter().zip(&old) {
        assert!(member.token() > *old, "{} re-joined", member.key());
        assert!(member.check().is_ok());
    }
    assert_eq!(tasks(), before);
}

/// A refused entry fails alone: a name another session's member holds, a name given
/// twice, a bad name or setting; every other entry joins.
#[tokio::test(start_paused = true)]
async fn join_many_refuses_an_entry_alone() {
    let (store, _probe) = probed(false, 3);
    let other = open(&store, tokio_clock()).await;
    let taken = other.join("m2").await.unwrap();
    let config = SessionConfig::new("q", ttl(TTL_MS)).unwrap();
    let session = Session::open(store.clone(), config).await.unwrap();
    let answers = session
        .join_many(["m0", "m1", "m2", "", "m4", "m0", "m6"])
        .await;
    let held = |a: &Result<Member>| matches!(a, Err(Error::Held { .. }));
    assert!(held(&answers[2]) && held(&answers[5]), "{answers:?}");
    assert!(matches!(answers[3], Err(Error::InvalidInput { .. })));
    for i in [0, 1, 4, 6] {
        let member = answers[i].as_ref().unwrap();
        assert_eq!(member.key().name().as_str(), format!("m{i}"));
        assert!(member.check().is_ok());
    }
    assert_eq!(session.members(), 4);
    let info = store.inspect(taken.key()).await.unwrap().unwrap();
    assert_eq!(info.token, taken.token());
    let bad = MemberConfig::new("w", ttl(TTL_MS))
        .unwrap()
        .progress_timeout(Duration::MAX);
    let good = MemberConfig::new("v", ttl(TTL_MS)).unwrap();
    let answers = session.join_many_with([bad, good]).await;
    assert!(matches!(
        answers[0],
        Err(Error::InvalidInput {
            what: "progress_timeout",
            ..
        })
    ));
    assert!(answers[1].as_ref().unwrap().check().is_ok());
}

/// A batch applied by the store whose reply was lost: its members are recognised as
/// the call's own and adopted, none left joined without a handle.
#[tokio::test(start_paused = true)]
async fn a_join_many_whose_reply_was_lost_adopts_what_the_store_applied() {
    let (store, probe) = probed(false, 10);
    let session = open(&store, tokio_clock()).await;
    probe.lose_replies.store(1, Ordering::SeqCst);
    let answers = session.join_many(names(25)).await;
    let members: Vec<Member> = answers.into_iter().map(|a| a.unwrap()).collect();
    assert_eq!(
        probe.lose_replies.load(Ordering::SeqCst),
        0,
        "a reply was lost"
    );
    for member in &members {
        let info = store.inspect(member.key()).await.unwrap().unwrap();
        assert_eq!(info.token, member.token(), "{}", member.key());
    }
    assert!(
        store.dead_tokens(10).await.unwrap().is_empty(),
        "nothing thrown away"
    );
    assert_eq!(session.members(), 25);
}

/// A `join_many` dropped mid-way (its second batch never answers): the members its
/// first batch joined leave, nothing rides the session without a handle.
#[tokio::test(start_paused = true)]
async fn a_dropped_join_many_releases_the_members_it_joined() {
    let (store, probe) = probed(false, 10);
    let session = open(&store, tokio_clock()).await;
    probe.stall_joins_after.store(1, Ordering::SeqCst);
    let call = session.join_many(names(20));
    assert!(tokio::time::timeout(Duration::from_secs(1), call)
        .await
        .is_err());
    tokio::time::sleep(Duration::from_secs(1)).await;
    for name in names(10) {
        let key = Key::member(&name).unwrap();
        assert!(store.inspect(&key).await.unwrap().is_none(), "{key} left");
    }
    assert_eq!(session.members(), 0);
}

/// A `join_many` dropped while its batch is in flight (the store applies it; its reply
/// comes later): once the reply comes, the members the store joined leave. None rides
/// the session without a handle, and their names are free again.
#[tokio::test(start_paused = true)]
async fn a_join_many_dropped_mid_call_leaves_nothing_behind() {
    a_dropped_join_leaves_nothing(Mishap::SlowReply, &["m0", "m1", "m2", "m3", "m4"]).await;
}

/// A `join_many` dropped after its batch's reply was lost (the store applied it),
/// before a later attempt adopted those members: the leases of this call's instances
/// are found and released in the background.
#[tokio::test(start_paused = true)]
async fn a_join_many_dropped_after_a_lost_reply_leaves_nothing_behind() {
    a_dropped_join_leaves_nothing(Mishap::LostReply, &["m0", "m1", "m2", "m3", "m4"]).await;
}

/// On a store without native sessions the members `join_many` joins are renewed by
/// their session as `join`'s are.
#[tokio::test(start_paused = true)]
async fn without_native_sessions_join_many_members_live_on_the_sessions_renewals() {
    let (store, probe) = probed(true, 2);
    let session = open(&store, tokio_clock()).await;
    let answers = session.join_many(names(5)).await;
    let members: Vec<Member> = answers.into_iter().map(|a| a.unwrap()).collect();
    assert_eq!(probe.join_calls.load(Ordering::SeqCst), 3);
    let tokens: Vec<_> = members.iter().map(Member::token).collect();
    tokio::time::sleep(Duration::from_millis(10 * TTL_MS)).await;
    for (member, token) in members.iter().zip(&tokens) {
        assert_eq!(member.check().unwrap(), *token);
        assert!(live(&store, member.key()).await);
    }
}

/// While the session is lost and being re-opened, `join_many` waits for its next
/// lease and joins every entry into it.
#[tokio::test(start_paused = true)]
async fn join_many_into_a_lost_session_joins_its_next_lease() {
    let (store, _probe, session, suspend) = suspendable(4).await;
    let old = session.token();
    suspend.advance(Duration::from_millis(TTL_MS));
    assert!(session.check().is_err());
    let answers = session.join_many(names(10)).await;
    assert!(session.token() > old, "re-opened");
    for answer in &answers {
        let member = answer.as_ref().unwrap();
        assert!(member.check().is_ok());
        let info = store.inspect(member.key()).await.unwrap().unwrap();
        assert_eq!(info.token, member.token());
    }
}
