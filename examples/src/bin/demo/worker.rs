//! One worker process: joins as a member, claims items one at a time, "works" on each
//! for a seeded while, and completes it, reporting every fact to the parent.
//!
//! When its cancellation fires mid-item (the frozen worker, once resumed), it still
//! tries to complete the item — as a careless worker would — so the audience sees the
//! store refuse the stale completion with `Error::Fenced`.

use std::time::Duration;

use liveness::{Error, Event, HolderId, HolderLoss, Member, MemberConfig, Store, Ttl};
use tokio::io::AsyncReadExt;

use crate::proto::Fact;
use crate::WorkerArgs;

fn fail(message: String) -> i32 {
    Fact::Error { message }.send();
    1
}

/// Runs the worker until every item is done (nothing pending or owned), or the
/// parent goes away (stdin closes). Returns the process exit code; the caller exits
/// with it at once (tokio's blocking stdin read would hold a runtime shutdown).
pub async fn run(args: WorkerArgs) -> i32 {
    let store: std::sync::Arc<dyn Store> = match liveness::connect(&args.store).await {
        Ok(s) => s,
        Err(e) => return fail(format!("connect: {e}")),
    };
    let config = match Ttl::from_millis(args.ttl_ms)
        .and_then(|ttl| MemberConfig::new(&args.name, ttl))
        .and_then(|c| {
            let holder = HolderId::new(format!("{}@pid{}", args.name, std::process::id()))?;
            Ok(c.holder(holder))
        }) {
        Ok(c) => c,
        Err(e) => return fail(format!("config: {e}")),
    };
    let ttl = config.heartbeat.ttl.duration();
    let mut events = config.events.subscribe();
    // Ends when the member and its heartbeat are gone (the bus closes).
    let forwarder = tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            let fact = match event {
                Event::Joined { token, .. } => Fact::Joined { token: token.0 },
                Event::Lost { token, reason, .. } => Fact::Lost {
                    token: token.0,
                    reason: match reason {
                        HolderLoss::Store(r) => format!("the store answered: {r}"),
                        HolderLoss::Deadline => "its local safety deadline passed".to_owned(),
                        HolderLoss::Fault => "a store fault".to_owned(),
                        HolderLoss::StoreLostState => "the store lost its state".to_owned(),
                        HolderLoss::Stalled => "its watchdog: no progress in time".to_owned(),
                    },
                },
                _ => continue,
            };
            fact.send();
        }
    });

    // The parent holds our stdin open; EOF means it is gone (or wants us to stop).
    let parent_gone = liveness::CancellationToken::new();
    tokio::spawn({
        let parent_gone = parent_gone.clone();
        async move {
            let mut buf = [0u8; 64];
            let mut stdin = tokio::io::stdin();
            while matches!(stdin.read(&mut buf).await, Ok(n) if n > 0) {}
            parent_gone.cancel();
        }
    });

    let member = match Member::join(store.clone(), config).await {
        Ok(m) => m,
        Err(e) => return fail(format!("join: {e}")),
    };
    let mut rng = fastrand::Rng::with_seed(args.seed);
    let (lo, hi) = args.work_ms;
    let idle = Duration::from_millis(25);

    while !parent_gone.is_cancelled() {
        let jobs = match member.claim(1).await {
            Ok(jobs) => jobs,
            // Lost: the heartbeat is re-joining; a fault: try again shortly.
            Err(e) if e.is_retryable() || e.lost_reason().is_some() => {
                tokio::time::sleep(idle).await;
                continue;
            }
            Err(e) => return fail(format!("claim: {e}")),
        };
        if jobs.is_empty() {
            match store.item_counts().await {
                Ok(c) if c.pending == 0 && c.owned == 0 => break,
                Ok(_) => {}
                Err(e) if e.is_retryable() => {}
                Err(e) => return fail(format!("item_counts: {e}")),
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
            .send();
            let work = Duration::from_millis(rng.u64(lo..=hi));
            let cancelled = tokio::select! {
                biased;
                _ = job.cancel.cancelled() => true,
                _ = tokio::time::sleep(work) => false,
            };
            if cancelled {
                Fact::Cancelled { id, token }.send();
            }
            // Complete even after a cancellation: fencing, not good manners, is what
            // keeps a stale owner from finishing an item somebody else now owns.
            let mut tries = 0;
            loop {
                match member.complete(&job).await {
                    Ok(()) => Fact::Done { id, token }.send(),
                    Err(Error::Fenced { .. }) => Fact::Fenced { id, token }.send(),
                    Err(e) if e.is_retryable() && tries < 20 => {
                        tries += 1;
                        tokio::time::sleep(idle).await;
                        continue;
                    }
                    Err(e) => return fail(format!("complete {id}: {e}")),
                }
                break;
            }
        }
    }
    // A member whose lease was lost (the frozen one, just resumed) re-joins on its
    // own; let it, so that it leaves under a live token and the re-join is seen.
    if member.cancelled().is_cancelled() {
        let mut generations = member.generations();
        let rejoined = async {
            while generations.borrow_and_update().cancel.is_cancelled() {
                if generations.changed().await.is_err() {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(ttl * 3, rejoined).await;
    }
    let token = member.token().0;
    match member.leave(Duration::from_secs(1)).await {
        Ok(()) => Fact::Left { token }.send(),
        // A member that lost its lease just before leaving has nothing to release.
        Err(e) if e.lost_reason().is_some() => {}
        Err(e) => return fail(format!("leave: {e}")),
    }
    // Let the event forwarder print what is left before the process exits.
    let _ = tokio::time::timeout(Duration::from_secs(1), forwarder).await;
    0
}
