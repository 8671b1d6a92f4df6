//! The liveness demo: the story it tells is [`Cli`]'s doc (its `--help`).
//!
//! ```sh
//! cargo run --release -p examples --bin demo
//! cargo run --release -p examples --bin demo -- --help
//! ```
//!
//! The parent process enqueues the items (with [`liveness::Queue`]), runs the checker
//! and the live view, and re-executes this binary with the hidden `worker` subcommand
//! for each worker, each running one worker runner ([`liveness::Worker`]) per member
//! riding its one session. Workers
//! report what they do as one line per fact on their stdout (see [`proto`]); the parent
//! keeps its own tally from those lines and checks it against the store at the end.

mod dashboard;
mod deaths;
mod live;
mod parent;
mod proto;
mod stage;
mod summary;
mod view;
mod worker;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// Watch a worker fleet survive a SIGKILL, a SIGSTOP and a stuck job, on a real
/// shared store.
///
/// Starts a checker and N worker processes (children of this one) on a store (by
/// default a fresh SQLite file in a temporary directory). Each worker opens ONE
/// session (its process's lease) and runs several members riding it, each a worker
/// runner that claims one item at a time and runs the demo's handler on it. The demo
/// enqueues M items that take a little while each (the first fails on its first
/// attempt and is retried after a backoff; the last is scheduled to run two ttls, at
/// least 2 s, after its enqueue, by the store's clock), then kills
/// one worker with SIGKILL, makes one member of another hang in its job (its watchdog
/// releases it alone, its item goes to another member, its process's other members
/// go on), and freezes a third worker with SIGSTOP for longer than the ttl before
/// resuming it. Watch the checker declare each process death once with its members
/// and requeue their items, every member of the frozen worker stop when it wakes up,
/// its late completions refused by fencing (the runner stops a job whose lease is lost;
/// the demo's handler completes it anyway, on purpose), and its re-join with new
/// tokens.
///
/// The deaths it shows come from the store's death history, so a checker running
/// beside it on the same store (`liveness check`) may declare them instead.
///
/// Exits with status 0 when every item was done at least once, every invariant held
/// and the run showed all it promised; 1 when an invariant broke or the run failed
/// (aborted, a store error); 3 when every invariant held but the run did not show all
/// it promised (its result line says what); 2 on a usage or setup error.
#[derive(Parser, Debug)]
#[command(name = "demo", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// One worker process (started by the demo itself), its settings as JSON.
    #[command(hide = true)]
    Worker { settings: String },
}

/// The demo's options.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// The store every process connects to, by URL: `sqlite:///path/file.db?ns=NAME`,
    /// or any backend compiled into this build (`redis://`, `postgres://`, `etcd://`
    /// with the `examples` crate's features of the same names, e.g. `cargo run -p
    /// examples --features redis --bin demo -- --store redis://…`). Default: a new
    /// SQLite file in a temporary directory, deleted at the end. The namespace must hold no items. `memory://` cannot work:
    /// it lives inside one process and the workers are separate processes.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,

    /// How many worker processes to start (at least 2: one is killed, one frozen; a
    /// third hosts the stuck member, or the frozen one waits for it to be released).
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(2..=64))]
    pub workers: u32,

    /// How many members each worker process hosts, riding its one session, each with
    /// its own worker runner (at least 2: one of them hangs, the others go on).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=256))]
    pub members_per_worker: u32,

    /// How many items to enqueue (the first fails once; the last, of two or more, is
    /// scheduled).
    #[arg(long, value_name = "M", default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub items: u64,

    /// The members' lease ttl, counted by the store's clock: `3s`, `800ms`, or a
    /// number of milliseconds. A worker that stops renewing is declared dead about
    /// one ttl later; the frozen worker stays stopped for 2 × ttl + ttl / 2.
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    pub ttl: Duration,

    /// The members' watchdog: a member whose jobs make no claim, completion or
    /// progress report for this long is released alone, its items handed back
    /// (`3s`, `800ms`, or milliseconds). Default: 3 × ttl, longer than the freeze,
    /// which every member of the frozen worker sits out without progress.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub progress_timeout: Option<Duration>,

    /// The seed of the random work times, for reproducible runs (default: random,
    /// printed at the start).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,

    /// How long one item takes, in milliseconds: `MIN-MAX` (uniform, seeded).
    #[arg(long, value_name = "MIN-MAX", default_value = "100-400", value_parser = parse_range)]
    pub work_ms: (u64, u64),

    /// Start no checker in the demo: one running beside it on the same store
    /// (`liveness check --store URL`) declares the deaths, which the demo reads from
    /// the store's death history, as it always does. Without one, nobody declares
    /// them, and the run does not show what it promised.
    #[arg(long)]
    pub no_checker: bool,

    /// Plain log lines instead of the live view, even on a terminal (the default when
    /// stdout is not a terminal, as in CI).
    #[arg(long)]
    pub plain: bool,

    /// Serve the fleet's live dashboard at http://ADDR/ while the demo runs (e.g.
    /// `127.0.0.1:8080`; port 0 picks a free one): open it to watch the kill, the
    /// freeze and the requeues happen. Read-only.
    #[arg(long, value_name = "ADDR")]
    pub dashboard: Option<std::net::SocketAddr>,
}

/// One worker process's settings: the parent passes them as JSON to the hidden
/// `worker` subcommand.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct WorkerArgs {
    /// The store URL.
    pub store: String,
    /// The process's name: its session's, and its members' prefix.
    pub name: String,
    /// How many members ride its session.
    pub members: usize,
    /// The members' progress timeout in milliseconds.
    pub progress_timeout_ms: u64,
    /// The lease ttl in milliseconds.
    pub ttl_ms: u64,
    /// The seed of this worker's work times.
    pub seed: u64,
    /// Work time range in milliseconds.
    pub work_ms: (u64, u64),
}

/// A duration as `3s`, `800ms`, `1m 30s`, or a number of milliseconds; not zero.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = match s.trim().parse::<u64>() {
        Ok(ms) => Duration::from_millis(ms),
        Err(_) => humantime::parse_duration(s.trim())
            .map_err(|e| format!("{s:?} is not a duration like 3s, 800ms or 1500: {e}"))?,
    };
    match d.is_zero() {
        true => Err("the duration must be at least 1 ms".to_owned()),
        false => Ok(d),
    }
}

fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let bad = || format!("{s:?} is not a range like 100-400");
    let (a, b) = s.split_once('-').ok_or_else(bad)?;
    let a: u64 = a.trim().parse().map_err(|_| bad())?;
    let b: u64 = b.trim().parse().map_err(|_| bad())?;
    (a <= b).then_some((a, b)).ok_or_else(bad)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Worker { settings }) => {
            let code = match serde_json::from_str(&settings) {
                Ok(args) => worker::run(args).await,
                Err(e) => {
                    eprintln!("demo worker: bad settings: {e}");
                    2
                }
            };
            // Exit now: the stdin watcher's blocking read would hold the runtime's
            // shutdown until the parent closes the pipe.
            std::process::exit(code)
        }
        None => parent::run(cli.run).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_flags() {
        assert_eq!(parse_duration("3s"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("800ms"), Ok(Duration::from_millis(800)));
        assert_eq!(parse_duration("1500"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("soon").is_err());
        assert_eq!(parse_range("10-20"), Ok((10, 20)));
        assert!(parse_range("20-10").is_err());
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
