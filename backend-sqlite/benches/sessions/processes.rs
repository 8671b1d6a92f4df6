//! `--processes N`: the sessions in N processes on the one file. The bench runs itself
//! again (`std::env::current_exe`) as N children, each opening the file with a store
//! handle of its own, holding one session lease (renewed every ttl/3 from the start)
//! and joining its share of the members into it. A child answers on its stdout: once
//! joined (`joined SECONDS LOST`), after each renewal (`renewed`), and after the
//! steady state the parent asks for on its stdin (`steady SECONDS`) with its own CPU
//! over it (`steady CPU_SECONDS WALL_SECONDS RENEWALS REFUSED MEDIAN_RENEWAL_MS`). It
//! exits when its stdin closes. SQLite runs in each child, so the store's cost is the
//! children's CPU, summed. Then the parent SIGKILLs the first child and times a checker
//! (its own handle on the file) declaring that child's members dead.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use liveness_conformance::bench::death_watch::DeathWatch;
use liveness_conformance::bench::procfs;
use liveness_core::{HolderId, Key, Name, Space, Store};
use liveness_sqlite::SqliteStore;
use tokio::sync::mpsc;

use super::{config, Figures, Options};

/// The namespace the processes share.
const NAMESPACE: &str = "bench_processes";

/// The key of the member `i` of the process `index`.
fn member(index: usize, i: usize) -> Key {
    Key::member(&format!("p{index}-m{i}")).unwrap_or_else(|e| panic!("{e}"))
}

/// The child's side: `--child INDEX --file PATH --members ITS_SHARE`.
pub fn child(o: &Options, index: usize, path: &Path) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    // The parent's words, read off the runtime; the channel closes with stdin.
    let (tx, mut words) = mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rt.block_on(async {
        let store = SqliteStore::connect(config(path, NAMESPACE, o))
            .await
            .unwrap_or_else(|e| panic!("child {index}: connect: {e}"));
        let holder = HolderId::new(format!("process-{index}")).unwrap_or_else(|e| panic!("{e}"));
        let key = Key::new(
            Space::sessions(),
            Name::new(format!("p{index}")).unwrap_or_else(|e| panic!("{e}")),
        );
        let session = store
            .acquire(&key, &holder, o.ttl)
            .await
            .unwrap_or_else(|e| panic!("child {index}: session: {e}"));
        let (renewed, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let took = Arc::new(Mutex::new(Vec::new()));
        {
            let (store, session) = (store.clone(), session.clone());
            let (renewed, refused, took) = (renewed.clone(), refused.clone(), took.clone());
            let every = o.ttl.duration() / 3;
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let sent = Instant::now();
                    if store.renew(&session).await.is_ok() {
                        renewed.fetch_add(1, Ordering::Relaxed);
                        println!("renewed");
                    } else {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Ok(mut took) = took.lock() {
                        took.push(sent.elapsed());
                    }
                }
            });
        }
        let started = Instant::now();
        let mut lost = 0;
        for i in 0..o.members {
            let joined = store
                .join_session(&session, &member(index, i), &holder)
                .await;
            lost += usize::from(joined.is_err());
        }
        println!("joined {:.3} {lost}", started.elapsed().as_secs_f64());
        while let Some(word) = words.recv().await {
            let Some(seconds) = word.strip_prefix("steady ") else {
                continue;
            };
            let seconds: u64 = seconds.trim().parse().unwrap_or(0);
            let (wall0, cpu0) = (Instant::now(), procfs::own_cpu());
            let (r0, f0) = (
                renewed.load(Ordering::Relaxed),
                refused.load(Ordering::Relaxed),
            );
            if let Ok(mut took) = took.lock() {
                took.clear();
            }
            tokio::time::sleep(Duration::from_secs(seconds)).await;
            let cpu = (procfs::own_cpu() - cpu0).as_secs_f64();
            let mut took = took.lock().map(|t| t.clone()).unwrap_or_default();
            took.sort();
            let median = took.get(took.len() / 2).copied().unwrap_or_default();
            println!(
                "steady {cpu:.3} {:.3} {} {} {:.3}",
                wall0.elapsed().as_secs_f64(),
                renewed.load(Ordering::Relaxed) - r0,
                refused.load(Ordering::Relaxed) - f0,
                median.as_secs_f64() * 1000.0
            );
        }
    });
}

/// A line a child wrote, with the instant the parent read it.
struct Said {
    child: usize,
    at: Instant,
    line: Option<String>,
}

/// The children, and what they say.
struct Children {
    procs: Vec<Child>,
    stdins: Vec<Option<ChildStdin>>,
    said: mpsc::UnboundedReceiver<Said>,
    last_renewed: Vec<Option<Instant>>,
}

impl Children {
    fn spawn(path: &Path, o: &Options) -> Children {
        let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
        let share = o.members / o.processes;
        let (tx, said) = mpsc::unbounded_channel();
        let (mut procs, mut stdins) = (Vec::new(), Vec::new());
        for index in 0..o.processes {
            let mut child = Command::new(&exe)
                .args(["--child", &index.to_string()])
                .arg("--file")
                .arg(path)
                .args(["--members", &share.to_string()])
                .args(["--ttl-ms", &o.ttl.duration().as_millis().to_string()])
                .args([
                    "--synchronous",
                    &format!("{:?}", o.synchronous).to_lowercase(),
                ])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("child {index}: {e}"));
            let out = child
                .stdout
                .take()
                .unwrap_or_else(|| panic!("child stdout"));
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    let said = Said {
                        child: index,
                        at: Instant::now(),
                        line: Some(line),
                    };
                    if tx.send(said).is_err() {
                        return;
                    }
                }
                let _ = tx.send(Said {
                    child: index,
                    at: Instant::now(),
                    line: None,
                });
            });
            stdins.push(child.stdin.take());
            procs.push(child);
        }
        Children {
            procs,
            stdins,
            said,
            last_renewed: vec![None; o.processes],
        }
    }

    /// The next line of each child that starts with `word`, its words after it, and
    /// when it was read. Panics when a child ends first.
    async fn each(&mut self, word: &str) -> Vec<(Instant, Vec<f64>)> {
        let mut got: Vec<Option<(Instant, Vec<f64>)>> = vec![None; self.procs.len()];
        while got.iter().any(Option::is_none) {
            let said = self
                .said
                .recv()
                .await
                .unwrap_or_else(|| panic!("no child left"));
            let Some(line) = said.line else {
                panic!("child {} ended before saying {word}", said.child);
            };
            if line == "renewed" {
                self.last_renewed[said.child] = Some(said.at);
            } else if let Some(rest) = line.strip_prefix(word) {
                let words = rest
                    .split_whitespace()
                    .map(|w| w.parse().unwrap_or(f64::NAN));
                got[said.child] = Some((said.at, words.collect()));
            }
        }
        got.into_iter().flatten().collect()
    }

    /// Tells every child (still running) `line`.
    fn tell(&mut self, line: &str) {
        for stdin in self.stdins.iter_mut().flatten() {
            let _ = writeln!(stdin, "{line}").and_then(|()| stdin.flush());
        }
    }

    /// Closes every child's stdin (they exit) and waits for them.
    fn end(mut self) {
        self.stdins.clear();
        for mut child in self.procs {
            let _ = child.wait();
        }
    }
}

/// The parent's side: the children join, hold and die; prints the figures and answers
/// them for the comparison with a lease each.
pub async fn run(path: &Path, o: &Options) -> Figures {
    let share = o.members / o.processes;
    let started = Instant::now();
    let mut children = Children::spawn(path, o);
    let joined = children.each("joined").await;
    let join = joined
        .iter()
        .map(|(at, _)| *at - started)
        .max()
        .unwrap_or_default();
    let own: Vec<f64> = joined.iter().map(|(_, w)| w[0]).collect();
    let lost: f64 = joined.iter().map(|(_, w)| w[1]).sum();
    let range = |v: &[f64]| {
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        (min, v.iter().copied().fold(0.0, f64::max))
    };
    let (fastest, slowest) = range(&own);
    println!(
        "{} processes, {share} members each: all joined {:.2} s after the spawn; each its own \
         joins in {fastest:.2} – {slowest:.2} s; joins refused (Lost) {lost}",
        o.processes,
        join.as_secs_f64()
    );
    children.tell(&format!("steady {}", o.seconds));
    let steady = children.each("steady").await;
    let cpu: Vec<f64> = steady.iter().map(|(_, w)| w[0]).collect();
    let wall = steady.iter().map(|(_, w)| w[1]).fold(0.0, f64::max);
    let renewals: f64 = steady.iter().map(|(_, w)| w[2]).sum();
    let refused: f64 = steady.iter().map(|(_, w)| w[3]).sum();
    let mut medians: Vec<f64> = steady.iter().map(|(_, w)| w[4]).collect();
    medians.sort_by(f64::total_cmp);
    let (least, most) = range(&cpu);
    let cpu_pct = cpu.iter().sum::<f64>() / wall * 100.0;
    println!(
        "steady state over {wall:.1} s: the {} processes' CPU {:.3} s in all ({cpu_pct:.3} % of \
         a core; each {least:.2} – {most:.2} s), session renewals {renewals} refused {refused}",
        o.processes,
        cpu.iter().sum::<f64>()
    );

    // The first child dies (SIGKILL); a checker in this process declares its members.
    let store = SqliteStore::connect(config(path, NAMESPACE, o))
        .await
        .unwrap_or_else(|e| panic!("checker's handle: {e}"));
    let mut watch = DeathWatch::start(Arc::new(store), Duration::from_secs(1));
    let prefix = "p0-m";
    let _ = children.procs[0].kill();
    let killed = Instant::now();
    children.stdins[0] = None;
    let last_renewed = children.last_renewed[0];
    let give_up = o.ttl.duration() * 3 + Duration::from_secs(60);
    let dying: HashSet<String> = (0..share).map(|i| format!("{prefix}{i}")).collect();
    let seen = watch
        .declared(share, give_up, |key, _| dying.contains(key.name().as_str()))
        .await;
    watch.stop().await;
    let since = |at: Option<Instant>, from: Instant| {
        at.map_or(f64::NAN, |t| {
            t.saturating_duration_since(from).as_secs_f64()
        })
    };
    let ttl = o.ttl.duration().as_secs_f64();
    let renewed_before = last_renewed.map_or(f64::NAN, |r| (killed - r).as_secs_f64());
    let after_renewal = last_renewed.map_or(f64::NAN, |r| since(seen.last, r));
    println!(
        "death of a process (SIGKILL), {share} members: {} declared by a checker in the parent; \
         first {:.2} s, last {:.2} s after the kill; its last renewal read {renewed_before:.2} s \
         before the kill, so the last member was declared {after_renewal:.2} s after it (ttl \
         {ttl:.0} s: {:.2} s beyond it); events missed {}",
        seen.count,
        since(seen.first, killed),
        since(seen.last, killed),
        after_renewal - ttl,
        seen.missed
    );
    children.end();
    Figures {
        join,
        cpu_pct,
        round: Duration::from_secs_f64(
            medians.get(medians.len() / 2).copied().unwrap_or(0.0) / 1000.0,
        ),
        lapsed: (lost + refused) as usize,
    }
}
