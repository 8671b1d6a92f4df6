//! The member's watchdog (`MemberConfig::progress_timeout`) on the memory model under
//! tokio's paused time: work that makes no progress is stopped, given the safety
//! margin, its items handed back and its lease released, while the process's other
//! members and work that does make progress go on untouched.

use std::sync::Arc;
use std::time::Duration;

use liveness_core::{
    Capabilities, Clock, Error, Event, EventBus, HolderLoss, ItemCounts, LostCause, Member,
    MemberConfig, MemoryServer, Session, SessionConfig, Store, TokioClock,
};
use tokio::time::Instant;

mod common;
use common::{enqueue_job, memory, ns, ttl};

const TTL_MS: u64 = 3000;
const PROGRESS_TIMEOUT: Duration = Duration::from_millis(2000);

/// The default safety margin of a 3 s ttl: the time stopped work has to stop.
fn margin() -> Duration {
    liveness_core::HeartbeatConfig::new(ttl(TTL_MS)).safety_margin
}

/// Joins `store` as `name` (ttl 3 s, margin 600 ms) with a 2 s progress timeout, on
/// tokio's clock so that paused time moves it.
async fn watched(store: &Arc<dyn Store>, name: &str, events: EventBus) -> Member {
    let config = MemberConfig::new(name, ttl(TTL_MS))
        .unwrap()
        .clock(Arc::new(TokioClock::new()))
        .events(events)
        .progress_timeout(PROGRESS_TIMEOUT);
    Member::join(store.clone(), config).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_stalled_member_is_released_alone_and_its_items_handed_back() {
    let store = memory();
    for _ in 0..3 {
        enqueue_job(&store).await;
    }
    let events = EventBus::new(64);
    let mut seen = events.subscribe();
    let stuck = watched(&store, "stuck", events.clone()).await;
    let busy = watched(&store, "busy", events).await;
    let (stuck_token, busy_token) = (stuck.token(), busy.token());
    let claimed = stuck.claim(2).await.unwrap();
    assert_eq!(claimed.len(), 2);
    let stalled_from = Instant::now();

    // `busy` makes progress all along; `stuck` makes none.
    let margin = margin();
    let deadline = stalled_from + PROGRESS_TIMEOUT + margin + Duration::from_secs(1);
    while Instant::now() < deadline {
        busy.progress();
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // The stuck work was told to stop, with the watchdog's own cause.
    assert!(claimed[0].cancel.is_cancelled());
    match claimed[0].check() {
        Err(Error::Lost {
            reason: LostCause::Stalled,
            ..
        }) => {}
        other => panic!("the stalled work's check answered {other:?}"),
    }
    // Its items are pending again, for anybody: handed back within the timeout, the
    // margin and a second, not when the lease would have expired.
    assert_eq!(store.item_counts().await.unwrap(), ItemCounts::new(3, 0, 0));
    // A completion the stuck work reports late is fenced.
    assert!(matches!(
        stuck.complete(&claimed[0]).await,
        Err(Error::Fenced { .. })
    ));
    // It re-joined under a new token; the other member was untouched.
    assert!(stuck.token() > stuck_token);
    assert_eq!(busy.token(), busy_token);
    assert!(busy.check().is_ok());
    let mut stalled = 0;
    while let Ok(e) = seen.try_recv() {
        if let Event::Lost { key, reason, .. } = e {
            assert_eq!(key, *stuck.key(), "only the stuck member lost its lease");
            assert_eq!(reason, HolderLoss::Stalled);
            stalled += 1;
        }
    }
    assert_eq!(stalled, 1);
}

#[tokio::test(start_paused = true)]
async fn the_margin_passes_before_anybody_else_can_take_the_items() {
    let store = memory();
    enqueue_job(&store).await;
    let stuck = watched(&store, "stuck", EventBus::default()).await;
    let claimed = stuck.claim(1).await.unwrap();
    let stopped = common::when_fired(claimed[0].cancel.clone());
    // Another worker polls for the item all along.
    let other = watched(&store, "other", EventBus::default()).await;
    let taken_at = loop {
        let got = other.claim(1).await.unwrap();
        if !got.is_empty() {
            break Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let stopped_at = stopped.await.unwrap();
    let margin = margin();
    assert!(
        taken_at >= stopped_at + margin,
        "the item was taken {:?} after its work was told to stop, before the margin {margin:?}",
        taken_at - stopped_at
    );
}

#[tokio::test(start_paused = true)]
async fn work_that_reports_progress_is_never_stalled() {
    let store = memory();
    enqueue_job(&store).await;
    let member = watched(&store, "slow", EventBus::default()).await;
    let token = member.token();
    let claimed = member.claim(1).await.unwrap();
    // One long job, ten times the timeout, reporting progress every second.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        member.progress();
    }
    assert!(claimed[0].check().is_ok());
    member.complete(&claimed[0]).await.unwrap();
    assert_eq!(member.token(), token);
}

#[tokio::test(start_paused = true)]
async fn a_progress_timeout_out_of_range_is_refused() {
    let store = memory();
    for bad in [Duration::ZERO, Duration::from_millis(1), Duration::MAX] {
        let config = MemberConfig::new("w", ttl(TTL_MS))
            .unwrap()
            .progress_timeout(bad);
        match Member::join(store.clone(), config).await {
            Err(Error::InvalidInput { what, .. }) => assert_eq!(what, "progress_timeout"),
            other => panic!("progress_timeout {bad:?} answered {other:?}"),
        }
    }
}

/// Members riding a session are watched by the session's one task, not a task each:
/// every stalled rider is still noticed within a second of its own timeout, however
/// the riders' timeouts fall between one another and however long the timeout.
#[tokio::test(start_paused = true)]
async fn riders_are_noticed_on_time_whatever_their_timeouts() {
    let caps = Capabilities::default().sessions(true);
    let store: Arc<dyn Store> = Arc::new(MemoryServer::new().with_capabilities(caps).store(&ns()));
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
    let config = SessionConfig::new("p", ttl(TTL_MS)).unwrap();
    let session = Session::open(store.clone(), config.clock(clock.clone()))
        .await
        .unwrap();
    let timeout = Duration::from_secs(40);
    let mut riders = Vec::new();
    for i in 0..8 {
        enqueue_job(&store).await;
        let config = MemberConfig::new(&format!("r{i}"), ttl(TTL_MS))
            .unwrap()
            .clock(clock.clone())
            .progress_timeout(timeout);
        let member = session.join_with(config).await.unwrap();
        let claimed = member.claim(1).await.unwrap();
        let fired = common::when_fired(claimed[0].cancel.clone());
        // Claiming was the member's last progress.
        riders.push((member, claimed, Instant::now(), fired));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for (member, claimed, stalled_from, fired) in riders {
        let noticed = fired.await.unwrap() - stalled_from;
        assert!(
            noticed >= timeout && noticed <= timeout + Duration::from_secs(1),
            "{} stalled {timeout:?} after its last progress and was noticed after {noticed:?}",
            member.key()
        );
        assert!(matches!(
            claimed[0].check(),
            Err(Error::Lost {
                reason: LostCause::Stalled,
                ..
            })
        ));
    }
}

/// The watchdog watches jobs, not the member: a member with nothing to work on is idle,
/// not stalled, however long nothing comes.
#[tokio::test(start_paused = true)]
async fn an_idle_member_is_never_stalled() {
    let store = memory();
    let member = watched(&store, "idle", EventBus::default()).await;
    let token = member.token();
    tokio::time::sleep(PROGRESS_TIMEOUT * 10).await;
    assert_eq!(
        member.token(),
        token,
        "an idle member was released as stalled"
    );
    assert!(member.check().is_ok());
}

/// One wedged job among busy ones is found: the member's other jobs come and go (a
/// claim and a completion every 250 ms), which says nothing of the wedged one. Its work
/// is told to stop within the timeout and a second of its claim.
#[tokio::test(start_paused = true)]
async fn a_wedged_job_among_busy_ones_is_stopped() {
    let store = memory();
    let member = watched(&store, "mixed", EventBus::default()).await;
    enqueue_job(&store).await;
    let wedged = member.claim(1).await.unwrap().pop().unwrap();
    let fired = common::when_fired(wedged.cancel.clone());
    let claimed_at = Instant::now();
    while Instant::now() < claimed_at + PROGRESS_TIMEOUT + Duration::from_secs(1) {
        if wedged.cancel.is_cancelled() {
            break;
        }
        enqueue_job(&store).await;
        for job in member.claim(1).await.unwrap() {
            member.complete(&job).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        wedged.cancel.is_cancelled(),
        "a wedged job went unnoticed behind its member's other jobs"
    );
    let noticed = fired.await.unwrap() - claimed_at;
    assert!(noticed >= PROGRESS_TIMEOUT, "noticed after {noticed:?}");
    assert!(matches!(
        wedged.check(),
        Err(Error::Lost {
            reason: LostCause::Stalled,
            ..
        })
    ));
}

/// A job reports its own progress ([`Claimed::progress`]): a long job that does is
/// never stalled, while its member has no other work.
#[tokio::test(start_paused = true)]
async fn a_job_reporting_its_own_progress_is_never_stalled() {
    let store = memory();
    enqueue_job(&store).await;
    let member = watched(&store, "long", EventBus::default()).await;
    let token = member.token();
    let job = member.claim(1).await.unwrap().pop().unwrap();
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        job.progress();
    }
    assert!(job.check().is_ok());
    member.complete(&job).await.unwrap();
    assert_eq!(member.token(), token);
}
