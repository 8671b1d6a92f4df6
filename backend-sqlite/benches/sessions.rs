//! Members riding sessions against members that are leases of their own, on one
//! SQLite file, in one run.
//!
//! `cargo bench -p liveness-sqlite --bench sessions -- [--members 100000]
//! [--sessions 10] [--ttl-ms 30000] [--seconds 30] [--synchronous full] [--no-leases]
//! [--processes 10] [--join-rates N]`.
//!
//! Sessions: `--sessions` store handles on the file (as that many processes of the host
//! have), each holding one session lease, joining its share of `--members` into it
//! (`join_session`, one write transaction each; the handles join at once), then
//! `--seconds` of steady state in which only the sessions are renewed (every ttl/3).
//! A lease each, on a fresh namespace of the same file: as many members taken with
//! `acquire_many` (batches of `max_batch`), then the same seconds of renewing every
//! one of them every ttl/3 with `renew_many` (batches of `max_batch`). SQLite runs in
//! this process, so the store's cost is this process's CPU (user + system, from
//! `/proc/self/stat`), printed as % of one core; and the wall time of one round of
//! renewals. Then one session is killed and swept as a checker does (its calls, the
//! whole sweep's time, the longest call). `synchronous=normal` by default: a join is one transaction, and 100,000
//! fsyncs would time the disk, not the store.
//!
//! `--processes N` holds the sessions in N processes instead of N handles of this one
//! (`--sessions` is then N): see `sessions/processes.rs`. The children's CPU, summed, is
//! the riding figure; a checker in this process times the death of one child,
//! SIGKILLed; the lease-each comparison runs in this process as without it.
//!
//! First, the join rates of `--join-rates` members (default `--members`; 0 skips them)
//! into one session, in the same run:
//! `join_session` one member a call, then `join_session_many` in batches of
//! `max_batch` (one call in flight, as a session re-joins its members after a loss).
//! `--joins-only` stops after them.

use std::time::{Duration, Instant};

use liveness_conformance::bench::args::{self, SessionOptions};
use liveness_conformance::bench::procfs;
use liveness_conformance::bench::sweep_members::sweep_members;
use liveness_conformance::bench_util;
use liveness_conformance::fixtures::renew_with_ttl;
use liveness_core::{HolderId, ItemStore, Key, Lease, LeaseStore, Name, Space, Store, Ttl};
use liveness_sqlite::{SqliteConfig, SqliteStore, Synchronous};

// Beside this file, not in benches/ itself (where cargo would take it for a bench).
#[path = "sessions/processes.rs"]
mod processes;

/// The bench's options, from the command line: the shared sessions options,
/// `--synchronous full` (else normal), `--processes N` (0, the default: one process),
/// `--join-rates N`, and a child's `--child INDEX --file PATH`.
struct Options {
    session: SessionOptions,
    synchronous: Synchronous,
    processes: usize,
    join_rates: usize,
    child: Option<(usize, std::path::PathBuf)>,
}

/// The bench's command line, [`Options`] before they are put together.
#[derive(clap::Args)]
struct Cli {
    #[command(flatten)]
    session: SessionOptions,
    /// The file's `synchronous` setting.
    #[arg(long, default_value = "normal", value_parser = ["full", "normal"])]
    synchronous: String,
    /// Hold the sessions in this many processes (0: handles of this one); `--sessions`
    /// is then N.
    #[arg(long, value_name = "N", default_value_t = 0)]
    processes: usize,
    /// The members of the join-rate figures (default `--members`; 0 skips them).
    #[arg(long, value_name = "N")]
    join_rates: Option<usize>,
    /// A child process's index (with `--file`).
    #[arg(long, hide = true, requires = "file")]
    child: Option<usize>,
    /// A child process's file.
    #[arg(long, hide = true)]
    file: Option<std::path::PathBuf>,
}

impl Options {
    fn from_args() -> Options {
        // A ttl long enough that 100,000 leases taken one batch after the other are all
        // still live when their renewals start.
        let defaults = [("members", "100000"), ("ttl", "30000"), ("seconds", "30")];
        let cli: Cli = args::parse(&defaults);
        let mut session = cli.session;
        if cli.processes > 0 {
            session.sessions = cli.processes;
        }
        Options {
            join_rates: cli.join_rates.unwrap_or(session.members),
            session,
            synchronous: match cli.synchronous.as_str() {
                "full" => Synchronous::Full,
                _ => Synchronous::Normal,
            },
            processes: cli.processes,
            child: cli.file.map(|file| (cli.child.unwrap_or(0), file)),
        }
    }
}

impl std::ops::Deref for Options {
    type Target = SessionOptions;

    fn deref(&self) -> &SessionOptions {
        &self.session
    }
}

/// What one way of holding the members measured.
struct Figures {
    join: Duration,
    cpu_pct: f64,
    round: Duration,
    lapsed: usize,
}

impl Figures {
    fn print(&self, what: &str, o: &Options) {
        println!(
            "{what:<28} members={} join {:>8.2} s ({:>7.0}/s)   steady state: {:>6.2} % of a core, \
             one renewal round {:>9.3} ms, renewals refused {}",
            o.members,
            self.join.as_secs_f64(),
            o.members as f64 / self.join.as_secs_f64(),
            self.cpu_pct,
            self.round.as_secs_f64() * 1000.0,
            self.lapsed
        );
    }
}

fn config(path: &std::path::Path, ns: &str, o: &Options) -> SqliteConfig {
    SqliteConfig::new(path, liveness_core::Namespace::new(ns).unwrap())
        .with_synchronous(o.synchronous)
        .with_max_connections(2)
        .unwrap()
}

/// Renews `renew` every ttl/3 for `o.seconds`; answers the process's CPU share, the
/// median wall time of one round and the renewals refused.
async fn steady<F, Fut>(o: &Options, mut renew: F) -> (f64, Duration, usize)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    let period = o.ttl.duration() / 3;
    let (wall0, cpu0) = (Instant::now(), procfs::own_cpu());
    let mut rounds = Vec::new();
    let mut lapsed = 0;
    let mut tick = tokio::time::interval(period);
    while wall0.elapsed() < Duration::from_secs(o.seconds) {
        tick.tick().await;
        let t = Instant::now();
        lapsed += renew().await;
        rounds.push(t.elapsed());
    }
    let pct = (procfs::own_cpu() - cpu0).as_secs_f64() / wall0.elapsed().as_secs_f64() * 100.0;
    rounds.sort();
    (pct, rounds[rounds.len() / 2], lapsed)
}

/// The members riding `o.sessions` sessions, one store handle each.
async fn sessions(path: &std::path::Path, o: &Options) -> Figures {
    let mut stores = Vec::new();
    for _ in 0..o.sessions {
        stores.push(
            SqliteStore::connect(config(path, "bench_sessions", o))
                .await
                .unwrap(),
        );
    }
    let started = Instant::now();
    let per = o.members / o.sessions;
    let joins: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(s, store)| {
            let store = store.clone();
            let ttl = o.ttl;
            tokio::spawn(async move {
                let holder = HolderId::new(format!("process-{s}")).unwrap();
                let key = Key::new(Space::sessions(), Name::new(format!("p{s}")).unwrap());
                let session = store.acquire(&key, &holder, ttl).await.unwrap();
                let mut last_renewal = Instant::now();
                let mut session = session;
                for i in 0..per {
                    // A process renews its session while its members join.
                    if last_renewal.elapsed() > ttl.duration() / 3 {
                        session = store.renew(&session).await.unwrap();
                        last_renewal = Instant::now();
                    }
                    let member = Key::member(&format!("p{s}-m{i}")).unwrap();
                    store
                        .join_session(&session, &member, &holder)
                        .await
                        .unwrap();
                }
                session
            })
        })
        .collect();
    let mut held: Vec<(SqliteStore, Lease)> = Vec::new();
    for (store, join) in stores.into_iter().zip(joins) {
        held.push((store, join.await.unwrap()));
    }
    let join = started.elapsed();
    let (cpu_pct, round, lapsed) = steady(o, || {
        let held = held.clone();
        async move {
            let mut lapsed = 0;
            for (store, session) in &held {
                lapsed += usize::from(store.renew(session).await.is_err());
            }
            lapsed
        }
    })
    .await;
    kill_and_sweep(&held[0].0, &held[0].1).await;
    Figures {
        join,
        cpu_pct,
        round,
        lapsed,
    }
}

/// Kills `session` (renewed with a 1 ms ttl) and sweeps it as a checker does: reap,
/// then `sweep` of its token until it leaves the dead set. Prints the calls, the
/// members declared dead, the whole sweep's time and the longest call (the longest the
/// file's write lock was held for it).
async fn kill_and_sweep(store: &SqliteStore, session: &Lease) {
    renew_with_ttl(store, session, Ttl::from_millis(1).unwrap()).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert!(store.reap(&session.key, session.token).await.unwrap());
    // Over when the session's token has left the dead set.
    let swept = sweep_members(store, session.token, async |_| {
        let dead = store.dead_tokens(1).await.unwrap();
        dead.first().map(|d| d.token) != Some(session.token)
    })
    .await;
    let d = swept.unwrap();
    println!(
        "sweep of one dead session      {} members in {} calls, {:.1} ms in all, longest call \
         {:.1} ms",
        d.members,
        d.calls,
        d.took.as_secs_f64() * 1000.0,
        d.longest.as_secs_f64() * 1000.0
    );
}

/// The members as leases of their own, renewed with `renew_many`.
async fn leases(path: &std::path::Path, o: &Options) -> Figures {
    let store = SqliteStore::connect(config(path, "bench_leases", o))
        .await
        .unwrap();
    let batch = store.capabilities().max_batch;
    let holder = HolderId::new("process").unwrap();
    let started = Instant::now();
    let held = bench_util::member_leases_batched(&store, "m", o.members, &holder, o.ttl)
        .await
        .unwrap();
    let join = started.elapsed();
    if join >= o.ttl.duration() {
        println!("(the first leases expired before the last was taken: raise --ttl-ms)");
    }
    let (cpu_pct, round, lapsed) = steady(o, || {
        let (store, held) = (store.clone(), held.clone());
        async move {
            let mut lapsed = 0;
            for chunk in held.chunks(batch) {
                let answers = store.renew_many(chunk).await.unwrap();
                lapsed += answers.iter().filter(|r| r.is_err()).count();
            }
            lapsed
        }
    })
    .await;
    Figures {
        join,
        cpu_pct,
        round,
        lapsed,
    }
}

fn main() {
    let o = Options::from_args();
    if let Some((index, file)) = &o.child {
        processes::child(&o, *index, file);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    println!(
        "file {} synchronous={:?} members={} sessions={} ttl={:?} steady state {} s",
        path.display(),
        o.synchronous,
        o.members,
        o.sessions,
        o.ttl.duration(),
        o.seconds
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let joins = SqliteStore::connect(config(&path, "bench_joins", &o))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let lanes = o.sessions;
        if o.join_rates > 0 {
            liveness_conformance::bench::joins::print_join_rates(
                o.join_rates,
                lanes,
                liveness_conformance::bench::joins::join_rates(&joins, o.join_rates, lanes).await,
            );
        }
        if o.joins_only {
            return;
        }
        let riding = if o.processes > 0 {
            let riding = processes::run(&path, &o).await;
            riding.print(&format!("riding sessions, {} processes", o.processes), &o);
            riding
        } else {
            let riding = sessions(&path, &o).await;
            riding.print("riding sessions", &o);
            riding
        };
        if o.leases {
            let each = leases(&path, &o).await;
            each.print("a lease each (renew_many)", &o);
            println!(
                "ratio (a lease each / sessions): steady-state CPU {:.0}x, renewal round {:.0}x",
                each.cpu_pct / riding.cpu_pct.max(0.01),
                each.round.as_secs_f64() / riding.round.as_secs_f64().max(1e-6)
            );
        }
    });
}
