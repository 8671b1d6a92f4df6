//! How late scheduled jobs start: jobs enqueued with `Queue::enqueue_in` at random
//! moments, with random delays, run by one idle worker; prints how long after its
//! due time each job's handler started.
//!
//! `cargo run --release -p examples --features redis,postgres --bin schedule -- URL
//! [JOBS] [--longest-ms 3000] [--workers 1]` (500 jobs by default). The delay is counted
//! by the store's own clock; no host clock is read, so running this under
//! `FAKETIME_DONT_FAKE_MONOTONIC=1 faketime -f +10m` (the wall clock ten minutes
//! off) gives the same figures.
//!
//! A job's lateness is the moment its handler started minus (the moment its enqueue
//! was sent + its delay), both on this process's monotonic clock. The store counts
//! the delay from the enqueue's arrival, a little after it was sent, so the figure
//! is an upper bound; a negative one would be a job started early, and is counted.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use liveness::{Queue, Store, Ttl, Worker, WorkerConfig};

/// The errors of this program: a message for the user.
type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The command line.
#[derive(clap::Parser)]
#[command(about = "How late scheduled jobs start, by the store's clock")]
struct Args {
    /// The store, as `liveness::connect` takes it; a fresh namespace is added.
    url: String,
    /// How many scheduled jobs.
    #[arg(default_value_t = 500)]
    jobs: usize,
    /// The longest delay in milliseconds; each job's is drawn between a tenth of it
    /// and it.
    #[arg(long, default_value_t = 3000)]
    longest_ms: u64,
    /// How many workers (each its own member) run the jobs.
    #[arg(long, default_value_t = 1)]
    workers: usize,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Args = clap::Parser::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("schedule: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<()> {
    let longest = Duration::from_millis(args.longest_ms);
    let store = connect(&args.url).await?;
    let started: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; args.jobs]));
    let mut workers = Vec::new();
    for w in 0..args.workers {
        let config = WorkerConfig::new(&format!("schedule-{w}"), Ttl::from_secs(10)?)?
            .concurrency(64)
            .checker(false);
        let seen = started.clone();
        let worker = Worker::start(store.clone(), config, move |job| {
            let at = Instant::now();
            let seen = seen.clone();
            async move {
                let i: usize = std::str::from_utf8(job.payload())?.parse()?;
                let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(slot) = seen.get_mut(i) {
                    *slot = Some(at);
                }
                Ok(())
            }
        })
        .await?;
        workers.push(worker);
    }

    // Enqueue at random moments, so that the workers are in every state (asleep on
    // a long pause, just woken, claiming) when a job is scheduled or comes due.
    let queue = Queue::new(store.clone());
    let mut due = Vec::with_capacity(args.jobs);
    let shortest = longest / 10;
    for i in 0..args.jobs {
        let delay = shortest + (longest - shortest).mul_f64(fastrand::f64());
        let sent = Instant::now();
        queue.enqueue_in(i.to_string().as_bytes(), delay).await?;
        due.push(sent + delay);
        tokio::time::sleep(Duration::from_micros(fastrand::u64(0..10_000))).await;
    }
    let give_up = Instant::now() + longest + Duration::from_secs(30);
    loop {
        let counts = store.item_counts().await?;
        if counts.pending + counts.owned == 0 {
            break;
        }
        if Instant::now() > give_up {
            return Err(format!("jobs left after 30 s past the last due time: {counts:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for worker in workers {
        worker.shutdown(Duration::from_secs(5)).await?;
    }

    let started = started.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut late = Vec::with_capacity(args.jobs);
    let mut early = 0;
    for (at, due) in started.iter().zip(&due) {
        let at = at.ok_or("a job never ran")?;
        match at.checked_duration_since(*due) {
            Some(d) => late.push(d),
            None => early += 1,
        }
    }
    late.sort();
    let pick = |q: f64| late[((late.len() as f64 - 1.0) * q).round() as usize];
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1000.0);
    println!(
        "| store | jobs | longest delay | workers | late p50 ms | late p99 ms | late max ms | early |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    println!(
        "| {} | {} | {:?} | {} | {} | {} | {} | {} |",
        store.backend(),
        args.jobs,
        longest,
        args.workers,
        ms(pick(0.5)),
        ms(pick(0.99)),
        ms(pick(1.0)),
        early
    );
    if early > 0 {
        return Err(format!("{early} jobs started before their due time").into());
    }
    Ok(())
}

/// The store at `url` on a namespace no earlier run used.
async fn connect(url: &str) -> Result<Arc<dyn Store>> {
    Ok(liveness::connect(&examples::in_fresh_namespace(url, "schedule")).await?)
}
