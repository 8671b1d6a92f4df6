//! Jobs per second through this project's queue and worker runner, beside the job
//! queue a user would pick instead, on the same server in the same run: BullMQ on a
//! `redis://` URL, graphile-worker on a `postgres://` URL.
//!
//! `cargo run --release -p examples --features redis,postgres --bin peers -- URL
//! [JOBS] [--runs N] [--dead-letters N]` (20,000 jobs by default). With
//! `--dead-letters N`, a namespace of its own is first given N dead-lettered items
//! (jobs finished for good, through the runner: each fails once, never to be tried
//! again), so that both ways run beside a store that holds them. Each way enqueues JOBS trivial jobs in
//! bulk (here `Queue::enqueue_many`; BullMQ `Queue.addBulk`; graphile-worker
//! `addJobs`), then runs them with one worker of concurrency 64 in one process until
//! all are done. The peer runs as a Node.js script from `examples/peers/`, whose
//! packages are installed with `npm ci` when missing. Odd runs measure this project
//! first, even runs the peer first. Prints one table: jobs per second both ways and
//! the ratio (ours / the peer's; above 1, this project is faster).

use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use liveness::{EnqueueOptions, JobError, Queue, Store, Ttl, Worker, WorkerConfig};
use tokio::process::Command;

/// How many jobs run at once, both ways.
const AT_ONCE: usize = 64;

/// The errors of this program: a message for the user.
type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The command line.
#[derive(clap::Parser)]
#[command(about = "Jobs per second: this project beside BullMQ or graphile-worker")]
struct Args {
    /// The server, as `liveness::connect` takes it (`redis://…` runs BullMQ beside,
    /// `postgres://…` graphile-worker); this project's side adds a fresh namespace.
    url: String,
    /// How many jobs each way runs.
    #[arg(default_value_t = 20_000)]
    jobs: usize,
    /// How many runs; odd runs measure this project first, even runs the peer first.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Dead-lettered items to put in a namespace of their own before the runs.
    #[arg(long, default_value_t = 0)]
    dead_letters: usize,
}

/// The job queue measured beside this project's.
#[derive(Clone, Copy, Debug)]
enum Peer {
    /// BullMQ (with ioredis), on Redis.
    BullMq,
    /// graphile-worker, on PostgreSQL.
    GraphileWorker,
}

impl Peer {
    /// The peer that runs on the server `url` names.
    fn for_url(url: &str) -> Result<Peer> {
        let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
        match scheme {
            "redis" | "rediss" => Ok(Peer::BullMq),
            "postgres" | "postgresql" => Ok(Peer::GraphileWorker),
            _ => Err(format!(
                "no peer for the URL `{url}`: give a redis:// URL (BullMQ) or a \
                 postgres:// URL (graphile-worker)"
            )
            .into()),
        }
    }

    /// The peer's name in the table.
    fn name(self) -> &'static str {
        match self {
            Peer::BullMq => "BullMQ",
            Peer::GraphileWorker => "graphile-worker",
        }
    }

    /// The Node.js script in `examples/peers/` that measures the peer.
    fn script(self) -> &'static str {
        match self {
            Peer::BullMq => "bullmq.mjs",
            Peer::GraphileWorker => "graphile-worker.mjs",
        }
    }

    /// The URL parameters the peer's client also understands, passed on; the others
    /// are this project's own (`ns`, `durability`, pool sizes, …) and are dropped.
    fn driver_params(self) -> &'static [&'static str] {
        match self {
            // ioredis reads no query parameters this project takes.
            Peer::BullMq => &[],
            // node-postgres reads libpq's TLS parameters and the application name.
            Peer::GraphileWorker => &[
                "sslmode",
                "sslrootcert",
                "sslcert",
                "sslkey",
                "application_name",
            ],
        }
    }

    /// `url` in the form the peer's Node.js client takes: without the fragment and
    /// without the query parameters that are this project's own.
    fn node_url(self, url: &str) -> String {
        let url = url.split_once('#').map_or(url, |(url, _)| url);
        let Some((base, query)) = url.split_once('?') else {
            return url.to_owned();
        };
        let kept: Vec<&str> = query
            .split('&')
            .filter(|pair| {
                let name = pair.split_once('=').map_or(*pair, |(name, _)| name);
                self.driver_params().contains(&name)
            })
            .collect();
        match kept.is_empty() {
            true => base.to_owned(),
            false => format!("{base}?{}", kept.join("&")),
        }
    }
}

/// One way's figures, in jobs per second.
#[derive(Clone, Copy, Debug)]
struct Rates {
    /// Enqueueing all jobs in bulk.
    enqueue: f64,
    /// Running all jobs, from the worker's start to the last completion.
    process: f64,
}

/// One run: both ways, in the order they ran.
struct Run {
    ours: Rates,
    peer: Rates,
    peer_first: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(clap::Parser::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("peers: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Measures both ways `args.runs` times and prints the table.
async fn run(args: Args) -> Result<()> {
    let Args {
        url,
        jobs,
        runs,
        dead_letters,
    } = args;
    if jobs == 0 || runs == 0 {
        return Err("JOBS and --runs must be at least 1".into());
    }
    let peer = Peer::for_url(&url)?;
    if dead_letters > 0 {
        let start = Instant::now();
        fill_dead_letters(&url, dead_letters).await?;
        println!(
            "{dead_letters} dead-lettered items put in a namespace of their own in {:.1?}",
            start.elapsed()
        );
    }
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/peers"));
    let version = install(&dir).await?;
    println!(
        "{jobs} trivial jobs, concurrency {AT_ONCE}, one worker process each way; \
         {peer} on Node.js {version}",
        peer = peer.name()
    );
    let node_url = peer.node_url(&url);
    let mut done = Vec::with_capacity(runs);
    for run in 0..runs {
        let peer_first = run % 2 == 1;
        let (ours, theirs) = if peer_first {
            let theirs = measure_peer(peer, &dir, &node_url, jobs).await?;
            (measure_ours(&url, jobs).await?, theirs)
        } else {
            let ours = measure_ours(&url, jobs).await?;
            (ours, measure_peer(peer, &dir, &node_url, jobs).await?)
        };
        done.push(Run {
            ours,
            peer: theirs,
            peer_first,
        });
    }
    print_table(peer, &done);
    Ok(())
}

/// Checks that `node` and `npm` are there and installs the peers' packages in `dir`
/// (`npm ci`) when they are missing; answers Node's version.
async fn install(dir: &Path) -> Result<String> {
    let version = output(Command::new("node").arg("--version"), "node", "nodejs").await?;
    if !dir.join("node_modules").is_dir() {
        eprintln!(
            "installing the peers' packages: npm ci in {}",
            dir.display()
        );
        let mut npm = Command::new("npm");
        npm.arg("ci").current_dir(dir).stdout(Stdio::null());
        let status = spawned(npm.status().await, "npm", "npm")?;
        if !status.success() {
            return Err(format!("`npm ci` in {} failed: {status}", dir.display()).into());
        }
    }
    Ok(version.trim().to_owned())
}

/// Runs `command` and answers what it printed; `program` missing is an error naming
/// the Debian `package` that brings it.
async fn output(command: &mut Command, program: &str, package: &str) -> Result<String> {
    let out = spawned(command.output().await, program, package)?;
    if !out.status.success() {
        return Err(format!(
            "`{program}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `started`, with a missing program turned into an error naming its Debian package.
fn spawned<T>(started: std::io::Result<T>, program: &str, package: &str) -> Result<T> {
    started.map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!(
            "`{program}` is not installed (needed to run the peer): install the Debian \
             package `{package}` (apt-get install {package})"
        )
        .into(),
        _ => format!("cannot run `{program}`: {e}").into(),
    })
}

/// Runs the peer's script on `node_url` and reads its figures.
async fn measure_peer(peer: Peer, dir: &Path, node_url: &str, jobs: usize) -> Result<Rates> {
    let mut node = Command::new("node");
    node.arg(peer.script())
        .arg(node_url)
        .arg(jobs.to_string())
        .arg(AT_ONCE.to_string())
        .current_dir(dir)
        .stderr(Stdio::inherit());
    let out = output(&mut node, "node", "nodejs").await?;
    let line = out
        .lines()
        .find(|line| line.starts_with("peer="))
        .ok_or_else(|| format!("{} printed no figures: {out}", peer.script()))?;
    let value = |key: &str| -> Result<f64> {
        line.split_whitespace()
            .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| format!("{} printed no `{key}`: {line}", peer.script()).into())
    };
    if value("failed")? != 0.0 {
        return Err(format!("jobs failed under {}: {line}", peer.name()).into());
    }
    Ok(Rates {
        enqueue: value("enqueue_per_s")?,
        process: value("process_per_s")?,
    })
}

/// Enqueues `jobs` trivial jobs with `Queue::enqueue_many` on a fresh namespace of
/// `url`, then runs them with one worker of concurrency 64 (otherwise the defaults)
/// until none is pending or owned.
async fn measure_ours(url: &str, jobs: usize) -> Result<Rates> {
    let store = connect(url).await?;
    let payloads = vec![b"job"; jobs];
    let start = Instant::now();
    let ids = Queue::new(store.clone()).enqueue_many(&payloads).await?;
    let enqueue = rate(ids.len(), start.elapsed());

    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let config = WorkerConfig::new("peers-bench", Ttl::from_secs(10)?)?.concurrency(AT_ONCE);
    let start = Instant::now();
    let worker = Worker::start(store.clone(), config, move |_| {
        counter.fetch_add(1, Ordering::Relaxed);
        async { Ok(()) }
    })
    .await?;
    // The store is asked only once every handler has run, so that the waiting does
    // not load it: then until the last completion is written.
    while ran.load(Ordering::Relaxed) < jobs {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    loop {
        let counts = store.item_counts().await?;
        if counts.pending + counts.owned == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let took = start.elapsed();
    let report = worker.shutdown(Duration::ZERO).await?;
    let completed = usize::try_from(report.completed)?;
    if completed != jobs {
        return Err(format!("the worker completed {completed} of {jobs} jobs").into());
    }
    Ok(Rates {
        enqueue,
        process: rate(completed, took),
    })
}

/// Puts `n` dead-lettered items in a fresh namespace of `url`: enqueued with one
/// attempt each, and failed by a worker whose handler fails every job.
async fn fill_dead_letters(url: &str, n: usize) -> Result<()> {
    let store = connect(url).await?;
    let once = EnqueueOptions::default().max_attempts(1);
    let queue = Queue::new(store.clone());
    for chunk in vec![b"finished"; n].chunks(100_000) {
        queue.enqueue_many_with(chunk, once).await?;
    }
    let config = WorkerConfig::new("peers-fill", Ttl::from_secs(10)?)?.concurrency(AT_ONCE);
    let worker = Worker::start(store.clone(), config, |_| async {
        Err::<(), _>(JobError::fail("finished for good"))
    })
    .await?;
    while (store.item_counts().await?.dead_lettered as usize) < n {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    worker.shutdown(Duration::ZERO).await?;
    Ok(())
}

/// The store at `url` on a namespace no earlier run used.
async fn connect(url: &str) -> Result<Arc<dyn Store>> {
    Ok(liveness::connect(&examples::in_fresh_namespace(url, "peers")).await?)
}

/// `n` jobs in `took`, in jobs per second.
fn rate(n: usize, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64()
}

/// Prints every run's figures and ratios, then the medians.
fn print_table(peer: Peer, runs: &[Run]) {
    let name = peer.name();
    println!(
        "{:<12} | {:>10} {:>16} {:>7} | {:>10} {:>16} {:>7}",
        "run", "enqueue", name, "ratio", "process", name, "ratio"
    );
    let row = |label: &str, ours: Rates, theirs: Rates| {
        println!(
            "{label:<12} | {:>10.0} {:>16.0} {:>7.2} | {:>10.0} {:>16.0} {:>7.2}",
            ours.enqueue,
            theirs.enqueue,
            ours.enqueue / theirs.enqueue,
            ours.process,
            theirs.process,
            ours.process / theirs.process
        );
    };
    for (i, run) in runs.iter().enumerate() {
        let order = if run.peer_first {
            "peer 1st"
        } else {
            "ours 1st"
        };
        row(&format!("{} {order}", i + 1), run.ours, run.peer);
    }
    if runs.len() > 1 {
        let median = |pick: fn(&Run) -> f64| {
            let mut all: Vec<f64> = runs.iter().map(pick).collect();
            all.sort_by(f64::total_cmp);
            all[all.len() / 2]
        };
        let ours = Rates {
            enqueue: median(|r| r.ours.enqueue),
            process: median(|r| r.ours.process),
        };
        let theirs = Rates {
            enqueue: median(|r| r.peer.enqueue),
            process: median(|r| r.peer.process),
        };
        row("median", ours, theirs);
    }
    println!("(jobs per second; ratio = this project / {name}, above 1: this project is faster)");
}

#[cfg(test)]
mod tests {
    use super::Peer;

    #[test]
    fn node_urls_keep_only_the_clients_parameters() {
        assert_eq!(
            Peer::BullMq.node_url("redis://127.0.0.1:6390?ns=x&durability=relaxed"),
            "redis://127.0.0.1:6390"
        );
        assert_eq!(
            Peer::GraphileWorker
                .node_url("postgres://u:p@h:5440/db?max_connections=8&sslmode=require&ns=x#frag"),
            "postgres://u:p@h:5440/db?sslmode=require"
        );
        assert_eq!(Peer::BullMq.node_url("redis://h"), "redis://h");
    }
}
