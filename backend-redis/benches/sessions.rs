//! Members riding sessions against members that are leases of their own, on one
//! redis-server, in one run.
//!
//! `cargo bench -p liveness-redis --bench sessions -- [--members 100000] [--sessions 10]
//! [--ttl-ms 10000] [--seconds 20] [--no-leases]`. Uses `LIVENESS_REDIS_URL` when set,
//! else starts a private redis-server (no persistence).
//!
//! Sessions: `--sessions` session leases, then `--members` members joined into them
//! (`join_session`, 64 calls in flight), then `--seconds` of steady state in which only
//! the sessions are renewed (every ttl/3). Per-member leases, on a fresh namespace of
//! the same server: as many members taken with `acquire_many` (batches of 1000), then
//! the same seconds of renewing every one of them every ttl/3 with `renew_many`
//! (batches of 1000, paced every 10 ms). Printed for each: the time to join (or take)
//! every member, the server's CPU in steady state (`INFO cpu`, as % of one core), the
//! server's memory per member (`INFO memory` used_memory) and the client's (this
//! process's resident set, `VmRSS`, both sets of members kept alive so that the second
//! does not reuse the first's pages).
//!
//! First, the join rates of `--members` members into one session, in the same run:
//! `join_session` one member a call, then `join_session_many` in batches of
//! `max_batch` (one call in flight, as a session re-joins its members after a loss).
//! `--joins-only` stops after them.
//!
//! `--members-as-handles` measures the members as a process holds them instead: each
//! of the `--sessions` sessions is a `liveness_core::Session` on the store (its own
//! heartbeat task and its own connection, as a process has), its share of the members joined with `Session::join_many`
//! (`--join-lanes` sessions at a time, default all) as `Member` handles, held through `--seconds` of steady state.
//! Printed: the join time, the server's CPU and this process's CPU in steady state,
//! the client's resident set per member (the handles, the session state and the
//! runtime, against the RSS before the sessions opened), and how many members were
//! lost (a member whose `check()` fails at the end, or whose token changed: lost and
//! re-joined). The join rates and the per-member leases are not run then.

use std::time::{Duration, Instant};

use liveness_conformance::bench::args::{self, SessionOptions};
use liveness_conformance::bench::paced::renew_paced;
use liveness_conformance::bench::procfs;
use liveness_conformance::bench_util;
use std::sync::Arc;

use liveness_core::{
    HolderId, Key, Lease, LeaseStore, Member, Name, Session, SessionConfig, Space, Store,
};
use liveness_redis::RedisStore;
use liveness_testkit::redis::RedisServer;

mod common;
use common::{connection, store, store_in};

/// One field of an `INFO <section>` answer.
async fn info(conn: &mut redis::aio::MultiplexedConnection, section: &str, field: &str) -> f64 {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_start_matches(':').parse().ok())
        .unwrap_or(0.0)
}

/// The server's CPU seconds (user + system) so far.
async fn cpu(conn: &mut redis::aio::MultiplexedConnection) -> f64 {
    info(conn, "cpu", "used_cpu_user:").await + info(conn, "cpu", "used_cpu_sys:").await
}

/// What one way of holding the members measured.
struct Figures {
    join: Duration,
    server_cpu_pct: f64,
    server_bytes_per_member: f64,
    client_bytes_per_member: f64,
    renewals_per_sec: f64,
}

impl Figures {
    /// The figures of one run of `o`: its join time, the server's memory and this
    /// process's resident size before and after the join, the server's CPU seconds
    /// over `wall` seconds of steady state, and the renewals answered Ok in them.
    fn of(
        o: &SessionOptions,
        join: Duration,
        (mem0, rss0): (f64, u64),
        (mem1, rss1): (f64, u64),
        (cpu, wall): (f64, f64),
        renewed: u64,
    ) -> Figures {
        let n = o.members.max(1) as f64;
        Figures {
            join,
            server_cpu_pct: cpu / wall * 100.0,
            server_bytes_per_member: (mem1 - mem0) / n,
            client_bytes_per_member: rss1.saturating_sub(rss0) as f64 / n,
            renewals_per_sec: renewed as f64 / wall,
        }
    }
}

/// Deletes the run's namespace, so the next run starts on an empty server; returns
/// the run's `figures`.
async fn purged(store: &RedisStore, figures: Figures) -> Figures {
    if let Err(e) = store.purge().await {
        eprintln!("purge: {e}");
    }
    figures
}

fn print(what: &str, n: usize, f: &Figures) {
    println!(
        "{what:<28} members {n:>8}  join {:>7.1} s  server CPU {:>6.1} % of a core  \
         server {:>5.0} B/member  client {:>5.0} B/member  renewals {:>8.0}/s",
        f.join.as_secs_f64(),
        f.server_cpu_pct,
        f.server_bytes_per_member,
        f.client_bytes_per_member,
        f.renewals_per_sec
    );
}

/// What one way of holding the members runs on: a store on a fresh namespace, the
/// members' holder id, the options, and a plain connection to read the server's own
/// figures through.
struct Run<'a> {
    store: RedisStore,
    holder: HolderId,
    o: &'a SessionOptions,
    conn: &'a mut redis::aio::MultiplexedConnection,
}

impl<'a> Run<'a> {
    async fn new(
        url: &str,
        o: &'a SessionOptions,
        conn: &'a mut redis::aio::MultiplexedConnection,
    ) -> Run<'a> {
        let holder = HolderId::new("bench").unwrap_or_else(|e| panic!("{e}"));
        Run {
            store: store(url).await,
            holder,
            o,
            conn,
        }
    }
}

/// Members riding `o.sessions` sessions; the members stay alive in `keep`.
async fn sessions(run: Run<'_>, keep: &mut Vec<Lease>) -> Figures {
    let Run {
        store,
        holder,
        o,
        conn,
    } = run;
    let mut sessions = Vec::with_capacity(o.sessions);
    for p in 0..o.sessions {
        let name = Name::new(format!("p{p}")).unwrap_or_else(|e| panic!("{e}"));
        let key = Key::new(Space::sessions(), name);
        sessions.push(
            store
                .acquire(&key, &holder, o.ttl)
                .await
                .unwrap_or_else(|e| panic!("session: {e}")),
        );
    }
    // The sessions are renewed every ttl/3 from now on, through the join and the
    // steady state, as a process's session is.
    let every = o.ttl.duration() / 3;
    let renewals = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let renewer = {
        let (store, sessions, renewals) = (store.clone(), sessions.clone(), renewals.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                for answer in store
                    .renew_many(&sessions)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"))
                {
                    answer.unwrap_or_else(|e| panic!("a session lost: {e}"));
                    renewals.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        })
    };
    let (mem0, rss0) = (info(conn, "memory", "used_memory:").await, procfs::rss());
    let start = Instant::now();
    let lanes = 64;
    let mut tasks = Vec::with_capacity(lanes);
    for lane in 0..lanes {
        let (store, holder, sessions) = (store.clone(), holder.clone(), sessions.clone());
        let n = o.members;
        tasks.push(tokio::spawn(async move {
            let mut joined = Vec::with_capacity(n / lanes + 1);
            for i in (lane..n).step_by(lanes) {
                let key = Key::member(&format!("m{i}")).unwrap_or_else(|e| panic!("{e}"));
                let session = &sessions[i % sessions.len()];
                joined.push(
                    store
                        .join_session(session, &key, &holder)
                        .await
                        .unwrap_or_else(|e| panic!("join: {e}")),
                );
            }
            joined
        }));
    }
    for task in tasks {
        keep.extend(task.await.unwrap_or_else(|e| panic!("{e}")));
    }
    let join = start.elapsed();
    let (mem1, rss1) = (info(conn, "memory", "used_memory:").await, procfs::rss());
    // Steady state: the sessions alone, renewed every ttl/3.
    let renewed0 = renewals.load(std::sync::atomic::Ordering::Relaxed);
    let cpu0 = cpu(conn).await;
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(o.seconds)).await;
    let wall = start.elapsed().as_secs_f64();
    let cpu1 = cpu(conn).await;
    let renewed = renewals.load(std::sync::atomic::Ordering::Relaxed) - renewed0;
    renewer.abort();
    let (before, after, used) = ((mem0, rss0), (mem1, rss1), (cpu1 - cpu0, wall));
    purged(&store, Figures::of(o, join, before, after, used, renewed)).await
}

/// Members that are leases of their own; they stay alive in `keep`.
async fn leases(run: Run<'_>, keep: &mut Vec<Lease>) -> Figures {
    let Run {
        store,
        holder,
        o,
        conn,
    } = run;
    let (mem0, rss0) = (info(conn, "memory", "used_memory:").await, procfs::rss());
    let start = Instant::now();
    let leases = bench_util::member_leases_batched(&store, "m", o.members, &holder, o.ttl)
        .await
        .unwrap_or_else(|e| panic!("acquire: {e}"));
    let join = start.elapsed();
    let (mem1, rss1) = (info(conn, "memory", "used_memory:").await, procfs::rss());
    // Steady state: every lease renewed every ttl/3, paced every 10 ms, from 8 tasks
    // (one `renew_many` of at most 1000 in flight each).
    let cpu0 = cpu(conn).await;
    let every = o.ttl.duration() / 3;
    let seconds = Duration::from_secs(o.seconds);
    let paced = renew_paced(&store, leases, every, (8, 1000), seconds).await;
    assert_eq!(paced.failed_calls, 0, "renew_many failed");
    let (leases, renewed) = (paced.leases, paced.renewed);
    let wall = paced.wall.as_secs_f64();
    let cpu1 = cpu(conn).await;
    keep.extend(leases);
    let (before, after, used) = ((mem0, rss0), (mem1, rss1), (cpu1 - cpu0, wall));
    purged(&store, Figures::of(o, join, before, after, used, renewed)).await
}

/// The members as a process holds them: `o.sessions` real sessions, each joining its
/// share of `o.members` with `join_many`, then held through the steady state.
async fn handles(
    url: &str,
    o: &SessionOptions,
    lanes: usize,
    conn: &mut redis::aio::MultiplexedConnection,
) {
    // Each session on a store (a connection) of its own, as each process has.
    let namespace = liveness_conformance::fresh_namespace();
    let redis = store_in(url, namespace.clone()).await;
    let rss0 = procfs::rss();
    let mut sessions = Vec::with_capacity(o.sessions);
    for p in 0..o.sessions {
        let store: Arc<dyn Store> = Arc::new(store_in(url, namespace.clone()).await);
        let config = SessionConfig::new(&format!("p{p}"), o.ttl).unwrap_or_else(|e| panic!("{e}"));
        let session = Session::open(store.clone(), config).await;
        sessions.push(session.unwrap_or_else(|e| panic!("session: {e}")));
    }
    let session_tokens: Vec<_> = sessions.iter().map(Session::token).collect();
    let (mem0, rss1) = (info(conn, "memory", "used_memory:").await, procfs::rss());
    let start = Instant::now();
    // `lanes` sessions join at a time, each its whole share in one `join_many`.
    let gate = Arc::new(tokio::sync::Semaphore::new(lanes.max(1)));
    let mut joins = Vec::with_capacity(o.sessions);
    for (p, session) in sessions.iter().enumerate() {
        let (session, gate) = (session.clone(), gate.clone());
        let names: Vec<String> = (p..o.members)
            .step_by(o.sessions)
            .map(|i| format!("m{i}"))
            .collect();
        joins.push(tokio::spawn(async move {
            let _lane = gate.acquire().await;
            let start = Instant::now();
            let answers = session.join_many(names).await;
            (answers, start.elapsed())
        }));
    }
    let mut members: Vec<Member> = Vec::with_capacity(o.members);
    let mut slowest = Duration::ZERO;
    for join in joins {
        let (answers, took) = join.await.unwrap_or_else(|e| panic!("{e}"));
        slowest = slowest.max(took);
        for answer in answers {
            members.push(answer.unwrap_or_else(|e| panic!("join_many: {e}")));
        }
    }
    let join = start.elapsed();
    let (mem1, rss2) = (info(conn, "memory", "used_memory:").await, procfs::rss());
    let tokens: Vec<_> = members.iter().map(Member::token).collect();
    let (cpu0, own0, commands0) = (
        cpu(conn).await,
        procfs::own_cpu().as_secs_f64(),
        info(conn, "stats", "total_commands_processed:").await,
    );
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(o.seconds)).await;
    let wall = start.elapsed().as_secs_f64();
    let (cpu1, own1, commands1) = (
        cpu(conn).await,
        procfs::own_cpu().as_secs_f64(),
        info(conn, "stats", "total_commands_processed:").await,
    );
    let lost = members
        .iter()
        .zip(&tokens)
        .filter(|(m, t)| m.check().ok() != Some(**t))
        .count();
    let sessions_lost = sessions
        .iter()
        .zip(&session_tokens)
        .filter(|(s, t)| s.check().ok() != Some(**t))
        .count();
    let n = o.members.max(1) as f64;
    println!(
        "{} members as handles in {} sessions (join_many, {lanes} at a time): join {:.1} s \
         (the slowest session's {:.1} s); steady state {:.0} s: \
         server CPU {:.2} % of a core, client CPU {:.2} % of a core, {:.0} commands/s; \
         server {:.0} B/member; client RSS {:.0} B/member ({:.0} MiB with the sessions, \
         {:.0} MiB before them); lost: {lost} members, {sessions_lost} sessions",
        o.members,
        o.sessions,
        join.as_secs_f64(),
        slowest.as_secs_f64(),
        wall,
        (cpu1 - cpu0) / wall * 100.0,
        (own1 - own0) / wall * 100.0,
        (commands1 - commands0) / wall,
        (mem1 - mem0) / n,
        rss2.saturating_sub(rss1) as f64 / n,
        rss2 as f64 / (1 << 20) as f64,
        rss0 as f64 / (1 << 20) as f64,
    );
    drop(members);
    drop(sessions);
    if let Err(e) = redis.purge().await {
        eprintln!("purge: {e}");
    }
}

/// The bench's command line: the shared sessions options (100,000 members by
/// default), `--members-as-handles` and `--join-lanes N`.
#[derive(clap::Args)]
struct Cli {
    #[command(flatten)]
    session: SessionOptions,
    /// Measure the members as a process holds them (`Member` handles on sessions).
    #[arg(long)]
    members_as_handles: bool,
    /// With `--members-as-handles`, the sessions joining at a time (default all).
    #[arg(long, value_name = "N", requires = "members_as_handles")]
    join_lanes: Option<usize>,
}

fn main() {
    let cli: Cli = args::parse(&[("members", "100000")]);
    let o = cli.session;
    let server = match std::env::var("LIVENESS_REDIS_URL") {
        Ok(_) => None,
        Err(_) => match RedisServer::start() {
            Some(s) => Some(s),
            None => {
                eprintln!("sessions: no redis-server (skipped)");
                return;
            }
        },
    };
    let url = std::env::var("LIVENESS_REDIS_URL")
        .ok()
        .or_else(|| server.as_ref().map(|s| s.url().to_owned()))
        .unwrap_or_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    rt.block_on(async {
        let mut conn = connection(&url).await;
        println!(
            "ttl {:?}, {} s of steady state, {} members",
            o.ttl.duration(),
            o.seconds,
            o.members
        );
        if cli.members_as_handles {
            let lanes = cli.join_lanes.unwrap_or(o.sessions);
            handles(&url, &o, lanes, &mut conn).await;
            return;
        }
        let joins = store(&url).await;
        liveness_conformance::bench::joins::print_join_rates(
            o.members,
            64,
            liveness_conformance::bench::joins::join_rates(&joins, o.members, 64).await,
        );
        if let Err(e) = joins.purge().await {
            eprintln!("purge: {e}");
        }
        if o.joins_only {
            return;
        }
        let (mut riding, mut owned) = (Vec::new(), Vec::new());
        let f = sessions(Run::new(&url, &o, &mut conn).await, &mut riding).await;
        print(&format!("in {} sessions", o.sessions), o.members, &f);
        if o.leases {
            let f = leases(Run::new(&url, &o, &mut conn).await, &mut owned).await;
            print("a lease per member", o.members, &f);
        }
        drop((riding, owned));
    });
}
