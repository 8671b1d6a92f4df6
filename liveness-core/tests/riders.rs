//! The seams between a member and its lease keeper, on the memory model under tokio's
//! paused time: what a store's `Lost` answer means for the work, for a member riding a
//! session and for one of its own lease alike.

use std::sync::atomic::Ordering;
use std::time::Duration;

use liveness_core::{Error, Member, MemberConfig};
use tokio::time::Instant;

mod common;
use common::probe::{margin, open, probed, tokio_clock, TTL_MS};
use common::{enqueue_job, ttl, when_fired};

/// A riding member whose own record is gone while its session is fine (an
/// asynchronous failover lost it, an operator released it) has no renewal of its own
/// to tell it: the first claim answering `Lost` marks it lost, and its session's task
/// re-joins it under a new token.
#[tokio::test(start_paused = true)]
async fn a_rider_whose_record_is_gone_notices_on_its_next_claim() {
    let (store, _probe) = probed(false, 1000);
    let session = open(&store, tokio_clock()).await;
    let member = session.join("m").await.unwrap();
    let old = member.token();
    enqueue_job(&store).await;
    assert!(store.release(&member.lease()).await.unwrap());
    assert!(matches!(member.claim(1).await, Err(Error::Lost { .. })));
    assert!(
        member.check().is_err(),
        "a rider the store refused may not act"
    );
    tokio::time::sleep(Duration::from_millis(TTL_MS)).await;
    assert!(member.token() > old, "the rider never re-joined");
    assert!(member.check().is_ok());
    assert_eq!(member.claim(1).await.unwrap().len(), 1);
    assert!(session.check().is_ok(), "the session was never touched");
}

/// Sets off a loss of `member` with `loss` and asserts that its lease is replaced in
/// the store (by the re-join's acquire) no earlier than the stop margin after its work
/// was told to stop, and that it works again one ttl later.
async fn hands_over_after_the_margin(
    store: &std::sync::Arc<dyn liveness_core::Store>,
    member: &Member,
    loss: impl std::future::Future<Output = ()>,
) {
    let (key, old) = (member.key().clone(), member.token());
    let fired = when_fired(member.cancelled());
    loss.await;
    let replaced = loop {
        match store.inspect(&key).await.unwrap() {
            Some(info) if info.token != old => break Instant::now(),
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    };
    let fired = fired.await.unwrap();
    assert!(
        replaced >= fired + margin(),
        "{key} was replaced {:?} after its work was told to stop",
        replaced - fired
    );
    tokio::time::sleep(Duration::from_millis(TTL_MS)).await;
    assert!(member.check().is_ok());
}

/// A session the store refuses after a failover (`Lost(Failover)`: the store did
/// not expire, supersede or release it, so nobody has its members' work yet) tells
/// the work to stop at once and gives it the stop margin before the re-open and the
/// re-joins put the old tokens in the dead set.
#[tokio::test(start_paused = true)]
async fn a_session_refused_after_a_failover_hands_over_only_after_the_margin() {
    let (store, probe) = probed(false, 1000);
    let session = open(&store, tokio_clock()).await;
    let member = session.join("m").await.unwrap();
    let failover = async { probe.failovers.store(1, Ordering::SeqCst) };
    hands_over_after_the_margin(&store, &member, failover).await;
    assert!(session.check().is_ok());
}

/// The same for a member of its own lease.
#[tokio::test(start_paused = true)]
async fn a_member_refused_after_a_failover_hands_over_only_after_the_margin() {
    let (store, probe) = probed(false, 1000);
    let config = MemberConfig::new("own", ttl(TTL_MS)).unwrap();
    let member = Member::join(store.clone(), config).await.unwrap();
    let failover = async { probe.failovers.store(1, Ordering::SeqCst) };
    hands_over_after_the_margin(&store, &member, failover).await;
}

/// On a store without native sessions a rider holds a lease of its own, which the
/// store's refusal of its session does not end: the rider's work is told to stop with
/// the session's, and gets the stop margin before the re-join hands its lease over.
#[tokio::test(start_paused = true)]
async fn a_rider_outliving_its_refused_session_hands_over_only_after_the_margin() {
    let (store, _probe) = probed(true, 1000);
    let session = open(&store, tokio_clock()).await;
    let member = session.join("m").await.unwrap();
    let refused = async { assert!(store.release(&session.lease()).await.unwrap()) };
    hands_over_after_the_margin(&store, &member, refused).await;
    assert!(session.check().is_ok());
}

/// On a store without native sessions, a session with many riders is answered by its
/// first `renew_many` alone: eleven batches of a slow store (300 ms each, 3.3 s one
/// after the other, against a 2.4 s budget) neither lose the session nor its riders.
#[tokio::test(start_paused = true)]
async fn a_session_s_renewal_never_waits_for_its_riders_batches() {
    let (store, probe) = probed(true, 10);
    let session = open(&store, tokio_clock()).await;
    let names: Vec<String> = (0..100).map(|i| format!("m{i}")).collect();
    let members: Vec<Member> = session
        .join_many(&names)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let (token, tokens) = (
        session.token(),
        members.iter().map(Member::token).collect::<Vec<_>>(),
    );
    probe.slow_renewals_ms.store(300, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(5 * TTL_MS)).await;
    assert_eq!(session.token(), token, "the session was lost");
    assert!(session.check().is_ok());
    for (member, token) in members.iter().zip(tokens) {
        assert_eq!(member.token(), token, "{} was lost", member.key());
        assert!(member.check().is_ok());
    }
}

/// A first join whose reply lands after its session was lost and re-opened (the store
/// applied it under the old session lease, 2 s before answering) does not ride the dead
/// session: the member is taken as lost at once and re-joins the new session.
#[tokio::test(start_paused = true)]
async fn a_join_answered_after_its_session_reopened_rejoins_the_new_one() {
    for many in [false, true] {
        let (store, probe) = probed(false, 1000);
        let session = open(&store, tokio_clock()).await;
        let old_session = session.token();
        probe.slow_join_replies_ms.store(2000, Ordering::SeqCst);
        let joining = {
            let session = session.clone();
            tokio::spawn(async move {
                match many {
                    false => session.join("late").await.unwrap(),
                    true => session.join_many(["late"]).await.pop().unwrap().unwrap(),
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The session is released behind its back: its next renewal is refused, and
        // it re-opens at once, while the join's reply is still on its way.
        assert!(store.release(&session.lease()).await.unwrap());
        let member = joining.await.unwrap();
        assert!(session.token() > old_session, "the session never re-opened");
        probe.slow_join_replies_ms.store(0, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(2 * TTL_MS)).await;
        assert!(
            member.check().is_ok(),
            "join_many: {many}: the member rides a dead session: {:?}",
            member.check()
        );
        enqueue_job(&store).await;
        assert_eq!(member.claim(1).await.unwrap().len(), 1);
    }
}

/// Joins gathered into one `join_session_many` (any join into a re-opened session's
/// lease) whose reply is lost after the store applied it: each join learns of the
/// fault as a join of its own would, adopts the lease its own holder id left, and
/// succeeds; none answers `Held` against itself, and no name is left held.
#[tokio::test(start_paused = true)]
async fn a_lost_reply_to_a_gathered_batch_of_joins_strands_nobody() {
    let (store, probe) = probed(false, 1000);
    let session = open(&store, tokio_clock()).await;
    let first = session.token();
    assert!(store.release(&session.lease()).await.unwrap());
    tokio::time::sleep(Duration::from_millis(TTL_MS)).await;
    assert!(session.token() > first, "the session never re-opened");
    let calls = probe.join_calls.load(Ordering::SeqCst);
    probe.lose_join_replies.store(1, Ordering::SeqCst);
    let (a, b) = tokio::join!(session.join("a"), session.join("b"));
    assert!(
        probe.join_calls.load(Ordering::SeqCst) > calls,
        "no join reached the store"
    );
    let (a, b) = (a.expect("a"), b.expect("b"));
    assert!(a.check().is_ok() && b.check().is_ok());
    for m in [&a, &b] {
        let info = store.inspect(m.key()).await.unwrap().unwrap();
        assert_eq!(
            info.token,
            m.token(),
            "{} is not the lease in the store",
            m.key()
        );
    }
}

/// A dropped rider whose release does not get through at first (a connection that
/// broke for a moment) is released on a later try: its lease has no expiry of its
/// own, so a single try would leave its name held for the life of its session.
#[tokio::test(start_paused = true)]
async fn a_dropped_rider_whose_release_fails_once_is_released_on_a_retry() {
    let (store, probe) = probed(false, 1000);
    let session = open(&store, tokio_clock()).await;
    let member = session.join("m").await.unwrap();
    let key = member.key().clone();
    probe.failed_releases.store(2, Ordering::SeqCst);
    drop(member);
    tokio::time::sleep(margin() + Duration::from_secs(5)).await;
    assert_eq!(probe.failed_releases.load(Ordering::SeqCst), 0);
    assert!(
        store.inspect(&key).await.unwrap().is_none(),
        "the dropped rider's name is still held"
    );
    assert!(session.check().is_ok());
    session.join("m").await.expect("the name is free again");
}

/// A rider dropped while its re-join after a session loss is in flight: the lease the
/// re-join then takes is released, on a later try if the first does not get through
/// (a riding lease has no expiry of its own: one lost release would hold the name
/// for the life of the session).
#[tokio::test(start_paused = true)]
async fn a_rider_dropped_during_its_rejoin_is_released_on_a_retry() {
    let (store, probe) = probed(false, 1000);
    let session = open(&store, tokio_clock()).await;
    let member = session.join("m").await.unwrap();
    let key = member.key().clone();
    let joins = probe.join_calls.load(Ordering::SeqCst);
    probe.slow_join_replies_ms.store(500, Ordering::SeqCst);
    probe.cut.store(true, Ordering::SeqCst);
    // The session is lost, re-opened, and the rider's re-join sent.
    while probe.join_calls.load(Ordering::SeqCst) == joins {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    probe.cut.store(false, Ordering::SeqCst);
    probe.failed_releases.store(1, Ordering::SeqCst);
    drop(member);
    tokio::time::sleep(Duration::from_millis(TTL_MS * 3)).await;
    assert_eq!(
        probe.failed_releases.load(Ordering::SeqCst),
        0,
        "no release was sent"
    );
    assert!(session.check().is_ok(), "the session re-opened");
    assert!(
        store.inspect(&key).await.unwrap().is_none(),
        "the dropped rider's re-joined lease still holds its name"
    );
}

/// A rider that leaves while the store refuses its release for a moment (a connection
/// that broke) is still released: its lease has no expiry of its own, so a single try
/// would hold its name for the life of its session, and the leave cannot hand the
/// release to the drop (it already handed its items back).
#[tokio::test(start_paused = true)]
async fn a_leaving_rider_whose_release_fails_once_is_released_on_a_retry() {
    let (store, probe) = probed(false, 1000);
    let session = open(&store, tokio_clock()).await;
    let member = session.join("m").await.unwrap();
    let key = member.key().clone();
    probe.failed_releases.store(2, Ordering::SeqCst);
    member
        .leave(Duration::from_millis(50))
        .await
        .expect("the leave retries a release that failed for a moment");
    assert_eq!(probe.failed_releases.load(Ordering::SeqCst), 0);
    assert!(
        store.inspect(&key).await.unwrap().is_none(),
        "the rider that left still holds its name"
    );
    session.join("m").await.expect("the name is free again");
}
