//! What a member learns from the store and from its own jobs, on the store under
//! test: a riding member whose record is gone re-joins, a process that survives a
//! session loss leaves one death record for it, and the watchdog stops a wedged job,
//! never an idle member.

use std::time::Duration;

use liveness_core::{
    EnqueueOptions, Error, Event, EventBus, HolderLoss, LostCause, Member, MemberConfig, Session,
    SessionConfig,
};
use tokio::sync::broadcast::error::TryRecvError;
use tokio::time::Instant;

use crate::fixtures::swept_session_record;
use crate::Ctx;

fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", fastrand::u32(..))
}

/// A member riding a session whose own record is gone while the session is fine (an
/// asynchronous failover lost it, an operator released it) learns it from its first
/// claim: the claim answers `Lost`, the member's checks fail at once, and it re-joins
/// under a new token and claims again.
pub async fn a_rider_whose_record_is_gone_rejoins(ctx: Ctx) {
    let s = &ctx.store;
    let ttl = ctx.machine_ttl();
    let config = SessionConfig::new(&unique("host"), ttl).unwrap();
    let session = Session::open(s.clone(), config).await.unwrap();
    let member = session.join(&unique("rider")).await.unwrap();
    let (old, gen) = (member.token(), member.generation());
    s.enqueue(b"job", EnqueueOptions::default()).await.unwrap();
    assert!(s.release(&member.lease()).await.unwrap());
    assert!(matches!(member.claim(1).await, Err(Error::Lost { .. })));
    assert!(gen.check().is_err(), "a rider the store refused may act");
    let until = Instant::now() + ttl.duration() * 2;
    while member.token() == old || member.check().is_err() {
        assert!(Instant::now() < until, "the rider never re-joined");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(member.claim(1).await.unwrap().len(), 1);
    assert!(session.check().is_ok(), "the session was never touched");
    member.leave(Duration::ZERO).await.unwrap();
    session.close(Duration::ZERO).await.unwrap();
}

/// A process that survives a short session loss (its session released behind its
/// back) re-opens its session and its members re-join, and the death history gains
/// one record for it: the old session lease's, counting the members that died with
/// it; none for a member of its own (on a store with native sessions).
pub async fn a_session_loss_leaves_one_death_record(ctx: Ctx) {
    if !ctx.caps().sessions {
        return;
    }
    const MEMBERS: usize = 6;
    let s = &ctx.store;
    let ttl = ctx.machine_ttl();
    let config = SessionConfig::new(&unique("host"), ttl).unwrap();
    let session = Session::open(s.clone(), config).await.unwrap();
    let names: Vec<String> = (0..MEMBERS).map(|_| unique("rider")).collect();
    let members: Vec<Member> = session
        .join_many(&names)
        .await
        .into_iter()
        .map(|m| m.unwrap())
        .collect();
    let old_tokens: Vec<_> = members.iter().map(Member::token).collect();
    let old = session.lease();
    assert!(s.release(&old).await.unwrap());
    let until = Instant::now() + ttl.duration() * 3;
    while members
        .iter()
        .zip(&old_tokens)
        .any(|(m, old)| m.token() == *old || m.check().is_err())
    {
        assert!(Instant::now() < until, "the members never re-joined");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    swept_session_record(s.as_ref(), old.token, &old_tokens, 0).await;
    for member in members {
        member.leave(Duration::ZERO).await.unwrap();
    }
    session.close(Duration::ZERO).await.unwrap();
}

/// The watchdog watches jobs: a member with nothing to do keeps its token for ten
/// progress timeouts; one wedged job among jobs that come and go is stopped (cause
/// `Stalled`) within its timeout and a second.
pub async fn the_watchdog_stops_a_wedged_job_not_an_idle_member(ctx: Ctx) {
    let s = &ctx.store;
    let ttl = ctx.machine_ttl();
    let timeout = Duration::from_millis(500);
    let bus = EventBus::new(64);
    let mut events = bus.subscribe();
    let config = MemberConfig::new(&unique("watched"), ttl)
        .unwrap()
        .progress_timeout(timeout)
        .events(bus);
    let member = Member::join(s.clone(), config).await.unwrap();
    tokio::time::sleep(timeout * 10).await;
    // Its watchdog never stopped it. (On a loaded machine a renewal may come too late
    // and the member re-join: a loss of another cause, not what this checks.)
    loop {
        match events.try_recv() {
            Ok(Event::Lost {
                reason: HolderLoss::Stalled,
                token,
                ..
            }) => panic!("an idle member was stopped as stalled (token {})", token.0),
            Ok(_) | Err(TryRecvError::Lagged(_)) => {}
            Err(_) => break,
        }
    }
    let until = Instant::now() + ttl.duration() * 3;
    while member.check().is_err() {
        assert!(Instant::now() < until, "the member never re-joined");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s.enqueue(b"wedged", EnqueueOptions::default())
        .await
        .unwrap();
    let wedged = member.claim(1).await.unwrap().pop().expect("claimed");
    let claimed_at = Instant::now();
    while !wedged.cancel.is_cancelled() {
        assert!(
            Instant::now() < claimed_at + timeout + Duration::from_secs(1),
            "a wedged job went unnoticed behind its member's other jobs"
        );
        s.enqueue(b"quick", EnqueueOptions::default())
            .await
            .unwrap();
        // The watchdog may fire between the look above and this claim: the claim
        // then answers `Lost`, and the loop's look ends it.
        match member.claim(1).await {
            Ok(jobs) => {
                for job in jobs {
                    let _ = member.complete(&job).await;
                }
            }
            Err(Error::Lost {
                reason: LostCause::Stalled,
                ..
            }) => continue,
            Err(e) => panic!("a claim beside the wedged job: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(claimed_at.elapsed() + Duration::from_millis(50) >= timeout);
    assert!(matches!(
        wedged.check(),
        Err(Error::Lost {
            reason: LostCause::Stalled,
            ..
        })
    ));
    member.leave(Duration::ZERO).await.unwrap();
}
