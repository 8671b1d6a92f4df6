//! The session state machine on the memory model under tokio's paused time: members
//! riding a session live on the session's renewals alone, die with it at once (their
//! checks fail before the store could hand their items away), re-join under new
//! tokens with the re-opened session, and leave or stall alone; on a store without
//! native sessions the session renews them with itself, one `renew_many` per batch.

use std::sync::atomic::Ordering;
use std::time::Duration;

use liveness_core::{
    Claimed, Error, FencingToken, ItemCounts, LeaseStatus, LostCause, Member, MemberConfig,
    Session, SessionConfig, Space,
};
use tokio::time::Instant;

mod common;
use common::probe::{
    a_dropped_join_leaves_nothing, join_all, margin, open, probed, suspendable, tasks, tokio_clock,
    Mishap, TTL_MS,
};
use common::{enqueue_job, live, ttl, when_fired};

#[tokio::test(start_paused = true)]
async fn riding_members_live_on_the_sessions_renewals_alone() {
    let (store, probe) = probed(false, 1000);
    let session = open(&store, tokio_clock()).await;
    assert!(session.native());
    let members = join_all(&session, 5).await;
    let tokens: Vec<_> = members.iter().map(Member::token).collect();
    let session_token = session.token();
    for member in &members {
        let info = store.inspect(member.key()).await.unwrap().unwrap();
        assert_eq!(info.session.as_ref(), Some(session.key()));
    }
    // Ten ttls.
    tokio::time::sleep(Duration::from_millis(10 * TTL_MS)).await;
    for (member, token) in members.iter().zip(&tokens) {
        assert_eq!(member.check().unwrap(), *token);
        assert!(live(&store, member.key()).await);
    }
    assert_eq!(session.token(), session_token);
    assert_eq!(session.members(), 5);
    assert_eq!(
        probe.member_renewals.load(Ordering::SeqCst),
        0,
        "no member renews"
    );
    assert!(probe.session_renewals.load(Ordering::SeqCst) >= 10);
    // A riding member does its work as any member.
    enqueue_job(&store).await;
    let claimed = members[0].claim(1).await.unwrap();
    assert_eq!(claimed[0].check().unwrap(), tokens[0]);
    members[0].complete(&claimed[0]).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_frozen_session_fails_every_members_check_at_once_and_they_rejoin() {
    let (store, _probe, session, suspend) = suspendable(1000).await;
    let members = join_all(&session, 4).await;
    enqueue_job(&store).await;
    let claimed = members[1].claim(1).await.unwrap();
    let (old_session, old_tokens): (_, Vec<_>) =
        (session.token(), members.iter().map(Member::token).collect());

    // The host sleeps past the session's local deadline; no task has run since.
    suspend.advance(Duration::from_millis(TTL_MS));
    assert!(matches!(
        members[0].check(),
        Err(Error::Lost {
            reason: LostCause::GaveUp,
            ..
        })
    ));
    // One check found the session lost: every member's work is told to stop.
    for member in &members {
        assert!(member.cancelled().is_cancelled());
        assert!(member.check().is_err());
    }
    assert!(claimed[0].check().is_err());
    assert!(matches!(
        members[1].complete(&claimed[0]).await,
        Err(Error::Fenced { .. })
    ));
    // The store (on tokio's clock, which the suspend did not move) still holds them:
    // nobody else was handed their items before their work stopped.
    for member in &members {
        assert!(live(&store, member.key()).await);
    }

    // The session re-opens under a new token, each member re-joins under a new one.
    tokio::time::sleep(Duration::from_millis(3 * TTL_MS)).await;
    assert!(session.token() > old_session);
    assert!(session.check().is_ok());
    for (member, old) in members.iter().zip(&old_tokens) {
        assert!(member.token() > *old, "{} re-joined", member.key());
        assert!(member.check().is_ok());
        let info = store.inspect(member.key()).await.unwrap().unwrap();
        assert_eq!(info.token, member.token());
        assert!(info.is_live());
    }
}

#[tokio::test(start_paused = true)]
async fn a_session_whose_renewals_fail_stops_its_members_before_the_store_expires_them() {
    let (store, probe) = probed(false, 1000);
    let session = open(&store, tokio_clock()).await;
    let members = join_all(&session, 3).await;
    let fired: Vec<_> = members.iter().map(|m| when_fired(m.cancelled())).collect();
    let old_session = session.lease();
    let first = members[0].lease().token;
    probe.cut.store(true, Ordering::SeqCst);
    // Watch the store until the first member's lease is gone (expired, or re-joined
    // at the instant it expired): it expired when the store's last look said.
    let mut expires_at = Instant::now();
    let expired_at = loop {
        let info = store.inspect(members[0].key()).await.unwrap().unwrap();
        match info.status {
            LeaseStatus::Live { remaining } if info.token == first => {
                expires_at = Instant::now() + remaining;
            }
            _ => break expires_at,
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let mut at = Vec::new();
    for f in fired {
        at.push(f.await.unwrap());
    }
    assert!(at.iter().all(|t| *t == at[0]), "all at once: {at:?}");
    assert!(
        expired_at >= at[0] + margin() - Duration::from_millis(20),
        "stopped {:?} before the store's expiry",
        expired_at - at[0]
    );
    probe.cut.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(3 * TTL_MS)).await;
    assert!(session.token() > old_session.token);
    assert!(members.iter().all(|m| m.check().is_ok()));
}

#[tokio::test(start_paused = true)]
async fn a_session_refused_by_the_store_reopens_at_once() {
    let (store, _probe) = probed(false, 1000);
    let session = open(&store, tokio_clock()).await;
    let members = join_all(&session, 2).await;
    let old = session.lease();
    let old_tokens: Vec<_> = members.iter().map(Member::token).collect();
    // Somebody releases the session behind its back: its next renewal is refused.
    assert!(store.release(&old).await.unwrap());
    tokio::time::sleep(Duration::from_millis(TTL_MS)).await;
    assert!(members.iter().all(|m| m.check().is_ok()));
    assert!(session.token() > old.token);
    for (member, old) in members.iter().zip(&old_tokens) {
        assert!(member.token() > *old);
    }
}

#[tokio::test(start_paused = true)]
async fn a_member_told_not_to_rejoin_stays_lost_while_the_session_reopens() {
    let (store, _probe) = probed(false, 1000);
    let session = open(&store, tokio_clock()).await;
    let config = MemberConfig::new("once", ttl(TTL_MS))
        .unwrap()
        .rejoin(false);
    let once = session.join_with(config).await.unwrap();
    let again = session.join("again").await.unwrap();
    let (once_token, again_token) = (once.token(), again.token());
    assert!(store.release(&session.lease()).await.unwrap());
    tokio::time::sleep(Duration::from_millis(2 * TTL_MS)).await;
    assert_eq!(once.token(), once_token);
    assert!(once.check().is_err());
    assert!(again.token() > again_token);
    assert!(again.check().is_ok());
    // The handle dropped, the session lives on for its members.
    drop(session);
    tokio::time::sleep(Duration::from_millis(2 * TTL_MS)).await;
    assert!(again.check().is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_stalled_member_dies_alone() {
    let (store, _probe) = probed(false, 1000);
    enqueue_job(&store).await;
    let session = open(&store, tokio_clock()).await;
    let (stuck, busy) = stuck_and_busy(&session).await;
    let before = [stuck.token(), busy.token(), session.token()];
    let claimed = stuck.claim(1).await.unwrap();
    tokio::time::sleep(STUCK_TIMEOUT + margin() + Duration::from_secs(1)).await;
    assert_eq!(store.item_counts().await.unwrap(), ItemCounts::new(1, 0, 0));
    assert_stalled_alone(&claimed[0], [&stuck, &busy], &session, before);
}

/// The progress timeout of [`stuck_and_busy`]'s stuck member.
const STUCK_TIMEOUT: Duration = Duration::from_millis(2000);

/// Joins a member `stuck`, watched with a [`STUCK_TIMEOUT`] progress timeout, and a
/// member `busy` into `session`.
async fn stuck_and_busy(session: &Session) -> (Member, Member) {
    let config = MemberConfig::new("stuck", ttl(TTL_MS))
        .unwrap()
        .progress_timeout(STUCK_TIMEOUT);
    let stuck = session.join_with(config).await.unwrap();
    (stuck, session.join("busy").await.unwrap())
}

/// What the watchdog leaves once `stuck` stalled on `job`: the job told to stop as
/// `Stalled`, `stuck` re-joined under a new token, `busy` and the session untouched
/// (`before`: the three tokens before the stall).
fn assert_stalled_alone(
    job: &Claimed,
    [stuck, busy]: [&Member; 2],
    session: &Session,
    before: [FencingToken; 3],
) {
    assert!(matches!(
        job.check(),
        Err(Error::Lost {
            reason: LostCause::Stalled,
            ..
        })
    ));
    assert!(stuck.token() > before[0], "the stalled member re-joined");
    assert!(stuck.check().is_ok());
    assert_eq!(busy.token(), before[1]);
    assert!(busy.check().is_ok());
    assert_eq!(session.token(), before[2]);
}

#[tokio::test(start_paused = true)]
async fn leave_releases_one_member_and_close_the_rest() {
    let (store, _probe) = probed(false, 1000);
    let session = open(&store, tokio_clock()).await;
    let mut members = join_all(&session, 3).await;
    let session_token = session.token();
    let gone = members.remove(0);
    let key = gone.key().clone();
    gone.leave(Duration::from_secs(1)).await.unwrap();
    assert!(store.inspect(&key).await.unwrap().is_none());
    assert_eq!(session.members(), 2);
    assert_eq!(session.token(), session_token);
    assert!(members.iter().all(|m| m.check().is_ok()));
    tokio::time::sleep(Duration::from_millis(2 * TTL_MS)).await;
    assert!(members.iter().all(|m| m.check().is_ok()));

    let session_key = session.key().clone();
    session.close(Duration::MAX).await.unwrap();
    assert!(store.inspect(&session_key).await.unwrap().is_none());
    for m in &members {
        assert!(store.inspect(m.key()).await.unwrap().is_none());
        assert!(matches!(
            m.check(),
            Err(Error::Lost {
                reason: LostCause::Released,
                ..
            })
        ));
    }
}

#[tokio::test(start_paused = true)]
async fn without_native_sessions_the_session_renews_its_members_in_batches() {
    let (store, probe) = probed(true, 2);
    let session = open(&store, tokio_clock()).await;
    assert!(!session.native());
    let members = join_all(&session, 5).await;
    let tokens: Vec<_> = members.iter().map(Member::token).collect();
    for member in &members {
        // An ordinary lease of its own.
        let info = store.inspect(member.key()).await.unwrap().unwrap();
        assert_eq!(info.session, None);
    }
    tokio::time::sleep(Duration::from_millis(10 * TTL_MS)).await;
    for (member, token) in members.iter().zip(&tokens) {
        assert_eq!(member.check().unwrap(), *token);
        assert!(live(&store, member.key()).await);
    }
    let batches = probe.batches.lock().unwrap().clone();
    assert!(batches.len() >= 3 * 10, "{} batches", batches.len());
    assert!(batches.iter().all(|b| b.len() <= 2), "at most max_batch");
    assert!(
        batches.iter().flatten().all(|k| k != session.key()),
        "the session renews in a call of its own"
    );
    // Every round: the session's renewal, and its five members' in three calls (the
    // last round's may still wait in the batcher's window).
    let rounds = probe.session_renewals.load(Ordering::SeqCst);
    let renewed = probe.member_renewals.load(Ordering::SeqCst);
    assert!(rounds >= 10, "{rounds} rounds");
    assert!(
        (5 * (rounds - 1)..=5 * rounds).contains(&renewed),
        "{renewed} member renewals in {rounds} of the session's rounds: each member in each"
    );

    // A member refused by the store (released behind its back) dies alone and
    // re-joins; the session and the others go on.
    let session_token = session.token();
    assert!(store.release(&members[2].lease()).await.unwrap());
    tokio::time::sleep(Duration::from_millis(TTL_MS)).await;
    assert!(members[2].token() > tokens[2]);
    assert!(members[2].check().is_ok());
    for i in [0, 1, 3, 4] {
        assert_eq!(members[i].token(), tokens[i]);
    }
    assert_eq!(session.token(), session_token);
}

#[tokio::test(start_paused = true)]
async fn without_native_sessions_a_lost_session_takes_its_members_along() {
    let (store, probe) = probed(true, 1000);
    let session = open(&store, tokio_clock()).await;
    let members = join_all(&session, 3).await;
    let old = session.token();
    let old_tokens: Vec<_> = members.iter().map(Member::token).collect();
    probe.cut.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(TTL_MS)).await;
    assert!(members.iter().all(|m| m.check().is_err()));
    probe.cut.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(3 * TTL_MS)).await;
    assert!(session.token() > old);
    for (member, old) in members.iter().zip(&old_tokens) {
        assert!(member.token() > *old);
        assert!(member.check().is_ok());
    }
}

#[tokio::test(start_paused = true)]
async fn settings_out_of_range_are_refused_naming_them() {
    let (store, _probe) = probed(false, 1000);
    let base = || SessionConfig::new("p", ttl(TTL_MS)).unwrap();
    for (config, what) in [
        (base().renew_every(Duration::MAX), "renew_every"),
        (base().renew_every(Duration::ZERO), "renew_every"),
        (base().safety_margin(Duration::MAX), "safety_margin"),
    ] {
        match Session::open(store.clone(), config).await {
            Err(Error::InvalidInput { what: got, .. }) => assert_eq!(got, what),
            other => panic!("{what} answered {other:?}"),
        }
    }
    let session = open(&store, tokio_clock()).await;
    let config = MemberConfig::new("w", ttl(TTL_MS))
        .unwrap()
        .progress_timeout(Duration::MAX);
    match session.join_with(config).await {
        Err(Error::InvalidInput { what, .. }) => assert_eq!(what, "progress_timeout"),
        other => panic!("progress_timeout answered {other:?}"),
    }
    // A member config's own heartbeat timing is not used: the session's is.
    let config = MemberConfig::new("v", ttl(TTL_MS))
        .unwrap()
        .renew_every(Duration::MAX);
    let member = session.join_with(config).await.unwrap();
    assert!(member.check().is_ok());
    session.close(Duration::MAX).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_open_and_a_join_whose_replies_were_lost_adopt_their_own_ghosts() {
    for plain in [false, true] {
        let (store, probe) = probed(plain, 1000);
        probe.lose_replies.store(1, Ordering::SeqCst);
        let session = open(&store, tokio_clock()).await;
        probe.lose_replies.store(1, Ordering::SeqCst);
        let member = session.join("m").await.unwrap();
        for (key, token) in [
            (session.key(), session.token()),
            (member.key(), member.token()),
        ] {
            let info = store.inspect(key).await.unwrap().unwrap();
            assert_eq!(info.token, token, "{key}: the lease the lost reply took");
        }
        // Nothing was thrown away for a new token.
        assert!(store.dead_tokens(10).await.unwrap().is_empty());
        tokio::time::sleep(Duration::from_millis(2 * TTL_MS)).await;
        assert!(member.check().is_ok());
    }
}

#[tokio::test(start_paused = true)]
async fn two_sessions_cannot_share_a_name() {
    let (store, _probe) = probed(false, 1000);
    let _first = open(&store, tokio_clock()).await;
    let config = SessionConfig::new("p", ttl(TTL_MS)).unwrap();
    assert!(matches!(
        Session::open(store.clone(), config).await,
        Err(Error::Held { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn members_rejoin_a_reopened_session_in_batches_of_max_batch() {
    const MEMBERS: u64 = 50;
    const MAX_BATCH: u64 = 10;
    let (store, probe, session, suspend) = suspendable(MAX_BATCH as usize).await;
    let members = join_all(&session, MEMBERS as usize).await;
    let old_tokens: Vec<_> = members.iter().map(Member::token).collect();
    let (calls_before, joined_before) = (
        probe.join_calls.load(Ordering::SeqCst),
        probe.joined.load(Ordering::SeqCst),
    );

    // The host sleeps past the session's local deadline: every member is lost.
    suspend.advance(Duration::from_millis(TTL_MS));
    assert!(members[0].check().is_err());
    tokio::time::sleep(Duration::from_millis(3 * TTL_MS)).await;

    for (member, old) in members.iter().zip(&old_tokens) {
        assert!(member.token() > *old, "{} re-joined", member.key());
        assert!(member.check().is_ok());
        let info = store.inspect(member.key()).await.unwrap().unwrap();
        assert_eq!(info.token, member.token());
        assert_eq!(info.session.as_ref(), Some(session.key()));
    }
    let calls = probe.join_calls.load(Ordering::SeqCst) - calls_before;
    let joined = probe.joined.load(Ordering::SeqCst) - joined_before;
    assert_eq!(joined, MEMBERS, "each member re-joined once");
    assert!(
        calls <= MEMBERS / MAX_BATCH + 1,
        "{MEMBERS} members re-joined in {calls} store calls, not about {}",
        MEMBERS / MAX_BATCH
    );
}

/// A process frozen past both its session's deadline and its members' progress
/// timeout wakes with every timer due at once: its members were lost with their
/// session, which the watchdog must not report as a stall of each (nor release them
/// one by one as stalled).
#[tokio::test(start_paused = true)]
async fn a_frozen_process_s_members_are_lost_with_the_session_not_stalled() {
    let (store, _probe) = probed(false, 1000);
    let session = open(&store, tokio_clock()).await;
    let bus = liveness_core::EventBus::new(1024);
    let mut events = bus.subscribe();
    let timeout = Duration::from_millis(2 * TTL_MS);
    let mut members = Vec::new();
    for i in 0..16 {
        let config = MemberConfig::new(&format!("f{i}"), ttl(TTL_MS))
            .unwrap()
            .progress_timeout(timeout)
            .events(bus.clone());
        members.push(session.join_with(config).await.unwrap());
    }
    // The freeze: no task runs while the time of three ttls passes; then every timer
    // (the session's renewal, each watchdog's) is due at once.
    tokio::time::advance(Duration::from_millis(3 * TTL_MS)).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let mut stalled = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let liveness_core::Event::Lost { key, reason, .. } = event {
            if reason == liveness_core::HolderLoss::Stalled {
                stalled.push(key);
            }
        }
    }
    assert!(stalled.is_empty(), "reported as stalled: {stalled:?}");
    drop(members);
}

/// A riding member has no task of its own: the session's one task tends its riders,
/// and a re-join after a loss runs only until the member has its next lease.
#[tokio::test(start_paused = true)]
async fn riding_members_have_no_task_of_their_own() {
    let (_store, _probe, session, suspend) = suspendable(1000).await;
    let warm = session.join("warm").await.unwrap();
    let before = tasks();
    let members = join_all(&session, 20).await;
    assert_eq!(tasks(), before, "joining 20 riders started tasks");

    // Every member is lost with the session, and re-joins under a new token.
    let old: Vec<_> = members.iter().map(Member::token).collect();
    suspend.advance(Duration::from_millis(TTL_MS));
    tokio::time::sleep(Duration::from_millis(3 * TTL_MS)).await;
    for (member, old) in members.iter().zip(&old) {
        assert!(member.token() > *old, "{} re-joined", member.key());
        assert!(member.check().is_ok());
    }
    assert_eq!(tasks(), before, "a re-join's task outlived it");
    drop(warm);
}

/// A member that re-joined after its session's loss is watched as before: stuck, it
/// is stalled and released alone.
#[tokio::test(start_paused = true)]
async fn a_member_rejoined_after_a_session_loss_is_still_watched() {
    let (store, _probe, session, suspend) = suspendable(1000).await;
    let (stuck, busy) = stuck_and_busy(&session).await;
    suspend.advance(Duration::from_millis(TTL_MS));
    // Long enough to re-join, too short to stall since (a re-join is progress).
    let mut rejoined = None;
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if stuck.check().is_ok() && busy.check().is_ok() {
            rejoined = Some([stuck.token(), busy.token(), session.token()]);
            break;
        }
    }
    let before = rejoined.expect("both re-joined");
    enqueue_job(&store).await;
    let claimed = stuck.claim(1).await.unwrap();
    tokio::time::sleep(STUCK_TIMEOUT + margin() + Duration::from_secs(1)).await;
    assert_eq!(store.item_counts().await.unwrap().pending, 1);
    assert_stalled_alone(&claimed[0], [&stuck, &busy], &session, before);
}

/// On a store without native sessions, a member whose renewals alone fail (its batch
/// of the session's `renew_many` does not get through) is stopped at its own local
/// deadline, before the store expires it, and re-joins alone; the session and the
/// other members go on.
#[tokio::test(start_paused = true)]
async fn without_native_sessions_a_member_whose_renewals_fail_stops_at_its_own_deadline() {
    // Batches of one: each member's renewal is a call of its own.
    let (store, probe) = probed(true, 1);
    let session = open(&store, tokio_clock()).await;
    let members = join_all(&session, 5).await;
    let tokens: Vec<_> = members.iter().map(Member::token).collect();
    let session_token = session.token();
    let fired = when_fired(members[3].cancelled());
    *probe.cut_members.lock().unwrap() = vec![members[3].key().clone()];
    let expired_at = loop {
        let info = store.inspect(members[3].key()).await.unwrap().unwrap();
        if !info.is_live() || info.token != tokens[3] {
            break Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let stopped_at = fired.await.unwrap();
    assert!(
        expired_at >= stopped_at + margin() - Duration::from_millis(20),
        "stopped {:?} before the store's expiry",
        expired_at - stopped_at
    );
    assert!(members
        .iter()
        .enumerate()
        .all(|(i, m)| i == 3 || m.check().is_ok()));
    probe.cut_members.lock().unwrap().clear();
    tokio::time::sleep(Duration::from_millis(2 * TTL_MS)).await;
    assert!(members[3].token() > tokens[3], "m3 re-joined");
    assert!(members[3].check().is_ok());
    for i in [0, 1, 2, 4] {
        assert_eq!(members[i].token(), tokens[i]);
        assert!(members[i].check().is_ok());
    }
    assert_eq!(session.token(), session_token);
}

/// A `join` dropped while its call is in flight (the store applies it; its reply comes
/// later): once the reply comes, the member the store joined leaves. It does not ride
/// the session without a handle, and its name is free again.
#[tokio::test(start_paused = true)]
async fn a_join_dropped_mid_call_leaves_no_member_behind() {
    a_dropped_join_leaves_nothing(Mishap::SlowReply, &["w"]).await;
}

/// A `join` dropped after its first attempt's reply was lost (the store applied it),
/// before a later attempt found and adopted that lease: the lease of this instance is
/// found and released in the background.
#[tokio::test(start_paused = true)]
async fn a_join_dropped_after_a_lost_reply_leaves_no_member_behind() {
    a_dropped_join_leaves_nothing(Mishap::LostReply, &["w"]).await;
}

/// A member that leaves while its re-join (after a session loss) waits to retry a
/// join whose reply was lost: the lease that join left under the member's instance
/// holder is released, not left riding the new session without a handle.
#[tokio::test(start_paused = true)]
async fn a_member_leaving_while_its_rejoin_retries_a_lost_reply_leaves_nothing() {
    let (store, probe) = probed(false, 1000);
    let session = open(&store, tokio_clock()).await;
    let member = session.join("w").await.unwrap();
    let calls = probe.join_calls.load(Ordering::SeqCst);
    probe.lose_join_replies.store(1, Ordering::SeqCst);
    assert!(store.release(&session.lease()).await.unwrap());
    while probe.join_calls.load(Ordering::SeqCst) == calls {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let key = liveness_core::Key::member("w").unwrap();
    let left = store.inspect(&key).await.unwrap().unwrap();
    assert_ne!(
        left.token,
        member.token(),
        "the re-join's reply was not lost"
    );
    member.leave(Duration::ZERO).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(store.inspect(&key).await.unwrap(), None, "{key} stayed");
}

/// A process that survives a short session loss leaves one death record for it,
/// whatever its number of members: the members that died with the old session lease
/// are counted in that lease's record, not given one each when they re-join (a large
/// process would otherwise push every other death out of the history).
#[tokio::test(start_paused = true)]
async fn a_session_lost_and_reopened_leaves_one_death_record() {
    const MEMBERS: usize = 20;
    let (store, _probe) = probed(false, 8);
    let session = open(&store, tokio_clock()).await;
    let members = join_all(&session, MEMBERS).await;
    let old = session.lease();
    let old_tokens: Vec<_> = members.iter().map(Member::token).collect();
    let seen = store.deaths(None, 1000).await.unwrap();
    let before = seen.iter().map(|d| d.seq).max().unwrap_or(0);
    // Somebody releases the session behind its back: it re-opens, its members re-join.
    assert!(store.release(&old).await.unwrap());
    tokio::time::sleep(Duration::from_millis(3 * TTL_MS)).await;
    assert!(session.token() > old.token);
    for (member, old) in members.iter().zip(&old_tokens) {
        assert!(member.token() > *old, "{} re-joined", member.key());
        assert!(member.check().is_ok());
    }
    let deaths = store.deaths(None, 1000).await.unwrap();
    let new: Vec<_> = deaths.iter().filter(|d| d.seq > before).collect();
    let of_members: Vec<_> = new
        .iter()
        .filter(|d| *d.key.space() == Space::members())
        .map(|d| d.key.to_string())
        .collect();
    assert!(
        of_members.is_empty(),
        "{} death records of members: {of_members:?}",
        of_members.len()
    );
    let of_session: Vec<_> = new.iter().filter(|d| d.token == old.token).collect();
    assert_eq!(
        of_session.len(),
        1,
        "one record of the old session lease: {new:?}"
    );
    assert_eq!(
        of_session[0].swept.map(|s| s.members),
        Some(MEMBERS as u64),
        "it counts the members that died with it"
    );
}
