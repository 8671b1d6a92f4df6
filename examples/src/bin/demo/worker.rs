//! One worker process: opens ONE session (its lease in the space `sessions`), joins
//! several members riding it, and runs a job loop per member: claim one item, "work"
//! on it for a seeded while (reporting progress to the member's watchdog), complete
//! it; every fact goes to the parent (see [`proto`](crate::proto)).
//!
//! On a store with native sessions the members cost the store nothing while they
//! live: their liveness is the session's. On one without, the session renews them
//! with its own lease. The demo works the same either way.
//!
//! When its cancellation fires mid-item (the frozen worker, once resumed), a member
//! still tries to complete the item — as a careless worker would — so the audience
//! sees the store refuse the stale completion with `Error::Fenced`. When the parent
//! sends [`STALL`], the next job one of its members claims hangs without reporting
//! progress, until the member's watchdog stops it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use liveness::{
    CancellationToken, Claimed, Error, Event, HolderId, HolderLoss, Member, MemberConfig, Session,
    SessionConfig, Space, Store, Ttl,
};
use tokio::io::AsyncBufReadExt;
use tokio::task::JoinSet;

use crate::proto::{Fact, Who, STALL};
use crate::WorkerArgs;

fn fail(who: Who, message: String) -> i32 {
    Fact::Error { message }.send(who);
    1
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
    let store: Arc<dyn Store> = match liveness::connect(&args.store).await {
        Ok(s) => s,
        Err(e) => return fail(Who::Session, format!("connect: {e}")),
    };
    let holder = |name: &str| HolderId::new(format!("{name}@pid{}", std::process::id()));
    let config = match Ttl::from_millis(args.ttl_ms)
        .and_then(|ttl| SessionConfig::new(&args.name, ttl))
        .and_then(|c| Ok(c.holder(holder(&args.name)?)))
    {
        Ok(c) => c,
        Err(e) => return fail(Who::Session, format!("config: {e}")),
    };
    let ttl = config.heartbeat.ttl;
    let names: Vec<String> = (0..args.members)
        .map(|n| member_name(&args.name, n))
        .collect();
    // The session and its members share one bus: every lease's events, by key.
    let mut events = config.events.subscribe();
    let who_by_name: HashMap<String, Who> = (names.iter().cloned())
        .enumerate()
        .map(|(n, name)| (name, Who::Member(n)))
        .collect();
    // Ends at the session's own `Left` (the last event of a close), or when the bus
    // closes.
    let forwarder = tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            let (key, fact) = match event {
                Event::Joined { key, token, .. } => (key, Fact::Joined { token: token.0 }),
                Event::Lost {
                    key,
                    token,
                    reason: HolderLoss::Stalled,
                } => (key, Fact::Stalled { token: token.0 }),
                Event::Lost { key, token, reason } => (
                    key,
                    Fact::Lost {
                        token: token.0,
                        reason: loss(reason),
                    },
                ),
                Event::Left { key, token } => (key, Fact::Left { token: token.0 }),
                _ => continue,
            };
            let who = match key.space() == &Space::sessions() {
                true => Who::Session,
                false => match who_by_name.get(key.name().as_str()) {
                    Some(who) => *who,
                    None => continue,
                },
            };
            let last = who == Who::Session && matches!(fact, Fact::Left { .. });
            fact.send(who);
            if last {
                break;
            }
        }
    });

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

    let session = match Session::open(store.clone(), config).await {
        Ok(s) => s,
        Err(e) => return fail(Who::Session, format!("open the session: {e}")),
    };
    let progress_timeout = Duration::from_millis(args.progress_timeout_ms);
    let mut members = Vec::new();
    for (n, name) in names.iter().enumerate() {
        let config = match MemberConfig::new(name, ttl).and_then(|c| {
            Ok(c.holder(holder(name)?)
                .events(session.events().clone())
                .progress_timeout(progress_timeout))
        }) {
            Ok(c) => c,
            Err(e) => return fail(Who::Member(n), format!("config: {e}")),
        };
        match session.join_with(config).await {
            Ok(m) => members.push(m),
            Err(e) => return fail(Who::Member(n), format!("join: {e}")),
        }
    }

    let mut loops = JoinSet::new();
    for (n, member) in members.into_iter().enumerate() {
        let job = Job {
            who: Who::Member(n),
            member,
            store: store.clone(),
            rng: fastrand::Rng::with_seed(args.seed.wrapping_mul(64).wrapping_add(n as u64)),
            work_ms: args.work_ms,
            pause: ttl.duration(),
            stall: stall.clone(),
            parent_gone: parent_gone.clone(),
        };
        loops.spawn(job.run());
    }
    let mut code = 0;
    let mut rejoining = Vec::new();
    while let Some(done) = loops.join_next().await {
        match done {
            Ok((member, Ok(()))) => rejoining.push(member),
            Ok((_, Err((who, message)))) => code = fail(who, message),
            Err(e) => code = fail(Who::Session, format!("a job loop ended: {e}")),
        }
    }
    // A session (or member) whose lease was lost (the frozen worker, just resumed)
    // takes a new one on its own; let it, so that every member leaves under a live
    // token and the re-join is seen.
    let all_back = async {
        for member in &rejoining {
            let mut generations = member.generations();
            while generations.borrow_and_update().check().is_err() {
                if generations.changed().await.is_err() {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(ttl.duration() * 3, all_back).await;
    // Closing leaves every riding member (held until then; one dropped before
    // releases itself after the stop margin), then releases the session.
    match session.close(Duration::from_secs(1)).await {
        Ok(()) => {}
        // A lease lost just before leaving has nothing to release.
        Err(e) if e.lost_reason().is_some() => {}
        Err(e) => code = fail(Who::Session, format!("close: {e}")),
    }
    drop(rejoining);
    // Let the event forwarder print what is left before the process exits.
    let _ = tokio::time::timeout(Duration::from_secs(1), forwarder).await;
    code
}

/// One member's job loop.
struct Job {
    who: Who,
    member: Member,
    store: Arc<dyn Store>,
    rng: fastrand::Rng,
    work_ms: (u64, u64),
    /// How long a member that hung waits before its next claim.
    pause: Duration,
    /// Set by the parent's [`STALL`]: the next job claimed (by any member of the
    /// process) hangs.
    stall: Arc<AtomicBool>,
    parent_gone: CancellationToken,
}

/// A job loop's error: who says it, and what.
type LoopError = (Who, String);

impl Job {
    /// Claims, works and completes until nothing is pending or owned; answers the
    /// member (to leave with the session) or the error that ended the loop.
    async fn run(mut self) -> (Member, Result<(), LoopError>) {
        let result = self.jobs().await;
        (self.member, result)
    }

    async fn jobs(&mut self) -> Result<(), LoopError> {
        let idle = Duration::from_millis(25);
        let who = self.who;
        while !self.parent_gone.is_cancelled() {
            let jobs = match self.member.claim(1).await {
                Ok(jobs) => jobs,
                // Lost: the member is re-joining; a fault: try again shortly.
                Err(e) if e.is_retryable() || e.lost_reason().is_some() => {
                    tokio::time::sleep(idle).await;
                    continue;
                }
                Err(e) => return Err((who, format!("claim: {e}"))),
            };
            if jobs.is_empty() {
                match self.store.item_counts().await {
                    Ok(c) if c.pending == 0 && c.owned == 0 => break,
                    Ok(_) => {}
                    Err(e) if e.is_retryable() => {}
                    Err(e) => return Err((who, format!("item_counts: {e}"))),
                }
                tokio::time::sleep(idle).await;
                continue;
            }
            for job in jobs {
                let (id, token) = (job.item.id.0, job.lease.token.0);
                Fact::Claimed {
                    id,
                    token,
                    attempt: job.item.attempts,
                }
                .send(who);
                let hung = self.stall.swap(false, Ordering::SeqCst);
                let cancelled = if hung {
                    // A stuck handler: it waits and reports no progress. Only the
                    // cancellation the watchdog fires ends the wait.
                    Fact::Hung { id, token }.send(who);
                    job.cancel.cancelled().await;
                    true
                } else {
                    self.work(&job).await
                };
                if let Err(e) = job.check() {
                    let reason = match e.lost_reason() {
                        Some(cause) => cause.to_string(),
                        None => e.to_string(),
                    };
                    Fact::Cancelled { id, token, reason }.send(who);
                } else if cancelled {
                    let reason = "its cancellation fired".to_owned();
                    Fact::Cancelled { id, token, reason }.send(who);
                }
                // Complete even after a cancellation: fencing, not good manners, is
                // what keeps a stale owner from finishing an item somebody else now
                // owns.
                let mut tries = 0;
                loop {
                    match self.member.complete(&job).await {
                        Ok(()) => Fact::Done { id, token }.send(who),
                        Err(Error::Fenced { .. }) => Fact::Fenced { id, token }.send(who),
                        Err(e) if e.is_retryable() && tries < 20 => {
                            tries += 1;
                            tokio::time::sleep(idle).await;
                            continue;
                        }
                        Err(e) => return Err((who, format!("complete {id}: {e}"))),
                    }
                    break;
                }
                if hung {
                    // It comes back slowly (a ttl, well within its watchdog): the
                    // item it hung on goes to another member.
                    tokio::time::sleep(self.pause).await;
                }
            }
        }
        Ok(())
    }

    /// Works on one item for a seeded while, telling the member's watchdog the job
    /// moves every 100 ms; true when the job's cancellation fired first.
    async fn work(&mut self, job: &Claimed) -> bool {
        let cancel = &job.cancel;
        let (lo, hi) = self.work_ms;
        let mut left = Duration::from_millis(self.rng.u64(lo..=hi));
        while !left.is_zero() {
            let slice = left.min(Duration::from_millis(100));
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return true,
                _ = tokio::time::sleep(slice) => {}
            }
            left -= slice;
            job.progress();
        }
        false
    }
}
