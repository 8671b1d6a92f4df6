//! The state machines on the memory model under tokio's paused time: fast and
//! deterministic, including store clocks that are skewed, fast or jumping.

use std::sync::Arc;
use std::time::Duration;

use liveness_core::{
    Checker, CheckerConfig, Claimed, Clock, Election, ElectionConfig, Event, EventBus, HolderLoss,
    ItemState, LostCause, ManualClock, Member, MemberConfig, MemoryServer, Store, TokioClock,
};
use tokio::time::{timeout, Instant};

mod common;
use common::{enqueue_job, join, live, memory, ns, ttl, when_fired, SuspendableHost};

/// A store clock with an arbitrary offset and rate relative to tokio's clock, plus a
/// manual jump: what a server with a badly set clock looks like.
#[derive(Debug)]
struct SkewedClock {
    base: TokioClock,
    offset: Duration,
    rate: f64,
    jump: ManualClock,
}

impl Clock for SkewedClock {
    fn now(&self) -> Duration {
        self.offset + self.base.now().mul_f64(self.rate) + self.jump.now()
    }
}

fn skewed(offset: Duration, rate: f64) -> (Arc<dyn Store>, ManualClock) {
    let jump = ManualClock::new();
    let clock = SkewedClock {
        base: TokioClock::new(),
        offset,
        rate,
        jump: jump.clone(),
    };
    (
        Arc::new(MemoryServer::with_clock(Arc::new(clock)).store(&ns())),
        jump,
    )
}

/// Whether `r` is the `InvalidInput` naming `what`.
fn rejects<T>(r: &liveness_core::Result<T>, what: &str) -> bool {
    matches!(r, Err(liveness_core::Error::InvalidInput { what: w, .. }) if *w == what)
}

/// Acquires `n` member leases `m0`, `m1`, … (ttl 500 ms) that nobody renews.
async fn abandoned_members(store: &Arc<dyn Store>, n: usize) {
    for i in 0..n {
        store
            .acquire(
                &liveness_core::Key::member(&format!("m{i}")).unwrap(),
                &liveness_core::HolderId::new("x").unwrap(),
                ttl(500),
            )
            .await
            .unwrap();
    }
}

/// Whether `r` is the `Lost(GaveUp)` a check answers once the local deadline passed.
fn gave_up<T>(r: &liveness_core::Result<T>) -> bool {
    matches!(
        r,
        Err(liveness_core::Error::Lost {
            reason: LostCause::GaveUp,
            ..
        })
    )
}

#[tokio::test(start_paused = true)]
async fn member_stays_live_for_many_ttls_under_a_skewed_store_clock() {
    // The store clock is 40 minutes ahead and runs 10 % fast: offsets never matter,
    // and a rate difference inside the safety margin (20 % of the ttl) does not either.
    let (store, _) = skewed(Duration::from_secs(2400), 1.10);
    let bus = EventBus::default();
    let mut events = bus.subscribe();
    let member = Member::join(
        store.clone(),
        MemberConfig::new("w", ttl(1000)).unwrap().events(bus),
    )
    .await
    .unwrap();
    let token = member.token();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(member.token(), token, "no re-join happened");
    assert!(!member.cancelled().is_cancelled());
    assert!(live(&store, member.key()).await);
    while let Ok(e) = events.try_recv() {
        assert!(
            matches!(e, Event::Joined { .. }),
            "unexpected event under skew: {e:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_clock_jump_makes_the_member_lose_and_rejoin() {
    let (store, jump) = skewed(Duration::ZERO, 1.0);
    let member = join(&store, "w", 900).await;
    let mut events = member.events().subscribe();
    let first = member.generation();
    // The store's clock steps forward past the lease's expiry (an NTP step).
    jump.advance(Duration::from_secs(5));
    timeout(Duration::from_secs(1), first.cancel.cancelled())
        .await
        .expect("the next renewal sees Lost(Expired) and cancels");
    let mut gens = member.generations();
    gens.wait_for(|g| g.lease.token != first.lease.token)
        .await
        .unwrap();
    assert!(member.token() > first.lease.token);
    assert!(matches!(
        events.recv().await.unwrap(),
        Event::Lost {
            reason: HolderLoss::Store(LostCause::Expired),
            ..
        }
    ));
    assert!(matches!(events.recv().await.unwrap(), Event::Joined { .. }));
}

#[tokio::test(start_paused = true)]
async fn checker_detects_a_dead_member_at_its_expiry_and_requeues_once() {
    let store = memory();
    let bus = EventBus::default();
    let mut events = bus.subscribe();
    let config = CheckerConfig::default()
        .check_every(Duration::from_secs(10))
        .events(bus.clone());
    let member = join(&store, "w", 1000).await;
    // Started once the member's lease exists: its first round reads that expiry.
    let checker = Checker::new(store.clone(), config).spawn();
    let id = enqueue_job(&store).await;
    let claimed = member.claim(1).await.unwrap();
    assert_eq!(claimed.len(), 1);
    // The member dies: its heartbeat stops, nothing is released.
    let died_at = Instant::now();
    let token = member.token();
    member.orphan();
    let event = loop {
        match events.recv().await.unwrap() {
            e @ Event::Died { .. } => break e,
            _ => continue,
        }
    };
    let latency = died_at.elapsed();
    assert!(
        matches!(event, Event::Died { token: t, requeued: 1, .. } if t == token),
        "{event:?}"
    );
    // Virtual time: the checker woke at the store-reported expiry (within the last
    // renew interval plus a millisecond), not at its 10 s polling cap.
    assert!(
        latency <= Duration::from_millis(1010),
        "detected after {latency:?}"
    );
    assert_eq!(
        store.item(id).await.unwrap().unwrap().state,
        ItemState::Pending
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    while let Ok(e) = events.try_recv() {
        assert!(
            !matches!(e, Event::Died { .. }),
            "declared dead twice: {e:?}"
        );
    }
    checker.stop().await;
}

#[tokio::test(start_paused = true)]
async fn elected_checkers_run_one_at_a_time() {
    let store = memory();
    let bus = EventBus::default();
    let mut events = bus.subscribe();
    let mut handles = Vec::new();
    for i in 0..3 {
        let config = CheckerConfig::default()
            .elected(
                ElectionConfig::new("checker", &format!("c{i}"), ttl(1000))
                    .unwrap()
                    .events(bus.clone()),
            )
            .events(bus.clone());
        handles.push(Checker::new(store.clone(), config).spawn());
    }
    abandoned_members(&store, 5).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (mut leaders, mut deaths) = (0, 0);
    while let Ok(e) = events.try_recv() {
        match e {
            Event::LeadershipAcquired { .. } => leaders += 1,
            Event::Died { .. } => deaths += 1,
            _ => {}
        }
    }
    assert_eq!(leaders, 1, "exactly one checker leads");
    assert_eq!(deaths, 5, "every death declared once");
    for h in handles {
        h.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn leadership_fails_over_after_the_leader_is_dropped() {
    let store = memory();
    let a = Election::new(
        store.clone(),
        ElectionConfig::new("dispatch", "a", ttl(1000)).unwrap(),
    );
    let b = Election::new(
        store.clone(),
        ElectionConfig::new("dispatch", "b", ttl(1000)).unwrap(),
    );
    let la = a.campaign().await.unwrap();
    let token_a = la.token();
    assert!(b.try_lead().await.unwrap().is_none());
    let start = Instant::now();
    drop(la);
    let lb = b.campaign().await.unwrap();
    assert!(lb.token() > token_a);
    assert!(
        start.elapsed() <= Duration::from_millis(1010),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(a.leader().await.unwrap().unwrap().token, lb.token());
    lb.resign().await.unwrap();
    assert!(a.leader().await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn bad_member_configs_are_rejected() {
    let store = memory();
    let w = || MemberConfig::new("w", ttl(1000)).unwrap();
    for (cfg, what) in [
        (w().renew_every(Duration::from_secs(2)), "renew_every"),
        (w().safety_margin(Duration::from_secs(1)), "safety_margin"),
    ] {
        assert!(rejects(&Member::join(store.clone(), cfg).await, what));
    }
    assert!(MemberConfig::new("", ttl(1000)).is_err());
    assert!(store
        .inspect(&liveness_core::Key::member("w").unwrap())
        .await
        .unwrap()
        .is_none());
}

#[tokio::test(start_paused = true)]
async fn dropping_a_member_cancels_the_work_claimed_under_it() {
    let store = memory();
    enqueue_job(&store).await;
    let member = join(&store, "w", 1000).await;
    let claimed = member.claim(1).await.unwrap().pop().unwrap();
    assert!(!claimed.cancel.is_cancelled());
    drop(member);
    assert!(
        claimed.cancel.is_cancelled(),
        "work must stop when nobody renews its lease"
    );
}

/// Blocks the whole (current-thread) runtime, as a SIGSTOP, a GC pause or a VM freeze
/// does: no task runs meanwhile, the heartbeat's included.
fn freeze(d: Duration) {
    std::thread::sleep(d);
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

#[test]
fn a_leader_woken_from_a_freeze_knows_it_lost_before_its_heartbeat_runs() {
    current_thread().block_on(async {
        let store = memory();
        let election = Election::new(
            store.clone(),
            ElectionConfig::new("frozen", "a", ttl(300)).unwrap(),
        );
        let leader = election.campaign().await.unwrap();
        assert!(!leader.is_lost());
        freeze(Duration::from_millis(300 + 500));
        // First thing after waking, before any other task of this runtime ran.
        assert!(
            leader.is_lost(),
            "a leader frozen past its ttl must not believe it still leads"
        );
        assert!(
            leader.cancelled().is_cancelled(),
            "the check fires the cancellation at once"
        );
        assert!(gave_up(&leader.check()));
    });
}

#[test]
fn a_worker_woken_from_a_freeze_is_refused_before_its_side_effect() {
    current_thread().block_on(async {
        let store = memory();
        enqueue_job(&store).await;
        let member = join(&store, "w", 300).await;
        let claimed = member.claim(1).await.unwrap().pop().unwrap();
        assert_eq!(claimed.check().unwrap(), claimed.lease.token);
        assert!(member.generation().check().is_ok());
        freeze(Duration::from_millis(300 + 500));
        assert!(gave_up(&claimed.check()));
        assert!(claimed.cancel.is_cancelled());
        assert!(member.generation().is_lost() || member.token() > claimed.lease.token);
        assert!(
            member.claim(1).await.unwrap().is_empty() || member.token() > claimed.lease.token,
            "no claim under the lost generation"
        );
    });
}

/// Polls `member.claim(1)` every 5 ms until it gets an item; returns when.
async fn claim_when_free(member: &Member) -> Instant {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if !member.claim(1).await.unwrap().is_empty() {
            return Instant::now();
        }
        assert!(Instant::now() < until, "the item never came free");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Members `a` and `b` (ttl 1 s) on a fresh store with one item, which `a` has
/// claimed; also `a`'s safety margin (a fifth of its ttl).
async fn a_holds_the_job_b_waits() -> (Member, Member, Duration, Claimed) {
    let store = memory();
    enqueue_job(&store).await;
    let a = join(&store, "a", 1000).await;
    let margin = a.generation().lease.ttl.duration() / 5;
    let b = join(&store, "b", 1000).await;
    let claimed = a.claim(1).await.unwrap().pop().unwrap();
    (a, b, margin, claimed)
}

#[tokio::test(start_paused = true)]
async fn leave_tells_the_worker_to_stop_and_gives_it_the_margin_before_handing_back() {
    let (a, b, margin, claimed) = a_holds_the_job_b_waits().await;
    // A's worker runs a job longer than the grace and never lets go by itself.
    let told = when_fired(claimed.cancel.clone());
    let leaving = tokio::spawn(a.leave(Duration::from_millis(100)));
    let taken = claim_when_free(&b).await;
    assert!(
        told.is_finished(),
        "another member claimed the item while its worker was not yet told to stop"
    );
    let told = told.await.unwrap();
    assert!(
        taken >= told + margin,
        "the item was handed away {:?} after its worker was told to stop, before the margin of {margin:?}",
        taken - told
    );
    leaving.await.unwrap().unwrap();
    drop(claimed);
}

#[tokio::test(start_paused = true)]
async fn leave_hands_back_at_once_when_the_told_worker_lets_go() {
    let (a, b, margin, claimed) = a_holds_the_job_b_waits().await;
    let cancel = claimed.cancel.clone();
    // The worker stops when told, and drops its claim without completing it.
    let worker = tokio::spawn(async move {
        cancel.cancelled().await;
        let at = Instant::now();
        drop(claimed);
        at
    });
    let leaving = tokio::spawn(a.leave(Duration::from_millis(100)));
    let taken = claim_when_free(&b).await;
    let told = worker.await.unwrap();
    assert!(taken >= told);
    assert!(
        taken < told + margin,
        "a worker that let go does not hold its item for the whole margin"
    );
    leaving.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_host_suspend_past_the_ttl_cancels_the_member_at_once() {
    let store = memory();
    enqueue_job(&store).await;
    let (clock, suspend) = SuspendableHost::shared();
    let config = MemberConfig::new("w", ttl(1000)).unwrap().clock(clock);
    let member = Member::join(store.clone(), config).await.unwrap();
    let claimed = member.claim(1).await.unwrap().pop().unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The host sleeps for ten minutes: the boot clock jumps, tokio's clock does not.
    suspend.advance(Duration::from_secs(600));
    assert!(
        gave_up(&claimed.check()),
        "a check right after the resume must see the deadline passed"
    );
    assert!(claimed.cancel.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn a_host_suspend_past_the_ttl_fires_the_cancellation_without_any_check() {
    let store = memory();
    let (clock, suspend) = SuspendableHost::shared();
    let config = ElectionConfig::new("sched", "a", ttl(1000))
        .unwrap()
        .clock(clock);
    let tick = config.heartbeat.tick();
    let leader = Election::new(store.clone(), config)
        .campaign()
        .await
        .unwrap();
    let cancel = leader.cancelled();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let resumed = Instant::now();
    suspend.advance(Duration::from_secs(600));
    // Nobody asks: the heartbeat's own next wake (within one tick) fires it.
    timeout(Duration::from_secs(60), cancel.cancelled())
        .await
        .expect("the heartbeat never noticed the suspend");
    assert!(
        Instant::now() <= resumed + tick,
        "cancelled {:?} after the resume, later than one tick ({tick:?})",
        Instant::now() - resumed
    );
    assert!(leader.is_lost());
}

/// A host clock whose resume signal the test sends by hand (as the process's resume
/// watcher does after a real suspend), counting its boot-clock reads.
#[derive(Debug)]
struct SignalledHost {
    host: SuspendableHost,
    signal: tokio::sync::watch::Sender<u64>,
    reads: std::sync::atomic::AtomicUsize,
}

impl Clock for SignalledHost {
    fn now(&self) -> Duration {
        self.host.now()
    }
    fn boot(&self) -> Duration {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.host.boot()
    }
    fn resumes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.signal.subscribe())
    }
}

/// Client CPU at scale: with a clock that signals resumes, a heartbeat does not wake
/// every tick to read the clock between renewals (100,000 members paid about seven
/// wake-ups per renewal for it), and a suspend still fires the cancellation as soon
/// as the signal comes, without any check.
#[tokio::test(start_paused = true)]
async fn with_a_resume_signal_the_heartbeat_sleeps_between_renewals_and_still_sees_a_suspend() {
    let store = memory();
    let (host, suspended) = SuspendableHost::new();
    let clock = Arc::new(SignalledHost {
        host,
        signal: tokio::sync::watch::channel(0).0,
        reads: Default::default(),
    });
    let ttl = ttl(10_000);
    let config = MemberConfig::new("w", ttl).unwrap().clock(clock.clone());
    let renew_every = config.heartbeat.renew_every;
    let tick = config.heartbeat.tick();
    let member = Member::join(store.clone(), config).await.unwrap();
    let token = member.token();
    tokio::time::sleep(renew_every).await;
    let before = clock.reads.load(std::sync::atomic::Ordering::SeqCst);
    let intervals = 20;
    tokio::time::sleep(renew_every * intervals).await;
    let reads = clock.reads.load(std::sync::atomic::Ordering::SeqCst) - before;
    let ticks = (renew_every.as_nanos() / tick.as_nanos()) as usize;
    assert!(
        reads <= 5 * intervals as usize,
        "{reads} boot-clock reads in {intervals} renew intervals (a tick every {tick:?} would be {} at least)",
        ticks * intervals as usize
    );
    assert_eq!(member.token(), token, "renewed all along");
    let generation = member.generation();
    suspended.advance(Duration::from_secs(600));
    let resumed = Instant::now();
    clock.signal.send_modify(|n| *n += 1);
    timeout(Duration::from_secs(60), generation.cancel.cancelled())
        .await
        .expect("the heartbeat never noticed the suspend");
    assert!(
        Instant::now() < resumed + Duration::from_millis(1),
        "cancelled {:?} after the signal",
        Instant::now() - resumed
    );
}

#[tokio::test(start_paused = true)]
async fn a_round_clamped_by_the_store_s_max_batch_asks_for_more() {
    let caps = liveness_core::Capabilities::default().max_batch(2);
    let store: Arc<dyn Store> = Arc::new(MemoryServer::new().with_capabilities(caps).store(&ns()));
    abandoned_members(&store, 5).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let checker = Checker::new(store.clone(), CheckerConfig::default());
    let report = checker.round().await.unwrap();
    assert_eq!(report.deaths.len(), 2, "the store clamps the batch to 2");
    assert!(
        report.more,
        "a round that got a full (clamped) batch asks for another at once"
    );
}

#[tokio::test(start_paused = true)]
async fn a_checker_with_check_every_zero_is_rejected() {
    let store = memory();
    let config = CheckerConfig::default().check_every(Duration::ZERO);
    assert!(rejects(&config.validate(), "check_every"));
    let checker = Checker::new(store.clone(), config);
    assert!(rejects(&checker.round().await, "check_every"));
    // `run` ends at once instead of busy-looping.
    timeout(
        Duration::from_secs(1),
        checker.run(liveness_core::CancellationToken::new()),
    )
    .await
    .expect("run refuses the configuration");
}

/// `Checker::status` follows the rounds `run` makes: none before the first, then the
/// last good round's end, and nothing failing.
#[tokio::test(start_paused = true)]
async fn checker_status_follows_its_rounds() {
    let store = memory();
    let checker = Checker::new(store.clone(), CheckerConfig::default());
    let mut status = checker.status();
    assert_eq!(*status.borrow(), liveness_core::CheckerStatus::default());
    let handle = checker.spawn();
    timeout(
        Duration::from_secs(5),
        status.wait_for(|s| s.last_ok.is_some()),
    )
    .await
    .expect("a round completes")
    .unwrap();
    let seen = status.borrow().clone();
    assert!(seen.failing.is_none(), "{seen:?}");
    handle.stop().await;
}
