//! Overload behaviour of the state machines, on the memory model under
//! tokio's paused time: jittered timers, and a slow store that makes the fleet slower,
//! never smaller. Every assertion counts calls or compares instants of paused time:
//! deterministic (the jitter comes from `fastrand`, seeded per test; a paused-time
//! test runs on one thread).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use liveness_core::layer::Intercepted;
use liveness_core::{
    async_trait, Batcher, Checker, CheckerConfig, EnqueueOptions, Error, Event, EventBus,
    FencingToken, HolderId, HolderLoss, Intercept, Key, Member, MemberConfig, MemoryServer,
    Namespace, Next, Op, Reply, Request, Result, Space, Store, Ttl,
};
use tokio::time::Instant;

fn ttl(ms: u64) -> Ttl {
    Ttl::from_millis(ms).unwrap()
}

/// What the wrapper saw.
#[derive(Debug, Default)]
struct Seen {
    /// Instant of every renew call, per key.
    renews: HashMap<Key, Vec<Instant>>,
    /// Instant of every acquire call, per key.
    acquires: HashMap<Key, Vec<Instant>>,
    /// Renewals in flight now, per key, and the most ever seen at once.
    in_flight: HashMap<Key, usize>,
    max_in_flight: usize,
}

/// A store wrapper that records calls and can be made slow: while `slow_until` is in
/// the future, every lease call takes `timeout` and then answers `Unavailable`, but
/// the store APPLIES it (the client gave up at its timeout, the server did the work
/// anyway: the worst case of an overloaded store).
#[derive(Debug)]
struct Slow {
    seen: Mutex<Seen>,
    slow_until: Mutex<Option<Instant>>,
    timeout: Duration,
    /// Leases the store handed out (tokens burned).
    granted: AtomicUsize,
    /// Instant of every `next_expiry` call: one per checker round.
    rounds: Mutex<Vec<Instant>>,
    /// Every `renew_many` call: when, and how many leases.
    batches: Mutex<Vec<(Instant, usize)>>,
    /// Every `acquire_many` call: how many entries.
    acquire_batches: Mutex<Vec<usize>>,
    /// Calls a checker makes (listings, reaps, requeues).
    checker_calls: AtomicUsize,
}

impl Slow {
    fn new(inner: Arc<dyn Store>, timeout: Duration) -> Arc<Intercepted<Slow>> {
        let hook = Arc::new(Slow {
            seen: Mutex::default(),
            slow_until: Mutex::new(None),
            timeout,
            granted: AtomicUsize::new(0),
            rounds: Mutex::default(),
            batches: Mutex::default(),
            acquire_batches: Mutex::default(),
            checker_calls: AtomicUsize::new(0),
        });
        Arc::new(Intercepted::new(inner, hook))
    }

    /// How many single `acquire` calls reached the store.
    fn single_acquires(&self) -> usize {
        self.seen
            .lock()
            .unwrap()
            .acquires
            .values()
            .map(Vec::len)
            .sum()
    }

    fn slow_for(&self, d: Duration) {
        *self.slow_until.lock().unwrap() = Some(Instant::now() + d);
    }
}

struct InFlight<'a>(&'a Slow, Key);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        *self
            .0
            .seen
            .lock()
            .unwrap()
            .in_flight
            .entry(self.1.clone())
            .or_default() -= 1;
    }
}

#[async_trait]
impl Intercept for Slow {
    /// Records the call; lease and checker calls are made slow while `slow_until` is
    /// in the future (see [`Slow`]).
    async fn call(&self, req: Request, next: Next) -> Result<Reply> {
        let op = req.op();
        let now = Instant::now();
        // A renewal is counted in flight until the call ends or the caller drops it.
        let mut _in_flight = None;
        // A call of one entry is a lease's own (the one-entry forms send one).
        let one = if req.n() == 1 { req.key() } else { None };
        match (op, one) {
            (Op::AcquireMany, Some(key)) => {
                let mut seen = self.seen.lock().unwrap();
                seen.acquires.entry(key.clone()).or_default().push(now);
            }
            (Op::RenewMany, Some(key)) => {
                let mut seen = self.seen.lock().unwrap();
                let seen = &mut *seen;
                seen.renews.entry(key.clone()).or_default().push(now);
                let n = seen.in_flight.entry(key.clone()).or_default();
                *n += 1;
                seen.max_in_flight = seen.max_in_flight.max(*n);
                _in_flight = Some(InFlight(self, key.clone()));
            }
            _ => {}
        }
        match op {
            Op::RenewMany => self.batches.lock().unwrap().push((now, req.n())),
            Op::AcquireMany => self.acquire_batches.lock().unwrap().push(req.n()),
            // One per round: the members' (a round asks the sessions' too).
            Op::NextExpiry if matches!(&req, Request::NextExpiry { space: s } if *s == Space::members()) => {
                self.rounds.lock().unwrap().push(now)
            }
            _ => {}
        }
        if op.is_checker_call() {
            self.checker_calls.fetch_add(1, Ordering::SeqCst);
        }
        let gated =
            op.is_checker_call() || matches!(op, Op::AcquireMany | Op::RenewMany | Op::Release);
        let slow = gated
            && self
                .slow_until
                .lock()
                .unwrap()
                .is_some_and(|t| Instant::now() < t);
        if slow {
            tokio::time::sleep(self.timeout).await;
        }
        let answer = next.run(req).await;
        if let (Op::AcquireMany, Ok(Reply::AcquireMany(answers))) = (op, &answer) {
            let granted = answers.iter().filter(|a| a.is_ok()).count();
            self.granted.fetch_add(granted, Ordering::SeqCst);
        }
        if slow {
            // The store applied it; the client had given up at its timeout.
            return Err(Error::unavailable("slow", "client timeout"));
        }
        answer
    }
}

fn memory() -> Arc<dyn Store> {
    Arc::new(MemoryServer::new().store(&Namespace::new("overload").unwrap()))
}

/// A [`Slow`] memory store (1 s timeout, never made slow here), also as a `dyn Store`.
fn slow_memory() -> (Arc<Intercepted<Slow>>, Arc<dyn Store>) {
    let store = Slow::new(memory(), Duration::from_secs(1));
    let dyn_store: Arc<dyn Store> = store.clone();
    (store, dyn_store)
}

async fn join_fleet(
    store: &Arc<Intercepted<Slow>>,
    n: usize,
    ttl: Ttl,
    bus: &EventBus,
) -> Vec<Member> {
    join_fleet_with(store, n, ttl, bus, None).await
}

/// Joins `n` members at one instant, through `batcher` when given, else each with
/// round trips of its own (the heartbeat's own timing, which these tests watch).
async fn join_fleet_with(
    store: &Arc<Intercepted<Slow>>,
    n: usize,
    ttl: Ttl,
    bus: &EventBus,
    batcher: Option<&Batcher>,
) -> Vec<Member> {
    let dyn_store: Arc<dyn Store> = store.clone();
    let joins = (0..n).map(|i| {
        let mut config = MemberConfig::new(&format!("m{i}"), ttl)
            .unwrap()
            .events(bus.clone());
        config = match batcher {
            Some(b) => config.batcher(b.clone()),
            None => config.unbatched(),
        };
        Member::join(dyn_store.clone(), config)
    });
    let mut members = Vec::new();
    for j in futures_join_all(joins).await {
        members.push(j.unwrap());
    }
    members
}

/// Joins every future at once (all start at the same instant of paused time).
async fn futures_join_all<F>(futs: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_fleet_joined_at_one_instant_renews_spread_over_the_interval() {
    fastrand::seed(13);
    let store = Slow::new(memory(), Duration::from_secs(1));
    let bus = EventBus::default();
    let n = 200;
    let ttl = ttl(9_000);
    let every = Duration::from_secs(3);
    let start = Instant::now();
    let members = join_fleet(&store, n, ttl, &bus).await;
    assert_eq!(Instant::now(), start, "all joined at the same instant");
    tokio::time::sleep(every * 6).await;

    // The renewals of the 5th interval, in tenths of the interval: spread out, no
    // tenth carrying more than a quarter of the fleet (uniform would be n / 10).
    let window = (start + every * 4, start + every * 5);
    let mut tenths = [0usize; 10];
    let seen = store.seen.lock().unwrap();
    for times in seen.renews.values() {
        for t in times.iter().filter(|t| **t >= window.0 && **t < window.1) {
            let i = ((*t - window.0).as_secs_f64() / every.as_secs_f64() * 10.0) as usize;
            tenths[i.min(9)] += 1;
        }
    }
    let total: usize = tenths.iter().sum();
    assert!(total >= n, "every member renewed in the window: {tenths:?}");
    assert!(
        tenths.iter().all(|&c| c <= n / 4),
        "renewals bunched together: {tenths:?}"
    );
    // No renewal later than configured: every gap between two renewals of a member is
    // at most the renew interval (jitter only ever brings a renewal forward).
    for times in seen.renews.values() {
        for w in times.windows(2) {
            assert!(
                w[1] - w[0] <= every,
                "a renewal came late: {:?}",
                w[1] - w[0]
            );
        }
    }
    drop(seen);
    for m in &members {
        m.check().unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn checkers_started_together_drift_apart() {
    // Two checkers over an empty space, started at one instant: their rounds are
    // capped by `check_every` (no lease to wait for) and must not stay in lockstep.
    fastrand::seed(5);
    let shared = memory();
    let (a_store, b_store) = (
        Slow::new(shared.clone(), Duration::from_secs(1)),
        Slow::new(shared, Duration::from_secs(1)),
    );
    let every = Duration::from_secs(1);
    let config = CheckerConfig::default().check_every(every);
    let a = Checker::new(a_store.clone(), config.clone()).spawn();
    let b = Checker::new(b_store.clone(), config).spawn();
    tokio::time::sleep(every * 10).await;
    a.stop().await;
    b.stop().await;
    let a_rounds = a_store.rounds.lock().unwrap().clone();
    let b_rounds = b_store.rounds.lock().unwrap().clone();
    assert!(a_rounds.len() >= 10 && b_rounds.len() >= 10);
    let together = a_rounds.iter().filter(|t| b_rounds.contains(t)).count();
    assert!(
        together <= 2,
        "{together} of {} rounds at the same instant",
        a_rounds.len()
    );
    // Never slower than configured: no gap between rounds beyond `check_every`.
    for w in a_rounds.windows(2) {
        assert!(w[1] - w[0] <= every);
    }
}

/// The overload scenario: a store whose every call takes longer than the
/// client timeout (and is still applied) for longer than the safety margin. Members
/// lose their leases (they could not reach the store within their margin), but the
/// recovery must not amplify: no tight re-join loop, no token burned per attempt, and
/// the whole fleet live again soon after the store recovers.
#[tokio::test(start_paused = true)]
async fn a_store_slower_than_the_client_timeout_makes_the_fleet_slower_not_smaller() {
    fastrand::seed(11);
    let ttl = ttl(10_000);
    let config = liveness_core::HeartbeatConfig::new(ttl);
    let timeout = config.client_timeout();
    let store = Slow::new(memory(), timeout);
    let bus = EventBus::new(100_000);
    let mut events = bus.subscribe();
    let n = 50;
    let members = join_fleet(&store, n, ttl, &bus).await;
    let dyn_store: Arc<dyn Store> = store.clone();
    let checker = Checker::new(dyn_store, CheckerConfig::default().events(bus.clone())).spawn();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let granted_before = store.granted.load(Ordering::SeqCst);
    assert_eq!(granted_before, n, "quiet: no re-join before the stall");

    let stall = Duration::from_secs(20);
    let stall_start = Instant::now();
    store.slow_for(stall);
    tokio::time::sleep(stall).await;
    // Recovery: within 2 ttl after the store is fast again, every member is live.
    tokio::time::sleep(ttl.duration() * 2).await;
    for m in &members {
        m.check()
            .unwrap_or_else(|e| panic!("{} not live after recovery: {e}", m.key()));
        let live = live_token(&store, m).await;
        assert_eq!(live, Some(m.token()), "{} holds its lease", m.key());
    }

    // Tokens burned: at most one re-join per member (its old token was truly lost:
    // the store could not be reached within the margin). Ghosts of timed-out acquires
    // are adopted, never released for a new token.
    let granted = store.granted.load(Ordering::SeqCst) - granted_before;
    assert!(
        granted <= n,
        "{granted} leases granted to {n} members during the stall and recovery"
    );

    // No tight loop: per member, one acquire at a time, each taking the client
    // timeout while the store is slow, then a backoff pause of at least an eighth of
    // the renew interval; never two acquires without a pause between them.
    {
        let seen = store.seen.lock().unwrap();
        let per_attempt = timeout + config.renew_every / 8;
        let bound = ((stall + ttl.duration() * 2).as_secs_f64() / per_attempt.as_secs_f64()).ceil()
            as usize;
        for (key, times) in &seen.acquires {
            let during: Vec<_> = times
                .iter()
                .copied()
                .filter(|t| *t >= stall_start)
                .collect();
            let what = format!("{key}: acquires during the stall and recovery");
            assert_few_and_spaced(&during, bound, config.renew_every / 8, &what);
        }
        assert_eq!(seen.max_in_flight, 1, "one renewal in flight per lease");
    }
    checker.stop().await;

    // No false deaths declared, and at most one loss per member (the store truly was
    // out of reach for longer than its margin).
    let mut died = 0;
    let mut lost = 0;
    while let Ok(e) = events.try_recv() {
        match e {
            Event::Died { .. } => died += 1,
            Event::Lost { .. } => lost += 1,
            _ => {}
        }
    }
    assert!(lost <= n, "{lost} Lost events for {n} members");
    assert_eq!(died, 0, "false deaths");
}

/// The live token on `member`'s key in the store behind the wrapper.
async fn live_token(store: &Arc<Intercepted<Slow>>, member: &Member) -> Option<FencingToken> {
    store
        .inner()
        .inspect(member.key())
        .await
        .unwrap()
        .filter(|i| i.is_live())
        .map(|i| i.token)
}

#[tokio::test(start_paused = true)]
async fn members_sharing_a_batcher_renew_in_few_round_trips_each_with_its_own_answer() {
    fastrand::seed(17);
    // The members' own handle, and the batcher's: a renewal that went around the
    // batcher would reach the store through the members' handle.
    let memory = memory();
    let store = Slow::new(memory.clone(), Duration::from_secs(1));
    let via = Slow::new(memory, Duration::from_secs(1));
    let window = Duration::from_millis(50);
    let renewals = Batcher::new(via.clone(), window);
    let bus = EventBus::new(100_000);
    let mut events = bus.subscribe();
    let ttl = ttl(9_000);
    let n = 1000;
    let members = join_fleet_with(&store, n, ttl, &bus, Some(&renewals)).await;
    let run = Duration::from_secs(30);
    tokio::time::sleep(run / 2).await;
    // One lease is released behind its member's back: only that member loses (its
    // own answer in the batch), the others keep renewing in the same batches.
    let victim = members[7].lease();
    assert!(store.inner().release(&victim).await.unwrap());
    tokio::time::sleep(run / 2).await;

    assert!(
        store.batches.lock().unwrap().is_empty(),
        "no renewal went around the batcher"
    );
    let batches = via.batches.lock().unwrap().clone();
    let renewed: usize = batches.iter().map(|(_, n)| n).sum();
    // Every member renews at least every 3 s: 10 times in 30 s.
    assert!(
        renewed >= n * 10,
        "{renewed} renewals for {n} members in {run:?}"
    );
    // Batches leave at least one window apart: the round trips are bounded by time,
    // not by the number of members.
    let bound = (run.as_millis() / window.as_millis()) as usize + 1;
    let sent: Vec<_> = batches.iter().map(|(at, _)| *at).collect();
    assert_few_and_spaced(
        &sent,
        bound,
        window,
        &format!("renew_many calls in {run:?}"),
    );
    let mut lost = Vec::new();
    while let Ok(e) = events.try_recv() {
        if let Event::Lost { key, reason, .. } = e {
            lost.push((key, reason));
        }
    }
    assert_eq!(
        lost,
        vec![(
            victim.key.clone(),
            HolderLoss::Store(liveness_core::LostCause::Released)
        )]
    );
    for m in &members {
        m.check().unwrap();
        assert_eq!(live_token(&store, m).await, Some(m.token()));
    }
}

/// Joins are batched like renewals: a fleet joining together through a
/// batcher sends a few `acquire_many` calls, not one acquire per member, and a
/// member that re-joins after a loss acquires through the batcher too.
#[tokio::test(start_paused = true)]
async fn members_sharing_a_batcher_join_and_rejoin_in_few_round_trips() {
    fastrand::seed(23);
    // The members' own handle, and the batcher's: a join that went around the
    // batcher would reach the store through the members' handle.
    let memory = memory();
    let store = Slow::new(memory.clone(), Duration::from_secs(1));
    let via = Slow::new(memory, Duration::from_secs(1));
    let dyn_store: Arc<dyn Store> = via.clone();
    let batcher = Batcher::new(dyn_store.clone(), Duration::from_millis(20));
    let ttl = ttl(3_000);
    let n = 2_000;
    let members = join_fleet_with(&store, n, ttl, &EventBus::default(), Some(&batcher)).await;
    assert_eq!(
        store.single_acquires(),
        0,
        "no join went around the batcher"
    );
    let batches = via.acquire_batches.lock().unwrap().clone();
    assert_eq!(batches.iter().sum::<usize>(), n, "one entry per member");
    let max = dyn_store.capabilities().max_batch;
    assert!(
        batches.len() <= n.div_ceil(max) + 4,
        "{} acquire_many calls for {n} joins (max_batch {max}): {batches:?}",
        batches.len()
    );
    for m in &members {
        assert_eq!(live_token(&store, m).await, Some(m.token()));
    }
    // A lease released behind its member's back: the member re-joins, through the
    // batcher, under a new token.
    let victim = &members[11];
    let old = victim.token();
    assert!(store.inner().release(&victim.lease()).await.unwrap());
    tokio::time::sleep(ttl.duration() * 2).await;
    assert!(victim.token() > old, "re-joined under a new token");
    assert_eq!(live_token(&store, victim).await, Some(victim.token()));
    assert_eq!(
        store.single_acquires(),
        0,
        "the re-join went around the batcher"
    );
    assert_eq!(
        via.acquire_batches.lock().unwrap().iter().sum::<usize>(),
        n + 1
    );
}

/// A store whose first `acquires` acquires wait `queued` before they are applied (a
/// request that sat in an overloaded queue), then answer at once.
#[derive(Debug)]
struct Queued {
    queued: Duration,
    late: AtomicUsize,
}

#[async_trait]
impl Intercept for Queued {
    async fn call(&self, req: Request, next: Next) -> Result<Reply> {
        if req.op() == Op::AcquireMany
            && self
                .late
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            tokio::time::sleep(self.queued).await;
        }
        next.run(req).await
    }
}

/// No amplification: an acquire answered after the local deadline it would
/// start (it waited longer than ttl − margin in a queue) is adopted by a renewal, not
/// thrown away: no `Lost`, no second token, no dead-set entry for the checker. Before,
/// each such join was lost at once and re-joined with a new token, whose acquire
/// queued again: an overloaded join never got out of the loop.
#[tokio::test(start_paused = true)]
async fn an_acquire_answered_after_its_deadline_is_adopted_not_thrown_away() {
    let ttl = ttl(1_000);
    let store = Arc::new(Intercepted::new(
        memory(),
        Arc::new(Queued {
            queued: ttl.duration().mul_f64(0.9),
            late: AtomicUsize::new(1),
        }),
    ));
    let dyn_store: Arc<dyn Store> = store.clone();
    let bus = EventBus::new(1_000);
    let mut events = bus.subscribe();
    let config = MemberConfig::new("late", ttl).unwrap().events(bus.clone());
    let member = Member::join(dyn_store.clone(), config).await.unwrap();
    let token = member.token();
    member.check().expect("live after the join");
    tokio::time::sleep(ttl.duration() * 5).await;
    assert_eq!(member.token(), token, "kept its first token");
    member.check().expect("still live");
    while let Ok(e) = events.try_recv() {
        assert!(!matches!(e, Event::Lost { .. }), "lost: {e:?}");
    }
    assert!(store.inner().dead_tokens(100).await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_checker_round_declares_many_deaths_in_a_few_round_trips() {
    let (store, dyn_store) = slow_memory();
    let ttl = ttl(1_000);
    let n = 50;
    for i in 0..n {
        let key = Key::new(
            Space::members(),
            liveness_core::Name::new(format!("d{i}")).unwrap(),
        );
        let lease = dyn_store
            .acquire(&key, &HolderId::new("h").unwrap(), ttl)
            .await
            .unwrap();
        dyn_store
            .enqueue(b"x", EnqueueOptions::default())
            .await
            .unwrap();
        dyn_store.claim(&lease, 1).await.unwrap();
    }
    tokio::time::sleep(ttl.duration() * 2).await;
    let checker = Checker::new(dyn_store.clone(), CheckerConfig::default());
    let before = store.checker_calls.load(Ordering::SeqCst);
    let report = checker.round().await.unwrap();
    let calls = store.checker_calls.load(Ordering::SeqCst) - before;
    assert_eq!(report.deaths.len(), n);
    assert!(report.deaths.iter().all(|d| d.sweep.requeued.len() == 1));
    // expired and next_expiry of the members and of the sessions, reap_many,
    // sweep_many, dead_tokens: not two calls per death.
    assert_eq!(calls, 7, "{calls} store calls for {n} deaths");
    assert_eq!(dyn_store.item_counts().await.unwrap().pending, n as u64);
}

/// Deaths that come one after another (a mass death: leases taken a few ms apart stop
/// renewing together) are declared in rounds no closer than a fiftieth of
/// `check_every`, each round reaping every lease expired since the last, and none later
/// than that gap after its expiry: the checker does not run one round per expiry.
#[tokio::test(start_paused = true)]
async fn deaths_a_few_ms_apart_are_declared_in_rounds_spaced_by_the_gap() {
    let (store, dyn_store) = slow_memory();
    let ttl = ttl(1_000);
    let n = 100;
    let spacing = Duration::from_millis(2);
    let mut expires = HashMap::new();
    for i in 0..n {
        let key = Key::new(
            Space::members(),
            liveness_core::Name::new(format!("d{i}")).unwrap(),
        );
        dyn_store
            .acquire(&key, &HolderId::new("h").unwrap(), ttl)
            .await
            .unwrap();
        expires.insert(key, Instant::now() + ttl.duration());
        tokio::time::sleep(spacing).await;
    }
    let bus = EventBus::new(1_000);
    let mut events = bus.subscribe();
    let declared = Arc::new(Mutex::new(HashMap::new()));
    let record = declared.clone();
    tokio::spawn(async move {
        while let Ok(e) = events.recv().await {
            if let Event::Died { key, .. } = &e {
                let mut d = record.lock().unwrap();
                assert!(
                    d.insert(key.clone(), Instant::now()).is_none(),
                    "{key} twice"
                );
            }
        }
    });
    let config = CheckerConfig::default().events(bus.clone());
    let gap = config.check_every / 50;
    let checker = Checker::new(dyn_store, config).spawn();
    tokio::time::sleep(ttl.duration() * 2).await;
    checker.stop().await;
    let declared = declared.lock().unwrap().clone();
    assert_eq!(declared.len(), n, "every lease declared dead once");
    // None later than the gap (and the 1 ms the checker waits past an expiry).
    for (key, at) in &declared {
        let late = *at - expires[key];
        assert!(
            late <= gap + Duration::from_millis(1),
            "{key} declared {late:?} late"
        );
    }
    // The rounds while the deaths came (about 200 ms): spaced by the gap, so about a
    // dozen rounds, not one per death.
    let first = expires.values().min().copied().unwrap();
    let last = expires.values().max().copied().unwrap();
    let rounds: Vec<Instant> = store
        .rounds
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|t| *t >= first && *t <= last + gap)
        .collect();
    let bound = ((last - first).as_millis() / gap.as_millis()) as usize + 2;
    assert_few_and_spaced(&rounds, bound, gap, "rounds during the deaths");
}

/// Asserts that `times` (in order) are at most `bound`, each at least `gap` after the
/// one before: `what` they are, for the message.
fn assert_few_and_spaced(times: &[Instant], bound: usize, gap: Duration, what: &str) {
    assert!(
        times.len() <= bound,
        "{} {what} (bound {bound})",
        times.len()
    );
    for w in times.windows(2) {
        assert!(w[1] - w[0] >= gap, "{what}: {:?} apart", w[1] - w[0]);
    }
}
