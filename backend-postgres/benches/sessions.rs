//! Sessions on PostgreSQL: members riding sessions against a lease each, in one run.
//!
//! For `--members` members (default 100,000) in `--sessions` sessions (default 10),
//! ttl `--ttl-ms` (default 10,000), it prints for each way of holding them: the time
//! to take them all (riding: one `join_session` each, 16 lanes; a lease each:
//! `acquire_many` batches of `max_batch`); then, over `--seconds` (default 20) of
//! steady state with every lease renewed every ttl/3 (riding: the sessions alone; a
//! lease each: `renew_many` batches of `max_batch`, 4 lanes), the server's CPU (its
//! processes' user + system time, from `/proc`, as % of one core), the rows updated
//! in `leases` (`pg_stat_user_tables`), the WAL written, the renewals per second
//! needed against those answered, and the renewals that failed (`Lost`).
//!
//! Then a process's death, as a checker sees it: one session (riding), or one
//! process's share of `members / sessions` leases (a lease each, measured only where
//! the renewals kept up), is renewed a last time and then no more, while the others
//! go on being renewed and a checker with the default configuration runs; it prints
//! when the checker declared the first and the last of those members dead, from the
//! send of that last renewal. Last (riding), the sweep of another session, released:
//! its members declared dead by `sweep`, a batch of `max_batch` a call.
//!
//! Run: `cargo bench -p liveness-postgres --bench sessions -- [--members N]
//! [--sessions S] [--ttl-ms MS] [--seconds S] [--join-rates N] [--no-leases]`. It
//! starts its own server through the test kit (or uses `LIVENESS_POSTGRES_URL`; the
//! CPU figure needs the server on this machine).
//!
//! First, the join rates of `--join-rates` members (default `--members`; 0 skips
//! them) into one session, in the same run: `join_session` one member a call, then
//! `join_session_many` in batches of `max_batch` (one call in flight, as a session
//! re-joins its members after a loss). `--joins-only` stops after them.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use liveness_conformance::bench::args::{self, SessionOptions};
use liveness_conformance::bench::death_watch::DeathWatch;
use liveness_conformance::bench::sweep_members::sweep_members;
use liveness_conformance::bench_util;
use liveness_core::{FencingToken, HolderId, Key, Lease, LeaseStore, Name, Space, Store, Ttl};
use liveness_postgres::PostgresStore;

/// A store on a fresh namespace.
async fn fresh(server: &liveness_testkit::postgres::PgServer) -> PostgresStore {
    let ns = liveness_conformance::fresh_namespace();
    liveness_postgres::connect(&server.url_with(&format!("ns={ns}&max_connections=20")))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

/// The server's counters: its processes' CPU seconds (user + system; 0 when the
/// server is not on this machine), rows updated in the namespace's `leases`, and the
/// WAL position in bytes.
async fn counters(store: &PostgresStore) -> (f64, i64, i64) {
    let row: (i32, i64, i64) = sqlx::query_as(
        "SELECT pg_backend_pid(), \
                coalesce((SELECT n_tup_upd FROM pg_stat_user_tables \
                          WHERE schemaname = $1 AND relname = 'leases'), 0), \
                pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint",
    )
    .bind(store.schema())
    .fetch_one(store.pool())
    .await
    .unwrap_or_else(|e| panic!("counters: {e}"));
    (server_cpu(row.0 as u32), row.1, row.2)
}

/// Fields of `/proc/<pid>/stat` after the command (`state` is index 0).
fn stat(pid: u32) -> Option<Vec<u64>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    Some(rest.split(' ').map(|f| f.parse().unwrap_or(0)).collect())
}

/// CPU seconds of the postmaster that is `backend`'s parent and of all its children.
fn server_cpu(backend: u32) -> f64 {
    let Some(postmaster) = stat(backend).map(|f| f[1]) else {
        return 0.0;
    };
    let tick = 100.0; // USER_HZ on Linux
    let mut total = 0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(f) = stat(pid) {
            if u64::from(pid) == postmaster || f[1] == postmaster {
                total += f[11] + f[12];
            }
        }
    }
    total as f64 / tick
}

/// Renewals answered and refused, counted a batch at a time by a renewing task.
#[derive(Clone, Default)]
struct Counts {
    renewed: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

impl Counts {
    fn now(&self) -> (u64, u64) {
        (
            self.renewed.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

/// Renews `leases` every `every` from now on (a round at once), `renew_many` batches of
/// `max_batch` on `lanes` tasks, counting each batch's answers as it comes. Aborting
/// the task stops its lanes too.
fn keep_renewing(
    store: PostgresStore,
    leases: Arc<Vec<Lease>>,
    every: Duration,
    lanes: usize,
    counts: Counts,
) -> tokio::task::JoinHandle<()> {
    let batch = store.capabilities().max_batch;
    tokio::spawn(async move {
        loop {
            let start = Instant::now();
            let mut round = tokio::task::JoinSet::new();
            for lane in 0..lanes {
                let (store, leases, counts) = (store.clone(), leases.clone(), counts.clone());
                round.spawn(async move {
                    for chunk in leases.chunks(batch).skip(lane).step_by(lanes) {
                        let ok = match store.renew_many(chunk).await {
                            Ok(answers) => answers.iter().filter(|a| a.is_ok()).count(),
                            Err(_) => 0,
                        };
                        counts.renewed.fetch_add(ok as u64, Ordering::Relaxed);
                        let lost = (chunk.len() - ok) as u64;
                        counts.failed.fetch_add(lost, Ordering::Relaxed);
                    }
                });
            }
            while round.join_next().await.is_some() {}
            tokio::time::sleep(every.saturating_sub(start.elapsed())).await;
        }
    })
}

/// What the steady state cost the server.
struct Steady {
    cpu_pct: f64,
    updated_per_s: f64,
    wal_per_s: f64,
    renewed: u64,
    failed: u64,
    wall: f64,
}

/// Measures the server for `o.seconds` while a task renews (counting into `counts`),
/// after one full renewal period, so that the measurement starts in steady state.
async fn steady(store: &PostgresStore, o: &SessionOptions, counts: &Counts) -> Steady {
    tokio::time::sleep(o.ttl.duration() / 3).await;
    let (cpu0, upd0, wal0) = counters(store).await;
    let (r0, f0) = counts.now();
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(o.seconds)).await;
    let wall = start.elapsed().as_secs_f64();
    let (r1, f1) = counts.now();
    // The server publishes its row counts about once a second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (cpu1, upd1, wal1) = counters(store).await;
    Steady {
        cpu_pct: (cpu1 - cpu0) / wall * 100.0,
        updated_per_s: (upd1 - upd0) as f64 / wall,
        wal_per_s: (wal1 - wal0) as f64 / wall,
        renewed: r1 - r0,
        failed: f1 - f0,
        wall,
    }
}

/// Prints a way of holding the members: the time to take them, and in steady state
/// the server's cost and the renewals needed (`leases` renewed every ttl/3) against
/// those answered.
fn print(what: &str, o: &SessionOptions, took: Duration, s: &Steady, leases: usize) {
    println!(
        "{what:<12} members={} take={:>6.1}s ({:>6.0}/s)  steady: server cpu={:>5.1}%  \
         rows updated/s={:>8.0}  wal={:>8.1} KiB/s  renewals/s needed={:.0} answered={:.0} \
         failed (Lost)={}",
        o.members,
        took.as_secs_f64(),
        o.members as f64 / took.as_secs_f64(),
        s.cpu_pct,
        s.updated_per_s,
        s.wal_per_s / 1024.0,
        leases as f64 * 3.0 / o.ttl.duration().as_secs_f64(),
        s.renewed as f64 / s.wall,
        s.failed
    );
}

/// One process dies: `group` (its session, or its members' own leases) is renewed one
/// last time and then no more, while `survivors` go on being renewed every ttl/3, and
/// a checker (default configuration) runs. Prints when the checker declared the
/// `dying` tokens dead, from the send of that last renewal. Answers the survivors'
/// renewing task.
async fn death(
    store: &PostgresStore,
    o: &SessionOptions,
    what: &str,
    (group, survivors): (Vec<Lease>, Vec<Lease>),
    lanes: usize,
    dying: &HashSet<FencingToken>,
) -> tokio::task::JoinHandle<()> {
    let every = o.ttl.duration() / 3;
    let counts = Counts::default();
    let keeper = keep_renewing(
        store.clone(),
        Arc::new(survivors),
        every,
        lanes,
        counts.clone(),
    );
    let mut watch = DeathWatch::start(Arc::new(store.clone()), Duration::from_secs(1));
    let last_sent = Instant::now();
    let mut refused = 0;
    for chunk in group.chunks(store.capabilities().max_batch) {
        let answers = store.renew_many(chunk).await.unwrap();
        refused += answers.iter().filter(|a| a.is_err()).count();
    }
    let answered = last_sent.elapsed();
    let give_up = o.ttl.duration() * 3 + Duration::from_secs(120);
    let seen = watch
        .declared(dying.len(), give_up, |_, token| dying.contains(&token))
        .await;
    watch.stop().await;
    let after = |at: Option<Instant>| at.map_or(f64::NAN, |t| (t - last_sent).as_secs_f64());
    let last = after(seen.last);
    println!(
        "death      {what}: {} of {} members declared by a checker; first {:.2}s, last {:.2}s \
         after the send of the last renewal (ttl {:.0}s: the last {:.2}s beyond it); that \
         renewal answered in {:.0} ms ({refused} refused); others' renewals failed meanwhile={}",
        seen.count,
        dying.len(),
        after(seen.first),
        last,
        o.ttl.duration().as_secs_f64(),
        last - o.ttl.duration().as_secs_f64(),
        answered.as_secs_f64() * 1000.0,
        counts.now().1
    );
    keeper
}

/// Members riding `o.sessions` sessions; then the death of one session (it stops
/// renewing, a checker declares its members), and the sweep of another, released.
async fn riding(store: PostgresStore, o: &SessionOptions) {
    let holder = HolderId::new("bench").unwrap_or_else(|e| panic!("{e}"));
    let mut sessions = Vec::with_capacity(o.sessions);
    for p in 0..o.sessions {
        let key = Key::new(Space::sessions(), Name::new(format!("p{p}")).unwrap());
        let lease = store.acquire(&key, &holder, o.ttl).await;
        sessions.push(lease.unwrap_or_else(|e| panic!("session: {e}")));
    }
    // The sessions are renewed every ttl/3 from now on, as a process's session is.
    let every = o.ttl.duration() / 3;
    let counts = Counts::default();
    let keeper = keep_renewing(
        store.clone(),
        Arc::new(sessions.clone()),
        every,
        1,
        counts.clone(),
    );
    let joined = Arc::new(AtomicU64::new(0));
    let progress = {
        let joined = joined.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(30)).await;
                eprintln!("joined {}", joined.load(Ordering::Relaxed));
            }
        })
    };
    let start = Instant::now();
    let lanes = 16;
    let mut tasks = Vec::with_capacity(lanes);
    for lane in 0..lanes {
        let (store, holder, sessions, n) =
            (store.clone(), holder.clone(), sessions.clone(), o.members);
        let joined = joined.clone();
        tasks.push(tokio::spawn(async move {
            // The tokens of the first session's members, the one that dies below.
            let mut first = Vec::new();
            for i in (lane..n).step_by(lanes) {
                let key = Key::member(&format!("m{i}")).unwrap();
                let session = &sessions[i % sessions.len()];
                let member = store.join_session(session, &key, &holder).await;
                let member = member.unwrap_or_else(|e| panic!("join of member {i}: {e}"));
                if i % sessions.len() == 0 {
                    first.push(member.token);
                }
                joined.fetch_add(1, Ordering::Relaxed);
            }
            first
        }));
    }
    let mut dying = HashSet::new();
    for task in tasks {
        dying.extend(task.await.unwrap());
    }
    let took = start.elapsed();
    progress.abort();
    let s = steady(&store, o, &counts).await;
    print("riding", o, took, &s, sessions.len());
    keeper.abort();

    // One session stops renewing: the checker declares its members.
    let what = format!("one session of {} stops renewing", dying.len());
    let split = (sessions[..1].to_vec(), sessions[1..].to_vec());
    let keeper = death(&store, o, &what, split, 1, &dying).await;

    // The sweep of another session, released.
    if let Some(dead) = sessions.get(1) {
        assert!(store.release(dead).await.unwrap());
        let swept = sweep_members(&store, dead.token, async |moved| moved.members.is_empty()).await;
        let d = swept.unwrap();
        println!(
            "sweep      one released session of {} members: {:.2}s in {} calls (longest {:.1} ms)",
            d.members,
            d.took.as_secs_f64(),
            d.calls,
            d.longest.as_secs_f64() * 1000.0
        );
    }
    keeper.abort();
}

/// The same members, a lease each; then, if their renewals kept up, the death of a
/// process's share of them (`members / sessions` leases that stop renewing).
async fn leases(store: PostgresStore, o: &SessionOptions) {
    let holder = HolderId::new("bench").unwrap_or_else(|e| panic!("{e}"));
    // Taken with a long ttl, so that none lapses while the rest are taken (at 100,000
    // that takes longer than a ttl), then renewed with `o.ttl`.
    let long = Ttl::from_secs(600).unwrap_or_else(|e| panic!("{e}"));
    let start = Instant::now();
    let taken = bench_util::member_leases_batched(&store, "m", o.members, &holder, long).await;
    let mut all: Vec<Lease> = taken
        .unwrap_or_else(|e| panic!("acquire: {e}"))
        .into_iter()
        .map(|mut lease| {
            lease.ttl = o.ttl;
            lease
        })
        .collect();
    let took = start.elapsed();
    let counts = Counts::default();
    let every = o.ttl.duration() / 3;
    let keeper = keep_renewing(
        store.clone(),
        Arc::new(all.clone()),
        every,
        4,
        counts.clone(),
    );
    let s = steady(&store, o, &counts).await;
    print("a lease each", o, took, &s, all.len());
    keeper.abort();
    if s.failed > 0 {
        println!(
            "death      a lease each: not measured, the renewals did not keep up \
             ({} refused in steady state)",
            s.failed
        );
        return;
    }
    let share = (o.members / o.sessions).max(1).min(all.len());
    let survivors = all.split_off(share);
    let dying: HashSet<FencingToken> = all.iter().map(|l| l.token).collect();
    let what = format!("{share} leases of one process stop renewing");
    let keeper = death(&store, o, &what, (all, survivors), 4, &dying).await;
    keeper.abort();
}

/// The bench's command line: the shared sessions options (100,000 members by
/// default) and `--join-rates N`.
#[derive(clap::Args)]
struct Cli {
    #[command(flatten)]
    session: SessionOptions,
    /// The members of the join-rate figures (default `--members`; 0 skips them).
    #[arg(long, value_name = "N")]
    join_rates: Option<usize>,
}

fn main() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    let Cli {
        session: o,
        join_rates,
    } = args::parse(&[("members", "100000")]);
    let join_rates = join_rates.unwrap_or(o.members);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        println!(
            "== liveness bench: postgres sessions, {} members in {} sessions, ttl {:?} ==",
            o.members,
            o.sessions,
            o.ttl.duration()
        );
        if join_rates > 0 {
            let joins = fresh(server).await;
            liveness_conformance::bench::joins::print_join_rates(
                join_rates,
                16,
                liveness_conformance::bench::joins::join_rates(&joins, join_rates, 16).await,
            );
        }
        if o.joins_only {
            return;
        }
        riding(fresh(server).await, &o).await;
        if o.leases {
            leases(fresh(server).await, &o).await;
        }
    });
}
