//! Sessions on PostgreSQL: members riding sessions against a lease each, in one run.
//!
//! For `--members` members (default 100,000) in `--sessions` sessions (default 10),
//! ttl `--ttl-ms` (default 10,000), it prints for each way of holding them: the time
//! to take them all (riding: one `join_session` each, 16 lanes; a lease each:
//! `acquire_many` batches of `max_batch`); then, over `--seconds` (default 20) of
//! steady state with every lease renewed every ttl/3 (riding: the sessions alone; a
//! lease each: `renew_many` batches of `max_batch`, 4 lanes), the server's CPU (its
//! processes' user + system time, from `/proc`, as % of one core), the rows updated
//! in `leases` (`pg_stat_user_tables`), the WAL written, and the renewals that failed.
//! Last, the drain of one dead session: its members retired by `requeue_orphans`, a
//! batch of `max_batch` a call.
//!
//! Run: `cargo bench -p liveness-postgres --bench sessions -- [--members N]
//! [--sessions S] [--ttl-ms MS] [--seconds S] [--no-leases]`. It starts its own server
//! through the test kit (or uses `LIVENESS_POSTGRES_URL`; the CPU figure needs the
//! server on this machine).
//!
//! First, the join rates of `--members` members into one session, in the same run:
//! `join_session` one member a call, then `join_session_many` in batches of
//! `max_batch` (one call in flight, as a session re-joins its members after a loss).
//! `--joins-only` stops after them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use liveness_conformance::bench::args::{Args, SessionOptions};
use liveness_core::{Acquire, HolderId, ItemStore, Key, Lease, LeaseStore, Name, Space, Ttl};
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

/// What the steady state cost the server.
struct Steady {
    cpu_pct: f64,
    updated_per_s: f64,
    wal_per_s: f64,
    renewed: u64,
    failed: u64,
}

/// Runs `renew` every ttl/3 for `o.seconds` and measures the server meanwhile.
async fn steady<F, Fut>(store: &PostgresStore, o: &SessionOptions, renew: F) -> Steady
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = (u64, u64)> + Send,
{
    let every = o.ttl.duration() / 3;
    let (renewed, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let task = {
        let (renewed, failed) = (renewed.clone(), failed.clone());
        tokio::spawn(async move {
            loop {
                let start = Instant::now();
                let (ok, lost) = renew().await;
                renewed.fetch_add(ok, Ordering::Relaxed);
                failed.fetch_add(lost, Ordering::Relaxed);
                tokio::time::sleep(every.saturating_sub(start.elapsed())).await;
            }
        })
    };
    // One full cycle first, so the measurement starts in steady state.
    tokio::time::sleep(every).await;
    let (cpu0, upd0, wal0) = counters(store).await;
    let (r0, f0) = (
        renewed.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(o.seconds)).await;
    let wall = start.elapsed().as_secs_f64();
    // The server publishes its row counts about once a second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (cpu1, upd1, wal1) = counters(store).await;
    let out = Steady {
        cpu_pct: (cpu1 - cpu0) / wall * 100.0,
        updated_per_s: (upd1 - upd0) as f64 / wall,
        wal_per_s: (wal1 - wal0) as f64 / wall,
        renewed: renewed.load(Ordering::Relaxed) - r0,
        failed: failed.load(Ordering::Relaxed) - f0,
    };
    task.abort();
    out
}

fn print(what: &str, o: &SessionOptions, took: Duration, s: &Steady) {
    println!(
        "{what:<10} members={} take={:>6.1}s ({:>6.0}/s)  steady: server cpu={:>5.1}%  \
         rows updated/s={:>8.0}  wal={:>8.1} KiB/s  renewals={} failed={}",
        o.members,
        took.as_secs_f64(),
        o.members as f64 / took.as_secs_f64(),
        s.cpu_pct,
        s.updated_per_s,
        s.wal_per_s / 1024.0,
        s.renewed,
        s.failed
    );
}

/// Members riding `o.sessions` sessions; then the drain of one dead session.
async fn riding(store: PostgresStore, o: &SessionOptions) {
    let holder = HolderId::new("bench").unwrap_or_else(|e| panic!("{e}"));
    let mut sessions = Vec::with_capacity(o.sessions);
    for p in 0..o.sessions {
        let key = Key::new(Space::sessions(), Name::new(format!("p{p}")).unwrap());
        let lease = store.acquire(&key, &holder, o.ttl).await;
        sessions.push(lease.unwrap_or_else(|e| panic!("session: {e}")));
    }
    // The sessions are renewed every ttl/3 from now on, as a process's session is.
    let keeper = {
        let (store, sessions) = (store.clone(), sessions.clone());
        let every = o.ttl.duration() / 3;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                for answer in store.renew_many(&sessions).await.unwrap() {
                    answer.unwrap_or_else(|e| panic!("a session lost: {e}"));
                }
            }
        })
    };
    let start = Instant::now();
    let lanes = 16;
    let mut tasks = Vec::with_capacity(lanes);
    for lane in 0..lanes {
        let (store, holder, sessions, n) =
            (store.clone(), holder.clone(), sessions.clone(), o.members);
        tasks.push(tokio::spawn(async move {
            for i in (lane..n).step_by(lanes) {
                let key = Key::member(&format!("m{i}")).unwrap();
                let session = &sessions[i % sessions.len()];
                let joined = store.join_session(session, &key, &holder).await;
                joined.unwrap_or_else(|e| panic!("join: {e}"));
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let took = start.elapsed();
    keeper.abort();
    let renew = {
        let (store, sessions) = (store.clone(), sessions.clone());
        move || {
            let (store, sessions) = (store.clone(), sessions.clone());
            async move {
                let answers = store.renew_many(&sessions).await.unwrap();
                let ok = answers.iter().filter(|a| a.is_ok()).count() as u64;
                (ok, answers.len() as u64 - ok)
            }
        }
    };
    let s = steady(&store, o, renew).await;
    print("riding", o, took, &s);

    // The drain of one dead session.
    let dead = &sessions[0];
    assert!(store.release(dead).await.unwrap());
    let start = Instant::now();
    let (mut calls, mut retired, mut longest) = (0, 0, Duration::ZERO);
    loop {
        let call = Instant::now();
        let moved = store.requeue_orphans(dead.token).await.unwrap();
        longest = longest.max(call.elapsed());
        calls += 1;
        retired += moved.retired.len();
        if moved.retired.is_empty() {
            break;
        }
    }
    println!(
        "drain      one dead session of {retired} members: {:.2}s in {calls} calls \
         (longest {:.1} ms)",
        start.elapsed().as_secs_f64(),
        longest.as_secs_f64() * 1000.0
    );
}

/// The same members, a lease each.
async fn leases(store: PostgresStore, o: &SessionOptions) {
    let holder = HolderId::new("bench").unwrap_or_else(|e| panic!("{e}"));
    let batch = store.capabilities().max_batch;
    // Taken with a long ttl, so that none lapses while the rest are taken (at 100,000
    // that takes longer than a ttl), then renewed with `o.ttl`.
    let long = Ttl::from_secs(600).unwrap_or_else(|e| panic!("{e}"));
    let start = Instant::now();
    let mut all = Vec::with_capacity(o.members);
    let keys: Vec<usize> = (0..o.members).collect();
    for chunk in keys.chunks(batch) {
        let asks: Vec<Acquire> = chunk
            .iter()
            .map(|i| Acquire::new(Key::member(&format!("m{i}")).unwrap(), holder.clone(), long))
            .collect();
        for answer in store.acquire_many(&asks).await.unwrap() {
            let lease = answer.unwrap_or_else(|e| panic!("acquire: {e}"));
            all.push(Lease {
                ttl: o.ttl,
                ..lease
            });
        }
    }
    let took = start.elapsed();
    let all: Arc<Vec<Lease>> = Arc::new(all);
    let renew = {
        let store = store.clone();
        move || {
            let (store, all) = (store.clone(), all.clone());
            async move {
                let lanes = 4;
                let chunks: Vec<Vec<Lease>> = all.chunks(batch).map(|c| c.to_vec()).collect();
                let chunks = Arc::new(chunks);
                let mut tasks = Vec::new();
                for lane in 0..lanes {
                    let (store, chunks) = (store.clone(), chunks.clone());
                    tasks.push(tokio::spawn(async move {
                        let (mut ok, mut lost) = (0, 0);
                        for chunk in chunks.iter().skip(lane).step_by(lanes) {
                            match store.renew_many(chunk).await {
                                Ok(answers) => {
                                    let n = answers.iter().filter(|a| a.is_ok()).count() as u64;
                                    ok += n;
                                    lost += answers.len() as u64 - n;
                                }
                                Err(_) => lost += chunk.len() as u64,
                            }
                        }
                        (ok, lost)
                    }));
                }
                let mut sum = (0, 0);
                for t in tasks {
                    let (ok, lost) = t.await.unwrap();
                    sum = (sum.0 + ok, sum.1 + lost);
                }
                sum
            }
        }
    };
    let s = steady(&store, o, renew).await;
    print("a lease each", o, took, &s);
}

fn main() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    let o = SessionOptions::defaults(100_000).with_args(&Args::from_env());
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
        let joins = fresh(server).await;
        liveness_conformance::bench::joins::print_join_rates(
            o.members,
            16,
            liveness_conformance::bench::joins::join_rates(&joins, o.members, 16).await,
        );
        if o.joins_only {
            return;
        }
        riding(fresh(server).await, &o).await;
        if o.leases {
            leases(fresh(server).await, &o).await;
        }
    });
}
