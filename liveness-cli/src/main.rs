//! `liveness`: the operator's command for any store of the liveness framework. Who is
//! alive, who died, what is stuck; a standalone checker; a live view; a bench.
//!
//! Exit codes: 0 done; 2 bad input (an argument, a URL, an item id) with a one-line
//! reason; 3 the store did not answer (unreachable, or not within `--timeout`); 1 any
//! other failure.

mod bench;
mod cancel;
mod check;
mod dashboard;
mod deaths;
mod items;
mod members;
mod output;
mod queues;
mod retry;
mod sessions;
mod watch;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use liveness::{CheckerConfig, Error, ItemStateKind, Store};

/// Who is alive, who died, what is stuck: the operator's view of a liveness store.
#[derive(Debug, Parser)]
#[command(name = "liveness", version)]
struct Cli {
    /// The store's URL, as `liveness::connect` takes it: sqlite:///path/file.db?ns=NAME,
    /// redis://HOST:PORT?ns=NAME, postgres://USER@HOST/DB?ns=NAME, etcd://HOST:PORT?ns=NAME.
    /// Reading commands (members, deaths, items, queues, watch) open only a store that is
    /// there: a missing file, schema or namespace is refused (exit 2), never created.
    #[arg(long, global = true, env = "LIVENESS_STORE", value_name = "URL")]
    store: Option<String>,
    /// Print JSON (one document; `watch` prints one line per refresh) instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// How long to wait for the store to answer (connecting, and each one-shot
    /// command) before exiting with status 3.
    #[arg(long, global = true, default_value = "10s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The leases of a space (live, or expired and not yet reaped), in name order.
    ///
    /// When some of them ride a session (one per process), the table groups them: a
    /// line per session (its key, its member count and time left) above its members,
    /// sessions in key order, then `own leases` above the members with a lease of
    /// their own. The grouping is of the members read (at most --limit, in name
    /// order; the store pages by name): a session's members past the limit are not
    /// counted. `--json` stays in name order, each member naming its `session`.
    Members {
        /// The space to list.
        #[arg(long, default_value = "members")]
        space: String,
        /// List (or, with --sessions, count over) at most this many members (at least 1).
        #[arg(long, default_value = "1000", allow_hyphen_values = true, value_parser = parse_limit)]
        limit: usize,
        /// One table in name order, without the session lines.
        #[arg(long, conflicts_with = "sessions")]
        flat: bool,
        /// Instead of the members, one line per session they ride: its key, holder,
        /// token, member count (among the members read, at most --limit) and time left.
        #[arg(long)]
        sessions: bool,
    },
    /// The death history, newest first: who died, why, and where their items went.
    Deaths {
        /// Only deaths at most this long ago by the store clock (`90s`, `15m`, `1h`).
        #[arg(long, allow_hyphen_values = true, value_parser = parse_since)]
        since: Option<Duration>,
        /// List at most this many (at least 1).
        #[arg(long, default_value = "100", allow_hyphen_values = true, value_parser = parse_limit)]
        limit: usize,
    },
    /// Item counts by state, or with `--state`, the items in one state.
    Items {
        /// List the items in this state instead of counting.
        #[arg(long, value_enum)]
        state: Option<StateArg>,
        /// List at most this many (at least 1).
        #[arg(long, default_value = "100", allow_hyphen_values = true, value_parser = parse_limit)]
        limit: usize,
    },
    /// Each queue that holds items, in name order, with its items by state (pending
    /// counts scheduled jobs and retries waiting out their backoff).
    Queues,
    /// Moves a dead-lettered item (or all of them) back to pending, attempts reset.
    Retry {
        /// The item's id.
        #[arg(required_unless_present = "all_dead_letters")]
        id: Option<u64>,
        /// Retry every dead-lettered item.
        #[arg(long, conflicts_with = "id")]
        all_dead_letters: bool,
    },
    /// Removes a pending or scheduled item (cancel) or a dead-lettered one (discard);
    /// one a worker owns is left to it.
    Cancel {
        /// The item's id.
        id: u64,
    },
    /// Runs a checker until SIGTERM or SIGINT: declares expired members dead, requeues
    /// their items, and logs every death.
    Check {
        /// Serve the dashboard at http://ADDR/, Prometheus metrics at
        /// http://ADDR/metrics and a health check at http://ADDR/health: 200 while
        /// rounds complete (the last one within 3 × --check-every, at least 5s), 503
        /// with the reason otherwise. ADDR is HOST:PORT, or a PORT on 127.0.0.1.
        #[arg(long, alias = "metrics", value_name = "ADDR", value_parser = dashboard::parse_http_addr)]
        http: Option<SocketAddr>,
        #[command(flatten)]
        dashboard: dashboard::DashboardArgs,
        /// The space to watch.
        #[arg(long, default_value = "members")]
        space: String,
        /// The longest pause between rounds.
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        check_every: Duration,
    },
    /// A live view of members, items and deaths, refreshed in place; Ctrl-C exits.
    Watch {
        /// The space to show.
        #[arg(long, default_value = "members")]
        space: String,
        /// How often to refresh (100ms to 1day).
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        every: Duration,
    },
    /// Prints a completion script for a shell: `liveness completions bash >
    /// /etc/bash_completion.d/liveness`, or for zsh, fish, elvish or powershell.
    /// Needs no store.
    Completions {
        /// The shell to complete in.
        shell: clap_complete::Shell,
    },
    /// Measures this deployment with the bench kit (liveness-bench): renewals per
    /// second, checker rounds, detection latency. Writes to fresh namespaces `bench_*`.
    Bench {
        /// Live member counts for the checker-round figures.
        #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
        members: Vec<usize>,
        /// Concurrency levels for the renewal figures.
        #[arg(long, value_delimiter = ',', default_value = "1,64")]
        concurrency: Vec<usize>,
        /// How long each renewal measurement runs, in seconds.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// How many deaths the detection latency is measured over (0: skip it).
        #[arg(long, default_value_t = 20)]
        deaths: usize,
    },
}

/// An item state on the command line.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum StateArg {
    Pending,
    Owned,
    DeadLettered,
}

impl From<StateArg> for ItemStateKind {
    fn from(s: StateArg) -> Self {
        match s {
            StateArg::Pending => ItemStateKind::Pending,
            StateArg::Owned => ItemStateKind::Owned,
            StateArg::DeadLettered => ItemStateKind::DeadLettered,
        }
    }
}

/// Why the command failed, and so its exit status.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Bad input: exit 2.
    Input(String),
    /// The store did not answer: exit 3.
    Unreachable(String),
    /// Anything else: exit 1.
    Other(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        match e {
            Error::InvalidInput { .. } => Failure::Input(e.to_string()),
            e if e.is_retryable() => Failure::Unreachable(e.to_string()),
            e => Failure::Other(e.to_string()),
        }
    }
}

impl Failure {
    fn exit(self) -> ExitCode {
        let (code, msg) = match self {
            Failure::Input(m) => (2, m),
            Failure::Unreachable(m) => (3, m),
            Failure::Other(m) => (1, m),
        };
        // One line, whatever the store's client put in its message.
        let msg = msg.split_whitespace().collect::<Vec<_>>().join(" ");
        eprintln!("liveness: {msg}");
        ExitCode::from(code)
    }
}

/// What every command gets: the store, the options shared by all.
pub(crate) struct Ctx {
    pub store: Arc<dyn Store>,
    pub url: String,
    pub json: bool,
    /// How long one store call may take before the store counts as unreachable.
    pub timeout: Duration,
}

/// Awaits `fut` for at most `timeout`; past it, the store counts as unreachable.
pub(crate) async fn within<T>(
    timeout: Duration,
    fut: impl std::future::Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    tokio::time::timeout(timeout, fut)
        .await
        .unwrap_or_else(|_| {
            Err(Failure::Unreachable(format!(
                "the store did not answer within {}",
                humantime::format_duration(timeout)
            )))
        })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match cli.command {
        Command::Check { .. } => tracing::Level::INFO,
        _ => tracing::Level::WARN,
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_max_level(level)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return Failure::Other(format!("cannot start the runtime: {e}")).exit(),
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => f.exit(),
    }
}

/// The most rows a listing prints (`--limit`).
const MAX_LIMIT: usize = 1_000_000;

/// A `--limit`: a whole number from 1 to [`MAX_LIMIT`]. Negative numbers reach here as
/// values (not as unknown flags), so the message names the flag.
fn parse_limit(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        _ => Err(format!("must be a whole number from 1 to {MAX_LIMIT}")),
    }
}

/// A `--since`: a duration ago (`90s`, `15m`, `1h`), never negative.
fn parse_since(s: &str) -> Result<Duration, String> {
    if s.starts_with('-') {
        return Err("must be a duration ago, not negative: 90s, 15m, 1h".into());
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("{e}: expected a duration such as 90s, 15m, 1h"))
}

/// The shortest value any duration flag takes.
const MIN_FLAG_DURATION: Duration = Duration::from_millis(1);

/// The longest `--timeout`, `--check-every`, `--every` and `--seconds`: one day (the
/// longest `check_every` a checker takes, and the longest ttl of any store).
const MAX_FLAG_DURATION: Duration = CheckerConfig::MAX_CHECK_EVERY;

/// The longest `--since`: a hundred years (any history a store keeps).
const MAX_SINCE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The shortest `watch --every`: a redraw is a few store reads and a screenful of
/// output, so a shorter one would only load the store and flood the terminal.
const MIN_WATCH_EVERY: Duration = Duration::from_millis(100);

/// Refuses `flag`'s value `d` (bad input, exit 2) unless it is between
/// [`MIN_FLAG_DURATION`] and `max`.
fn in_range(flag: &str, d: Duration, max: Duration) -> Result<(), Failure> {
    in_bounds(flag, d, MIN_FLAG_DURATION, max)
}

/// Refuses `flag`'s value `d` (bad input, exit 2) unless it is between `min` and
/// `max`.
fn in_bounds(flag: &str, d: Duration, min: Duration, max: Duration) -> Result<(), Failure> {
    if (min..=max).contains(&d) {
        return Ok(());
    }
    Err(Failure::Input(format!(
        "invalid {flag} {}: must be between {} and {}",
        humantime::format_duration(d),
        humantime::format_duration(min),
        humantime::format_duration(max)
    )))
}

/// Range-checks every duration flag, before anything is bound or connected: a zero
/// would busy-loop, a huge one overflow a timer or never come.
fn check_durations(cli: &Cli) -> Result<(), Failure> {
    in_range("--timeout", cli.timeout, MAX_FLAG_DURATION)?;
    match &cli.command {
        Command::Deaths {
            since: Some(since), ..
        } => in_range("--since", *since, MAX_SINCE),
        Command::Check { check_every, .. } => {
            in_range("--check-every", *check_every, MAX_FLAG_DURATION)
        }
        Command::Watch { every, .. } => {
            in_bounds("--every", *every, MIN_WATCH_EVERY, MAX_FLAG_DURATION)
        }
        Command::Bench { seconds, .. } => {
            let max = MAX_FLAG_DURATION.as_secs_f64();
            if seconds.is_finite() && (0.001..=max).contains(seconds) {
                Ok(())
            } else {
                Err(Failure::Input(format!(
                    "invalid --seconds {seconds}: must be between 0.001 and {max}"
                )))
            }
        }
        _ => Ok(()),
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    if let Command::Completions { shell } = cli.command {
        let mut command = <Cli as clap::CommandFactory>::command();
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut command, "liveness", &mut script);
        // A reader that went away (`| head`) is not an error of ours.
        return match std::io::Write::write_all(&mut std::io::stdout(), &script) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(Failure::Other(format!("cannot write the script: {e}")))
            }
            _ => Ok(()),
        };
    }
    check_durations(&cli)?;
    if cli.json && matches!(cli.command, Command::Check { .. }) {
        return Err(Failure::Input(
            "invalid --json: `check` logs lines of text to stderr; --json applies to \
             members, deaths, items, queues, retry, cancel, watch and bench"
                .into(),
        ));
    }
    let Some(url) = cli.store.clone() else {
        return Err(Failure::Input(
            "no store: give --store URL or set LIVENESS_STORE".into(),
        ));
    };
    // The recorder goes in before the checker binds its metric handles.
    let (health, mount) = match &cli.command {
        Command::Check {
            http: Some(addr),
            check_every,
            dashboard,
            ..
        } => {
            let (health, mount) = check::serve_metrics(*addr, *check_every, dashboard).await?;
            (Some(health), Some(mount))
        }
        _ => (None, None),
    };
    // Reading commands open only a store that is there: never one created by looking.
    let reads = matches!(
        cli.command,
        Command::Members { .. }
            | Command::Deaths { .. }
            | Command::Items { .. }
            | Command::Queues
            | Command::Watch { .. }
    );
    let store = within(cli.timeout, async {
        Ok(if reads {
            liveness::connect_existing(&url).await?
        } else {
            liveness::connect(&url).await?
        })
    })
    .await?;
    let ctx = Ctx {
        store,
        url,
        json: cli.json,
        timeout: cli.timeout,
    };
    if let (Some(mount), Command::Check { space, .. }) = (&mount, &cli.command) {
        mount.connect(ctx.store.clone(), &ctx.url, space)?;
    }
    let t = cli.timeout;
    match cli.command {
        Command::Members {
            space,
            limit,
            sessions: true,
            ..
        } => within(t, sessions::run(&ctx, &space, limit)).await,
        Command::Members {
            space, limit, flat, ..
        } => within(t, members::run(&ctx, &space, limit, flat)).await,
        Command::Deaths { since, limit } => within(t, deaths::run(&ctx, since, limit)).await,
        Command::Items { state, limit } => {
            within(t, items::run(&ctx, state.map(Into::into), limit)).await
        }
        Command::Queues => within(t, queues::run(&ctx)).await,
        Command::Retry {
            id,
            all_dead_letters,
        } => within(t, retry::run(&ctx, id, all_dead_letters)).await,
        Command::Cancel { id } => within(t, cancel::run(&ctx, id)).await,
        Command::Check {
            space, check_every, ..
        } => check::run(&ctx, &space, check_every, health).await,
        Command::Watch { space, every } => watch::run(&ctx, &space, every).await,
        Command::Bench {
            members,
            concurrency,
            seconds,
            deaths,
        } => {
            let options = liveness_bench::Options {
                members,
                concurrency,
                seconds,
                deaths,
                check_cost: false,
            };
            bench::run(&ctx, options).await
        }
        // Answered before any store is opened.
        Command::Completions { .. } => Ok(()),
    }
}
