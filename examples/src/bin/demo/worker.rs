//! One worker process: opens ONE session (its lease in the space `sessions`) and runs
//! one worker runner ([`liveness::Worker::ride`]) per member riding it, one job at a
//! time each. The handler "works" on each item for a seeded while, telling the
//! member's watchdog the job moves; the runner completes it, or hands it back to be
//! tried again when the handler fails (a payload marked [`FLAKY`] fails on its first
//! attempt). Every fact goes to the parent (see [`proto`](crate::proto)): the handler
//! says what it claimed, the runner's events say how each job ended.
//!
//! On a store with native sessions the members cost the store nothing while they
//! live: their liveness is the session's. On one without, the session renews them
//! with its own lease. The demo works the same either way.
//!
//! The runner drops a handler the moment its member's lease is lost, before the store
//! can give the item to anybody else, and sends no completion for it. This handler is
//! careless ON PURPOSE: a guard that it drops unfinished (the frozen worker, once
//! resumed; the stuck job) completes the item anyway with the old claim, so that the
//! audience sees fencing refuse the stale completion with `Error::Fenced`; a freeze
//! between the handler's answer and the runner's completion is reported as refused
//! too. After the parent's [`STALL`], the next job one of its members claims hangs
//! without reporting progress, until the member's watchdog stops it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use liveness::{
    CancellationToken, Claimed, Error, Event, HolderId, HolderLoss, Job, JobEnd, JobError, Key,
    Member, MemberConfig, Session, SessionConfig, Space, Ttl, Worker, WorkerConfig,
};
use tokio::io::AsyncBufReadExt;
use tokio::sync::broadcast;
use tokio::task::JoinSet;

use crate::proto::{Fact, Who, STALL};
use crate::WorkerArgs;

/// The last word of a payload whose job fails on its first attempt, to be retried.
pub const FLAKY: &str = "flaky";

/// The wait before a failed job's first retry (each further one doubles it, up to
/// four times it), by the store's clock; at once on a store without delays.
pub const RETRY_BACKOFF: Duration = Duration::from_millis(500);

/// The longest pause of an idle runner between two claims, and of the process between
/// two looks at whether every item is done.
const POLL: Duration = Duration::from_millis(100);

/// Reports a failure of `who` to the parent; answers the exit code.
fn fail((who, message): (Who, String)) -> i32 {
    Fact::Error { message }.send(who);
    1
}

/// A failure of `who` in `step`, for [`fail`].
fn failed(who: Who, step: &'static str) -> impl FnOnce(liveness::Error) -> (Who, String) {
    move |e| (who, format!("{step}: {e}"))
}

/// The name of member `n` (from 0) of the worker `worker`: `worker-1.m1`.
pub fn member_name(worker: &str, n: usize) -> String {
    format!("{worker}.m{}", n + 1)
}

/// What a lost lease's reason says, for the log.
fn loss(reason: HolderLoss) -> String {
    match reason {
        HolderLoss::Store(r) => format!("the store answered: {r}"),
        HolderLoss::Deadline => "its local safety deadline passed".to_owned(),
        HolderLoss::Fault => "a store fault".to_owned(),
        HolderLoss::StoreLostState => "the store lost its state".to_owned(),
        HolderLoss::Stalled => "its watchdog: no progress in time".to_owned(),
    }
}

/// Runs the worker until every item is done (nothing pending or owned), or the
/// parent goes away (stdin closes). Returns the process exit code; the caller exits
/// with it at once (tokio's blocking stdin read would hold a runtime shutdown).
pub async fn run(args: WorkerArgs) -> i32 {
    match work(args).await {
        Ok(code) => code,
        Err(failure) => fail(failure),
    }
}

/// [`run`], until a step it cannot go on without fails.
async fn work(args: WorkerArgs) -> Result<i32, (Who, String)> {
    let session_failed = |step| failed(Who::Session, step);
    let store = (liveness::connect(&args.store).await).map_err(session_failed("connect"))?;
    let holder = |name: &str| HolderId::new(format!("{name}@pid{}", std::process::id()));
    let config = Ttl::from_millis(args.ttl_ms)
        .and_then(|ttl| SessionConfig::new(&args.name, ttl))
        .and_then(|c| Ok(c.holder(holder(&args.name)?)))
        .map_err(session_failed("config"))?;
    let ttl = config.heartbeat.ttl;
    let names: Vec<String> = (0..args.members)
        .map(|n| member_name(&args.name, n))
        .collect();
    // The session and its members share one bus: every lease's events, by key.
    let who_by_name: HashMap<String, Who> = (names.iter().cloned())
        .enumerate()
        .map(|(n, name)| (name, Who::Member(n)))
        .collect();
    let answered = Answered::default();
    let events = config.events.subscribe();
    let forwarder = tokio::spawn(forward(events, who_by_name, answered.clone()));

    // The parent holds our stdin open: a line asks for a stall; EOF means it is gone
    // (or wants us to stop).
    let parent_gone = CancellationToken::new();
    let stall = Arc::new(AtomicBool::new(false));
    tokio::spawn({
        let (parent_gone, stall) = (parent_gone.clone(), stall.clone());
        async move {
            let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line.trim() == STALL {
                    stall.store(true, Ordering::SeqCst);
                }
            }
            parent_gone.cancel();
        }
    });

    let session =
        (Session::open(store.clone(), config).await).map_err(session_failed("open the session"))?;
    let mut workers = Vec::new();
    let careless = Arc::new(Mutex::new(JoinSet::new()));
    for (n, name) in names.iter().enumerate() {
        let config = WorkerConfig::new(name, ttl).and_then(|c| {
            let mut c = (c.concurrency(1).checker(false).poll(POLL))
                .retry_backoff(RETRY_BACKOFF, RETRY_BACKOFF * 4);
            c.member = MemberConfig::new(name, ttl)?
                .holder(holder(name)?)
                .events(session.events().clone())
                .progress_timeout(Duration::from_millis(args.progress_timeout_ms));
            Ok(c)
        });
        let who = Who::Member(n);
        let config = config.map_err(failed(who, "config"))?;
        let seed = args.seed.wrapping_mul(64).wrapping_add(n as u64);
        let hands = Arc::new(Hands {
            who,
            member: OnceLock::new(),
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            work_ms: args.work_ms,
            stall: stall.clone(),
            careless: careless.clone(),
            answered: answered.clone(),
            ttl: ttl.duration(),
        });
        let handler = {
            let hands = hands.clone();
            move |job| hands.clone().work(job)
        };
        let worker =
            (Worker::ride(&session, config, handler).await).map_err(failed(who, "join"))?;
        let _ = hands.member.set(worker.member().clone());
        workers.push(worker);
    }

    // Until every item is done, the held-back ones too (a scheduled job, a retry's
    // backoff: pending all the same).
    let mut code = 0;
    while !parent_gone.is_cancelled() {
        match store.item_counts().await {
            Ok(c) if c.pending == 0 && c.owned == 0 => break,
            Ok(_) => {}
            Err(e) if e.is_retryable() => {}
            Err(e) => {
                code = fail(session_failed("item_counts")(e));
                break;
            }
        }
        tokio::select! {
            _ = parent_gone.cancelled() => {}
            _ = tokio::time::sleep(POLL) => {}
        }
    }
    // A session (or member) whose lease was lost (the frozen worker, just resumed)
    // takes a new one on its own; let it, so that every member leaves under a live
    // token and the re-join is seen.
    let all_back = async {
        for worker in &workers {
            let mut generations = worker.member().generations();
            let _ = generations.wait_for(|g| g.check().is_ok()).await;
        }
    };
    let _ = tokio::time::timeout(ttl.duration() * 3, all_back).await;
    // The careless completions still out say how the store answered them.
    let mut completions = match careless.lock() {
        Ok(mut set) => std::mem::take(&mut *set),
        Err(_) => JoinSet::new(),
    };
    let answered = async { while completions.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(ttl.duration() * 3, answered).await;
    // Each runner stops and its member leaves; then the session is released.
    for (n, worker) in workers.into_iter().enumerate() {
        match worker.shutdown(Duration::from_secs(1)).await {
            Ok(_) => {}
            // A lease lost just before leaving has nothing to release.
            Err(e) if e.lost_reason().is_some() => {}
            Err(e) => code = fail(failed(Who::Member(n), "shutdown")(e)),
        }
    }
    match session.close(Duration::from_secs(1)).await {
        Ok(()) => {}
        Err(e) if e.lost_reason().is_some() => {}
        Err(e) => code = fail(session_failed("close")(e)),
    }
    // Let the event forwarder print what is left before the process exits.
    let _ = tokio::time::timeout(Duration::from_secs(1), forwarder).await;
    Ok(code)
}

/// The jobs whose handler answered `Ok`, by item and token, until the runner says how
/// they ended: one stopped after its handler answered had its completion refused
/// (its lease was lost meanwhile, as when a freeze lands between the two).
type Answered = Arc<Mutex<HashSet<(u64, u64)>>>;

/// Sends the facts the bus tells: each lease's joins, losses and leaves, and how each
/// job ended. Ends at the session's own `Left` (the last event of a close), or when
/// the bus closes.
async fn forward(
    mut events: broadcast::Receiver<Event>,
    who_by_name: HashMap<String, Who>,
    answered: Answered,
) {
    let who_of = |key: &Key| match key.space() == &Space::sessions() {
        true => Some(Who::Session),
        false => who_by_name.get(key.name().as_str()).copied(),
    };
    loop {
        let (who, fact) = match events.recv().await {
            Err(broadcast::error::RecvError::Lagged(n)) => {
                let message = format!("the event forwarder missed {n} events");
                (Some(Who::Session), Fact::Error { message })
            }
            Err(broadcast::error::RecvError::Closed) => break,
            Ok(Event::Joined { key, token, .. }) => (who_of(&key), Fact::Joined { token: token.0 }),
            Ok(Event::Lost { key, token, reason }) => {
                let token = token.0;
                let fact = match reason {
                    HolderLoss::Stalled => Fact::Stalled { token },
                    _ => Fact::Lost {
                        token,
                        reason: loss(reason),
                    },
                };
                (who_of(&key), fact)
            }
            Ok(Event::JobEnded {
                key,
                token,
                id,
                end,
                ..
            }) => {
                let (id, token) = (id.0, token.0);
                let ok = answered.lock().is_ok_and(|mut a| a.remove(&(id, token)));
                let fact = match end {
                    JobEnd::Stopped if ok => Fact::Fenced { id, token },
                    JobEnd::Stopped => Fact::Cancelled { id, token },
                    JobEnd::Completed => Fact::Done { id, token },
                    JobEnd::Retried => Fact::Retried { id, token },
                    _ => Fact::Error {
                        message: format!("item #{id} dead-lettered"),
                    },
                };
                (who_of(&key), fact)
            }
            Ok(Event::Left { key, token }) => {
                let who = who_of(&key);
                if let Some(who) = who {
                    Fact::Left { token: token.0 }.send(who);
                }
                if who == Some(Who::Session) {
                    break;
                }
                continue;
            }
            Ok(_) => continue,
        };
        if let Some(who) = who {
            fact.send(who);
        }
    }
}

/// What one member's handler works with.
struct Hands {
    who: Who,
    /// The member, once its runner started: for the careless completion.
    member: OnceLock<Member>,
    rng: Mutex<fastrand::Rng>,
    work_ms: (u64, u64),
    /// Set by the parent's [`STALL`]: the next job claimed (by any member of the
    /// process) hangs.
    stall: Arc<AtomicBool>,
    /// The process's careless completions under way.
    careless: Arc<Mutex<JoinSet<()>>>,
    /// Where it notes the jobs it answered `Ok`.
    answered: Answered,
    /// The lease ttl: how long a careless completion waits at most for its member.
    ttl: Duration,
}

impl Hands {
    /// The handler: works on one item for a seeded while, telling the member's
    /// watchdog the job moves every 100 ms.
    async fn work(self: Arc<Self>, job: Job) -> Result<(), JobError> {
        let claimed = job.claimed();
        let (id, token) = (claimed.item.id.0, claimed.lease.token.0);
        let attempt = job.attempts();
        Fact::Claimed { id, token, attempt }.send(self.who);
        let careless = Careless {
            hands: self.clone(),
            claimed: Some(claimed.clone()),
        };
        if self.stall.swap(false, Ordering::SeqCst) {
            // A stuck handler: it waits and reports no progress, until the runner
            // drops it when the watchdog releases the member.
            Fact::Hung { id, token }.send(self.who);
            std::future::pending::<()>().await;
        }
        let flaky = job.payload().ends_with(FLAKY.as_bytes());
        if flaky && attempt == 1 {
            careless.finished();
            return Err(JobError::retry(format!("{FLAKY} on its first attempt")));
        }
        let (lo, hi) = self.work_ms;
        let ms = match self.rng.lock() {
            Ok(mut rng) => rng.u64(lo..=hi),
            Err(_) => hi,
        };
        let mut left = Duration::from_millis(ms);
        while !left.is_zero() {
            let slice = left.min(Duration::from_millis(100));
            tokio::time::sleep(slice).await;
            left -= slice;
            if job.check().is_err() {
                // Lost while working (a process woken from a freeze sees it before
                // its lease's cancellation stops the job): wait to be stopped, and
                // let the guard complete anyway.
                std::future::pending::<()>().await;
            }
            job.progress();
        }
        careless.finished();
        if let Ok(mut answered) = self.answered.lock() {
            answered.insert((id, token));
        }
        Ok(())
    }
}

/// The careless part of the handler: dropped before the handler finished (the runner
/// stopped it), it completes the item anyway with the old claim, once its member is
/// back under a new token (a stalled member first hands back the items it held, so
/// that another member takes them). Fencing, not good manners, is what keeps a stale
/// owner from finishing an item somebody else now owns: the completion is refused
/// with `Error::Fenced`.
struct Careless {
    hands: Arc<Hands>,
    /// The claim, until the handler finished.
    claimed: Option<Claimed>,
}

impl Careless {
    /// The handler answered: nothing to do.
    fn finished(mut self) {
        self.claimed = None;
    }
}

impl Drop for Careless {
    fn drop(&mut self) {
        let (Some(claimed), Ok(runtime)) =
            (self.claimed.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let (who, member) = (self.hands.who, self.hands.member.get().cloned());
        let wait = self.hands.ttl * 3;
        let completion = async move {
            let (id, token) = (claimed.item.id.0, claimed.lease.token.0);
            let Some(member) = member else {
                let message = format!("item #{id}: no member to complete it with");
                return Fact::Error { message }.send(who);
            };
            let mut generations = member.generations();
            let back = generations.wait_for(|g| g.lease.token != claimed.lease.token);
            let _ = tokio::time::timeout(wait, back).await;
            for _ in 0..20 {
                match member.complete(&claimed).await {
                    Ok(()) => Fact::Done { id, token }.send(who),
                    Err(Error::Fenced { .. }) => Fact::Fenced { id, token }.send(who),
                    Err(e) if e.is_retryable() => {
                        tokio::time::sleep(Duration::from_millis(25)).await;
                        continue;
                    }
                    Err(e) => Fact::Error {
                        message: format!("complete {id}: {e}"),
                    }
                    .send(who),
                }
                return;
            }
            let message = format!("complete {id}: the store stayed unavailable");
            Fact::Error { message }.send(who);
        };
        if let Ok(mut set) = self.hands.careless.lock() {
            set.spawn_on(completion, &runtime);
        }
    }
}
