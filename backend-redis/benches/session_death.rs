//! A process hosting many members is SIGKILLed: how long until every one of its
//! members is declared dead and its item requeued, whether any is declared twice, and
//! what the other processes' renewals saw meanwhile. Once with the members riding one
//! session, once with a lease each, on one redis-server, in one run.
//!
//! `cargo bench -p liveness-redis --bench session_death -- [--members 10000]
//! [--others 20] [--other-members 500] [--ttl-ms 5000] [--no-leases]`. Uses
//! `LIVENESS_REDIS_URL` when set, else starts a private redis-server.
//!
//! The victim is a child process (this binary run with `--victim`): it joins
//! `--members` members (into one session, or each a lease of its own), claims one
//! item for each, says `ready`, and renews (its session, or every lease with
//! `renew_many`) every ttl/3 until the parent kills it with SIGKILL. Beside it, the
//! parent holds `--others` sessions of `--other-members` members each, renewed every
//! ttl/3, and one probe session renewed every 20 ms, whose latencies are the other
//! processes' renewal figures. A checker with the default configuration runs in the
//! parent from the start. Printed: the time from the kill to the last member
//! declared dead and to the last item requeued, against ttl + 2 s (the victim's
//! leases expire up to one ttl after its last renewal), the members declared twice
//! (must be 0), the others' `Lost` answers (must be 0) and the probe's p50/p99/max.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use liveness_conformance::bench::args::Args;
use liveness_conformance::bench_util;
use liveness_core::{
    Checker, CheckerConfig, EnqueueOptions, Event, EventBus, HolderId, ItemStore, Key, Lease,
    LeaseStore, Name, Namespace, Space, Store, Ttl,
};
use liveness_redis::RedisStore;

mod common;
use common::{server, store_in};

/// The bench's options, from the command line.
#[derive(Clone)]
struct Options {
    members: usize,
    others: usize,
    other_members: usize,
    ttl: Ttl,
    leases: bool,
}

impl Options {
    fn from_args(args: &[String]) -> Options {
        let args = Args::new(args);
        Options {
            members: args.number("--members", 10_000usize).max(1),
            others: args.number("--others", 20),
            other_members: args.number("--other-members", 500),
            ttl: args.ttl_ms("--ttl-ms", Duration::from_secs(5)),
            leases: !args.flag("--no-leases"),
        }
    }
}

/// A store on namespace `ns` of the server at `url`.
async fn store(url: &str, ns: &str) -> RedisStore {
    store_in(url, Namespace::new(ns).unwrap_or_else(|e| panic!("{e}"))).await
}

fn name(text: &str) -> Name {
    Name::new(text).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `f` over `0..n` with 64 calls in flight; the answers in index order.
async fn lanes<T, F, Fut>(n: usize, f: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = T> + Send,
{
    let f = Arc::new(f);
    let lanes = 64;
    let mut tasks = Vec::with_capacity(lanes);
    for lane in 0..lanes {
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in (lane..n).step_by(lanes) {
                out.push((i, f(i).await));
            }
            out
        }));
    }
    let mut all = Vec::with_capacity(n);
    for task in tasks {
        all.extend(task.await.unwrap_or_else(|e| panic!("{e}")));
    }
    all.sort_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, t)| t).collect()
}

/// The victim process: joins, claims, says `ready`, renews until killed.
async fn victim(url: &str, ns: &str, leases: bool, members: usize, ttl: Ttl) {
    let store = Arc::new(store(url, ns).await);
    let holder = HolderId::new("victim").unwrap_or_else(|e| panic!("{e}"));
    let every = ttl.duration() / 3;
    let session_key = Key::new(Space::sessions(), name("victim"));
    let (session, mine): (Option<Lease>, Vec<Lease>) = if leases {
        let mine = bench_util::member_leases_batched(store.as_ref(), "v-", members, &holder, ttl)
            .await
            .unwrap_or_else(|e| panic!("acquire: {e}"));
        (None, mine)
    } else {
        let session = store
            .acquire(&session_key, &holder, ttl)
            .await
            .unwrap_or_else(|e| panic!("session: {e}"));
        let (s, h, sess) = (store.clone(), holder.clone(), session.clone());
        let mine = lanes(members, move |i| {
            let (s, h, sess) = (s.clone(), h.clone(), sess.clone());
            async move {
                let key = Key::new(Space::members(), name(&format!("v-{i}")));
                s.join_session(&sess, &key, &h)
                    .await
                    .unwrap_or_else(|e| panic!("join: {e}"))
            }
        })
        .await;
        (Some(session), mine)
    };
    // The session (or the leases) are renewed from here on, through the claims.
    let renewer = {
        let store = store.clone();
        let session = session.clone();
        let mine = mine.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match &session {
                    Some(s) => {
                        store.renew(s).await.unwrap_or_else(|e| panic!("{e}"));
                    }
                    None => {
                        for chunk in mine.chunks(1000) {
                            store
                                .renew_many(chunk)
                                .await
                                .unwrap_or_else(|e| panic!("{e}"));
                        }
                    }
                }
            }
        })
    };
    let s = store.clone();
    let claimed = lanes(members, move |i| {
        let (s, lease) = (s.clone(), mine[i].clone());
        async move { s.claim(&lease, 1).await.map(|v| v.len()).unwrap_or(0) }
    })
    .await;
    let claimed: usize = claimed.into_iter().sum();
    println!("ready {claimed}");
    std::io::stdout().flush().unwrap_or_else(|e| panic!("{e}"));
    renewer.await.unwrap_or_else(|e| panic!("{e}"));
}

/// The victim's members declared dead: their tokens, how many were declared again,
/// and when the last one was.
type Declared = (HashSet<u64>, usize, Option<Instant>);

/// What one run measured.
struct Figures {
    join: Duration,
    declared: Option<Duration>,
    requeued: Option<Duration>,
    dead: usize,
    twice: usize,
    lost: u64,
    probe: Vec<Duration>,
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

fn print(what: &str, o: &Options, f: &mut Figures) {
    f.probe.sort();
    let show = |d: Option<Duration>| d.map_or("never".to_owned(), |d| format!("{d:.2?}"));
    println!("{what}: {} members", o.members);
    println!("  victim ready (join + claim) in {:.2?}", f.join);
    println!(
        "  kill -> last member declared dead: {} ; -> last item requeued: {} (target ttl + 2 s = {:.2?})",
        show(f.declared),
        show(f.requeued),
        o.ttl.duration() + Duration::from_secs(2)
    );
    println!(
        "  declared {} of {}, {} twice; others' Lost: {}",
        f.dead, o.members, f.twice, f.lost
    );
    println!(
        "  others' renewals meanwhile ({} probes): p50 {:.2?}, p99 {:.2?}, max {:.2?}",
        f.probe.len(),
        quantile(&f.probe, 0.5),
        quantile(&f.probe, 0.99),
        quantile(&f.probe, 1.0),
    );
}

/// One run: a fresh namespace, the others, the victim, the kill, the checker.
async fn run(url: &str, o: &Options, leases: bool) -> Figures {
    let ns = liveness_conformance::fresh_namespace();
    let store: Arc<dyn Store> = Arc::new(store(url, ns.as_str()).await);
    for _ in 0..o.members {
        store
            .enqueue(b"job", EnqueueOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    // The others: sessions with their members, and the probe.
    let holder = HolderId::new("other").unwrap_or_else(|e| panic!("{e}"));
    let mut others = Vec::new();
    for p in 0..=o.others {
        let key = Key::new(Space::sessions(), name(&format!("o{p}")));
        let s = store
            .acquire(&key, &holder, o.ttl)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        if p < o.others {
            for m in 0..o.other_members {
                let key = Key::new(Space::members(), name(&format!("o{p}-{m}")));
                store
                    .join_session(&s, &key, &holder)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        }
        others.push(s);
    }
    let probe_session = others.pop().unwrap_or_else(|| unreachable!());
    let lost = Arc::new(AtomicU64::new(0));
    let stop = liveness_core::CancellationToken::new();
    let every = o.ttl.duration() / 3;
    let spread = others.len().max(1) as u32;
    for (p, s) in others.into_iter().enumerate() {
        let (store, lost, stop) = (store.clone(), lost.clone(), stop.clone());
        // Staggered, as processes started apart are.
        let offset = every * p as u32 / spread;
        tokio::spawn(async move {
            tokio::time::sleep(offset).await;
            while !stop.is_cancelled() {
                tokio::time::sleep(every).await;
                if store.renew(&s).await.is_err() {
                    lost.fetch_add(1, Relaxed);
                }
            }
        });
    }
    let probe = Arc::new(Mutex::new(Vec::new()));
    let probing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let (store, lost, stop) = (store.clone(), lost.clone(), stop.clone());
        let (probe, probing) = (probe.clone(), probing.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let start = Instant::now();
                if store.renew(&probe_session).await.is_err() {
                    lost.fetch_add(1, Relaxed);
                }
                if probing.load(Relaxed) {
                    probe
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(start.elapsed());
                }
            }
        });
    }
    // The checker, and the deaths it declares.
    let bus = EventBus::new(1 << 18);
    let mut events = bus.subscribe();
    let died: Arc<Mutex<Declared>> = Arc::default();
    {
        let died = died.clone();
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(Event::Died { key, token, .. }) if key.name().as_str().starts_with("v-") => {
                        let mut d = died.lock().unwrap_or_else(|e| e.into_inner());
                        if !d.0.insert(token.0) {
                            d.1 += 1;
                        }
                        d.2 = Some(Instant::now());
                    }
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        panic!("the bench's event receiver lagged by {n}")
                    }
                    Err(_) => return,
                }
            }
        });
    }
    let checker = Checker::new(store.clone(), CheckerConfig::default().events(bus)).spawn();

    // The victim.
    let started = Instant::now();
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    let mut child = Command::new(exe)
        .arg("--victim")
        .arg(url)
        .arg(ns.as_str())
        .arg(if leases { "leases" } else { "session" })
        .arg(o.members.to_string())
        .arg(o.ttl.as_millis().to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("the victim: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| unreachable!());
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(line.starts_with("ready"), "the victim said {line:?}");
    let join = started.elapsed();
    // A moment of steady state, then the kill.
    tokio::time::sleep(Duration::from_secs(1)).await;
    probing.store(true, Relaxed);
    child.kill().unwrap_or_else(|e| panic!("kill: {e}"));
    let killed = Instant::now();
    let _ = child.wait();
    let give_up = killed + o.ttl.duration() + Duration::from_secs(60);
    let mut requeued = None;
    while Instant::now() < give_up {
        let counts = store.item_counts().await.unwrap_or_else(|e| panic!("{e}"));
        if counts.owned == 0 && counts.pending == o.members as u64 {
            requeued = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Let a late duplicate show, then stop.
    tokio::time::sleep(Duration::from_millis(500)).await;
    probing.store(false, Relaxed);
    stop.cancel();
    checker.stop().await;
    let (dead, twice, last) = {
        let d = died.lock().unwrap_or_else(|e| e.into_inner());
        (d.0.len(), d.1, d.2)
    };
    let probe = std::mem::take(&mut *probe.lock().unwrap_or_else(|e| e.into_inner()));
    Figures {
        join,
        declared: last.filter(|_| dead == o.members).map(|t| t - killed),
        requeued,
        dead,
        twice,
        lost: lost.load(Relaxed),
        probe,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    if args.first().map(String::as_str) == Some("--victim") {
        let [_, url, ns, mode, members, ttl] = args.as_slice() else {
            panic!("--victim URL NS MODE MEMBERS TTL_MS");
        };
        let members = members.parse().unwrap_or_else(|e| panic!("{e}"));
        let ttl = Ttl::from_millis(ttl.parse().unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
        rt.block_on(victim(url, ns, mode == "leases", members, ttl));
        return;
    }
    let o = Options::from_args(&args);
    let Some((_server, url)) = server("session_death") else {
        return;
    };
    println!(
        "ttl {:?}; {} other sessions of {} members renewed every ttl/3, a probe every 20 ms",
        o.ttl.duration(),
        o.others,
        o.other_members
    );
    let mut f = rt.block_on(run(&url, &o, false));
    print("victim's members riding one session", &o, &mut f);
    if o.leases {
        let mut f = rt.block_on(run(&url, &o, true));
        print("victim's members a lease each", &o, &mut f);
    }
}
