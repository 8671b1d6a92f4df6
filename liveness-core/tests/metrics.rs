//! The state machines record their metrics through the `metrics` facade: a debugging
//! recorder installed for this test binary sees the counters move when the events
//! happen. Every test uses a namespace of its own, so their metrics never mix.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use liveness_core::metrics::{
    CHECKER_ROUNDS_TOTAL, CHECKER_ROUND_SECONDS, CHECKER_ROUND_TRIPS, DEATHS_TOTAL, FENCED_TOTAL,
    ITEMS, ITEMS_DEAD_LETTERED_TOTAL, ITEMS_REQUEUED_TOTAL, JOBS_TOTAL, JOB_SECONDS,
    JOB_WAIT_SECONDS, JOINS_TOTAL, LEADERSHIPS_TOTAL, LEASES_LOST_TOTAL, RENEWALS_TOTAL,
    RENEWAL_SECONDS, STORE_ERRORS_TOTAL, UNREAPED_LEASES,
};
use liveness_core::{
    Checker, CheckerConfig, Election, ElectionConfig, EnqueueOptions, Error, Event, JobError,
    Member, MemberConfig, MemoryServer, Namespace, Queue, Store, Ttl, Worker, WorkerConfig,
};
use metrics::{Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// One metric: its name and labels, sorted.
type Series = (String, Vec<(String, String)>);

/// What the recorder saw so far, added up: a snapshot drains the recorder, and the
/// tests of this binary take snapshots concurrently.
#[derive(Default)]
struct Seen {
    counters: HashMap<Series, u64>,
    histograms: HashMap<Series, Vec<f64>>,
}

/// The gauges, each with its latest value (the debugging recorder's snapshot would
/// read a gauge back as 0 once read, so a test could not tell a gauge set to 0).
type Gauges = Arc<Mutex<HashMap<Series, Arc<AtomicU64>>>>;

/// The debugging recorder, but for gauges, which [`Gauges`] keeps.
struct TestRecorder {
    inner: DebuggingRecorder,
    gauges: Gauges,
}

/// The series of `key`: its name and its labels, sorted.
fn series(key: &Key) -> Series {
    let mut labels: Vec<(String, String)> = key
        .labels()
        .map(|l| (l.key().to_owned(), l.value().to_owned()))
        .collect();
    labels.sort();
    (key.name().to_owned(), labels)
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, text: SharedString) {
        self.inner.describe_counter(key, unit, text)
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, text: SharedString) {
        self.inner.describe_gauge(key, unit, text)
    }
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, text: SharedString) {
        self.inner.describe_histogram(key, unit, text)
    }
    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> metrics::Counter {
        self.inner.register_counter(key, metadata)
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> metrics::Gauge {
        let mut gauges = self.gauges.lock().unwrap();
        metrics::Gauge::from_arc(gauges.entry(series(key)).or_default().clone())
    }
    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> metrics::Histogram {
        self.inner.register_histogram(key, metadata)
    }
}

fn recorder() -> &'static (Snapshotter, Mutex<Seen>, Gauges) {
    static RECORDER: OnceLock<(Snapshotter, Mutex<Seen>, Gauges)> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let inner = DebuggingRecorder::new();
        let snapshotter = inner.snapshotter();
        let gauges = Gauges::default();
        let recorder = TestRecorder {
            inner,
            gauges: gauges.clone(),
        };
        metrics::set_global_recorder(recorder).unwrap();
        (snapshotter, Mutex::new(Seen::default()), gauges)
    })
}

/// Installs the recorder (before any handle is built).
fn install() {
    recorder();
}

fn seen() -> std::sync::MutexGuard<'static, Seen> {
    let (snapshotter, seen, _) = recorder();
    let mut seen = seen.lock().unwrap();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let series = series(key.key());
        match value {
            DebugValue::Counter(n) => *seen.counters.entry(series).or_default() += n,
            DebugValue::Histogram(v) => seen
                .histograms
                .entry(series)
                .or_default()
                .extend(v.into_iter().map(|x| x.into_inner())),
            DebugValue::Gauge(_) => {}
        }
    }
    seen
}

/// Whether `labels` carry the namespace `ns`, backend `memory`, and every `extra` one.
fn matches(labels: &[(String, String)], ns: &str, extra: &[(&str, &str)]) -> bool {
    let has = |k: &str, v: &str| labels.iter().any(|(lk, lv)| lk == k && lv == v);
    has("namespace", ns) && has("backend", "memory") && extra.iter().all(|(k, v)| has(k, v))
}

/// The counter `name` in namespace `ns` with the `extra` labels, summed over the rest.
fn counter(name: &str, ns: &str, extra: &[(&str, &str)]) -> u64 {
    seen()
        .counters
        .iter()
        .filter(|((n, labels), _)| n == name && matches(labels, ns, extra))
        .map(|(_, v)| *v)
        .sum()
}

/// Every value recorded in the histogram `name` in namespace `ns`.
fn histogram(name: &str, ns: &str, extra: &[(&str, &str)]) -> Vec<f64> {
    seen()
        .histograms
        .iter()
        .filter(|((n, labels), _)| n == name && matches(labels, ns, extra))
        .flat_map(|(_, v)| v.clone())
        .collect()
}

/// The latest value of the gauge `name` in namespace `ns` with the `extra` labels.
fn gauge(name: &str, ns: &str, extra: &[(&str, &str)]) -> Option<f64> {
    let gauges = recorder().2.lock().unwrap();
    gauges
        .iter()
        .find(|((n, labels), _)| n == name && matches(labels, ns, extra))
        .map(|(_, v)| f64::from_bits(v.load(Ordering::SeqCst)))
}

fn store(ns: &str) -> Arc<dyn Store> {
    install();
    Arc::new(MemoryServer::new().store(&Namespace::new(ns).unwrap()))
}

fn ttl(ms: u64) -> Ttl {
    Ttl::from_millis(ms).unwrap()
}

/// Member `w` (ttl 300 ms, rejoining) joined on `store`.
async fn join_w(store: Arc<dyn Store>) -> Member {
    Member::join(store, MemberConfig::new("w", ttl(300)).unwrap())
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_renewing_member_counts_its_join_and_renewals() {
    let ns = "metrics_renew";
    let store = store(ns);
    let member = join_w(store).await;
    assert_eq!(counter(JOINS_TOTAL, ns, &[("kind", "join")]), 1);
    // ttl 300 ms, renewals every 100 ms at most: 2 s hold at least ten.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Read once the member left: no renewal is then recorded between the two reads.
    member.leave(Duration::ZERO).await.unwrap();
    let renewals = counter(RENEWALS_TOTAL, ns, &[("role", "member")]);
    assert!(renewals >= 10, "{renewals} renewals counted");
    let timed = histogram(RENEWAL_SECONDS, ns, &[("role", "member")]).len() as u64;
    assert!(
        timed >= renewals,
        "{timed} renewals timed, {renewals} counted"
    );
    assert_eq!(counter(LEASES_LOST_TOTAL, ns, &[]), 0);
}

#[tokio::test(start_paused = true)]
async fn a_lost_lease_counts_its_reason_and_the_rejoin() {
    let ns = "metrics_lost";
    let store = store(ns);
    let member = join_w(store.clone()).await;
    let mut events = member.events().subscribe();
    // Somebody else releases the member's lease: its next renewal answers `Lost`.
    assert!(store.release(&member.lease()).await.unwrap());
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Event::Joined { .. } = events.recv().await.unwrap() {
                return;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(
        counter(
            LEASES_LOST_TOTAL,
            ns,
            &[("role", "member"), ("reason", "released")]
        ),
        1
    );
    assert_eq!(counter(JOINS_TOTAL, ns, &[("kind", "rejoin")]), 1);
    assert_eq!(counter(JOINS_TOTAL, ns, &[("kind", "join")]), 1);
}

#[tokio::test(start_paused = true)]
async fn a_declared_death_counts_the_death_and_its_items() {
    let ns = "metrics_death";
    let store = store(ns);
    let checker = Checker::new(store.clone(), CheckerConfig::default());
    let member = join_w(store.clone()).await;
    store
        .enqueue(b"again", EnqueueOptions::default())
        .await
        .unwrap();
    let poison = EnqueueOptions::default().max_attempts(1);
    store.enqueue(b"poison", poison).await.unwrap();
    assert_eq!(member.claim(2).await.unwrap().len(), 2);
    member.orphan();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let report = checker.round().await.unwrap();
    assert_eq!(report.deaths.len(), 1);
    assert_eq!(counter(DEATHS_TOTAL, ns, &[]), 1);
    assert_eq!(counter(ITEMS_REQUEUED_TOTAL, ns, &[]), 1);
    assert_eq!(counter(ITEMS_DEAD_LETTERED_TOTAL, ns, &[]), 1);
    assert_eq!(counter(CHECKER_ROUNDS_TOTAL, ns, &[]), 1);
    assert_eq!(histogram(CHECKER_ROUND_SECONDS, ns, &[]).len(), 1);
    // expired (members, then sessions), reap_many, sweep_many,
    // dead_tokens, next_expiry (members, then sessions).
    assert_eq!(histogram(CHECKER_ROUND_TRIPS, ns, &[]), vec![7.0]);
    // A round with nothing to do declares nothing more.
    checker.round().await.unwrap();
    assert_eq!(counter(DEATHS_TOTAL, ns, &[]), 1);
    assert_eq!(counter(CHECKER_ROUNDS_TOTAL, ns, &[]), 2);
}

#[tokio::test(start_paused = true)]
async fn fenced_completions_and_fails_are_counted() {
    let ns = "metrics_fenced";
    let store = store(ns);
    let config = MemberConfig::new("w", ttl(300)).unwrap().rejoin(false);
    let member = Member::join(store.clone(), config).await.unwrap();
    store
        .enqueue(b"x", EnqueueOptions::default())
        .await
        .unwrap();
    let claimed = member.claim(1).await.unwrap().remove(0);
    // The lease is released behind the member's back and a checker's sweep requeues
    // the item: the member's completion is refused.
    assert!(store.release(&member.lease()).await.unwrap());
    let report = Checker::new(store.clone(), CheckerConfig::default())
        .round()
        .await
        .unwrap();
    assert_eq!(report.swept.len(), 1);
    assert_eq!(counter(ITEMS_REQUEUED_TOTAL, ns, &[]), 1);
    assert!(matches!(
        member.complete(&claimed).await,
        Err(Error::Fenced { .. })
    ));
    assert_eq!(counter(FENCED_TOTAL, ns, &[("op", "complete")]), 1);
    let failed = member.fail(&claimed, true).await;
    assert!(matches!(failed, Err(Error::Fenced { .. })), "{failed:?}");
    assert_eq!(counter(FENCED_TOTAL, ns, &[("op", "fail")]), 1);
}

#[tokio::test(start_paused = true)]
async fn a_store_error_is_counted_by_operation_and_kind() {
    let ns = "metrics_errors";
    let store = store(ns);
    let member = join_w(store).await;
    // A claim of zero items: the store refuses it.
    let refused = member.claim(0).await;
    assert!(
        matches!(refused, Err(Error::InvalidInput { .. })),
        "{refused:?}"
    );
    assert_eq!(
        counter(
            STORE_ERRORS_TOTAL,
            ns,
            &[("op", "claim"), ("kind", "invalid_input")]
        ),
        1
    );
    member.leave(Duration::ZERO).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_election_counts_its_leadership_and_renewals() {
    let ns = "metrics_leader";
    let store = store(ns);
    let election = Election::new(
        store,
        ElectionConfig::new("dispatch", "a", ttl(300)).unwrap(),
    );
    let leadership = election.campaign().await.unwrap();
    assert_eq!(counter(LEADERSHIPS_TOTAL, ns, &[]), 1);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(counter(RENEWALS_TOTAL, ns, &[("role", "leader")]) >= 3);
    leadership.resign().await.unwrap();
}

#[test]
fn every_metric_is_documented_in_the_table() {
    let table = include_str!("../../docs/metrics.md");
    for name in liveness_core::metrics::ALL {
        assert!(
            table.contains(&format!("| `{name}` |")),
            "{name} has no row in docs/metrics.md"
        );
    }
}

/// The kind docs/metrics.md gives `name` (`counter`, `histogram`, `gauge`).
fn documented_kind(name: &str) -> &'static str {
    let table = include_str!("../../docs/metrics.md");
    let row = format!("| `{name}` | ");
    let at = table
        .find(&row)
        .unwrap_or_else(|| panic!("{name} has no row"));
    let rest = &table[at + row.len()..];
    rest[..rest.find(' ').unwrap_or(rest.len())].trim()
}

#[test]
fn every_histogram_has_buckets() {
    let histograms = liveness_core::metrics::HISTOGRAMS;
    for name in liveness_core::metrics::ALL {
        assert_eq!(
            histograms.iter().any(|(h, _)| h == name),
            documented_kind(name) == "histogram",
            "{name}"
        );
    }
    for (name, buckets) in histograms {
        assert!(buckets.windows(2).all(|w| w[0] < w[1]), "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_worker_counts_its_jobs_by_outcome_and_times_them() {
    let ns = "metrics_jobs";
    let store = store(ns);
    let queue = Queue::new(store.clone());
    queue.enqueue(b"ok").await.unwrap();
    queue.enqueue(b"bad").await.unwrap();
    // Both wait in the queue a while before a worker starts.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let config = WorkerConfig::new("w", ttl(1000)).unwrap().checker(false);
    let worker = Worker::start(store.clone(), config, |job| async move {
        tokio::time::sleep(Duration::from_millis(250)).await;
        match job.payload() {
            b"ok" => Ok(()),
            _ => Err(JobError::fail("malformed")),
        }
    })
    .await
    .unwrap();
    while store.item_counts().await.unwrap().pending + store.item_counts().await.unwrap().owned > 0
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    worker.shutdown(Duration::ZERO).await.unwrap();
    assert_eq!(counter(JOBS_TOTAL, ns, &[("outcome", "completed")]), 1);
    assert_eq!(counter(JOBS_TOTAL, ns, &[("outcome", "dead_lettered")]), 1);
    assert_eq!(counter(JOBS_TOTAL, ns, &[("outcome", "retried")]), 0);
    let times = histogram(JOB_SECONDS, ns, &[]);
    assert_eq!(times.len(), 2, "{times:?}");
    assert!(times.iter().all(|t| *t >= 0.25), "{times:?}");
    let waits = histogram(JOB_WAIT_SECONDS, ns, &[]);
    assert_eq!(waits.len(), 2, "{waits:?}");
    assert!(waits.iter().all(|t| *t >= 0.4), "{waits:?}");
}

#[tokio::test(start_paused = true)]
async fn leases_left_unreaped_set_the_gauge_until_a_checker_reaps_them() {
    let ns = "metrics_unreaped";
    let store = store(ns);
    let space = [("space", "members")];
    let _alive = join_w(store.clone()).await;
    for name in ["dead-1", "dead-2"] {
        let config = MemberConfig::new(name, ttl(1000)).unwrap();
        Member::join(store.clone(), config).await.unwrap().orphan();
    }
    // Looks every 5 s at most (ttl 300 ms): the second sees both left over.
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(gauge(UNREAPED_LEASES, ns, &space), Some(2.0));
    // A checker (here, in this process) reaps them; the watch then says 0 again.
    let checker = Checker::new(store.clone(), CheckerConfig::default()).spawn();
    tokio::time::sleep(Duration::from_secs(2)).await;
    checker.stop().await;
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(gauge(UNREAPED_LEASES, ns, &space), Some(0.0));
}

/// The checker that runs rounds reads the item counts of each queue into the depth
/// gauge every `depth_every`, sets a queue that no longer holds items to 0, and sets
/// every queue to 0 when it stops: the maximum over a fleet is the store's count.
#[tokio::test(start_paused = true)]
async fn the_checker_reports_the_items_by_queue_and_state_and_zero_once_stopped() {
    let ns = "metrics_depth";
    let store = store(ns);
    let depth = |queue: &str, state: &str| gauge(ITEMS, ns, &[("queue", queue), ("state", state)]);
    let queue = Queue::new(store.clone());
    for _ in 0..3 {
        queue.enqueue(b"job").await.unwrap();
    }
    let mail = Queue::named(store.clone(), "mail").unwrap();
    let letter = mail.enqueue(b"letter").await.unwrap();
    let config = CheckerConfig::default().depth_every(Duration::from_secs(10));
    let checker = Checker::new(store.clone(), config).spawn();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(depth("default", "pending"), Some(3.0));
    assert_eq!(depth("mail", "pending"), Some(1.0));
    assert_eq!(
        (depth("default", "owned"), depth("default", "dead_lettered")),
        (Some(0.0), Some(0.0))
    );
    // One claimed, the letter cancelled: seen at the next read, within a period.
    let member = join_w(store.clone()).await;
    let claimed = member.claim(1).await.unwrap();
    assert_eq!(claimed.len(), 1);
    store.cancel(letter).await.unwrap();
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(
        (
            depth("default", "pending"),
            depth("default", "owned"),
            depth("default", "dead_lettered")
        ),
        (Some(2.0), Some(1.0), Some(0.0))
    );
    assert_eq!(
        depth("mail", "pending"),
        Some(0.0),
        "an emptied queue reads 0"
    );
    checker.stop().await;
    assert_eq!(
        (depth("default", "pending"), depth("default", "owned")),
        (Some(0.0), Some(0.0))
    );
    member.leave(Duration::ZERO).await.unwrap();
}
