//! A seeded fault-injection simulation of members, checkers and an election over any
//! store, judged by an oracle ([`oracle`]).
//!
//! Each member and each election candidate is a "process": an OS thread with its own
//! current-thread tokio runtime, so that a freeze (the thread blocked, as SIGSTOP or a
//! long GC pause would) stops its heartbeat and its work together, and on waking its
//! tasks run in whatever order the runtime picks. Their store calls go through their
//! own [`Faulty`] handle, which runs every call on the driver's runtime (the store's
//! "server side"). Two checkers run at once on the driver's runtime.
//!
//! During the chaos phase (four ttls) the driver arms the faults (failed calls, lost
//! replies, late calls), freezes a member and the leader past their ttl, suspends a
//! member's host past its ttl (its boot clock counts the time, its monotonic clock
//! does not), cuts a member's renewals off for longer than its ttl, and has a member
//! leave in the middle of its jobs and join again (a rolling deploy), while items
//! arrive at about half the workers' pace. Then it disarms the faults and waits for
//! every item to be completed. The oracle then checks the run (see
//! [`Outcome::violations`]).
//!
//! In sessions mode ([`SimConfig::sessions`]) each member process is a session host
//! instead: it opens one session ([`liveness_core::Session`]) that several members
//! ride, and the chaos hits whole processes: one is killed (its session and every
//! member stop without a word, and it starts again), one is frozen past its ttl (its
//! session expires; on waking none of its members may act), one member leaves alone,
//! and replies are lost as in every run. The oracle then also checks that no member
//! began a step after its work was told to stop (for a riding member: after its
//! session's deadline passed) and that no member was declared dead twice by the
//! sweep of its session's death.
//!
//! Memory runs on real time too, with the same ttl as a real backend: a frozen
//! process needs a runtime of its own, and tokio's paused clock is per runtime, so
//! the processes and the store could not share one paused time.
//!
//! A seed fixes the schedule, every fault decision and every job length; the thread
//! interleaving on real time is not fixed, so a failing seed replays the same faults
//! at the same moments, which usually fails the same way. `LIVENESS_SIM_SEED=N`
//! replays seed N; `LIVENESS_SIM_SOAK=N` runs N fresh random seeds;
//! `LIVENESS_SIM_SESSIONS=N` runs every seed in sessions mode with N members a
//! process ([`run_session_seeds`] asks for it in code).

mod hosts;
pub mod oracle;
mod process;

use std::sync::Arc;
use std::time::Duration;

use liveness_core::{
    Backoff, Checker, CheckerConfig, CheckerHandle, EnqueueOptions, Event, EventBus, ItemCounts,
    ItemId, Key, Name, RequestId, Space, Store, Ttl,
};
use tokio::time::Instant;

use crate::faults::{FaultPlan, Faulty, FaultyStore, Injected, Op};
use crate::Factory;
use hosts::spawn_host;
use oracle::{Log, Record};
use process::{spawn_candidate, spawn_member, Command, Process, Shared};

/// The role the candidates campaign for.
const LEADER_ROLE: &str = "sim-leader";

/// The seeds every store runs in the suite.
pub const SEEDS: &[u64] = &[1, 2];

/// What one simulation run does.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Fixes the schedule, the fault decisions and the job lengths.
    pub seed: u64,
    /// The ttl of members and leaders. Every duration of the run scales with it.
    pub ttl: Ttl,
    /// Member processes.
    pub members: usize,
    /// Concurrent workers per member.
    pub workers: usize,
    /// Election candidate processes.
    pub candidates: usize,
    /// Concurrent checkers.
    pub checkers: usize,
    /// Items to complete.
    pub items: usize,
    /// The faults of the chaos phase.
    pub faults: FaultPlan,
    /// Breaks the workers and leaders ON PURPOSE, to prove that the oracle can fail:
    /// they skip their "may I still act?" check and act until their job is done.
    pub careless: bool,
    /// Sessions mode: `Some(n)` makes each member process a session host whose `n`
    /// members ride one session, faults hitting whole processes (see the module
    /// docs); `None` (the default): each member process is a member of its own.
    pub sessions: Option<usize>,
}

impl SimConfig {
    /// The default run for `seed` with `ttl`: 3 members of 2 workers, 2 candidates,
    /// 2 checkers, 40 items, the default fault plan with its timeout at ttl / 5.
    pub fn new(seed: u64, ttl: Ttl) -> Self {
        let faults = FaultPlan {
            timeout: ttl.duration() / 5,
            late_by: ttl.duration() / 5,
            ..FaultPlan::default()
        };
        SimConfig {
            seed,
            ttl,
            members: 3,
            workers: 2,
            candidates: 2,
            checkers: 2,
            items: 40,
            faults,
            careless: false,
            sessions: None,
        }
    }

    /// This run in sessions mode, with `riders` members riding each process's
    /// session ([`SimConfig::sessions`]).
    pub fn with_sessions(self, riders: usize) -> Self {
        SimConfig {
            sessions: Some(riders.max(1)),
            ..self
        }
    }

    /// The stop margin of members and leaders (the default, ttl / 5).
    pub fn margin(&self) -> Duration {
        self.ttl.duration() / 5
    }

    /// How long the chaos phase lasts: four ttls.
    pub fn chaos(&self) -> Duration {
        self.ttl.duration() * 4
    }

    /// One step of work: a quarter of the margin, so a worker told to stop finishes
    /// its step well inside the margin.
    fn step(&self) -> Duration {
        self.margin() / 4
    }
}

/// What a run found.
#[derive(Debug)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// Every oracle violation, empty when the run is clean:
    /// - no two tokens worked one item at once, unless the first was told to stop at
    ///   least the stop margin before the second began;
    /// - at most one leader acted at once (same rule);
    /// - the store accepted no completion from a token that did not own the item;
    /// - each death was declared once (one winning `reap` or one member declared dead
    ///   by a session's sweep, one `Died` per token);
    /// - in sessions mode, no worker began a step after its work was told to stop (a
    ///   riding member's work is told when its session's deadline passes), and once
    ///   the processes stopped the dead set emptied (every death swept to its end);
    /// - every item was completed, and nothing stayed stranded (owned, pending or
    ///   dead-lettered) past the completion deadline while members were live.
    pub violations: Vec<String>,
    /// The faults injected.
    pub injected: Injected,
    /// The chaos the driver caused, in order.
    pub schedule: Vec<String>,
    /// The end of the log, for the failure report.
    pub tail: String,
}

impl Outcome {
    /// Asserts that one violation mentions every one of `words`: that the oracles
    /// caught `what`, the bug a test seeded.
    ///
    /// # Panics
    ///
    /// When no violation does, naming `what` and listing the violations.
    pub fn assert_caught(&self, what: &str, words: &[&str]) {
        assert!(
            self.violations
                .iter()
                .any(|v| words.iter().all(|w| v.contains(w))),
            "{what} went unseen; violations: {:?}",
            self.violations
        );
    }
}

/// The members each session host runs in [`run_session_seeds`].
pub const RIDERS: usize = 2;

/// Runs the suite's seeds (or the ones the environment asks for) in sessions mode
/// ([`SimConfig::with_sessions`], [`RIDERS`] members a process) against stores from
/// `factory`; panics as [`run_seeds`] does. On a store without native sessions the
/// members ride through the default (a lease each, renewed with the session).
pub fn run_session_seeds(factory: Factory) {
    run_sessions(factory, seeds_from_env());
}

/// As [`run_session_seeds`], with the first of the seeds only (what every backend's
/// suite runs, beside [`run_seeds`]: a process hosting members is the common case).
pub fn run_session_seed(factory: Factory) {
    run_sessions(factory, seeds_from_env().into_iter().take(1).collect());
}

fn run_sessions(factory: Factory, seeds: Vec<u64>) {
    for seed in seeds {
        if !run_config(&factory, seed, |c| c.with_sessions(RIDERS)) {
            return;
        }
    }
}

/// Runs the suite's seeds (or the ones the environment asks for) against stores from
/// `factory`, each on a fresh namespace; panics with the seed and the oracle's findings
/// on the first failing run. Used by [`suite!`](crate::suite).
pub fn run_seeds(factory: Factory) {
    for seed in seeds_from_env() {
        if !run_one(&factory, seed) {
            return;
        }
    }
}

/// The seeds to run: `LIVENESS_SIM_SEED` (one seed), else `LIVENESS_SIM_SOAK` fresh
/// random seeds, else [`SEEDS`].
pub fn seeds_from_env() -> Vec<u64> {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    if let Some(seed) = var("LIVENESS_SIM_SEED") {
        return vec![seed];
    }
    if let Some(n) = var("LIVENESS_SIM_SOAK") {
        return (0..n).map(|_| fastrand::u64(..)).collect();
    }
    SEEDS.to_vec()
}

/// The run for `seed` with `ttl`. Faults hit every operation, `claim` and `enqueue`
/// included; `LIVENESS_SIM_FAULTS=spare-request-ids` spares those two
/// ([`FaultPlan::sparing_request_ids`]), to tell a fault in their request-id handling
/// from any other when a seed fails.
pub fn config_from_env(seed: u64, ttl: Ttl) -> SimConfig {
    let mut config = SimConfig::new(seed, ttl);
    if std::env::var("LIVENESS_SIM_FAULTS").is_ok_and(|v| v == "spare-request-ids") {
        config.faults = config.faults.sparing_request_ids();
    }
    let riders = std::env::var("LIVENESS_SIM_SESSIONS").ok();
    if let Some(riders) = riders.and_then(|v| v.parse::<usize>().ok()) {
        config = config.with_sessions(riders);
    }
    config
}

/// Runs one seed against a fresh store from `factory` on a new runtime; panics on a
/// violation, naming the seed and how to replay it. Returns false when there was no
/// store and skipping was asked for ([`crate::skip`]).
pub fn run_one(factory: &Factory, seed: u64) -> bool {
    run_config(factory, seed, |c| c)
}

/// [`run_one`] with the configuration changed by `adjust`.
fn run_config(factory: &Factory, seed: u64, adjust: impl FnOnce(SimConfig) -> SimConfig) -> bool {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    let outcome = rt.block_on(async {
        let store = factory().await?;
        let ttl = crate::Ctx::new(store.clone(), factory.clone()).machine_ttl();
        Some(simulate(store, adjust(config_from_env(seed, ttl))).await)
    });
    let Some(outcome) = outcome else {
        crate::skip::no_store("fault_simulation", "the factory returned None");
        return false;
    };
    eprintln!(
        "simulation seed {seed}: {:?}; chaos: {}",
        outcome.injected,
        outcome.schedule.join(", ")
    );
    assert!(
        outcome.violations.is_empty(),
        "simulation seed {seed} failed (replay: LIVENESS_SIM_SEED={seed}):\n- {}\nchaos: {}\nlast records:\n{}",
        outcome.violations.join("\n- "),
        outcome.schedule.join(", "),
        outcome.tail
    );
    true
}

/// Runs one simulation over `store` (a fresh namespace) and judges it. Must be called
/// on a multi-threaded runtime with time enabled: the store's calls run on it.
pub async fn simulate(store: Arc<dyn Store>, config: SimConfig) -> Outcome {
    let log = Log::new();
    let bus = EventBus::new(1 << 16);
    let recorder = tokio::spawn(record_events(bus.subscribe(), log.clone()));
    let producer = tokio::spawn(produce(store.clone(), config.items, config.chaos() * 3 / 4));
    let shared = Shared {
        config: config.clone(),
        log: log.clone(),
        bus: bus.clone(),
    };
    let mut seeds = fastrand::Rng::with_seed(config.seed);
    let mut handles: Vec<Arc<FaultyStore>> = Vec::new();
    let mut handle = |seeds: &mut fastrand::Rng| {
        let h = Faulty::new(config.faults.clone(), seeds.u64(..))
            .observed(log.clone())
            .on_runtime(tokio::runtime::Handle::current())
            .wrap(store.clone());
        handles.push(h.clone());
        h
    };
    let checkers: Vec<CheckerHandle> = (0..config.checkers)
        .map(|_| start_checker(handle(&mut seeds), &config, &bus))
        .collect();
    let spawn = match config.sessions {
        Some(_) => spawn_host,
        None => spawn_member,
    };
    let members: Vec<Process> = (0..config.members)
        .map(|i| spawn(i, handle(&mut seeds), seeds.u64(..), shared.clone()))
        .collect();
    let candidates: Vec<Process> = (0..config.candidates)
        .map(|i| spawn_candidate(i, handle(&mut seeds), seeds.u64(..), shared.clone()))
        .collect();

    for h in &handles {
        h.arm(true);
    }
    let schedule = chaos(&store, &config, &mut seeds, &members, &candidates, &log).await;
    for h in &handles {
        h.arm(false);
    }

    let ids = producer
        .await
        .unwrap_or_else(|e| panic!("the producer failed: {e}"));
    let mut violations = all_completed(&store, &config, &ids).await;
    let limit = config.ttl.duration() * 4 + Duration::from_secs(10);
    for p in members.into_iter().chain(candidates) {
        violations.extend(p.stop(limit).await);
    }
    if config.sessions.is_some() {
        violations.extend(swept(&store, &config).await);
    }
    for c in checkers {
        c.stop().await;
    }
    recorder.abort();

    let entries = log.entries();
    violations.extend(oracle::check_exclusive(&entries, config.margin()));
    violations.extend(oracle::check_fenced_completions(&entries));
    violations.extend(oracle::check_deaths_once(&entries));
    violations.extend(oracle::check_all_completed(&entries, &ids));
    if config.sessions.is_some() {
        violations.extend(oracle::check_no_act_after_told(&entries));
    }
    let injected = handles
        .iter()
        .map(|h| h.injected())
        .fold(Injected::default(), |a, b| Injected {
            failed_before: a.failed_before + b.failed_before,
            lost_replies: a.lost_replies + b.lost_replies,
            delayed: a.delayed + b.delayed,
            claims: a.claims + b.claims,
        });
    Outcome {
        seed: config.seed,
        tail: report_tail(&entries, &violations),
        violations,
        injected,
        schedule,
    }
}

/// The history of the first violation's subject (an item, or the leadership), or
/// the end of the whole log.
fn report_tail(entries: &[oracle::Entry], violations: &[String]) -> String {
    let Some(first) = violations.first() else {
        return String::new();
    };
    if first.starts_with("leadership") {
        return oracle::tail(entries, 120, |r| oracle::about(r, None));
    }
    let id = first.split_once("item #").and_then(|(_, rest)| {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok().map(ItemId)
    });
    match id {
        Some(id) => oracle::tail(entries, 120, |r| oracle::about(r, Some(id))),
        None => oracle::tail(entries, 120, oracle::worth_showing),
    }
}

/// Enqueues `n` items spread evenly over `spread`, so that idle workers are polling
/// for work whenever an item is handed back. Each item has attempts to spare: faults
/// must never dead-letter one.
async fn produce(store: Arc<dyn Store>, n: usize, spread: Duration) -> Vec<ItemId> {
    let gap = spread / u32::try_from(n.max(1)).unwrap_or(u32::MAX);
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        // Keyed, so that a retry after a lost reply adds nothing twice.
        let options = EnqueueOptions::keyed(RequestId::random()).max_attempts(1000);
        let payload = (i as u32).to_be_bytes();
        let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(200));
        let mut tries = 0;
        let id = loop {
            match store.enqueue(&payload, options).await {
                Err(e) if e.is_retryable() && tries < 50 => {
                    tries += 1;
                    tokio::time::sleep(backoff.next()).await;
                }
                other => break other.unwrap_or_else(|e| panic!("enqueue: {e}")),
            }
        };
        ids.push(id);
        tokio::time::sleep(gap).await;
    }
    ids
}

/// Logs what the oracle needs from the event bus (`Died`), and the rest as notes.
async fn record_events(mut rx: tokio::sync::broadcast::Receiver<Event>, log: Arc<Log>) {
    loop {
        match rx.recv().await {
            Ok(Event::Died { token, .. }) => {
                log.push(Record::Died { token });
            }
            Ok(Event::RenewedLate { .. }) => {}
            Ok(e) => {
                log.push(Record::Note(format!("{e:?}")));
            }
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                log.push(Record::Note(format!("event recorder lagged by {n}")));
            }
            Err(_) => return,
        }
    }
}

fn start_checker(store: Arc<dyn Store>, config: &SimConfig, bus: &EventBus) -> CheckerHandle {
    let every = (config.ttl.duration() / 4).max(Duration::from_millis(50));
    Checker::new(
        store,
        CheckerConfig::default()
            .check_every(every)
            .events(bus.clone()),
    )
    .spawn()
}

/// Drives the chaos phase, faults armed throughout: a member frozen past its ttl, the
/// leader frozen past its ttl, another member leaving in the middle of its jobs (and
/// joining again), a member whose renewals cannot get through for longer than its
/// ttl, and a member's host suspended past its ttl; with sessions, a host killed,
/// one member leaving alone and one dropped without a leave. Returns what it did.
async fn chaos(
    store: &Arc<dyn Store>,
    config: &SimConfig,
    rng: &mut fastrand::Rng,
    members: &[Process],
    candidates: &[Process],
    log: &Log,
) -> Vec<String> {
    let ttl = config.ttl.duration();
    let frac = |rng: &mut fastrand::Rng, lo: f64, hi: f64| ttl.mul_f64(lo + rng.f64() * (hi - lo));
    let n = members.len();
    let frozen = rng.usize(..n);
    let leaving = (frozen + 1 + rng.usize(..n.max(2) - 1)) % n;
    let mut plan: Vec<(Duration, Target, Chaos)> = vec![
        (
            frac(rng, 0.5, 2.0),
            Target::Member(frozen),
            Chaos::Command(Command::Freeze(frac(rng, 1.3, 2.0))),
        ),
        (
            frac(rng, 1.0, 2.5),
            Target::Leader,
            Chaos::Command(Command::Freeze(frac(rng, 1.3, 2.0))),
        ),
        (
            frac(rng, 0.5, 2.5),
            Target::Member(leaving),
            Chaos::Command(match config.sessions {
                Some(_) => Command::Kill,
                None => Command::Leave(config.step()),
            }),
        ),
        (
            frac(rng, 0.3, 2.5),
            Target::Member(rng.usize(..n)),
            Chaos::RenewalsCut(frac(rng, 1.3, 2.0)),
        ),
        (
            frac(rng, 0.5, 2.5),
            Target::Member(rng.usize(..n)),
            Chaos::Command(Command::Suspend(frac(rng, 1.3, 2.0))),
        ),
    ];
    if config.sessions.is_some() {
        // One member of a host leaves alone, and joins again; one is dropped without
        // a leave, and joins again once it released its name.
        plan.push((
            frac(rng, 0.5, 2.5),
            Target::Member(rng.usize(..n)),
            Chaos::Command(Command::Leave(config.step())),
        ));
        plan.push((
            frac(rng, 0.5, 2.5),
            Target::Member(rng.usize(..n)),
            Chaos::Command(Command::Drop),
        ));
    }
    plan.sort_by_key(|(at, _, _)| *at);
    let start = Instant::now();
    let mut done = Vec::new();
    for (at, target, chaos) in plan {
        tokio::time::sleep_until(start + at).await;
        let process = match target {
            Target::Member(i) => &members[i],
            Target::Leader => leader(store, candidates).await,
        };
        let what = format!("{} {:?} at {:?}", process.name, chaos, at);
        log.push(Record::Note(what.clone()));
        match chaos {
            Chaos::Command(c) => process.send(c),
            Chaos::RenewalsCut(d) => process.store.refuse(Op::RenewMany, d),
        }
        done.push(what);
    }
    tokio::time::sleep_until(start + config.chaos()).await;
    done
}

/// One act of chaos.
#[derive(Debug)]
enum Chaos {
    /// A command to the process.
    Command(Command),
    /// The process's renewals fail before reaching the store for this long.
    RenewalsCut(Duration),
}

/// Whom a chaos command goes to.
#[derive(Clone, Copy, Debug)]
enum Target {
    /// The member process with this index.
    Member(usize),
    /// The candidate that leads now (the first one when nobody does).
    Leader,
}

/// The candidate process that holds the leadership now, by its holder id.
async fn leader<'a>(store: &Arc<dyn Store>, candidates: &'a [Process]) -> &'a Process {
    let key = Key::new(
        Space::leaders(),
        Name::new(LEADER_ROLE).unwrap_or_else(|e| panic!("{e}")),
    );
    let holder = match store.inspect(&key).await {
        Ok(Some(info)) => info.holder.to_string(),
        _ => String::new(),
    };
    candidates
        .iter()
        .find(|p| holder.starts_with(&format!("{}-", p.name)))
        .unwrap_or(&candidates[0])
}

/// Waits, checkers running and faults off, until the dead set is empty: every death
/// (a killed session's, each of its members', each released lease's) was swept to
/// its end, a dead session's sweep of its members included. Reports what stayed at the deadline.
async fn swept(store: &Arc<dyn Store>, config: &SimConfig) -> Vec<String> {
    let deadline = config.ttl.duration() * 4 + Duration::from_secs(2);
    let until = Instant::now() + deadline;
    loop {
        match store.dead_tokens(100).await {
            Ok(dead) if dead.is_empty() => return Vec::new(),
            Ok(dead) if Instant::now() >= until => {
                return dead
                    .iter()
                    .map(|d| {
                        format!(
                            "token {} of {} stayed in the dead set for {deadline:?} after the processes stopped: its death was never swept to its end",
                            d.token, d.key
                        )
                    })
                    .collect();
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Waits, faults off, until every item is completed; reports what stayed stranded at
/// the deadline.
async fn all_completed(store: &Arc<dyn Store>, config: &SimConfig, ids: &[ItemId]) -> Vec<String> {
    let deadline = config.ttl.duration() * 12 + Duration::from_secs(10);
    let until = Instant::now() + deadline;
    loop {
        if let Ok(c) = store.item_counts().await {
            if c == ItemCounts::default() {
                return Vec::new();
            }
        }
        if Instant::now() >= until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut found = Vec::new();
    for id in ids {
        if let Ok(Some(record)) = store.item(*id).await {
            found.push(format!(
                "item {id} stranded {:?} (attempt {}) for {deadline:?} after the faults stopped, members live",
                record.state, record.item.attempts
            ));
        }
    }
    found
}
