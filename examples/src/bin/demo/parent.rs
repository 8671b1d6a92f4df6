//! The demo's parent process: sets the store up, enqueues the items (one of them
//! scheduled, one failing once), runs the checker, starts the workers (one session
//! each, one worker runner per member riding it), stages the SIGKILL, the stuck job
//! and the SIGSTOP, follows the store's death history,
//! draws the view; [`summary`](crate::summary) checks the invariants and what the run
//! showed at the end.

use std::collections::{HashMap, HashSet};
use std::io::IsTerminal;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use liveness::{
    Checker, CheckerConfig, EnqueueOptions, Event, EventBus, FencingToken, ItemCounts, Queue,
    Store, Ttl,
};
use nix::sys::signal::Signal;
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::deaths::{poll_deaths, Deaths};
use crate::proto::{Fact, Who, STALL};
use crate::stage::{signal, Flaky, Role, Scheduled, Stage, Stall, Worker};
use crate::view::{plural, secs, View};
use crate::worker::FLAKY;
use crate::{RunArgs, WorkerArgs};

/// Attempts per item: enough that a kill, a stall and a freeze never dead-letter one.
const MAX_ATTEMPTS: u32 = 5;

/// How much sooner than due the scheduled job's claim may be seen: the store's clock
/// and this process's may run at slightly different rates.
const SCHEDULE_SLACK: Duration = Duration::from_millis(100);

/// How many times in a row the freeze is tried when it lands inside one of the
/// victim's store transactions, before it waits for a later claim.
const FREEZE_TRIES: u32 = 3;

enum Msg {
    Fact(usize, Who, Fact),
    Stderr(usize, String),
    Exited(usize, std::io::Result<ExitStatus>),
}

type Sender = mpsc::UnboundedSender<Msg>;

/// Sends each line worker `i` writes to `pipe`: a fact, or text for the log.
fn read_lines(i: usize, pipe: Option<impl AsyncRead + Unpin + Send + 'static>, tx: &Sender) {
    let (Some(pipe), tx) = (pipe, tx.clone()) else {
        return;
    };
    tokio::spawn(async move {
        let mut lines = BufReader::new(pipe).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let msg = match Fact::parse(&line) {
                Some((who, fact)) => Msg::Fact(i, who, fact),
                None if line.trim().is_empty() => continue,
                None => Msg::Stderr(i, line),
            };
            _ = tx.send(msg);
        }
    });
}

/// The characters a `sqlite://` URL path cannot carry verbatim.
const NOT_IN_PATH: &AsciiSet = &CONTROLS.add(b'%').add(b'?').add(b'#').add(b' ');

/// What the parent knows of the run: the workers, the stages, its own tally of the
/// items from the workers' facts.
pub struct Run {
    pub view: View,
    store: Arc<dyn Store>,
    pub ttl: Ttl,
    pub progress_timeout: Duration,
    pub members_per_worker: usize,
    pub workers: Vec<Worker>,
    pub stage: Stage,
    pub stall: Option<Stall>,
    pub scheduled: Option<Scheduled>,
    pub flaky: Option<Flaky>,
    /// Accepted completions per item.
    pub done_by_id: HashMap<u64, u32>,
    /// Claims per item.
    pub claims_by_id: HashMap<u64, u32>,
    /// Who completed each item (`worker-N.mK`).
    pub done_by: HashMap<u64, String>,
    /// Items the store completed that no worker reported (its worker was killed in
    /// between), read at the end.
    pub unreported: HashSet<u64>,
    pub counts: ItemCounts,
    pub failures: Vec<String>,
    pub total: u64,
    kill_at: u64,
    stall_at: u64,
    freeze_at: u64,
    freeze_for: Duration,
    /// A freeze undone (it held the store's write lock) is tried again from then.
    freeze_not_before: Instant,
}

impl Run {
    pub fn done_total(&self) -> u64 {
        self.done_by_id.len() as u64
    }

    /// Handles one fact of worker `i`.
    async fn on_fact(&mut self, i: usize, who: Who, fact: Fact) {
        match who {
            Who::Session => self.on_session_fact(i, fact),
            Who::Member(n) => self.on_member_fact(i, n, fact).await,
        }
    }

    fn on_session_fact(&mut self, i: usize, fact: Fact) {
        let w = &mut self.workers[i];
        match fact {
            Fact::Joined { token } => {
                if let Some(old) = w.token() {
                    self.view.log(&format!("{}'s session re-opened with a NEW token {token} (its old token {old} stays dead); its members re-join", w.name));
                } else {
                    self.view.log(&format!("{} opened its session (token {token}): {} ride it, each with a worker runner", w.name, plural(w.members.len(), "member", "members")));
                }
                w.tokens.push(token);
            }
            Fact::Lost { token, reason } => {
                self.view.log(&format!("{}: its session (token {token}) lost, every member's work told to stop at once: {reason}", w.name));
                w.lost.push((token, reason));
                self.note_other_loss(i, None);
            }
            Fact::Left { token } => {
                self.view.log(&format!(
                    "{} left: all work done, its members and its session (token {token}) released",
                    w.name
                ));
            }
            Fact::Error { message } => self.view.log(&format!("{}: error: {message}", w.name)),
            other => self.view.log(&format!("{} says: {other:?}", w.name)),
        }
    }

    /// A lease of worker `i` other than the stuck member's (`member`: which) was
    /// lost while the stuck member hung: its fellows did not go on untouched.
    fn note_other_loss(&mut self, i: usize, member: Option<usize>) {
        if let Some(stall) = self.stall.as_mut() {
            let stuck = stall.hung.map(|(n, ..)| n);
            if stall.worker == i && stall.ongoing() && member != stuck {
                stall.others_lost = true;
            }
        }
    }

    async fn on_member_fact(&mut self, i: usize, n: usize, fact: Fact) {
        let w = &mut self.workers[i];
        let Some(name) = w.members.get(n).map(|m| m.name.clone()) else {
            return self
                .view
                .log(&format!("{} says: member {} {fact:?}", w.name, n + 1));
        };
        match fact {
            Fact::Joined { token } => {
                let m = &mut w.members[n];
                if let Some(old) = m.token() {
                    self.view.log(&format!("{name} re-joined with a NEW token {token} (its old token {old} stays dead)"));
                }
                m.tokens.push(token);
                if m.tokens.len() == 1 && w.members.iter().all(|m| m.token().is_some()) {
                    let joined: Vec<String> = (w.members.iter())
                        .map(|m| format!("{} (token {})", m.name, m.token().unwrap_or(0)))
                        .collect();
                    self.view.log(&format!(
                        "{}: {} joined, riding its session",
                        w.name,
                        joined.join(", ")
                    ));
                }
            }
            Fact::Claimed { id, token, attempt } => {
                *self.claims_by_id.entry(id).or_default() += 1;
                w.members[n].working_on = Some(id);
                let scheduled = self.scheduled.as_mut().filter(|s| s.id == id);
                let retried = (self.flaky.as_mut())
                    .filter(|f| f.id == id && f.again.is_none())
                    .and_then(|f| Some((f.failed.as_ref()?.1, f)));
                if let Some(s) = scheduled.filter(|s| s.claimed.is_none()) {
                    let after = s.enqueued.elapsed();
                    s.claimed = Some((name.clone(), after));
                    self.view.log(&format!("{name} claimed the SCHEDULED item #{id} {} after its enqueue (due after {})", secs(after), secs(s.due)));
                    if after + SCHEDULE_SLACK < s.due {
                        (self.failures).push(format!("the scheduled item #{id} was claimed {} after its enqueue, before it was due ({})", secs(after), secs(s.due)));
                    }
                } else if let Some((failed_at, f)) = retried {
                    let after = failed_at.elapsed();
                    f.again = Some((name.clone(), attempt, after));
                    self.view.log(&format!("{name} claimed the retried item #{id} (attempt {attempt}, token {token}) {} after its failure", secs(after)));
                } else if attempt > 1 {
                    self.view.log(&format!(
                        "{name} claimed requeued item #{id} (attempt {attempt}, token {token})"
                    ));
                    if let Some(stall) = self.stall.as_mut() {
                        if stall.item() == Some(id) && stall.taken_by.is_none() {
                            stall.taken_by = Some(name.clone());
                        }
                    }
                }
                self.stage_faults(i, id, token).await;
            }
            Fact::Done { id, .. } => {
                let m = &mut w.members[n];
                m.done += 1;
                m.working_on = None;
                let count = self.done_by_id.entry(id).or_default();
                *count += 1;
                if *count > 1 {
                    (self.failures).push(format!(
                        "item #{id}: the store accepted a second completion"
                    ));
                }
                self.done_by.insert(id, name.clone());
                if let Some(stall) = self.stall.as_mut() {
                    let stuck = stall.hung.map(|(n, ..)| n);
                    if stall.item() == Some(id) {
                        stall.redone = true;
                        self.view.log(&format!(
                            "{name} completed item #{id}, the stuck member's: the work got done"
                        ));
                    } else if stall.worker == i && stuck.is_some_and(|s| s != n) && !stall.redone {
                        stall.others_done += 1;
                    }
                }
            }
            Fact::Retried { id, token } => {
                w.members[n].working_on = None;
                let flaky = self.flaky.as_mut().filter(|f| f.id == id);
                if let Some(f) = flaky.filter(|f| f.failed.is_none()) {
                    f.failed = Some((name.clone(), Instant::now()));
                }
                self.view.log(&format!("{name}: its job on item #{id} (token {token}) FAILED (on purpose): the runner hands it back, to be tried again after its backoff"));
            }
            Fact::Cancelled { id, token } => {
                self.view.log(&format!("{name}: its work on item #{id} (token {token}) stopped by the runner before its handler answered"));
            }
            Fact::Fenced { id, token } => {
                let m = &mut w.members[n];
                m.working_on = None;
                m.fenced.push((id, token));
                self.view.log(&format!("{name}: its late completion of item #{id} under token {token} was REFUSED by fencing: Error::Fenced (its token is no longer the item's owner; the item goes to a live member)"));
            }
            Fact::Hung { id, token } => {
                self.view.log(&format!("{name} hangs on item #{id} (token {token}): its handler waits and reports no progress; {}'s other members go on", w.name));
                if let Some(stall) = self.stall.as_mut().filter(|s| s.worker == i) {
                    stall.hung.get_or_insert((n, id, token, Instant::now()));
                }
            }
            Fact::Stalled { token } => {
                w.members[n].lost.push((token, "stalled".to_owned()));
                let stall = self.stall.as_mut().filter(|s| {
                    s.worker == i && s.hung.is_some_and(|(m, _, t, _)| m == n && t == token)
                });
                match stall {
                    Some(stall) => {
                        let after = stall.hung.map(|(.., at)| at.elapsed()).unwrap_or_default();
                        stall.stalled = Some(Instant::now());
                        self.view.log(&format!("{name}: its WATCHDOG fired, {} without progress (timeout {}): its work told to stop (cause stalled), its item handed back, its lease (token {token}) released alone; {}'s session and other members untouched", secs(after), secs(self.progress_timeout), w.name));
                    }
                    None => self.view.log(&format!(
                        "{name}: its watchdog fired (no progress in time): lease token {token} released"
                    )),
                }
            }
            Fact::Lost { token, reason } => {
                self.view.log(&format!(
                    "{name}: lease token {token} lost, its work told to stop: {reason}"
                ));
                w.members[n].lost.push((token, reason));
                self.note_other_loss(i, Some(n));
            }
            // The session's own `Left` says it for all of them.
            Fact::Left { .. } => {}
            Fact::Error { message } => self.view.log(&format!("{name}: error: {message}")),
        }
    }

    /// Stages the next fault when its share of the items is done: worker `i`'s member
    /// just claimed item `id` under `token`.
    async fn stage_faults(&mut self, i: usize, id: u64, token: u64) {
        let done = self.done_total();
        let w = &mut self.workers[i];
        if w.role != Role::Normal {
            return;
        }
        let on = w.members.iter().filter_map(|m| m.working_on);
        let on = on.map(|id| format!("#{id}")).collect::<Vec<_>>().join(", ");
        let pid = w.pid.unwrap_or(0);
        match self.stage {
            Stage::WaitKill if done >= self.kill_at => {
                match signal(w.pid, Signal::SIGKILL) {
                    Ok(()) => {
                        w.stage(Role::Killed { at: Instant::now() });
                        self.view.log(&format!("SIGKILL -> {} (pid {pid}): its session (token {}) and its {} die with it, while they work on items {on}", w.name, w.token().unwrap_or(0), plural(w.members.len(), "member", "members")));
                    }
                    Err(e) => self.view.log(&format!("could not kill {}: {e}", w.name)),
                }
                self.stage = Stage::WaitStall;
            }
            Stage::WaitStall if done >= self.stall_at => {
                let sent = match w.stdin.as_mut() {
                    Some(stdin) => stdin.write_all(format!("{STALL}\n").as_bytes()).await,
                    None => Err(std::io::ErrorKind::BrokenPipe.into()),
                };
                match sent {
                    Ok(()) => {
                        w.stall_host = true;
                        self.stall = Some(Stall {
                            worker: i,
                            ..Stall::default()
                        });
                        self.view.log(&format!("STALL -> {}: the next job one of its members claims hangs without reporting progress (its watchdog: {})", w.name, secs(self.progress_timeout)));
                    }
                    Err(e) => self
                        .view
                        .log(&format!("could not ask {} to stall: {e}", w.name)),
                }
                self.stage = Stage::WaitFreeze;
            }
            Stage::WaitFreeze if done >= self.freeze_at => {
                // Not the stuck member's process while it hangs: each story alone.
                if w.stall_host && self.stall.as_ref().is_some_and(|s| !s.redone) {
                    return;
                }
                if Instant::now() < self.freeze_not_before {
                    return;
                }
                let pid_of = w.pid;
                let mut stopped = signal(pid_of, Signal::SIGSTOP);
                // Stopped inside one of its store transactions? An SQLite file serves
                // one writer at a time, and a frozen holder of its lock would stop
                // every process's writes, the checker's too: resume it at once (well
                // before its deadline) and stop it again a moment later.
                let mut tries = 1;
                while stopped.is_ok() && !self.store_writes().await {
                    let resumed = signal(pid_of, Signal::SIGCONT);
                    let name = &self.workers[i].name;
                    if tries == FREEZE_TRIES || resumed.is_err() {
                        // Every process renews before the next try, at a later claim.
                        self.freeze_not_before = Instant::now() + self.ttl.duration() / 2;
                        self.view.log(&format!("{name} was stopped {tries} times holding the store's write lock (SQLite: one writer at a time, so every process's writes would wait): resumed each time at once, well before its deadline; it is frozen again at a later claim{}", resumed.err().map(|e| format!(" (SIGCONT failed: {e})")).unwrap_or_default()));
                        return;
                    }
                    self.view.log(&format!("{name} was stopped holding the store's write lock (SQLite: one writer at a time, so every process's writes would wait): SIGCONT at once, SIGSTOP again a moment later"));
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    tries += 1;
                    stopped = signal(pid_of, Signal::SIGSTOP);
                }
                let w = &mut self.workers[i];
                match stopped {
                    Ok(()) => {
                        let at = Instant::now();
                        w.stage(Role::Frozen { at, resumed: None });
                        self.view.log(&format!("SIGSTOP -> {} (pid {pid}) while its member claims item #{id} under token {token}; its members work on items {on}; SIGCONT in {}", w.name, secs(self.freeze_for)));
                        self.stage = Stage::Frozen {
                            victim: i,
                            resume_at: at + self.freeze_for,
                        };
                    }
                    Err(e) => {
                        self.view.log(&format!("could not freeze {}: {e}", w.name));
                        self.stage = Stage::Over;
                    }
                }
            }
            _ => {}
        }
    }

    /// True when the store serves a write within an eighth of the ttl: a no-op
    /// sweep of a token never handed out takes the write lock and changes nothing.
    async fn store_writes(&self) -> bool {
        let never = FencingToken(i64::MAX as u64);
        let probe = self.store.sweep(never);
        matches!(
            tokio::time::timeout(self.ttl.duration() / 8, probe).await,
            Ok(Ok(_))
        )
    }
}

/// Runs the demo; the exit code says whether every invariant held and whether the
/// run showed all it promised (2 for a setup that failed).
pub async fn run(args: RunArgs) -> ExitCode {
    match try_run(args).await {
        Ok(code) => code,
        Err(message) => {
            eprintln!("demo: {message}");
            ExitCode::from(2)
        }
    }
}

/// [`run`]; an error is a setup that failed, before the story began.
async fn try_run(args: RunArgs) -> Result<ExitCode, String> {
    let live = !args.plain && std::io::stdout().is_terminal();
    let mut view = View::new(live);
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..1_000_000));

    // The store: a fresh SQLite file unless the user named one.
    let mut _tmp = None;
    let url = match &args.store {
        Some(url) => url.clone(),
        None => {
            let dir = (tempfile::Builder::new().prefix("liveness-demo-").tempdir())
                .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
            let path = dir.path().join("demo.db");
            let path = utf8_percent_encode(&path.to_string_lossy(), NOT_IN_PATH).to_string();
            let url = format!("sqlite://{path}?ns=demo");
            _tmp = Some(dir);
            url
        }
    };
    if url.to_ascii_lowercase().starts_with("memory:") {
        return Err(
            "memory:// lives inside one process, and the demo's workers are separate processes: \
             use sqlite:///path/file.db (the default) or a server store"
                .to_owned(),
        );
    }
    let ttl = Ttl::new(args.ttl).map_err(|e| format!("--ttl: {e}"))?;
    let progress_timeout = args.progress_timeout.unwrap_or(ttl.duration() * 3);
    if progress_timeout < liveness::member::MIN_PROGRESS_TIMEOUT {
        return Err(format!(
            "--progress-timeout: at least {} ms",
            liveness::member::MIN_PROGRESS_TIMEOUT.as_millis()
        ));
    }
    // A backend this build leaves out: say how to build it in.
    let scheme = url
        .split(':')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let missing =
        liveness::feature_of(&scheme).filter(|_| !liveness::schemes().contains(&&*scheme));
    if let Some(feature) = missing {
        return Err(format!(
            "this demo was built without the {feature} backend that `{scheme}://` needs: \
             run it with `cargo run -p examples --features {feature} --bin demo -- --store …`"
        ));
    }
    let store: Arc<dyn Store> =
        (liveness::connect(&url).await).map_err(|e| format!("cannot open the store {url}: {e}"))?;
    (store.capabilities().check_ttl(ttl))
        .map_err(|e| format!("--ttl for the {} store: {e}", store.backend()))?;
    if let Some(addr) = args.dashboard {
        let at = (crate::dashboard::serve(addr, store.clone(), &url).await)
            .map_err(|e| format!("--dashboard {addr}: {e}"))?;
        println!("dashboard: http://{at}/");
    }
    let counts = (store.item_counts().await).map_err(|e| format!("cannot read the store: {e}"))?;
    if counts != ItemCounts::default() {
        return Err(format!("the store's namespace already holds items ({counts:?}): give the demo a fresh one (?ns=NAME)"));
    }

    let members = args.members_per_worker as usize;
    let freeze_for = ttl.duration() * 2 + ttl.duration() / 2;
    view.say(&format!(
        "liveness demo: {} workers × {members} members riding one session each, {} items of {}-{} ms each, ttl {}, seed {seed} (re-run with --seed {seed})",
        args.workers,
        args.items,
        args.work_ms.0,
        args.work_ms.1,
        secs(ttl.duration())
    ));
    view.say(&format!(
        "store: {url} ({})",
        match store.capabilities().sessions {
            true => "native sessions: a riding member costs the store nothing while it lives",
            false => "no native sessions: each session renews its members with its own lease",
        }
    ));
    view.say(&format!(
        "plan: SIGKILL one worker once 15% of the items are done; at 25% one member of another hangs in its job (its watchdog: {}); SIGSTOP a third at 35% for {} (longer than the ttl), then SIGCONT; one job fails once and is retried{}",
        secs(progress_timeout),
        secs(freeze_for),
        match store.capabilities().delays {
            true => ", one is scheduled",
            false => "",
        }
    ));

    // The items: the first fails on its first attempt; the last (of two or more, on a
    // store that keeps delays) is scheduled.
    let queue = Queue::new(store.clone());
    let options = EnqueueOptions::default().max_attempts(MAX_ATTEMPTS);
    let delays = store.capabilities().delays;
    let now = args.items - u64::from(delays && args.items > 1);
    let payloads: Vec<String> = (0..now)
        .map(|i| match i {
            0 => format!("item {i} {FLAKY}"),
            _ => format!("item {i}"),
        })
        .collect();
    let mut ids =
        (queue.enqueue_many_with(&payloads, options).await).map_err(|e| format!("enqueue: {e}"))?;
    let flaky = ids.first().map(|id| Flaky {
        id: id.0,
        failed: None,
        again: None,
    });
    let mut scheduled = None;
    if now < args.items {
        let (enqueued, due) = (
            Instant::now(),
            (ttl.duration() * 2).max(Duration::from_secs(2)),
        );
        let payload = format!("item {now} scheduled");
        let id = (queue
            .enqueue_with(payload.as_bytes(), options.delay(due))
            .await)
            .map_err(|e| format!("enqueue: {e}"))?;
        ids.push(id);
        scheduled = Some(Scheduled {
            id: id.0,
            enqueued,
            due,
            claimed: None,
        });
    }
    view.log(&format!(
        "enqueued {}{}{}",
        plural(ids.len(), "item", "items"),
        flaky
            .as_ref()
            .map(|f| format!("; #{} fails on its first attempt, to be retried", f.id))
            .unwrap_or_default(),
        match &scheduled {
            Some(s) => format!(
                "; #{} is scheduled {} after its enqueue, by the store's clock",
                s.id,
                secs(s.due)
            ),
            None if !delays => "; no scheduled job: this store keeps no delays".to_owned(),
            None => String::new(),
        }
    ));

    // The deaths to show, from the store's death history: a checker running beside
    // the demo on the same store may win every reap from the demo's own.
    let mut deaths = (Deaths::start(&*store).await)
        .map_err(|e| format!("cannot read the store's death history: {e}"))?;
    // The checker, in this process (unless one beside it does the work). It watches
    // the sessions too (the default): a process's death is its session's.
    let bus = EventBus::default();
    let mut checker_events = bus.subscribe();
    let checker = if args.no_checker {
        view.log("no checker in the demo (--no-checker): the one beside it declares the deaths");
        None
    } else {
        let check_every =
            (ttl.duration() / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let config = CheckerConfig::default()
            .check_every(check_every)
            .events(bus);
        view.log("checker started: it reaps expired sessions and members and requeues their items");
        Some(Checker::new(store.clone(), config).spawn())
    };

    // The workers.
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find this program's path: {e}"))?;
    let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
    let mut workers: Vec<Worker> = Vec::new();
    for i in 0..args.workers as usize {
        let name = format!("worker-{}", i + 1);
        let settings = serde_json::to_string(&WorkerArgs {
            store: url.clone(),
            name: name.clone(),
            members,
            progress_timeout_ms: progress_timeout.as_millis() as u64,
            ttl_ms: ttl.as_millis(),
            seed: seed.wrapping_mul(1000).wrapping_add(i as u64),
            work_ms: args.work_ms,
        });
        let spawned = Command::new(&exe)
            .arg("worker")
            .arg(settings.unwrap_or_default())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn();
        let mut child = spawned.map_err(|e| format!("cannot start {name}: {e}"))?;
        let pid = child.id();
        let stdin = child.stdin.take();
        read_lines(i, child.stdout.take(), &tx);
        read_lines(i, child.stderr.take(), &tx);
        let tx = tx.clone();
        tokio::spawn(async move { _ = tx.send(Msg::Exited(i, child.wait().await)) });
        view.log(&format!("started {name} (pid {})", pid.unwrap_or(0)));
        workers.push(Worker::new(name, members, pid, stdin));
    }
    drop(tx);

    let total = ids.len() as u64;
    let kill_at = (total * 15 / 100).max(1);
    let stall_at = (total * 25 / 100).max(kill_at + 1);
    let freeze_at = (total * 35 / 100).max(stall_at + 1);
    let mut run = Run {
        view,
        store: store.clone(),
        ttl,
        progress_timeout,
        members_per_worker: members,
        workers,
        stage: Stage::WaitKill,
        stall: None,
        scheduled,
        flaky,
        done_by_id: HashMap::new(),
        claims_by_id: HashMap::new(),
        done_by: HashMap::new(),
        unreported: HashSet::new(),
        counts: ItemCounts::default(),
        failures: Vec::new(),
        total,
        kill_at,
        stall_at,
        freeze_at,
        freeze_for,
        freeze_not_before: Instant::now(),
    };
    let upper = Duration::from_millis(
        total.saturating_mul(args.work_ms.1.max(1)) * 2
            / u64::from(args.workers.max(1) * args.members_per_worker.max(1)),
    );
    let deadline =
        Instant::now() + Duration::from_secs(120) + freeze_for * 2 + progress_timeout * 2 + upper;
    let mut tick = tokio::time::interval(Duration::from_millis(if live { 120 } else { 250 }));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = Instant::now();
    let mut aborted: Option<String> = None;

    loop {
        let resume_at = match run.stage {
            Stage::Frozen { resume_at, .. } => Some(resume_at),
            _ => None,
        };
        tokio::select! {
            msg = rx.recv() => {
                let Some(msg) = msg else { break };
                match msg {
                    Msg::Fact(i, who, fact) => run.on_fact(i, who, fact).await,
                    Msg::Stderr(i, line) => {
                        let name = &run.workers[i].name;
                        run.view.log(&format!("{name} says: {line}"));
                    }
                    Msg::Exited(i, status) => {
                        let w = &mut run.workers[i];
                        w.stdin = None;
                        let status = status.unwrap_or_else(|e| {
                            run.failures.push(format!("{}: could not wait for it: {e}", w.name));
                            ExitStatus::from_raw(1 << 8)
                        });
                        w.exited = Some(status);
                        if !matches!(w.role, Role::Killed { .. }) {
                            run.view.log(&format!("{} exited ({status})", w.name));
                        }
                    }
                }
            }
            ev = checker_events.recv() => {
                match ev {
                    Ok(Event::Died { token, .. }) => {
                        *deaths.ours.entry(token.0).or_default() += 1;
                        poll_deaths(&*store, &mut deaths, &mut run.view, &run.workers).await;
                    }
                    Ok(Event::Swept { requeued, token, .. }) => {
                        run.view.log(&format!("checker: swept token {token}: {} requeued", plural(requeued, "item", "items")));
                    }
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        run.failures.push(format!("the view missed {n} checker events"));
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        std::future::pending::<()>().await;
                    }
                }
            }
            _ = async {
                match resume_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {
                if let Stage::Frozen { victim, .. } = run.stage {
                    // Resume only once a checker has declared the frozen worker's
                    // session dead (on a loaded machine that can take longer than the
                    // planned freeze), so the audience sees the stale completions
                    // refused.
                    poll_deaths(&*store, &mut deaths, &mut run.view, &run.workers).await;
                    let w = &run.workers[victim];
                    let declared = deaths.list.iter().any(|d| d.session && w.fault_of(d).is_some());
                    let frozen_at = match w.role {
                        Role::Frozen { at, .. } => at,
                        _ => Instant::now(),
                    };
                    let cap = frozen_at + freeze_for + ttl.duration() * 10;
                    if !declared && Instant::now() < cap {
                        run.stage = Stage::Frozen { victim, resume_at: Instant::now() + Duration::from_millis(50) };
                        continue;
                    }
                    let w = &mut run.workers[victim];
                    w.note_held();
                    match signal(w.pid, Signal::SIGCONT) {
                        Ok(()) => {
                            if let Role::Frozen { at, .. } = w.role {
                                w.role = Role::Frozen { at, resumed: Some(Instant::now()) };
                                run.view.log(&format!("SIGCONT -> {} after {} frozen: it wakes up past its session's deadline", w.name, secs(at.elapsed())));
                            }
                        }
                        Err(e) => run.failures.push(format!("could not resume {}: {e}", w.name)),
                    }
                    run.stage = Stage::Over;
                }
            }
            _ = tick.tick() => {
                poll_deaths(&*store, &mut deaths, &mut run.view, &run.workers).await;
                if let Ok(c) = store.item_counts().await {
                    run.counts = c;
                }
                run.draw(&*store, &deaths, started.elapsed()).await;
                if Instant::now() > deadline {
                    aborted = Some(format!("the demo did not finish within {}", secs(deadline - started)));
                }
            }
            _ = tokio::signal::ctrl_c() => {
                aborted = Some("interrupted".to_owned());
            }
        }
        if aborted.is_some() {
            break;
        }
        let all_exited = run.workers.iter().all(|w| w.exited.is_some());
        // A killed worker that held items is declared dead before the others can
        // finish; wait for the declaration of its session and of every member in any
        // case (up to ten ttls, as for the frozen one), so the summary can show it.
        let kill_seen = run.workers.iter().all(|w| match w.role {
            Role::Killed { at } => {
                crate::summary::process_death(&deaths, w)
                    .is_some_and(|d| d.moved.members >= members as u64)
                    || at.elapsed() > ttl.duration() * 10
            }
            _ => true,
        });
        if all_exited && kill_seen {
            break;
        }
    }

    if let Some(why) = &aborted {
        for w in run.workers.iter_mut() {
            if w.exited.is_none() {
                let _ = signal(w.pid, Signal::SIGCONT);
                let _ = signal(w.pid, Signal::SIGKILL);
            }
            w.stdin = None;
        }
        run.failures.push(format!("aborted: {why}"));
    }
    if let Some(checker) = checker {
        checker.stop().await;
    }
    // The deaths this demo's checker reported after the loop's last look, then the
    // history as the store holds it at the end (every sweep done).
    while let Ok(event) = checker_events.try_recv() {
        if let Event::Died { token, .. } = event {
            *deaths.ours.entry(token.0).or_default() += 1;
        }
    }
    if let Err(e) = deaths.poll(&*store).await {
        run.failures
            .push(format!("cannot read the store's death history: {e}"));
    }
    // What the killed workers' members held: their last facts are all read now.
    for w in run.workers.iter_mut() {
        if matches!(w.role, Role::Killed { .. }) {
            w.note_held();
        }
    }
    run.view.finish();
    if let Ok(c) = store.item_counts().await {
        run.counts = c;
    }
    let temporary = _tmp.is_some();
    let aborted = aborted.is_some();
    Ok(crate::summary::report(run, &*store, &deaths, &url, &ids, temporary, aborted).await)
}
