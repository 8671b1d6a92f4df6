#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use liveness_core::sync::lock;
use liveness_core::Page;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use liveness_core::{
    Acquire, Checker, CheckerConfig, EnqueueOptions, HolderId, ItemState, Key, Lease, MemoryServer,
    Namespace, Store, Ttl,
};
use tokio::time::Instant;

use crate::wrappers::Wrapped;

pub mod args;
mod cost;
pub mod death_watch;
pub mod fixtures;
pub mod joins;
pub mod paced;
pub mod procfs;
pub mod session_death;
pub mod skip;
pub mod sweep_members;
pub mod util;
pub mod wrappers;
pub use cost::*;

/// A boxed future returning a store, as a [`Factory`] makes.
pub type StoreFuture = Pin<Box<dyn Future<Output = Option<Arc<dyn Store>>> + Send>>;

/// Makes a store on a FRESH namespace for each call, or `None` when there is no store
/// to test (its server is missing). `None` fails the test unless skipping was asked for
/// outside CI: see [`skip`].
pub type Factory = Arc<dyn Fn() -> StoreFuture + Send + Sync>;

/// Wraps an `async fn() -> Option<Arc<dyn Store>>` (or closure) into a [`Factory`]
/// whose stores stand behind [`liveness_core::CheckInput`], as every store the state
/// machines and `connect` hand out does: the suite and the bench kit see the store as
/// its users see it, and a store under test receives only checked input (the store
/// contract).
pub fn factory<F, Fut>(f: F) -> Factory
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<Arc<dyn Store>>> + Send + 'static,
{
    let f = Arc::new(f);
    Arc::new(move || {
        let f = f.clone();
        Box::pin(async move { f().await.map(liveness_core::checked) }) as StoreFuture
    })
}

/// A [`Factory`] of fresh namespaces on one in-memory `server` (the reference model):
/// what the bench binaries run on when no backend is named.
pub fn memory_factory(server: MemoryServer) -> Factory {
    factory(move || {
        let store: Arc<dyn Store> = Arc::new(server.store(&fresh_namespace()));
        async move { Some(store) }
    })
}

/// A random namespace (`t_` and 16 hex digits), for one scenario or one case.
pub fn fresh_namespace() -> Namespace {
    let name = format!("t_{:016x}", fastrand::u64(..));
    Namespace::new(name).unwrap_or_else(|e| panic!("generated namespace is valid: {e}"))
}

/// A memory store on a fresh server, for the bench kit's own tests.
#[cfg(test)]
fn memory_store() -> liveness_core::MemoryStore {
    MemoryServer::new().store(&fresh_namespace())
}

/// What to measure, from the command line (`--members 1000,10000 --seconds 2
/// --deaths 20 --concurrency 1,64 --check-cost`).
#[derive(Clone, Debug, clap::Args)]
pub struct Options {
    /// Member counts for the checker-round figures.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    pub members: Vec<usize>,
    /// How long each renewal measurement runs, in seconds.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Concurrency levels for the renewal figures.
    #[arg(long, value_delimiter = ',', default_value = "1,64")]
    pub concurrency: Vec<usize>,
    /// How many deaths the detection latency is measured over.
    #[arg(long, default_value_t = 20)]
    pub deaths: usize,
    /// Instead of the figures, check that a checker round's cost does not grow with
    /// live leases, between the smallest and the largest `--members` (`main` runs
    /// `check_round_cost`, wall time judged too; exit status 1 when it grows).
    #[arg(long)]
    pub check_cost: bool,
}

impl Options {
    /// The options of this process's command line, as [`args::parse`] reads them
    /// (exits with clap's message on an unknown flag or a bad value).
    pub fn from_args() -> Options {
        args::parse(&[])
    }
}

/// Renewal throughput at one concurrency level.
#[derive(Clone, Copy, Debug)]
pub struct Renewals {
    /// Concurrent members.
    pub concurrency: usize,
    /// Successful renewals per second.
    pub per_second: f64,
}

/// One checker round's cost.
#[derive(Clone, Copy, Debug)]
pub struct Round {
    /// Live members in the store.
    pub members: usize,
    /// Expired members (reaped by the round).
    pub expired: usize,
    /// Wall time of the round.
    pub time: Duration,
    /// Store calls the round made.
    pub round_trips: u64,
    /// Median time of `leases` answering the first page (100) of the members space,
    /// measured before the round: with an index by key it stays about one round trip
    /// however many members there are.
    pub leases_page: Duration,
    /// Median time of one single-read store call (`dead_tokens(1)`), the round trip
    /// `leases_page` compares with.
    pub one_call: Duration,
}

/// Detection latencies.
#[derive(Clone, Debug)]
pub struct Detection {
    /// The ttl of the dying members.
    pub ttl: Duration,
    /// Time from each member's last renewal to its item pending again, sorted.
    pub latencies: Vec<Duration>,
}

impl Detection {
    /// The latency at quantile `p` (0.0 = min, 0.5 = median, 1.0 = max; nearest
    /// rank), or zero when no death was measured.
    pub fn percentile(&self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let i = ((self.latencies.len() - 1) as f64 * p.clamp(0.0, 1.0)).round() as usize;
        self.latencies[i]
    }
}

/// The kit's one-line report: deaths, ttl, min / median / p99, median beyond the ttl.
impl std::fmt::Display for Detection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "detection    deaths={} ttl={:?} min={:.3?} median={:.3?} p99={:.3?} (median beyond ttl {:.3?})",
            self.latencies.len(),
            self.ttl,
            self.percentile(0.0),
            self.percentile(0.5),
            self.percentile(0.99),
            self.percentile(0.5).saturating_sub(self.ttl)
        )
    }
}

/// The kit's one-line report of a round: members, expired, time, round trips.
impl std::fmt::Display for Round {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "checker round members={:<7} expired={:<5} time={:>10.3?} round_trips={} \
             leases_page(100)={:.3?} (one call {:.3?})",
            self.members,
            self.expired,
            self.time,
            self.round_trips,
            self.leases_page,
            self.one_call
        )
    }
}

/// Builds a multi-threaded runtime, runs [`run`] with options from the arguments.
/// With `--check-cost`, runs [`check_round_cost`] instead (between the smallest and
/// the largest `--members`, by default 1,000 and 100,000, with wall time judged),
/// prints its report, and exits with status 1 when the cost grows with live leases.
pub fn main(factory: Factory) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    let options = Options::from_args();
    if !options.check_cost {
        rt.block_on(run(factory, options));
        return;
    }
    let smallest = options.members.iter().copied().min().unwrap_or(1_000);
    let largest = options.members.iter().copied().max().unwrap_or(100_000);
    let check = CostCheck {
        live: vec![smallest, largest],
        ..CostCheck::default()
    };
    let report = rt.block_on(check_round_cost(factory, &check));
    println!("{report}");
    if !report.passed() {
        std::process::exit(1);
    }
}

fn holder() -> HolderId {
    HolderId::new("bench").unwrap_or_else(|e| panic!("{e}"))
}

fn key(prefix: &str, i: usize) -> Key {
    Key::member(&format!("{prefix}{i}")).unwrap_or_else(|e| panic!("{e}"))
}

fn ttl_of(d: Duration) -> Ttl {
    Ttl::new(Duration::from_millis(d.as_millis().max(1) as u64)).unwrap_or_else(|e| panic!("{e}"))
}

/// The median of repeated measurements (sorts `v`; zero when empty).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Keys taken per second on one handle, one task, `n` fresh keys each way: one
/// `acquire` after the other, then `acquire_many` in batches of `max_batch` (what a
/// process hosting many members sends at join). Medians of `rounds` rounds;
/// returns (one by one, acquire_many). Panics if the store refuses a fresh key.
pub async fn acquires(store: &dyn Store, n: usize, rounds: usize) -> (f64, f64) {
    let ttl = ttl_of(store.capabilities().min_ttl.max(Duration::from_secs(3600)));
    let holder = HolderId::new("bench").unwrap_or_else(|e| panic!("{e}"));
    let max = store.capabilities().max_batch.max(1);
    let asks = |prefix: String| -> Vec<Acquire> {
        (0..n)
            .map(|i| Acquire::new(key(&prefix, i), holder.clone(), ttl))
            .collect()
    };
    let (mut one, mut many) = (Vec::new(), Vec::new());
    for round in 0..rounds.max(1) {
        let each = asks(format!("join-one-{round}-"));
        let start = Instant::now();
        for ask in &each {
            store
                .acquire(&ask.key, &ask.holder, ask.ttl)
                .await
                .unwrap_or_else(|e| panic!("acquire: {e}"));
        }
        one.push(n as f64 / start.elapsed().as_secs_f64());
        let all = asks(format!("join-many-{round}-"));
        let start = Instant::now();
        for chunk in all.chunks(max) {
            for answer in store
                .acquire_many(chunk)
                .await
                .unwrap_or_else(|e| panic!("acquire_many: {e}"))
            {
                answer.unwrap_or_else(|e| panic!("acquire_many refused a fresh key: {e}"));
            }
        }
        many.push(n as f64 / start.elapsed().as_secs_f64());
    }
    (median(&mut one), median(&mut many))
}

/// Measures [`acquires`] of 1,000 keys and prints the line every backend bench
/// prints: `join batch keys=1000 batch=B one by one=…/s acquire_many=…/s (ratio …)`.
pub async fn print_acquires(store: &dyn Store, rounds: usize) {
    let n = 1000;
    let (one, many) = acquires(store, n, rounds).await;
    println!(
        "join batch   keys={n} batch={} one by one={one:>9.0}/s acquire_many={many:>9.0}/s (ratio {:.2})",
        store.capabilities().max_batch,
        many / one.max(1.0)
    );
}

/// Adds up what `tasks` counted (each, the operations it completed since `start`)
/// and divides by the time since `start`: operations per second. The common tail of
/// every throughput loop, the framework's and the raw primitives' alike.
pub async fn per_second(start: Instant, tasks: Vec<tokio::task::JoinHandle<u64>>) -> f64 {
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap_or(0);
    }
    total as f64 / start.elapsed().as_secs_f64()
}

/// Measures renewals per second with `concurrency` members for `seconds`.
pub async fn renewals(store: Arc<dyn Store>, concurrency: usize, seconds: f64) -> Renewals {
    let caps = store.capabilities();
    let ttl = ttl_of(caps.min_ttl.max(Duration::from_secs(60)).min(caps.max_ttl));
    let mut leases = Vec::new();
    for i in 0..concurrency {
        leases.push(
            store
                .acquire(&key("r", i), &holder(), ttl)
                .await
                .unwrap_or_else(|e| panic!("{e}")),
        );
    }
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let tasks: Vec<_> = leases
        .into_iter()
        .map(|lease| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < until {
                    if store.renew(&lease).await.is_ok() {
                        n += 1;
                    }
                }
                n
            })
        })
        .collect();
    Renewals {
        concurrency,
        per_second: per_second(start, tasks).await,
    }
}

async fn populate(store: &Arc<dyn Store>, prefix: &str, n: usize, ttl: Ttl) -> Vec<Lease> {
    let mut out = Vec::with_capacity(n);
    let mut next = 0;
    while next < n {
        let batch: Vec<_> = (next..(next + 64).min(n))
            .map(|i| {
                let store = store.clone();
                let key = key(prefix, i);
                tokio::spawn(async move { store.acquire(&key, &holder(), ttl).await })
            })
            .collect();
        for t in batch {
            if let Ok(Ok(lease)) = t.await {
                out.push(lease);
            }
        }
        next = (next + 64).min(n);
    }
    out
}

/// Measures one checker round over `members` live members of which `expired` are
/// expired. Needs a store on a fresh namespace.
pub async fn checker_round(store: Arc<dyn Store>, members: usize, expired: usize) -> Round {
    let caps = store.capabilities();
    let long = ttl_of(Duration::from_secs(3600).min(caps.max_ttl));
    let short = ttl_of(caps.min_ttl.max(Duration::from_millis(200)));
    populate(&store, "live", members - expired, long).await;
    let dying = populate(&store, "dying", expired, short).await;
    // Wait for the dying ones to be seen expired (observer-local stores observe here).
    wait_listed(&store, dying.len(), short).await;
    let (leases_page, one_call) = leases_page(&store).await;
    let wrapped = Arc::new(Wrapped::new(store));
    let checker = Checker::new(
        wrapped.clone(),
        CheckerConfig::default().batch(expired.max(1).min(caps.max_batch)),
    );
    let start = Instant::now();
    let report = checker
        .round()
        .await
        .unwrap_or_else(|e| panic!("checker round: {e}"));
    Round {
        members,
        expired: report.deaths.len(),
        time: start.elapsed(),
        round_trips: wrapped.calls(),
        leases_page,
        one_call,
    }
}

/// The median times of `leases` answering the first page of 100 of the members space,
/// and of one single-read call (`dead_tokens(1)`), over 5 tries each.
async fn leases_page(store: &Arc<dyn Store>) -> (Duration, Duration) {
    let (mut page, mut one) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let start = Instant::now();
        store
            .leases(&liveness_core::Space::members(), Page::first(100))
            .await
            .unwrap_or_else(|e| panic!("leases: {e}"));
        page.push(start.elapsed().as_secs_f64());
        let start = Instant::now();
        store
            .dead_tokens(1)
            .await
            .unwrap_or_else(|e| panic!("dead_tokens: {e}"));
        one.push(start.elapsed().as_secs_f64());
    }
    (
        Duration::from_secs_f64(median(&mut page)),
        Duration::from_secs_f64(median(&mut one)),
    )
}

/// Measures detection latency over `deaths` members that stop renewing, with a
/// checker running: every member joins and renews every ttl / 3 (a steady fleet);
/// each stops renewing at its own moment, spread over two ttls; the latency is from
/// its last successful renewal's send time to its item observed pending again.
pub async fn detection(store: Arc<dyn Store>, deaths: usize) -> Detection {
    let caps = store.capabilities();
    let ttl = ttl_of(caps.min_ttl.max(Duration::from_millis(500)));
    let mut members = Vec::new();
    for i in 0..deaths {
        store.enqueue(b"d", EnqueueOptions::default()).await.ok();
        let sent = Instant::now();
        let Ok(lease) = store.acquire(&key("die", i), &holder(), ttl).await else {
            continue;
        };
        let Some(item) = store
            .claim(&lease, 1)
            .await
            .ok()
            .and_then(|v| v.first().map(|i| i.id))
        else {
            continue;
        };
        members.push((lease, item, sent));
    }
    let checker = Checker::new(
        store.clone(),
        CheckerConfig::default().check_every(Duration::from_secs(1)),
    )
    .spawn();
    let n = members.len().max(1);
    let tasks: Vec<_> = members
        .into_iter()
        .enumerate()
        .map(|(i, (lease, item, acquired))| {
            let store = store.clone();
            tokio::spawn(async move {
                let stop_at = Instant::now() + ttl.duration().mul_f64(2.0 * i as f64 / n as f64);
                let mut last = acquired;
                while Instant::now() < stop_at {
                    tokio::time::sleep(ttl.duration() / 3).await;
                    let sent = Instant::now();
                    if store.renew(&lease).await.is_err() {
                        return None;
                    }
                    last = sent;
                }
                let give_up = last + ttl.duration() * 4 + Duration::from_secs(5);
                loop {
                    match store.item(item).await {
                        Ok(Some(r)) if r.state == ItemState::Pending => {
                            return Some(last.elapsed())
                        }
                        _ if Instant::now() > give_up => return None,
                        _ => tokio::time::sleep(Duration::from_millis(2)).await,
                    }
                }
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for t in tasks {
        if let Ok(Some(d)) = t.await {
            latencies.push(d);
        }
    }
    checker.stop().await;
    latencies.sort();
    Detection {
        ttl: ttl.duration(),
        latencies,
    }
}

/// Runs every measurement, each on a fresh store from `factory`, and prints them.
pub async fn run(factory: Factory, options: Options) {
    let Some(probe) = factory().await else {
        crate::skip::no_store("bench", "the factory returned None");
        return;
    };
    println!("== liveness bench: backend {} ==", probe.backend());
    drop(probe);
    for &c in &options.concurrency {
        let Some(store) = factory().await else { return };
        let r = renewals(store, c, options.seconds).await;
        println!(
            "renewals/s   members={:<6} {:>12.0}",
            r.concurrency, r.per_second
        );
    }
    for &m in &options.members {
        for pct in [0usize, 1] {
            let Some(store) = factory().await else { return };
            let expired = m * pct / 100;
            println!("{}", checker_round(store, m, expired).await);
        }
    }
    let Some(store) = factory().await else { return };
    println!("{}", detection(store, options.deaths).await);
}

/// Waits until `expired` lists at least `n` members (observer-local stores observe
/// them here), or gives up after four short ttls plus five seconds.
async fn wait_listed(store: &Arc<dyn Store>, n: usize, short: Ttl) {
    let caps = store.capabilities();
    let until = Instant::now() + short.duration() * 4 + Duration::from_secs(5);
    loop {
        let seen = store
            .expired(&liveness_core::Space::members(), caps.max_batch.max(1))
            .await
            .map(|v| v.len())
            .unwrap_or(0);
        if seen >= n.min(caps.max_batch) || Instant::now() > until {
            return;
        }
        tokio::time::sleep(short.duration() / 4).await;
    }
}
