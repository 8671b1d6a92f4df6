//! What an enqueue costs: 20,000 jobs (or `--jobs N`) through `Queue::enqueue_many`
//! (chunks of `max_batch`), through single `enqueue` calls one after the other, and
//! through single `enqueue` calls from 64 tasks at once, each on a fresh namespace;
//! jobs per second, `--runs` times (3 by default) and the median.
//!
//! Run: `cargo bench -p liveness-postgres --bench enqueue -- [--jobs 20000]
//! [--runs 3] [--concurrency 64]`. It starts its own server through the test kit
//! (`fsync=off`), or uses `LIVENESS_POSTGRES_URL` (a durable server gives the figures
//! that matter: the commits wait for the disk).

use std::sync::Arc;
use std::time::{Duration, Instant};

use liveness_core::{OperatorStore, Queue, Store};

/// The command line.
#[derive(clap::Parser)]
struct Args {
    /// How many jobs each way enqueues.
    #[arg(long, default_value_t = 20_000)]
    jobs: usize,
    /// How many runs of the three ways.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// How many tasks enqueue at once in the concurrent way.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// `cargo bench` passes `--bench`.
    #[arg(long, hide = true)]
    bench: bool,
}

/// A store on a fresh namespace, its connections opened before the timing.
async fn fresh(server: &liveness_testkit::postgres::PgServer, pool: usize) -> Arc<dyn Store> {
    let ns = liveness_conformance::fresh_namespace();
    let url = server.url_with(&format!("ns={ns}&max_connections={pool}"));
    let store = liveness_postgres::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    let calls: Vec<_> = (0..pool)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.item_counts().await })
        })
        .collect();
    for call in calls {
        let _ = call.await;
    }
    Arc::new(store)
}

/// `n` jobs in `took`, in jobs per second.
fn rate(n: usize, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64()
}

fn median(mut all: Vec<f64>) -> f64 {
    all.sort_by(f64::total_cmp);
    all[all.len() / 2]
}

#[tokio::main]
async fn main() {
    let args: Args = clap::Parser::parse();
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    let (jobs, at_once) = (args.jobs, args.concurrency.max(1));
    println!("{jobs} jobs per way; concurrent way: {at_once} tasks, a pool of {at_once}");
    let (mut bulk, mut one_by_one, mut concurrent) = (Vec::new(), Vec::new(), Vec::new());
    for run in 1..=args.runs {
        let queue = Queue::new(fresh(server, 16).await);
        let payloads = vec![b"job"; jobs];
        let start = Instant::now();
        let ids = queue.enqueue_many(&payloads).await.expect("enqueue_many");
        assert_eq!(ids.len(), jobs);
        bulk.push(rate(jobs, start.elapsed()));

        let queue = Queue::new(fresh(server, 16).await);
        let start = Instant::now();
        for _ in 0..jobs {
            queue.enqueue(b"job").await.expect("enqueue");
        }
        one_by_one.push(rate(jobs, start.elapsed()));

        let queue = Arc::new(Queue::new(fresh(server, at_once).await));
        let start = Instant::now();
        let tasks: Vec<_> = (0..at_once)
            .map(|t| {
                let queue = queue.clone();
                let share = jobs / at_once + usize::from(t < jobs % at_once);
                tokio::spawn(async move {
                    for _ in 0..share {
                        queue.enqueue(b"job").await.expect("enqueue");
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("an enqueueing task");
        }
        concurrent.push(rate(jobs, start.elapsed()));
        println!(
            "run {run}: enqueue_many {:.0}/s, enqueue one by one {:.0}/s, enqueue from \
             {at_once} tasks {:.0}/s",
            bulk[run - 1],
            one_by_one[run - 1],
            concurrent[run - 1]
        );
    }
    println!(
        "median: enqueue_many {:.0}/s, enqueue one by one {:.0}/s, enqueue from {at_once} \
         tasks {:.0}/s",
        median(bulk),
        median(one_by_one),
        median(concurrent)
    );
}
