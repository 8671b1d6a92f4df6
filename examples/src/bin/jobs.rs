//! Jobs per second through the worker runner, beside the loop a user would write by
//! hand on the same store in the same run: N trivial jobs, 64 at a time, one process.
//!
//! `cargo run --release -p examples --bin jobs [STORE_URL] [JOBS]` (default
//! `memory://`, 20,000 jobs). Prints one line per way and the runner's ratio to the
//! hand-written loop (above 1: the runner is faster).

use std::sync::Arc;
use std::time::{Duration, Instant};

use liveness::{Member, MemberConfig, Queue, Store, Ttl, Worker, WorkerConfig};

/// How many jobs run at once, both ways.
const AT_ONCE: usize = 64;

/// The command line.
#[derive(clap::Parser)]
#[command(about = "Jobs per second: the worker runner beside a hand-written loop")]
struct Args {
    /// The store, as `liveness::connect` takes it; each way runs on a namespace of
    /// its own, added to the URL.
    #[arg(default_value = "memory://")]
    url: String,
    /// How many jobs each way runs.
    #[arg(default_value_t = 20_000)]
    jobs: usize,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Args { url, jobs } = clap::Parser::parse();
    let ttl = Ttl::from_secs(10)?;
    // Each way on a namespace of its own, the hand-written loop first.
    let by_hand = {
        let store = connect(&url, "jobs_by_hand").await?;
        fill(&store, jobs).await?;
        let member = Member::join(store.clone(), MemberConfig::new("by-hand", ttl)?).await?;
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..AT_ONCE {
            let member = member.clone();
            tasks.spawn(async move {
                let mut done = 0usize;
                loop {
                    // A retryable fault (a conflict, a timeout) is tried again.
                    let claimed = match member.claim(1).await {
                        Err(e) if e.is_retryable() => continue,
                        answer => answer?,
                    };
                    if claimed.is_empty() {
                        return Ok::<_, liveness::Error>(done);
                    }
                    for job in claimed {
                        loop {
                            match member.complete(&job).await {
                                Err(e) if e.is_retryable() => continue,
                                answer => break answer?,
                            }
                        }
                        done += 1;
                    }
                }
            });
        }
        let mut done = 0;
        while let Some(n) = tasks.join_next().await {
            done += n??;
        }
        let took = start.elapsed();
        member.leave(Duration::ZERO).await?;
        report("by hand (claim(1) + complete, 64 tasks)", done, took)
    };
    let runner = {
        let store = connect(&url, "jobs_runner").await?;
        fill(&store, jobs).await?;
        let config = WorkerConfig::new("runner", ttl)?
            .concurrency(AT_ONCE)
            .checker(false);
        let start = Instant::now();
        let worker = Worker::start(store.clone(), config, |_| async { Ok(()) }).await?;
        while store.item_counts().await?.pending + store.item_counts().await?.owned > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let took = start.elapsed();
        let done = worker.shutdown(Duration::ZERO).await?.completed;
        report("worker runner (concurrency 64)", done as usize, took)
    };
    println!("runner / by hand: {:.2}", runner / by_hand);
    Ok(())
}

/// The store at `url` on namespace `ns` (added to the URL's parameters).
async fn connect(url: &str, ns: &str) -> liveness::Result<Arc<dyn Store>> {
    let sep = if url.contains('?') { '&' } else { '?' };
    liveness::connect(&format!("{url}{sep}ns={ns}")).await
}

/// Enqueues `n` trivial jobs, 64 calls at a time.
async fn fill(store: &Arc<dyn Store>, n: usize) -> liveness::Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    for part in 0..AT_ONCE {
        let queue = Queue::new(store.clone());
        let mine = n / AT_ONCE + usize::from(part < n % AT_ONCE);
        tasks.spawn(async move {
            for _ in 0..mine {
                // A retryable fault (etcd answers `Contention` to racing writes) is
                // tried again: the bench counts jobs, not faults.
                while let Err(e) = queue.enqueue(b"job").await {
                    if !e.is_retryable() {
                        return Err(e);
                    }
                }
            }
            Ok::<_, liveness::Error>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.map_err(|e| liveness::Error::backend("jobs", e.to_string()))??;
    }
    Ok(())
}

/// Prints `what`'s rate and answers it in jobs per second.
fn report(what: &str, done: usize, took: Duration) -> f64 {
    let rate = done as f64 / took.as_secs_f64();
    println!("{what:<42} {done:>7} jobs in {took:>9.2?}: {rate:>9.0} jobs/s");
    rate
}
