//! How soon a SIGKILLed worker's jobs run again: the target is within ttl + 1 s, on
//! every backend.
//!
//! `cargo run --release -p examples --features redis,postgres,etcd --bin rerun -- URL
//! [--runs 5] [--ttl-ms 5000] [--jobs 8]`. Each run, on a fresh namespace of the
//! store (the URL's `ns`, if any, gets a random suffix):
//!
//! 1. enqueues JOBS jobs with `Queue`;
//! 2. starts this program again as a victim process: one `Worker` (concurrency JOBS,
//!    no checker, the default member config but the ttl) whose handler prints
//!    `started ID` and never returns;
//! 3. once the victim holds every job, starts a rescuer `Worker` here (the defaults
//!    but the ttl: it runs an elected checker, as a user's fleet does), whose
//!    handler notes when it starts each job and completes it;
//! 4. waits a random 0..ttl/3, so that the kill lands anywhere in the victim's
//!    renewal cycle, notes the moment and SIGKILLs the victim;
//! 5. waits until the rescuer started every job (at most 10 × ttl + 30 s).
//!
//! A job's figure is its start in the rescuer minus the kill, on this process's
//! monotonic clock; each run prints the max and the median over its jobs, beside the
//! moment the rescuer's checker declared the victim dead (its `Died` event, sent once
//! the jobs are back to pending), and the last line the worst max beside ttl + 1 s.
//!
//! Why ttl + 1 s: the victim's lease expires at most one ttl after its last renewal,
//! which came before the kill, so at most one ttl after the kill. Then the checker
//! has to notice (it sleeps until the store's next expiry, at most 1 s between its
//! rounds), reap the member, sweep its items back to pending, and a worker has to
//! claim them (woken by the store's signal, or at its next poll, at most 1 s apart).
//! The second is what those steps may take together.

use std::collections::HashMap;
use std::io::Write;
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use liveness::{Event, Queue, Store, Ttl, Worker, WorkerConfig};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::broadcast::error::RecvError;

/// The errors of this program: a message for the user.
type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The command line.
#[derive(Parser)]
#[command(
    about = "How soon a SIGKILLed worker's jobs run again",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Args {
    /// The victim process (started by this program itself).
    #[command(subcommand)]
    victim: Option<Victim>,
    /// The store, as `liveness::connect` takes it; a fresh namespace is added.
    #[arg(required = true)]
    url: Option<String>,
    /// How many runs, each on a fresh namespace.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// The lease ttl of both workers, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    ttl_ms: u64,
    /// How many jobs the victim holds when it is killed.
    #[arg(long, default_value_t = 8)]
    jobs: usize,
}

/// The hidden subcommand.
#[derive(Subcommand)]
enum Victim {
    /// One worker holding every job until it is killed.
    #[command(hide = true)]
    Victim {
        /// The store, its namespace included.
        #[arg(long)]
        url: String,
        /// The lease ttl, in milliseconds.
        #[arg(long)]
        ttl_ms: u64,
        /// How many jobs it runs at once.
        #[arg(long)]
        jobs: usize,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Args = Parser::parse();
    let done = match args.victim {
        Some(Victim::Victim { url, ttl_ms, jobs }) => victim(&url, ttl_ms, jobs).await,
        None => run(args).await,
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rerun: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The victim: one worker whose handler says which job it started, then hangs.
async fn victim(url: &str, ttl_ms: u64, jobs: usize) -> Result<()> {
    let store = liveness::connect(url).await?;
    let config = WorkerConfig::new("victim", Ttl::from_millis(ttl_ms)?)?
        .concurrency(jobs)
        .checker(false);
    let _worker = Worker::start(store, config, |job| async move {
        {
            let mut out = std::io::stdout().lock();
            writeln!(out, "started {}", job.id().0)?;
            out.flush()?;
        }
        std::future::pending().await
    })
    .await?;
    std::future::pending().await
}

/// Measures `args.runs` kills and prints the table.
async fn run(args: Args) -> Result<()> {
    let url = args.url.as_deref().ok_or("give the store's URL")?;
    if args.runs == 0 || args.jobs == 0 {
        return Err("--runs and --jobs must be at least 1".into());
    }
    let ttl = Ttl::from_millis(args.ttl_ms)?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let mut rows = Vec::with_capacity(args.runs);
    let mut backend = String::new();
    for _ in 0..args.runs {
        let (name, dead, mut took) = one_run(&exe, url, ttl, args.jobs).await?;
        took.sort();
        backend = name;
        rows.push((took[took.len() - 1], took[(took.len() - 1) / 2], dead));
    }
    let secs = |d: Duration| format!("{:.3}", d.as_secs_f64());
    let bound = ttl.duration() + Duration::from_secs(1);
    println!(
        "{backend}, ttl {} s, {} jobs held by the killed worker",
        secs(ttl.duration()),
        args.jobs
    );
    println!("| run | declared dead s | max s | p50 s |");
    println!("| ---: | ---: | ---: | ---: |");
    for (i, (max, p50, dead)) in rows.iter().enumerate() {
        let dead = dead.map_or("?".to_owned(), secs);
        println!("| {} | {dead} | {} | {} |", i + 1, secs(*max), secs(*p50));
    }
    let worst = rows.iter().map(|r| r.0).max().unwrap_or_default();
    let met = if worst <= bound { "met" } else { "NOT met" };
    println!(
        "worst max {} s; target ttl + 1 s = {} s: {met}",
        secs(worst),
        secs(bound)
    );
    Ok(())
}

/// One kill on a fresh namespace of `url`: answers the backend's name, when the
/// rescuer's checker declared the victim dead (its `Died` event, after it requeued the
/// jobs) and, per job, its start in the rescuer; each minus the kill.
async fn one_run(
    exe: &std::path::Path,
    url: &str,
    ttl: Ttl,
    jobs: usize,
) -> Result<(String, Option<Duration>, Vec<Duration>)> {
    let url = examples::in_fresh_namespace(url, "rerun");
    let store: Arc<dyn Store> = liveness::connect(&url).await?;
    let payloads = vec![b"job"; jobs];
    Queue::new(store.clone()).enqueue_many(&payloads).await?;
    let give_up = ttl.duration() * 10 + Duration::from_secs(30);

    let mut child = Command::new(exe)
        .args(["victim", "--url", &url, "--ttl-ms"])
        .arg(ttl.duration().as_millis().to_string())
        .args(["--jobs", &jobs.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the victim: {e}"))?;
    let pid = child.id().ok_or("the victim exited at once")?;
    let stdout = child.stdout.take().ok_or("no stdout from the victim")?;
    let mut lines = BufReader::new(stdout).lines();
    let holds_all = async {
        let mut held = 0;
        while held < jobs {
            match lines.next_line().await? {
                Some(line) if line.starts_with("started ") => held += 1,
                Some(_) => {}
                None => return Err("the victim exited before it held every job".into()),
            }
        }
        Result::Ok(())
    };
    tokio::time::timeout(give_up, holds_all)
        .await
        .map_err(|_| "the victim did not start every job in time")??;

    // The rescuer: first start of each job, by item id.
    let starts: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let seen = starts.clone();
    let config = WorkerConfig::new("rescuer", ttl)?;
    let mut events = config.member.events.subscribe();
    let mut died = tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(Event::Died { key, .. }) if key.name().as_str() == "victim" => {
                    return Some(Instant::now())
                }
                Err(RecvError::Closed) => return None,
                _ => {}
            }
        }
    });
    let rescuer = Worker::start(store.clone(), config, move |job| {
        let at = Instant::now();
        let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.entry(job.id().0).or_insert(at);
        async { Ok(()) }
    })
    .await?;

    tokio::time::sleep((ttl.duration() / 3).mul_f64(fastrand::f64())).await;
    let killed_at = Instant::now();
    let pid = Pid::from_raw(i32::try_from(pid)?);
    kill(pid, Signal::SIGKILL).map_err(|e| format!("cannot kill the victim: {e}"))?;
    child.wait().await?;

    let all_started = || starts.lock().map_or(0, |s| s.len()) >= jobs;
    while !all_started() {
        if killed_at.elapsed() > give_up {
            let n = starts.lock().map_or(0, |s| s.len());
            return Err(format!("only {n} of {jobs} jobs ran again within {give_up:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let dead = tokio::time::timeout(Duration::from_secs(1), &mut died).await;
    died.abort();
    let dead = dead.ok().and_then(|d| d.ok().flatten());
    let dead = dead.and_then(|at| at.checked_duration_since(killed_at));
    rescuer.shutdown(Duration::from_secs(5)).await?;
    let starts = starts.lock().unwrap_or_else(|e| e.into_inner());
    let took = starts
        .values()
        .map(|at| at.checked_duration_since(killed_at))
        .collect::<Option<Vec<_>>>()
        .ok_or("the rescuer started a job before the victim was killed")?;
    Ok((store.backend().to_string(), dead, took))
}
