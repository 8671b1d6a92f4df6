//! A process hosting many members is SIGKILLed: how long until every one of its
//! members is declared dead and its item requeued, whether any is declared twice, how
//! many death records the death left, and what the other processes' renewals saw
//! meanwhile. Once with the members riding one session, once with a lease each, on
//! one server, in one run. Any server backend runs it with [`main`], given how to start
//! (or find) its server and how to connect to it ([`Connect`]).
//!
//! Options ([`Options`]): `[--members 10000] [--others 20] [--other-members 500]
//! [--ttl-ms 5000] [--no-leases]`.
//!
//! The victim is a child process: the same bench binary run again with
//! `--victim URL --namespace NAMESPACE [--victim-leases] --members MEMBERS --ttl-ms
//! TTL_MS` ([`Victim`]), connecting to the same
//! server through the same [`Connect`]. It joins `--members` members (into one session,
//! `sessions/victim`, or each a lease of its own), claims one item for each, says
//! `ready`, and renews (its session, or every lease with `renew_many` in batches of
//! `max_batch`) every ttl/3 until the parent kills it with SIGKILL. Beside it, the parent
//! holds `--others` sessions of `--other-members` members each, renewed every ttl/3,
//! and one probe session renewed every 20 ms, whose latencies are the other processes'
//! renewal figures. A checker with the default configuration runs in the parent from
//! the start.
//!
//! Printed per run: the time from the kill to the last member declared dead and to
//! the last item requeued, against ttl + 2 s (the victim's leases expire up to one ttl
//! after its last renewal); the moments the session itself was declared dead and the
//! first member was (where the time goes); the members declared twice (must be 0); the
//! death records the victim left (riding: one, the session's, counting its members; a
//! lease each: one per member); the others' `Lost` answers after the kill (must be 0)
//! and before it, and their other errors (timeouts, a busy store); the probe's
//! p50/p99/max; the checker's skipped steps (store errors it went past); and, to see
//! where the time goes, the checker's store calls from the kill to the last item
//! requeued (per operation: calls, total and longest time; its rounds are its
//! `dead_tokens` calls, one each).

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use liveness_core::layer::Intercepted;
use liveness_core::{
    async_trait, Acquire, CancellationToken, Checker, CheckerConfig, EnqueueOptions, Event,
    EventBus, HolderId, Intercept, Key, Lease, Name, Namespace, Next, Reply, Request, Result,
    Space, Store, Ttl,
};
use tokio::sync::broadcast::error::RecvError;

use super::args::{self, at_least_one, ttl_ms};

/// The name of the victim's session (in the space `sessions`) and the prefix of its
/// members' names.
const VICTIM: &str = "victim";
const VICTIM_MEMBER: &str = "v-";

/// What the bench measures, from the command line.
#[derive(Clone, Debug, clap::Args)]
pub struct Options {
    /// The members of the victim process (at least one).
    #[arg(long, default_value_t = 10_000, value_parser = at_least_one)]
    pub members: usize,
    /// The other processes' sessions, beside the probe's.
    #[arg(long, default_value_t = 20)]
    pub others: usize,
    /// The members riding each of the other sessions.
    #[arg(long, default_value_t = 500)]
    pub other_members: usize,
    /// The ttl of every session and lease, in milliseconds.
    #[arg(long = "ttl-ms", value_name = "MS", default_value = "5000", value_parser = ttl_ms)]
    pub ttl: Ttl,
    /// Runs the lease-per-member victim too, unless `--no-leases` is given.
    #[arg(long = "no-leases", action = clap::ArgAction::SetFalse)]
    pub leases: bool,
}

/// No options of a backend's own, for [`main_with`].
#[derive(Clone, Debug, clap::Args)]
pub struct NoOptions {}

/// The bench binary's command line: [`Options`], a backend's own `E`, and the
/// victim's (hidden) flags.
#[derive(Clone, Debug, clap::Args)]
struct Line<E: clap::Args> {
    #[command(flatten)]
    options: Options,
    #[command(flatten)]
    own: E,
    /// Run as the victim, on the server at this url.
    #[arg(long, hide = true, value_name = "URL", requires = "namespace")]
    victim: Option<String>,
    /// The victim's namespace.
    #[arg(long, hide = true, requires = "victim", value_parser = namespace)]
    namespace: Option<Namespace>,
    /// The victim's members each hold a lease of their own.
    #[arg(long, hide = true, requires = "victim")]
    victim_leases: bool,
}

fn namespace(text: &str) -> std::result::Result<Namespace, String> {
    Namespace::new(text).map_err(|e| e.to_string())
}

impl<E: clap::Args> Line<E> {
    /// The victim this command line makes the process, when it names one.
    fn victim(&self) -> Option<Victim> {
        Some(Victim {
            url: self.victim.clone()?,
            namespace: self.namespace.clone()?,
            leases: self.victim_leases,
            members: self.options.members,
            ttl: self.options.ttl,
        })
    }
}

/// A boxed future answering a store, as a [`Connect`] makes.
pub type StoreFuture = Pin<Box<dyn Future<Output = Arc<dyn Store>> + Send>>;

/// Makes a store on `namespace` of the server at `url` (both processes, the parent and
/// the victim, call it with the same url and namespace); panics when it cannot.
pub type Connect = Arc<dyn Fn(String, Namespace) -> StoreFuture + Send + Sync>;

/// Wraps an `async` closure `(url, namespace) -> store` into a [`Connect`].
pub fn connect<S, F, Fut>(f: F) -> Connect
where
    S: Store + 'static,
    F: Fn(String, Namespace) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = S> + Send + 'static,
{
    let f = Arc::new(f);
    Arc::new(move |url, namespace| {
        let fut = f(url, namespace);
        Box::pin(async move { Arc::new(fut.await) as Arc<dyn Store> }) as StoreFuture
    })
}

/// The bench binary's entry point. Run as the victim (`--victim …`), it is the victim
/// until killed. Otherwise it calls `server` for the server to run against (its guard,
/// kept until the end so that a server it started stops with it, and its url; `None`
/// skips the bench, `server` having said why), then runs the riding victim and, unless
/// `--no-leases`, the lease-per-member one, printing each one's figures. An unknown
/// flag or a bad value exits with clap's message before anything starts.
///
/// # Panics
///
/// When the runtime cannot start, the store refuses a set-up call, or the victim
/// cannot be started or fails: the figures would mean nothing.
pub fn main<G>(server: impl FnOnce() -> Option<(G, String)>, connect: Connect) {
    main_with(|_: &NoOptions| server(), connect);
}

/// As [`main`], with a backend's own options `E` on the command line beside
/// [`Options`], handed to `server` (the victim gets none of them: its url carries
/// what they say).
///
/// # Panics
///
/// As [`main`] does.
pub fn main_with<E: clap::Args, G>(
    server: impl FnOnce(&E) -> Option<(G, String)>,
    connect: Connect,
) {
    let line: Line<E> = args::parse(&[]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    if let Some(victim) = line.victim() {
        rt.block_on(victim.run(&connect));
        return;
    }
    let o = line.options;
    let Some((guard, url)) = server(&line.own) else {
        return;
    };
    println!(
        "ttl {:?}; {} other sessions of {} members renewed every ttl/3, a probe every 20 ms",
        o.ttl.duration(),
        o.others,
        o.other_members
    );
    let f = rt.block_on(run(&url, &connect, &o, false));
    f.print("victim's members riding one session", &o);
    if o.leases {
        let f = rt.block_on(run(&url, &connect, &o, true));
        f.print("victim's members a lease each", &o);
    }
    drop(rt);
    drop(guard);
}

/// The victim's side, from its command line: `--victim URL --namespace NAMESPACE
/// [--victim-leases] --members MEMBERS --ttl-ms TTL_MS`.
#[derive(Clone, Debug)]
pub struct Victim {
    /// The server's url.
    pub url: String,
    /// The namespace the parent made.
    pub namespace: Namespace,
    /// Each member a lease of its own (else riding one session).
    pub leases: bool,
    /// How many members.
    pub members: usize,
    /// Their ttl.
    pub ttl: Ttl,
}

impl Victim {
    /// The command line that makes a bench binary this victim (after its name).
    fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--victim".to_owned(),
            self.url.clone(),
            "--namespace".to_owned(),
            self.namespace.as_str().to_owned(),
            "--members".to_owned(),
            self.members.to_string(),
            "--ttl-ms".to_owned(),
            self.ttl.as_millis().to_string(),
        ];
        if self.leases {
            args.push("--victim-leases".to_owned());
        }
        args
    }

    /// Joins, claims, says `ready` on stdout, renews until killed.
    ///
    /// # Panics
    ///
    /// When the store refuses a join or a renewal.
    pub async fn run(self, connect: &Connect) {
        let store = connect(self.url.clone(), self.namespace.clone()).await;
        let holder = HolderId::new(VICTIM).unwrap_or_else(|e| panic!("{e}"));
        let every = self.ttl.duration() / 3;
        let batch = store.capabilities().max_batch.clamp(1, 1000);
        // Renewed from the moment it is taken, through the joins and the claims.
        let (renewer, mine) = if self.leases {
            // Each chunk renewed from the moment it is taken: on a slow store the
            // acquires of 10,000 leases outlast a short ttl.
            let held: Arc<Mutex<Vec<Lease>>> = Arc::default();
            let (s, leases) = (store.clone(), held.clone());
            let renewer = tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let now = leases.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    // Several calls in flight, as a fleet's batcher sends them: one
                    // after the other, 10,000 leases on etcd (32 a call) take longer
                    // than a renew interval.
                    let chunks: Vec<Vec<Lease>> =
                        now.chunks(batch).map(<[Lease]>::to_vec).collect();
                    let calls = chunks.into_iter().map(|chunk| {
                        let s = s.clone();
                        async move {
                            s.renew_many(&chunk).await.unwrap_or_else(|e| panic!("{e}"));
                        }
                    });
                    futures::stream::iter(calls)
                        .buffer_unordered(8)
                        .collect::<Vec<()>>()
                        .await;
                }
            });
            let names: Vec<usize> = (0..self.members).collect();
            for chunk in names.chunks(batch) {
                let asks: Vec<Acquire> = chunk
                    .iter()
                    .map(|i| Acquire::new(member(VICTIM_MEMBER, *i), holder.clone(), self.ttl))
                    .collect();
                let taken = store
                    .acquire_many(&asks)
                    .await
                    .unwrap_or_else(|e| panic!("acquire: {e}"));
                let taken: Vec<Lease> = taken
                    .into_iter()
                    .map(|t| t.unwrap_or_else(|e| panic!("acquire: {e}")))
                    .collect();
                held.lock().unwrap_or_else(|e| e.into_inner()).extend(taken);
            }
            let mine = held.lock().unwrap_or_else(|e| e.into_inner()).clone();
            (renewer, mine)
        } else {
            let session = store
                .acquire(
                    &Key::new(Space::sessions(), name(VICTIM)),
                    &holder,
                    self.ttl,
                )
                .await
                .unwrap_or_else(|e| panic!("session: {e}"));
            let (s, lease) = (store.clone(), session.clone());
            let renewer = tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    s.renew(&lease).await.unwrap_or_else(|e| panic!("{e}"));
                }
            });
            let (s, h, sess) = (store.clone(), holder.clone(), session.clone());
            let mine = lanes(self.members, 64, move |i| {
                let (s, h, sess) = (s.clone(), h.clone(), sess.clone());
                async move {
                    s.join_session(&sess, &member(VICTIM_MEMBER, i), &h)
                        .await
                        .unwrap_or_else(|e| panic!("join: {e}"))
                }
            })
            .await;
            (renewer, mine)
        };
        let s = store.clone();
        let claimed = lanes(self.members, 64, move |i| {
            let (s, lease) = (s.clone(), mine[i].clone());
            async move { s.claim(&lease, 1).await.map(|v| v.len()) }
        })
        .await;
        let failed: Vec<&liveness_core::Error> =
            claimed.iter().filter_map(|c| c.as_ref().err()).collect();
        if let Some(first) = failed.first() {
            eprintln!(
                "victim: {} claims failed, the first with {first}",
                failed.len()
            );
        }
        let claimed: usize = claimed.iter().filter_map(|c| c.as_ref().ok()).sum();
        println!("ready {claimed}");
        std::io::stdout().flush().unwrap_or_else(|e| panic!("{e}"));
        renewer.await.unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The victim's process, SIGKILLed when dropped (a bench that panics leaves none).
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn name(text: &str) -> Name {
    Name::new(text).unwrap_or_else(|e| panic!("{e}"))
}

fn member(prefix: &str, i: usize) -> Key {
    Key::new(Space::members(), name(&format!("{prefix}{i}")))
}

/// Runs `f` over `0..n` with `lanes` calls in flight; the answers in index order.
async fn lanes<T, F, Fut>(n: usize, lanes: usize, f: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = T> + Send,
{
    let f = Arc::new(f);
    let lanes = lanes.max(1);
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

/// Per store operation: calls, their total time and the longest one.
pub type OpTimes = BTreeMap<&'static str, (u64, Duration, Duration)>;

/// Times the checker's store calls while on.
#[derive(Debug, Default)]
struct Timed {
    on: AtomicBool,
    times: Mutex<OpTimes>,
}

#[async_trait]
impl Intercept for Timed {
    async fn call(&self, req: Request, next: Next) -> Result<Reply> {
        if !self.on.load(Relaxed) {
            return next.run(req).await;
        }
        let op = req.op().name();
        let start = Instant::now();
        let answer = next.run(req).await;
        let took = start.elapsed();
        let mut times = self.times.lock().unwrap_or_else(|e| e.into_inner());
        let (calls, total, longest) = times.entry(op).or_default();
        *calls += 1;
        *total += took;
        *longest = (*longest).max(took);
        answer
    }
}

/// The other sessions' and the probe's renewals that failed: `Lost` answers and
/// other errors (a timeout, a busy store), before the kill and after it.
#[derive(Debug, Default)]
struct Refusals {
    killed: AtomicBool,
    /// [lost, other] before the kill, then after it.
    counts: [[AtomicU64; 2]; 2],
    first_other: Mutex<Option<String>>,
}

impl Refusals {
    fn record(&self, answer: &Result<Lease>) {
        let Err(e) = answer else { return };
        let lost = matches!(e, liveness_core::Error::Lost { .. });
        let phase = usize::from(self.killed.load(Relaxed));
        self.counts[phase][usize::from(!lost)].fetch_add(1, Relaxed);
        if !lost {
            let mut first = self.first_other.lock().unwrap_or_else(|e| e.into_inner());
            first.get_or_insert_with(|| e.to_string());
        }
    }

    fn get(&self, after: bool, lost: bool) -> u64 {
        self.counts[usize::from(after)][usize::from(!lost)].load(Relaxed)
    }
}

/// What the bench's event watcher saw of the victim.
#[derive(Default)]
struct Seen {
    /// The victim's members' tokens declared dead.
    tokens: HashSet<u64>,
    /// Members declared again.
    twice: usize,
    /// When the first and the last member were declared.
    first: Option<Instant>,
    last: Option<Instant>,
    /// When the victim's session was declared dead.
    session: Option<Instant>,
    /// Items the checker requeued (`Died` and `Swept` events), and when
    /// their count reached the victim's members.
    requeued: u64,
    all_requeued: Option<Instant>,
    /// The checker's steps skipped on a store error.
    skipped: u64,
}

/// What one run measured.
#[derive(Clone, Debug)]
pub struct Figures {
    /// From the victim's start to its `ready` (joins and claims).
    pub join: Duration,
    /// The items the victim claimed (one per member, unless a claim failed).
    pub claimed: u64,
    /// From the kill to the victim's session declared dead (riding only).
    pub session_declared: Option<Duration>,
    /// From the kill to its first member declared dead.
    pub first_declared: Option<Duration>,
    /// From the kill to the last of its members declared dead (`None` unless all were).
    pub declared: Option<Duration>,
    /// From the kill to every item pending again, as the checker's events counted
    /// them or the store's counts showed (`None`: not within ttl + 120 s).
    pub requeued: Option<Duration>,
    /// The victim's members declared dead.
    pub dead: usize,
    /// Those declared more than once.
    pub twice: usize,
    /// Death records naming the victim (its session, or its members' leases) written
    /// after the kill, and the members the records count as declared dead with them.
    pub records: usize,
    /// The members the session's records count (`Swept::members`, riding only).
    pub record_members: u64,
    /// `Lost` answers to the other sessions' and the probe's renewals.
    pub lost: u64,
    /// `Lost` answers to those renewals before the kill (the victim joining).
    pub lost_before: u64,
    /// Other errors answered to those renewals (timeouts, a busy store): after the
    /// kill, before it, and the first one's message.
    pub errors: u64,
    /// See [`Figures::errors`].
    pub errors_before: u64,
    /// See [`Figures::errors`].
    pub first_error: Option<String>,
    /// The checker's steps skipped on a store error (`Event::CheckSkipped`).
    pub skipped: u64,
    /// The probe's renewal latencies after the kill, sorted.
    pub probe: Vec<Duration>,
    /// The checker's store calls from the kill to the last item requeued.
    pub checker_calls: OpTimes,
    /// Items pending and owned at the end (all of the victim's, and none, when every
    /// item went back).
    pub pending: u64,
    /// See [`Figures::pending`].
    pub owned: u64,
}

/// The nearest-rank quantile `q` of `sorted`, or zero when empty.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

impl Figures {
    /// Prints the figures under the heading `what`.
    pub fn print(&self, what: &str, o: &Options) {
        let show = |d: Option<Duration>| d.map_or("never".to_owned(), |d| format!("{d:.2?}"));
        println!("{what}: {} members", o.members);
        println!(
            "  victim ready (join + claim) in {:.2?}, {} items claimed",
            self.join, self.claimed
        );
        println!(
            "  kill -> last member declared dead: {} ; -> last item requeued: {} (target ttl + 2 s = {:.2?})",
            show(self.declared),
            show(self.requeued),
            o.ttl.duration() + Duration::from_secs(2)
        );
        println!(
            "  kill -> session declared dead: {} ; -> first member declared: {}; items at the end: {} pending, {} owned",
            show(self.session_declared),
            show(self.first_declared),
            self.pending,
            self.owned,
        );
        println!(
            "  declared {} of {}, {} twice; death records {} (members counted {}); checker steps skipped: {}",
            self.dead, o.members, self.twice, self.records, self.record_members, self.skipped
        );
        println!(
            "  others' Lost: {} (before the kill: {}); others' other errors: {} (before the kill: {}){}",
            self.lost,
            self.lost_before,
            self.errors,
            self.errors_before,
            self.first_error
                .as_ref()
                .map_or(String::new(), |e| format!("; the first: {e}"))
        );
        println!(
            "  others' renewals meanwhile ({} probes): p50 {:.2?}, p99 {:.2?}, max {:.2?}",
            self.probe.len(),
            quantile(&self.probe, 0.5),
            quantile(&self.probe, 0.99),
            quantile(&self.probe, 1.0),
        );
        let calls: Vec<String> = self
            .checker_calls
            .iter()
            .map(|(op, (n, total, longest))| format!("{op} {n}x {total:.2?} (max {longest:.2?})"))
            .collect();
        println!(
            "  checker's store calls, kill -> requeued: {}",
            calls.join(", ")
        );
    }
}

/// The highest death-record seq so far (0: none).
async fn last_seq(store: &dyn Store) -> u64 {
    let top = store
        .deaths(None, 1)
        .await
        .unwrap_or_else(|e| panic!("deaths: {e}"));
    top.first().map_or(0, |r| r.seq)
}

/// The death records after `since` that name the victim: how many, and the members
/// they count.
async fn victim_records(store: &dyn Store, since: u64) -> (usize, u64) {
    let limit = store.capabilities().max_batch.max(1);
    let session = Key::new(Space::sessions(), name(VICTIM));
    let (mut count, mut members, mut before) = (0, 0, None);
    loop {
        let page = store
            .deaths(before, limit)
            .await
            .unwrap_or_else(|e| panic!("deaths: {e}"));
        for r in page.iter().filter(|r| r.seq > since) {
            if r.key == session || r.key.name().as_str().starts_with(VICTIM_MEMBER) {
                count += 1;
                members += r.swept.map_or(0, |s| s.members);
            }
        }
        match page.last() {
            Some(r) if r.seq > since + 1 => before = Some(r.seq),
            _ => return (count, members),
        }
    }
}

/// One run: a fresh namespace, the others, the victim, the kill, the checker.
///
/// # Panics
///
/// When the store refuses a set-up call, or the victim fails.
pub async fn run(url: &str, connect: &Connect, o: &Options, leases: bool) -> Figures {
    let ns = crate::fresh_namespace();
    let store = connect(url.to_owned(), ns.clone()).await;
    let s = store.clone();
    // Few in flight: on some stores (etcd) enqueues contend for the item counter.
    lanes(o.members, 4, move |_| {
        let s = s.clone();
        async move {
            s.enqueue(b"job", EnqueueOptions::default())
                .await
                .unwrap_or_else(|e| panic!("enqueue: {e}"))
        }
    })
    .await;
    // The others' sessions and the probe's, each renewed from its acquisition on;
    // then the others' members join them.
    let holder = HolderId::new("other").unwrap_or_else(|e| panic!("{e}"));
    let mut others = Vec::new();
    for p in 0..=o.others {
        let key = Key::new(Space::sessions(), name(&format!("o{p}")));
        let s = store
            .acquire(&key, &holder, o.ttl)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        others.push(s);
    }
    let probe_session = others.pop().unwrap_or_else(|| unreachable!());
    let refusals = Arc::new(Refusals::default());
    let stop = CancellationToken::new();
    let every = o.ttl.duration() / 3;
    let spread = others.len().max(1) as u32;
    for (p, s) in others.iter().cloned().enumerate() {
        let (store, refusals, stop) = (store.clone(), refusals.clone(), stop.clone());
        // Staggered, as processes started apart are.
        let offset = every * p as u32 / spread;
        tokio::spawn(async move {
            tokio::time::sleep(offset).await;
            while !stop.is_cancelled() {
                refusals.record(&store.renew(&s).await);
                tokio::time::sleep(every).await;
            }
        });
    }
    let probe = Arc::new(Mutex::new(Vec::new()));
    let probing = Arc::new(AtomicBool::new(false));
    {
        let (store, refusals, stop) = (store.clone(), refusals.clone(), stop.clone());
        let (probe, probing) = (probe.clone(), probing.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let start = Instant::now();
                refusals.record(&store.renew(&probe_session).await);
                if probing.load(Relaxed) {
                    probe
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(start.elapsed());
                }
            }
        });
    }
    let batch = store.capabilities().max_batch.max(1);
    for (p, s) in others.iter().enumerate() {
        let asks: Vec<_> = (0..o.other_members)
            .map(|m| (member(&format!("o{p}-"), m), holder.clone()))
            .collect();
        for chunk in asks.chunks(batch) {
            for joined in store
                .join_session_many(s, chunk)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
            {
                joined.unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }
    // The checker, and the deaths it declares.
    let bus = EventBus::new(1 << 18);
    let mut events = bus.subscribe();
    let seen: Arc<Mutex<Seen>> = Arc::default();
    // The items the victim claimed, once it said so: what the requeues must reach.
    let target = Arc::new(AtomicU64::new(u64::MAX));
    {
        let seen = seen.clone();
        let session = Key::new(Space::sessions(), name(VICTIM));
        let target = target.clone();
        tokio::spawn(async move {
            loop {
                let event = match events.recv().await {
                    Ok(event) => event,
                    Err(RecvError::Lagged(n)) => {
                        panic!("the bench's event receiver lagged by {n}")
                    }
                    Err(RecvError::Closed) => return,
                };
                let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                if let Event::Died { requeued, .. } | Event::Swept { requeued, .. } = &event {
                    s.requeued += *requeued as u64;
                    if s.requeued >= target.load(Relaxed) {
                        s.all_requeued.get_or_insert_with(Instant::now);
                    }
                }
                match event {
                    Event::Died { key, .. } if key == session => {
                        s.session.get_or_insert_with(Instant::now);
                    }
                    Event::Died { key, token, .. }
                        if key.name().as_str().starts_with(VICTIM_MEMBER) =>
                    {
                        if !s.tokens.insert(token.0) {
                            s.twice += 1;
                        }
                        let now = Instant::now();
                        s.first.get_or_insert(now);
                        s.last = Some(now);
                    }
                    Event::CheckSkipped { .. } => s.skipped += 1,
                    _ => {}
                }
            }
        });
    }
    let timed = Arc::new(Timed::default());
    let checked: Arc<dyn Store> = Arc::new(Intercepted::new(store.clone(), timed.clone()));
    let checker = Checker::new(checked, CheckerConfig::default().events(bus)).spawn();

    // The victim.
    let victim = Victim {
        url: url.to_owned(),
        namespace: ns,
        leases,
        members: o.members,
        ttl: o.ttl,
    };
    let started = Instant::now();
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    let mut child = Running(
        Command::new(exe)
            .args(victim.args())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("the victim: {e}")),
    );
    let stdout = child.0.stdout.take().unwrap_or_else(|| unreachable!());
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(line.starts_with("ready"), "the victim said {line:?}");
    let join = started.elapsed();
    let claimed: u64 = line
        .trim()
        .strip_prefix("ready ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the victim said {line:?}"));
    target.store(claimed, Relaxed);
    // A moment of steady state, then the kill.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let since = last_seq(store.as_ref()).await;
    probing.store(true, Relaxed);
    timed.on.store(true, Relaxed);
    refusals.killed.store(true, Relaxed);
    child.0.kill().unwrap_or_else(|e| panic!("kill: {e}"));
    let killed = Instant::now();
    let _ = child.0.wait();
    // The requeues are timed by the checker's events (its own count of what it
    // moved); the store's item counts confirm them, read every 250 ms only (on some
    // stores a count walks every item).
    let give_up = killed + o.ttl.duration() + Duration::from_secs(120);
    let mut requeued = None;
    let mut counted = Instant::now();
    while Instant::now() < give_up {
        let all = seen.lock().unwrap_or_else(|e| e.into_inner()).all_requeued;
        if let Some(at) = all {
            requeued = Some(at.saturating_duration_since(killed));
            break;
        }
        if counted.elapsed() >= Duration::from_millis(250) {
            counted = Instant::now();
            let counts = store.item_counts().await.unwrap_or_else(|e| panic!("{e}"));
            if counts.owned == 0 && counts.pending == o.members as u64 {
                requeued = Some(killed.elapsed());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    timed.on.store(false, Relaxed);
    // Let a late duplicate show, then stop.
    tokio::time::sleep(Duration::from_millis(500)).await;
    probing.store(false, Relaxed);
    stop.cancel();
    checker.stop().await;
    let (records, record_members) = victim_records(store.as_ref(), since).await;
    let counts = store.item_counts().await.unwrap_or_else(|e| panic!("{e}"));
    let s = std::mem::take(&mut *seen.lock().unwrap_or_else(|e| e.into_inner()));
    let mut probe = std::mem::take(&mut *probe.lock().unwrap_or_else(|e| e.into_inner()));
    probe.sort();
    let dead = s.tokens.len();
    let after = |t: Option<Instant>| t.map(|t| t.saturating_duration_since(killed));
    let first_error = refusals
        .first_other
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let checker_calls = std::mem::take(&mut *timed.times.lock().unwrap_or_else(|e| e.into_inner()));
    Figures {
        join,
        claimed,
        session_declared: after(s.session),
        first_declared: after(s.first),
        declared: after(s.last.filter(|_| dead == o.members)),
        requeued,
        dead,
        twice: s.twice,
        records,
        record_members,
        lost: refusals.get(true, true),
        lost_before: refusals.get(false, true),
        errors: refusals.get(true, false),
        errors_before: refusals.get(false, false),
        first_error,
        skipped: s.skipped,
        probe,
        checker_calls,
        pending: counts.pending,
        owned: counts.owned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(args: &[&str]) -> std::result::Result<Line<NoOptions>, clap::Error> {
        args::try_parse_from(&[], std::iter::once("bench").chain(args.iter().copied()))
    }

    #[test]
    fn a_victim_command_line_reads_back() {
        for leases in [true, false] {
            let victim = Victim {
                url: "redis://127.0.0.1:1/?x=1".to_owned(),
                namespace: Namespace::new("t_1").unwrap_or_else(|e| panic!("{e}")),
                leases,
                members: 7,
                ttl: Ttl::from_millis(2500).unwrap_or_else(|e| panic!("{e}")),
            };
            let args = victim.args();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let back = line(&args).unwrap_or_else(|e| panic!("{e}"));
            let back = back.victim().unwrap_or_else(|| unreachable!());
            assert_eq!(back.url, victim.url);
            assert_eq!(back.namespace, victim.namespace);
            assert_eq!(back.leases, leases);
            assert_eq!(
                (back.members, back.ttl.duration()),
                (7, victim.ttl.duration())
            );
        }
        let parent = line(&["--members", "5"]).unwrap_or_else(|e| panic!("{e}"));
        assert!(parent.victim().is_none());
        assert!(line(&["--victim", "redis://x"]).is_err());
    }

    #[test]
    fn options_default_to_the_target_run() {
        let o = line(&["--bench", "--no-leases"])
            .unwrap_or_else(|e| panic!("{e}"))
            .options;
        assert_eq!((o.members, o.others, o.other_members), (10_000, 20, 500));
        assert_eq!(o.ttl.duration(), Duration::from_secs(5));
        assert!(!o.leases);
    }

    #[test]
    fn unknown_flags_and_bad_numbers_are_refused() {
        for args in [
            &["--member", "1000"][..],
            &["--members", "many"],
            &["--members", "0"],
            &["--others", "-1"],
            &["--ttl-ms", "0"],
        ] {
            assert!(line(args).is_err(), "{args:?}");
        }
    }
}
