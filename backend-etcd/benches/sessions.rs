//! Members riding sessions against members that are leases of their own, on one etcd
//! member, in one run.
//!
//! `cargo bench -p liveness-etcd --bench sessions -- [--members 10000] [--sessions 10]
//! [--ttl-ms 10000] [--seconds 20] [--no-leases]`. Starts a private etcd member (the
//! test kit's) and measures its CPU from `/proc/<pid>/stat` (user + system ticks).
//!
//! Sessions: `--sessions` session leases, then `--members` members joined into them
//! (`join_session`, 64 calls in flight), then `--seconds` of steady state in which only
//! the sessions are renewed (every ttl/3). Per-member leases, on a fresh namespace of
//! the same member: as many members taken with `acquire_many` (batches of
//! `max_batch`, 16 in flight), then the same seconds of renewing every one of them
//! every ttl/3 with `renew_many` (batches of `max_batch`, 8 tasks paced every 10 ms).
//! Printed for each: the time to join (or take) every member, etcd's CPU in steady
//! state (% of one core), the renewals answered Ok per second, and the CPU ratio; for
//! the sessions, also their sweep after their release: every session swept by a task
//! of its own (`sweep` of its token until a call declares no member dead), its time
//! and calls.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use liveness_conformance::bench::args::{self, SessionOptions};
use liveness_conformance::bench::paced::renew_paced;
use liveness_conformance::bench::procfs;
use liveness_conformance::bench::sweep_members::sweep_members;
use liveness_core::{Acquire, HolderId, ItemStore, Key, Lease, LeaseStore, Name, Space, Store};

mod common;
use common::store;

/// What one way of holding the members measured.
struct Figures {
    join: Duration,
    cpu_pct: f64,
    renewals_per_sec: f64,
    /// Sessions only: the members declared dead by the sweeps of the released
    /// sessions, the time it took and the sweep calls made (each session's last one
    /// declares no member dead).
    sweep: Option<(usize, Duration, usize)>,
}

fn print(what: &str, n: usize, f: &Figures) {
    println!(
        "{what:<24} members {n:>7}  join {:>6.1} s  etcd CPU {:>6.1} % of a core  \
         renewals {:>8.0}/s",
        f.join.as_secs_f64(),
        f.cpu_pct,
        f.renewals_per_sec
    );
    if let Some((dead, took, calls)) = f.sweep {
        println!(
            "{:<24} {dead} members declared dead in {:.1} s, {calls} sweep calls",
            "  sweep after release",
            took.as_secs_f64()
        );
    }
}

fn holder() -> HolderId {
    HolderId::new("bench").unwrap_or_else(|e| panic!("{e}"))
}

fn member(i: usize) -> Key {
    Key::member(&format!("m{i}")).unwrap_or_else(|e| panic!("{e}"))
}

/// Members riding `o.sessions` sessions; they stay alive in `keep`.
async fn sessions(url: &str, pid: u32, o: &SessionOptions, keep: &mut Vec<Lease>) -> Figures {
    let store = store(url).await;
    let mut sessions = Vec::with_capacity(o.sessions);
    for p in 0..o.sessions {
        let name = Name::new(format!("p{p}")).unwrap_or_else(|e| panic!("{e}"));
        let key = Key::new(Space::sessions(), name);
        let lease = store.acquire(&key, &holder(), o.ttl).await;
        sessions.push(lease.unwrap_or_else(|e| panic!("session: {e}")));
    }
    // The sessions are renewed every ttl/3 from now on, as a process's session is.
    let every = o.ttl.duration() / 3;
    let renewals = Arc::new(AtomicU64::new(0));
    let renewer = {
        let (store, sessions, renewals) = (store.clone(), sessions.clone(), renewals.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let answers = store.renew_many(&sessions).await;
                for answer in answers.unwrap_or_else(|e| panic!("{e}")) {
                    answer.unwrap_or_else(|e| panic!("a session lost: {e}"));
                    renewals.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let start = Instant::now();
    let lanes = 64;
    let mut tasks = Vec::with_capacity(lanes);
    for lane in 0..lanes {
        let (store, sessions, n) = (store.clone(), sessions.clone(), o.members);
        tasks.push(tokio::spawn(async move {
            let mut joined = Vec::with_capacity(n / lanes + 1);
            for i in (lane..n).step_by(lanes) {
                let session = &sessions[i % sessions.len()];
                let lease = store.join_session(session, &member(i), &holder()).await;
                joined.push(lease.unwrap_or_else(|e| panic!("join: {e}")));
            }
            joined
        }));
    }
    for task in tasks {
        keep.extend(task.await.unwrap_or_else(|e| panic!("{e}")));
    }
    let join = start.elapsed();
    let renewed0 = renewals.load(Ordering::Relaxed);
    let cpu0 = procfs::cpu(pid);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(o.seconds)).await;
    let wall = start.elapsed().as_secs_f64();
    let used = (procfs::cpu(pid) - cpu0).as_secs_f64();
    let renewed = renewals.load(Ordering::Relaxed) - renewed0;
    renewer.abort();
    // The processes leave: their sessions released, then swept, one batch of
    // members per call, each session by a task of its own until a call declares no
    // member dead (the call after the one that declared the last batch dead). The
    // members' tokens stay in the dead set: listing it (`dead_tokens`, which etcd 3.4
    // serves by walking the whole dead set) is kept out of the sweeps' time, and done once at
    // the end to check that no session token is left (session tokens sort before
    // their members').
    let start = Instant::now();
    for s in &sessions {
        store
            .release(s)
            .await
            .unwrap_or_else(|e| panic!("release: {e}"));
    }
    let sweeps = sessions.iter().map(|s| {
        let (store, token) = (store.clone(), s.token);
        async move {
            let swept = sweep_members(&store, token, async |moved| moved.members.is_empty()).await;
            swept.unwrap_or_else(|e| panic!("sweep: {e}"))
        }
    });
    let (mut dead_members, mut calls) = (0, 0);
    for d in futures::future::join_all(sweeps).await {
        dead_members += d.members;
        calls += d.calls;
    }
    let swept = start.elapsed();
    let dead = store.dead_tokens(o.sessions).await;
    let dead = dead.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !dead.iter().any(|d| d.key.space() == &Space::sessions()),
        "a session token is still in the dead set"
    );
    Figures {
        join,
        cpu_pct: used / wall * 100.0,
        renewals_per_sec: renewed as f64 / wall,
        sweep: Some((dead_members, swept, calls)),
    }
}

/// Members that are leases of their own; they stay alive in `keep`.
async fn leases(url: &str, pid: u32, o: &SessionOptions, keep: &mut Vec<Lease>) -> Figures {
    let store = store(url).await;
    let batch = store.capabilities().max_batch;
    let start = Instant::now();
    let ids: Vec<usize> = (0..o.members).collect();
    let mut leases = Vec::with_capacity(o.members);
    for wave in ids.chunks(batch * 16) {
        let calls = wave.chunks(batch).map(|chunk| {
            let asks: Vec<Acquire> = chunk
                .iter()
                .map(|i| Acquire::new(member(*i), holder(), o.ttl))
                .collect();
            let store = store.clone();
            async move { store.acquire_many(&asks).await }
        });
        for answers in futures::future::join_all(calls).await {
            for taken in answers.unwrap_or_else(|e| panic!("{e}")) {
                leases.push(taken.unwrap_or_else(|e| panic!("acquire: {e}")));
            }
        }
    }
    let join = start.elapsed();
    // Steady state: every lease renewed every ttl/3, paced every 10 ms, from 8 tasks
    // (one `renew_many` in flight each). Behind, the renewals that did not fit are
    // skipped and a lapsed lease stays lost: the rate answered Ok shows it.
    let cpu0 = procfs::cpu(pid);
    let every = o.ttl.duration() / 3;
    let seconds = Duration::from_secs(o.seconds);
    let paced = renew_paced(&store, leases, every, (8, batch), seconds).await;
    let wall = paced.wall.as_secs_f64();
    let used = (procfs::cpu(pid) - cpu0).as_secs_f64();
    keep.extend(paced.leases);
    Figures {
        join,
        cpu_pct: used / wall * 100.0,
        renewals_per_sec: paced.renewed as f64 / wall,
        sweep: None,
    }
}

fn main() {
    let o: SessionOptions = args::parse(&[]);
    let Some(server) = liveness_testkit::etcd::start() else {
        eprintln!("sessions: no etcd (skipped)");
        return;
    };
    let Some(pid) = server.process().and_then(|p| p.pid()) else {
        eprintln!("sessions: the etcd member has no process id (skipped)");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    rt.block_on(async {
        println!(
            "etcd, ttl {:?}, {} s of steady state, {} members",
            o.ttl.duration(),
            o.seconds,
            o.members
        );
        let (mut riding, mut owned) = (Vec::new(), Vec::new());
        let s = sessions(server.url(), pid, &o, &mut riding).await;
        print(&format!("in {} sessions", o.sessions), o.members, &s);
        if o.leases {
            let l = leases(server.url(), pid, &o, &mut owned).await;
            print("a lease per member", o.members, &l);
            println!(
                "etcd CPU, a lease each / in sessions: {:.1}x",
                l.cpu_pct / s.cpu_pct.max(0.01)
            );
        }
        drop((riding, owned));
    });
}
