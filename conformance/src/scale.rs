//! The scale bench: a whole fleet of members in this process, one checker,
//! real time. Figures, not assertions. Any store runs it with [`main`] (flags below)
//! or [`run`].
//!
//! ```text
//! --members 10000,100000   fleet sizes, one run each
//! --ttl 10s                member ttl (renew every ttl/3, margin ttl/5)
//! --seconds 60             length of a quiet run
//! --batch-ms 2             renew through a Batcher of the bench's own with this
//!                          window (0: every member renews by itself, `unbatched`)
//! --defaults               members joined with `MemberConfig::new` as it is, as a
//!                          user writes it (the store handle's shared batcher);
//!                          overrides --batch-ms
//! --overload               instead of a quiet run: `before` (1 ttl), then a spinning
//!                          process steals CPU for --steal seconds (`during`), then
//!                          `after` (2 ttl); figures per phase
//! --steal 30               seconds of CPU stealing
//! --spinners 1             spinning processes
//! --server-pid PID         also print the CPU of this local server process per
//!                          phase (% of one core, µs per renewal), from /proc
//! ```
//!
//! Printed per run and phase: join time; renewals/s achieved vs needed; renew latency
//! p50 / p99 / max per store call; `Lost` events; false deaths (a `Died` of a member
//! that was not killed); checker round p50 / p99 and store calls per round; detection
//! p50 / p99 beyond the store expiry for 1 % of members killed (orphaned: without
//! release; expiry = their last renewal's send time + ttl, so the figure slightly
//! overstates); client CPU µs per renewal (utime + stime of this process from
//! `/proc/self/stat`); resident bytes per member (`/proc/self/statm` before and after
//! the join).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use liveness_core::layer::{Intercepted, Reply, Request};
use liveness_core::{
    async_trait, Batcher, Checker, CheckerConfig, Event, EventBus, Intercept, Key, Lease, Member,
    MemberConfig, Next, Op, Result, Store, Ttl,
};
use tokio::time::Instant;

use crate::Factory;

/// What to run, from the command line (the flags above).
#[derive(Clone, Debug, clap::Args)]
pub struct ScaleOptions {
    /// Fleet sizes, one run each.
    #[arg(long, value_delimiter = ',', default_value = "10000")]
    pub members: Vec<usize>,
    /// Member ttl (`10s`, `500ms`, or seconds).
    #[arg(long, default_value = "10s", value_parser = secs)]
    pub ttl: Duration,
    /// Length of a quiet run, in seconds.
    #[arg(long, default_value_t = 60.0)]
    pub seconds: f64,
    /// The batcher's window, in milliseconds (0, `None`: each member renews by itself).
    #[arg(long = "batch-ms", value_name = "MS", default_value = "2", value_parser = batch_ms)]
    pub batch: ::std::option::Option<Duration>,
    /// Members joined with the default configuration (overrides `batch`).
    #[arg(long)]
    pub defaults: bool,
    /// Overload mode: before / during (CPU stolen) / after.
    #[arg(long)]
    pub overload: bool,
    /// How long the CPU is stolen (`30s`, `500ms`, or seconds).
    #[arg(long, default_value = "30s", value_parser = secs)]
    pub steal: Duration,
    /// How many spinning processes steal it.
    #[arg(long, default_value_t = 1)]
    pub spinners: usize,
    /// A local server process whose CPU is printed per phase (Linux `/proc`).
    #[arg(long, value_name = "PID")]
    pub server_pid: Option<u32>,
}

/// Reads `10s`, `500ms` or `2.5` (seconds).
fn secs(v: &str) -> std::result::Result<Duration, String> {
    let v = v.trim();
    if let Some(ms) = v.strip_suffix("ms") {
        return ms
            .parse()
            .map(Duration::from_millis)
            .map_err(|e| format!("{e}"));
    }
    let secs = v.strip_suffix('s').unwrap_or(v).parse::<f64>();
    secs.map_err(|e| format!("{e}"))
        .and_then(|s| Duration::try_from_secs_f64(s).map_err(|e| format!("{e}")))
}

/// Reads a batch window in milliseconds, 0 being none.
fn batch_ms(v: &str) -> std::result::Result<Option<Duration>, String> {
    let ms = v.parse::<u64>().map_err(|e| format!("{e}"))?;
    Ok((ms > 0).then(|| Duration::from_millis(ms)))
}

impl ScaleOptions {
    /// The options of this process's command line, as
    /// [`bench::args::parse`](crate::bench::args::parse) reads them (exits with clap's
    /// message on an unknown flag or a bad value).
    pub fn from_args() -> ScaleOptions {
        crate::bench::args::parse(&[])
    }
}

/// Builds a multi-threaded runtime and runs [`run`] with options from the arguments.
pub fn main(factory: Factory) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    rt.block_on(run(factory, ScaleOptions::from_args()));
}

/// Runs every fleet size of `options` on a fresh store from `factory`, printing the
/// figures.
pub async fn run(factory: Factory, options: ScaleOptions) {
    for &n in &options.members {
        let Some(store) = factory().await else {
            println!("scale: no store");
            return;
        };
        one(store, n, &options).await;
    }
}

/// A latency histogram: buckets 5 % wide from 1 µs up, lock-free.
struct Histogram {
    buckets: Vec<AtomicU64>,
    max: AtomicU64,
}

const BUCKETS: usize = 420; // 1.05^420 µs ≈ 8 × 10^8 µs

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max: AtomicU64::new(0),
        }
    }
    fn record(&self, d: Duration) {
        let us = d.as_micros().max(1) as f64;
        let i = ((us.ln() / 1.05f64.ln()) as usize).min(BUCKETS - 1);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.max.fetch_max(d.as_micros() as u64, Ordering::Relaxed);
    }
    fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }
    fn quantile(&self, q: f64) -> Duration {
        let total = self.count();
        if total == 0 {
            return Duration::ZERO;
        }
        let want = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            seen += b.load(Ordering::Relaxed);
            if seen >= want {
                return Duration::from_micros(1.05f64.powi(i as i32 + 1) as u64);
            }
        }
        self.max()
    }
    fn max(&self) -> Duration {
        Duration::from_micros(self.max.load(Ordering::Relaxed))
    }
}

/// Per-phase counters.
struct Phase {
    renew: Histogram,
    renewed: AtomicU64,
    renew_calls: AtomicU64,
    rounds: Histogram,
    round_calls: AtomicU64,
    round_count: AtomicU64,
}

impl Phase {
    fn new() -> Phase {
        Phase {
            renew: Histogram::new(),
            renewed: AtomicU64::new(0),
            renew_calls: AtomicU64::new(0),
            rounds: Histogram::new(),
            round_calls: AtomicU64::new(0),
            round_count: AtomicU64::new(0),
        }
    }
}

/// A forwarding store that measures what the bench prints.
struct Meter {
    phases: Vec<Phase>,
    phase: AtomicUsize,
    /// Send time of the last renewal of each victim (killed member).
    victims: Mutex<HashMap<Key, Instant>>,
    watched: HashSet<Key>,
    /// The checker's current round: start, store calls so far.
    round: Mutex<Option<(Instant, u64)>>,
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Meter")
    }
}

impl Meter {
    fn phase(&self) -> &Phase {
        &self.phases[self
            .phase
            .load(Ordering::Relaxed)
            .min(self.phases.len() - 1)]
    }
    /// Counts a renewal call sent at `sent` (its latency is recorded by
    /// [`Meter::answered`] once it answers).
    fn renewed(&self, leases: &[Lease], sent: Instant) {
        let p = self.phase();
        p.renew_calls.fetch_add(1, Ordering::Relaxed);
        p.renewed.fetch_add(leases.len() as u64, Ordering::Relaxed);
        let mut v = self.victims.lock().unwrap_or_else(|e| e.into_inner());
        for l in leases {
            if self.watched.contains(&l.key) {
                v.insert(l.key.clone(), sent);
            }
        }
    }
    /// Records the latency of a renewal call sent at `sent`, now answered.
    fn answered(&self, sent: Instant) {
        self.phase().renew.record(sent.elapsed());
    }

    /// Ends the checker's round (its `next_expiry` came back), if one was open.
    fn round_ended(&self) {
        if let Some((start, calls)) = self.round.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let p = self.phase();
            p.rounds.record(start.elapsed());
            p.round_calls.fetch_add(calls + 1, Ordering::Relaxed);
            p.round_count.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn round_call(&self) {
        if let Some((_, n)) = self
            .round
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            *n += 1;
        }
    }
}

#[async_trait]
impl Intercept for Meter {
    async fn call(&self, req: Request, next: Next) -> Result<Reply> {
        let sent = Instant::now();
        let op = req.op();
        match op {
            Op::Expired => {
                *self.round.lock().unwrap_or_else(|e| e.into_inner()) = Some((sent, 1));
            }
            op if op.is_checker_call() && op != Op::NextExpiry => self.round_call(),
            _ => {}
        }
        let renewal = matches!(op, Op::RenewMany);
        if let Request::RenewMany { leases } = &req {
            self.renewed(leases, sent);
        }
        let answer = next.run(req).await;
        if renewal {
            self.answered(sent);
        }
        if op == Op::NextExpiry {
            self.round_ended();
        }
        answer
    }
}

/// utime + stime of this process, from `/proc/self/stat` (clock ticks of 10 ms).
fn cpu_time() -> Option<Duration> {
    proc_cpu("self")
}

/// utime + stime of process `pid` ("self" for this one), from `/proc/PID/stat`
/// (clock ticks of 10 ms).
fn proc_cpu(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// Resident bytes of this process, from `/proc/self/statm` (4 KiB pages).
fn resident() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    Some(statm.split_whitespace().nth(1)?.parse::<u64>().ok()? * 4096)
}

/// The 1- and 5-minute load averages.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".into())
}

/// The phase slot of the join (phases are 0, 1, 2).
const JOIN: usize = 3;

#[derive(Default)]
struct Seen {
    lost: [u64; 4],
    joined: [u64; 4],
    false_deaths: [u64; 4],
    deaths: Vec<(Key, Instant)>,
    lagged: u64,
    /// `Lost` events by reason, over the whole run.
    why_lost: std::collections::BTreeMap<String, u64>,
}

async fn one(inner: Arc<dyn Store>, n: usize, o: &ScaleOptions) {
    let ttl = Ttl::new(Duration::from_millis(o.ttl.as_millis() as u64))
        .unwrap_or_else(|e| panic!("ttl: {e}"));
    let names: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
    let kill_n = (n / 100).max(1);
    let victims: Vec<usize> = (0..kill_n).map(|i| i * (n / kill_n)).collect();
    let watched: HashSet<Key> = victims
        .iter()
        .map(|&i| Key::member(&names[i]).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let meter = Arc::new(Meter {
        // One slot per phase, and the last one (JOIN) for the join, so that the calls
        // of a long join are not counted in the first phase's figures.
        phases: (0..=JOIN).map(|_| Phase::new()).collect(),
        phase: AtomicUsize::new(JOIN),
        victims: Mutex::default(),
        watched: watched.clone(),
        round: Mutex::default(),
    });
    let store: Arc<dyn Store> = Arc::new(Intercepted::new(inner, meter.clone()));
    let bus = EventBus::new(1 << 16);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let collector = {
        let mut rx = bus.subscribe();
        let seen = seen.clone();
        let meter = meter.clone();
        let watched = watched.clone();
        tokio::spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(e) => {
                        let p = meter.phase.load(Ordering::Relaxed).min(JOIN);
                        let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                        match e {
                            Event::Lost { reason, .. } => {
                                s.lost[p] += 1;
                                *s.why_lost.entry(format!("{reason:?}")).or_default() += 1;
                            }
                            Event::Joined { .. } => s.joined[p] += 1,
                            Event::Died { key, .. } => {
                                if watched.contains(&key) {
                                    s.deaths.push((key, Instant::now()));
                                } else {
                                    s.false_deaths[p] += 1;
                                }
                            }
                            _ => {}
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(k)) => {
                        seen.lock().unwrap_or_else(|e| e.into_inner()).lagged += k
                    }
                    Err(_) => return,
                }
            }
        })
    };
    let renewals = match o.defaults {
        true => None,
        false => o.batch.map(|w| Batcher::new(store.clone(), w)),
    };
    let rss_before = resident();
    let join_start = Instant::now();
    let gate = Arc::new(tokio::sync::Semaphore::new(256));
    let mut joins = Vec::with_capacity(n);
    for name in &names {
        let mut config = MemberConfig::new(name, ttl)
            .unwrap_or_else(|e| panic!("{e}"))
            .events(bus.clone());
        if !o.defaults {
            config = match &renewals {
                Some(r) => config.batcher(r.clone()),
                None => config.unbatched(),
            };
        }
        let (store, gate) = (store.clone(), gate.clone());
        joins.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await;
            Member::join(store, config).await
        }));
    }
    let mut members = Vec::with_capacity(n);
    for j in joins {
        match j.await {
            Ok(Ok(m)) => members.push(Some(m)),
            Ok(Err(e)) => panic!("join: {e}"),
            Err(e) => panic!("join task: {e}"),
        }
    }
    let join_time = join_start.elapsed();
    let per_member = match (rss_before, resident()) {
        (Some(a), Some(b)) => format!("{}", b.saturating_sub(a) / n as u64),
        _ => "?".into(),
    };
    let checker = Checker::new(store.clone(), CheckerConfig::default().events(bus.clone())).spawn();
    println!(
        "== scale: backend={} members={n} ttl={:?} batch={} mode={} load(1/5/15 min) at start={} ==",
        store.backend(),
        o.ttl,
        match (o.defaults, o.batch) {
            (true, _) => "default (the store handle's shared batcher)".into(),
            (false, Some(w)) => format!("{w:?}"),
            (false, None) => "off".into(),
        },
        if o.overload { "overload" } else { "quiet" },
        load()
    );
    {
        let s = seen.lock().unwrap_or_else(|e| e.into_inner());
        let j = &meter.phases[JOIN];
        println!(
            "join         {n} members in {join_time:.2?}; resident bytes per member {per_member}; during the join: Lost={} re-joins={} renewals={} (p99 {:.2?})",
            s.lost[JOIN],
            s.joined[JOIN].saturating_sub(n as u64),
            j.renewed.load(Ordering::Relaxed),
            j.renew.quantile(0.99),
        );
    }

    let needed = n as f64 / (o.ttl.as_secs_f64() / 3.0);
    let kill = |members: &mut Vec<Option<Member>>| {
        for &i in &victims {
            // Orphaned: the heartbeat stops, nothing is released (a dropped member
            // would release itself after its margin).
            if let Some(m) = members[i].take() {
                m.orphan();
            }
        }
    };
    let lens: Vec<Duration> = if o.overload {
        vec![o.ttl, o.steal, o.ttl * 2]
    } else {
        vec![Duration::from_secs_f64(o.seconds)]
    };
    let names_of = if o.overload {
        vec!["before", "during", "after"]
    } else {
        vec!["quiet"]
    };
    let mut kill_at = None;
    for (p, len) in lens.iter().enumerate() {
        meter.phase.store(p, Ordering::Relaxed);
        let cpu0 = cpu_time();
        let server = o.server_pid.map(|pid| pid.to_string());
        let server0 = server.as_deref().and_then(proc_cpu);
        let start = Instant::now();
        let mut spinners = Vec::new();
        if o.overload && p == 1 {
            for _ in 0..o.spinners {
                if let Ok(c) = std::process::Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
                {
                    spinners.push(c);
                }
            }
        }
        // Kill 1 %: a third into a quiet run, at the start of the steal in overload.
        if (!o.overload && p == 0) || (o.overload && p == 1) {
            let wait = if o.overload { Duration::ZERO } else { *len / 3 };
            tokio::time::sleep(wait).await;
            kill(&mut members);
            kill_at = Some(Instant::now());
            tokio::time::sleep(len.saturating_sub(wait)).await;
        } else {
            tokio::time::sleep(*len).await;
        }
        for mut c in spinners {
            let _ = c.kill();
            let _ = c.wait();
        }
        let elapsed = start.elapsed();
        let ph = &meter.phases[p];
        let renewed = ph.renewed.load(Ordering::Relaxed);
        let cpu_us = match (cpu0, cpu_time()) {
            (Some(a), Some(b)) if renewed > 0 => {
                format!("{:.1}", (b - a).as_micros() as f64 / renewed as f64)
            }
            _ => "?".into(),
        };
        let server_cpu = match (server0, server.as_deref().and_then(proc_cpu)) {
            (Some(a), Some(b)) => format!(
                "; server CPU {:.1} % of one core, {:.1} µs/renewal",
                (b - a).as_secs_f64() / elapsed.as_secs_f64() * 100.0,
                (b - a).as_micros() as f64 / renewed.max(1) as f64
            ),
            _ => String::new(),
        };
        let s = seen.lock().unwrap_or_else(|e| e.into_inner());
        let calls = ph.round_calls.load(Ordering::Relaxed);
        let rounds = ph.round_count.load(Ordering::Relaxed).max(1);
        println!(
            "{:<7} {:>5.1}s renewals/s {:>8.0} (needed {:>7.0}) in {:>8} store calls; renew call p50={:.2?} p99={:.2?} max={:.2?}; Lost={} re-joins={} false deaths={}; checker rounds={} p50={:.2?} p99={:.2?} calls/round={:.1}; client CPU µs/renewal={cpu_us}{server_cpu}; load={}",
            names_of[p],
            elapsed.as_secs_f64(),
            renewed as f64 / elapsed.as_secs_f64(),
            needed,
            ph.renew_calls.load(Ordering::Relaxed),
            ph.renew.quantile(0.5),
            ph.renew.quantile(0.99),
            ph.renew.max(),
            s.lost[p],
            // The fleet's own joins are counted in the first phase.
            s.joined[p],
            s.false_deaths[p],
            ph.round_count.load(Ordering::Relaxed),
            ph.rounds.quantile(0.5),
            ph.rounds.quantile(0.99),
            calls as f64 / rounds as f64,
            load()
        );
    }
    // Detection: each killed member's Died, past its store expiry (last renewal sent
    // + ttl). Deaths not seen by the end are reported as missing.
    let expiry: HashMap<Key, Instant> = meter
        .victims
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(k, t)| (k.clone(), *t + o.ttl))
        .collect();
    {
        let s = seen.lock().unwrap_or_else(|e| e.into_inner());
        let mut beyond: Vec<Duration> = s
            .deaths
            .iter()
            .filter_map(|(k, at)| expiry.get(k).map(|e| at.saturating_duration_since(*e)))
            .collect();
        beyond.sort();
        let q = |p: f64| -> Duration {
            if beyond.is_empty() {
                return Duration::ZERO;
            }
            beyond[((beyond.len() - 1) as f64 * p).round() as usize]
        };
        println!(
            "detection    killed={} at {:?} into the run; declared dead={} missing={}; beyond store expiry p50={:.2?} p99={:.2?} max={:.2?}; events lagged={}",
            victims.len(),
            kill_at.map(|k| k.saturating_duration_since(join_start)),
            s.deaths.len(),
            victims.len().saturating_sub(s.deaths.len()),
            q(0.5),
            q(0.99),
            q(1.0),
            s.lagged
        );
    }
    let not_live = members
        .iter()
        .flatten()
        .filter(|m| m.check().is_err())
        .count();
    let why_lost = {
        let s = seen.lock().unwrap_or_else(|e| e.into_inner());
        format!("{:?}", s.why_lost)
    };
    println!(
        "end          members not live at the end: {not_live} of {}; Lost by reason over the run: {why_lost}",
        n - victims.len()
    );
    checker.stop().await;
    collector.abort();
    drop(members);
}

#[cfg(test)]
mod options {
    use super::*;

    fn parse(args: &[&str]) -> std::result::Result<ScaleOptions, clap::Error> {
        crate::bench::args::try_parse_from(
            &[],
            std::iter::once("scale").chain(args.iter().copied()),
        )
    }

    #[test]
    fn the_flags_keep_their_names_and_defaults() {
        let o = parse(&["--bench"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((o.members, o.seconds, o.spinners), (vec![10_000], 60.0, 1));
        assert_eq!(
            (o.ttl, o.steal),
            (Duration::from_secs(10), Duration::from_secs(30))
        );
        assert_eq!(o.batch, Some(Duration::from_millis(2)));
        assert!(!o.defaults && !o.overload && o.server_pid.is_none());
        let o = parse(&[
            "--members",
            "10,20",
            "--ttl",
            "500ms",
            "--batch-ms",
            "0",
            "--steal",
            "2.5",
            "--overload",
            "--server-pid",
            "7",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(o.members, [10, 20]);
        assert_eq!(
            (o.ttl, o.steal),
            (Duration::from_millis(500), Duration::from_millis(2500))
        );
        assert_eq!((o.batch, o.server_pid), (None, Some(7)));
        assert!(o.overload);
    }

    #[test]
    fn unknown_flags_and_bad_numbers_are_refused() {
        for args in [
            &["--member", "1000"][..],
            &["--members", "1000,many"],
            &["--ttl", "soon"],
            &["--batch-ms", "-1"],
            &["--seconds", "x"],
        ] {
            assert!(parse(args).is_err(), "{args:?}");
        }
    }
}
