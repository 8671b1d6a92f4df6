//! The simulated processes: members (with their workers) and election candidates,
//! each an OS thread with its own current-thread runtime and its own clock, obeying
//! the driver's commands (freeze, suspend, leave, stop).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use liveness_core::{
    CancellationToken, Claimed, Clock, Election, ElectionConfig, EventBus, HostClock, Member,
    MemberConfig,
};
use tokio::sync::{mpsc, RwLock};

use super::oracle::{Log, Record};
use super::{SimConfig, LEADER_ROLE};
use crate::faults::FaultyStore;

/// A command to a simulated process.
#[derive(Debug)]
pub(super) enum Command {
    /// Block the process's thread for this long, in the middle of its work but
    /// between two of its steps: heartbeat, work, everything on its runtime stops, as
    /// under SIGSTOP or a long pause.
    Freeze(Duration),
    /// Suspend the host for this long: a freeze during which the process's monotonic
    /// clock ([`Clock::now`]) stands still while its boot clock ([`Clock::boot`])
    /// counts on, as on a host that hibernates.
    Suspend(Duration),
    /// Leave gracefully with this grace, in the middle of a job, then join again (a
    /// rolling deploy). Members only.
    Leave(Duration),
    /// Drop one member in the middle of its jobs, without a leave (an early `?`
    /// return, a panicking task: its workers end where they stand), then join its
    /// name again once the dropped member released it. Session hosts only.
    Drop,
    /// Die at once, as under SIGKILL, and start again: every task of the process
    /// ends where it stands (no leave, no release), then a new incarnation opens its
    /// session anew. Session hosts only.
    Kill,
    /// Leave and end.
    Stop,
}

/// What every process shares.
#[derive(Clone)]
pub(super) struct Shared {
    pub config: SimConfig,
    pub log: Arc<Log>,
    pub bus: EventBus,
}

/// A simulated process: its thread, its store handle and its control channel.
pub(super) struct Process {
    /// `member-N` or `candidate-N`; holder ids start with it.
    pub name: String,
    /// Its store handle (the driver cuts its paths through it).
    pub store: Arc<FaultyStore>,
    pub(super) control: mpsc::UnboundedSender<Command>,
    pub(super) thread: std::thread::JoinHandle<()>,
}

impl Process {
    /// Sends a command (ignored once the process ended).
    pub fn send(&self, command: Command) {
        let _ = self.control.send(command);
    }

    /// Stops the process and waits for its thread, up to `limit`.
    pub async fn stop(self, limit: Duration) -> Vec<String> {
        self.send(Command::Stop);
        let name = self.name;
        let joined = tokio::task::spawn_blocking(move || self.thread.join());
        match tokio::time::timeout(limit, joined).await {
            Ok(Ok(Ok(()))) => Vec::new(),
            Ok(_) => vec![format!("{name} panicked")],
            Err(_) => vec![format!("{name} did not stop within {limit:?}")],
        }
    }
}

/// What a process's body starts with: its name, its view of the store, its seed, the
/// run's shared state, what freezes it, and its command channel.
pub(super) struct Start {
    pub(super) name: String,
    pub(super) store: Arc<FaultyStore>,
    pub(super) seed: u64,
    pub(super) shared: Shared,
    pub(super) pauser: Arc<Pauser>,
    pub(super) rx: mpsc::UnboundedReceiver<Command>,
}

impl Start {
    /// How long a freeze waits for the process to be busy: one ttl.
    pub(super) fn wait(&self) -> Duration {
        self.shared.config.ttl.duration()
    }

    /// Obeys freeze and suspend commands until another one (or the end) comes.
    pub(super) async fn obey(&mut self) -> Option<Command> {
        let wait = self.wait();
        self.pauser.obey(&mut self.rx, wait).await
    }
}

/// Starts a process thread named `name` running `body` on its own current-thread
/// runtime.
fn spawn_process<F, Fut>(
    name: String,
    store: Arc<FaultyStore>,
    seed: u64,
    shared: Shared,
    body: F,
) -> Process
where
    F: FnOnce(Start) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    spawn_thread(name, store, seed, shared, move |start| {
        runtime().block_on(body(start));
    })
}

/// A fresh current-thread runtime: what one incarnation of a process runs on.
pub(super) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"))
}

/// Starts a process thread named `name` that runs `run` with what the process
/// starts with (its command channel's other end is the returned [`Process`]).
pub(super) fn spawn_thread<F>(
    name: String,
    store: Arc<FaultyStore>,
    seed: u64,
    shared: Shared,
    run: F,
) -> Process
where
    F: FnOnce(Start) + Send + 'static,
{
    let (control, rx) = mpsc::unbounded_channel();
    let start = Start {
        name: name.clone(),
        store: store.clone(),
        seed,
        shared,
        pauser: Arc::new(Pauser::default()),
        rx,
    };
    let thread = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || run(start))
        .unwrap_or_else(|e| panic!("spawn a process thread: {e}"));
    Process {
        name,
        store,
        control,
        thread,
    }
}

/// A process's local clock: the host's, except that the time of a simulated suspend
/// is hidden from its monotonic reading ([`Clock::now`]) and counted by its boot
/// clock ([`Clock::boot`]).
#[derive(Debug, Default)]
pub(super) struct SimClock {
    host: HostClock,
    hidden: AtomicU64,
    high: AtomicU64,
}

impl SimClock {
    /// Hides `d` from the monotonic reading from now on: the host was suspended.
    fn hide(&self, d: Duration) {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.hidden.fetch_add(nanos, Ordering::SeqCst);
    }
}

impl Clock for SimClock {
    fn now(&self) -> Duration {
        let hidden = Duration::from_nanos(self.hidden.load(Ordering::SeqCst));
        let now = self.host.now().saturating_sub(hidden);
        let nanos = u64::try_from(now.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(self.high.fetch_max(nanos, Ordering::SeqCst).max(nanos))
    }

    fn boot(&self) -> Duration {
        self.host.boot()
    }
}

/// What freezes a process: its acts hold the gate for reading; a freeze takes it for
/// writing, after waiting (up to a bound) until the process is busy.
#[derive(Debug, Default)]
pub(super) struct Pauser {
    gate: RwLock<()>,
    pub(super) busy: AtomicUsize,
    pub(super) clock: Arc<SimClock>,
}

impl Pauser {
    /// Blocks the thread for `d` once the process is in the middle of its work (or
    /// after `wait`), between two of its steps; a `suspend` hides `d` from the
    /// monotonic clock.
    async fn pause(&self, d: Duration, suspend: bool, wait: Duration) {
        let until = tokio::time::Instant::now() + wait;
        while self.busy.load(Ordering::SeqCst) == 0 && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _all = self.gate.write().await;
        std::thread::sleep(d);
        if suspend {
            self.clock.hide(d);
        }
    }

    /// Obeys freeze and suspend commands until another one (or the end) comes.
    async fn obey(
        &self,
        rx: &mut mpsc::UnboundedReceiver<Command>,
        wait: Duration,
    ) -> Option<Command> {
        loop {
            match rx.recv().await {
                Some(Command::Freeze(d)) => self.pause(d, false, wait).await,
                Some(Command::Suspend(d)) => self.pause(d, true, wait).await,
                other => return other,
            }
        }
    }
}

/// Counts a process busy while alive.
struct Busy<'a>(&'a AtomicUsize);

impl<'a> Busy<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Busy(count)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a member's workers share.
#[derive(Clone)]
pub(super) struct Work {
    pub(super) shared: Shared,
    pub(super) pauser: Arc<Pauser>,
    pub(super) stop: CancellationToken,
    pub(super) rng: Arc<Mutex<fastrand::Rng>>,
}

/// Starts member process `i`.
pub(super) fn spawn_member(
    i: usize,
    store: Arc<FaultyStore>,
    seed: u64,
    shared: Shared,
) -> Process {
    spawn_process(format!("member-{i}"), store, seed, shared, member_process)
}

/// A member process: joins, runs its workers, obeys commands; a `Leave` leaves and
/// joins again under the same name.
async fn member_process(mut start: Start) {
    let (shared, pauser) = (start.shared.clone(), start.pauser.clone());
    let rng = Arc::new(Mutex::new(fastrand::Rng::with_seed(start.seed)));
    loop {
        let member = join(&start.name, &start.store, &shared, pauser.clock.clone()).await;
        let work = Work {
            shared: shared.clone(),
            pauser: pauser.clone(),
            stop: CancellationToken::new(),
            rng: rng.clone(),
        };
        let workers: Vec<_> = (0..shared.config.workers)
            .map(|_| tokio::spawn(worker(member.clone(), work.clone())))
            .collect();
        let command = start.obey().await;
        let grace = match command {
            Some(Command::Leave(grace)) => {
                wait_busy(&pauser.busy, start.wait()).await;
                grace
            }
            _ => shared.config.step(),
        };
        let _ = member.leave(grace).await;
        work.stop.cancel();
        for w in workers {
            let _ = w.await;
        }
        if !matches!(command, Some(Command::Leave(_))) {
            return;
        }
    }
}

/// Waits until `busy` is non-zero, or `wait` passed.
pub(super) async fn wait_busy(busy: &AtomicUsize, wait: Duration) {
    let until = tokio::time::Instant::now() + wait;
    while busy.load(Ordering::SeqCst) == 0 && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Joins as `name`, retrying until it succeeds (faults may be armed).
async fn join(
    name: &str,
    store: &Arc<FaultyStore>,
    shared: &Shared,
    clock: Arc<SimClock>,
) -> Member {
    loop {
        let config = MemberConfig::new(name, shared.config.ttl)
            .unwrap_or_else(|e| panic!("member config: {e}"))
            .events(shared.bus.clone())
            .clock(clock.clone());
        match Member::join(store.clone(), config).await {
            Ok(m) => return m,
            Err(_) => tokio::time::sleep(shared.config.ttl.duration() / 4).await,
        }
    }
}

/// "May this work still act?", checked before every side effect with the check the
/// member gives the work ([`Claimed::check`]); always yes for careless workers.
fn may_act(c: &Claimed, careless: bool) -> bool {
    careless || c.check().is_ok()
}

/// Claims one item at a time and works it until told to stop.
pub(super) async fn worker(member: Member, work: Work) {
    let idle = work.shared.config.step() / 2;
    while !work.stop.is_cancelled() {
        match member.claim(1).await {
            Ok(claimed) if !claimed.is_empty() => {
                for c in claimed {
                    let _busy = Busy::new(&work.pauser.busy);
                    job(&member, c, &work).await;
                }
            }
            _ => tokio::time::sleep(idle).await,
        }
    }
}

/// Works one item: a few steps of side effects, each after a "may I act?" check, then
/// completes it (retrying transport faults while it may still act).
async fn job(member: &Member, c: Claimed, work: &Work) {
    let (id, token, log) = (c.item.id, c.lease.token, &work.shared.log);
    let careless = work.shared.config.careless;
    let done = CancellationToken::new();
    tokio::spawn(watch_told(
        c.cancel.clone(),
        done.clone(),
        log.clone(),
        Record::Told { id, token },
    ));
    let _done = done.drop_guard();
    let step = work.shared.config.step();
    let steps = lock(&work.rng).u32(3..9);
    for _ in 0..steps {
        let _acting = work.pauser.gate.read().await;
        if !may_act(&c, careless) {
            return;
        }
        log.push(Record::StepBegin { id, token });
        tokio::time::sleep(step).await;
        log.push(Record::StepEnd { id, token });
    }
    while may_act(&c, careless) {
        match member.complete(&c).await {
            Err(e) if e.is_retryable() => tokio::time::sleep(step).await,
            _ => return,
        }
    }
}

/// Records `told` when `cancel` fires, unless `done` fires first.
async fn watch_told(
    cancel: CancellationToken,
    done: CancellationToken,
    log: Arc<Log>,
    told: Record,
) {
    tokio::select! {
        _ = cancel.cancelled() => { log.push(told); }
        _ = done.cancelled() => {}
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts candidate process `i`.
pub(super) fn spawn_candidate(
    i: usize,
    store: Arc<FaultyStore>,
    seed: u64,
    shared: Shared,
) -> Process {
    spawn_process(
        format!("candidate-{i}"),
        store,
        seed,
        shared,
        candidate_process,
    )
}

/// A candidate process: campaigns, acts as leader while it may, sometimes resigns;
/// obeys commands.
async fn candidate_process(mut start: Start) {
    let (shared, pauser) = (start.shared.clone(), start.pauser.clone());
    let holder = format!("{}-{:016x}", start.name, start.seed);
    let config = ElectionConfig::new(LEADER_ROLE, &holder, shared.config.ttl)
        .unwrap_or_else(|e| panic!("election config: {e}"))
        .events(shared.bus.clone())
        .clock(pauser.clock.clone());
    let election = Election::new(start.store.clone(), config);
    let stop = CancellationToken::new();
    let leading = tokio::spawn(lead(election, shared, pauser, stop.clone(), start.seed));
    // Candidates ignore `Leave`: only a stop (or the end of the channel) ends them.
    while let Some(Command::Leave(_)) = start.obey().await {}
    stop.cancel();
    let _ = leading.await;
}

/// Campaigns and leads until `stop`: each act is a step after an `is_lost` check
/// (skipped by careless leaders); after each act, resigns with probability 1/20.
async fn lead(
    election: Election,
    shared: Shared,
    pauser: Arc<Pauser>,
    stop: CancellationToken,
    seed: u64,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let step = shared.config.step();
    let careless = shared.config.careless;
    let log = &shared.log;
    loop {
        let leadership = tokio::select! {
            _ = stop.cancelled() => return,
            l = election.campaign() => match l {
                Ok(l) => l,
                Err(_) => { tokio::time::sleep(step).await; continue; }
            },
        };
        let token = leadership.token();
        let done = CancellationToken::new();
        tokio::spawn(watch_told(
            leadership.cancelled(),
            done.clone(),
            log.clone(),
            Record::LeadTold { token },
        ));
        let busy = Busy::new(&pauser.busy);
        loop {
            let _acting = pauser.gate.read().await;
            if stop.is_cancelled() || (!careless && leadership.is_lost()) {
                break;
            }
            log.push(Record::LeadBegin { token });
            tokio::time::sleep(step).await;
            log.push(Record::LeadEnd { token });
            if rng.u32(0..20) == 0 {
                break;
            }
        }
        drop(busy);
        done.cancel();
        let _ = leadership.resign().await;
        if stop.is_cancelled() {
            return;
        }
    }
}
