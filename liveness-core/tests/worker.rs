//! The worker runner on the memory store: jobs run at most `concurrency` at a time,
//! answers become completions and hand-backs, an idle worker wakes on an enqueue, a
//! lost lease stops the handlers, a shutdown drains within its grace, and the checker
//! a worker runs brings a dead worker's jobs back.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use liveness_core::{
    EnqueueOptions, Error, InputProblem, ItemId, ItemState, JobError, Queue, QueueName, Store,
    Worker, WorkerConfig, WorkerHandle,
};
use tokio::time::Instant;

mod common;
use common::{all_done, memory, ttl};

/// A worker `name` on `store` with a 1 s ttl, the given concurrency and no checker.
fn config(name: &str, concurrency: usize) -> WorkerConfig {
    WorkerConfig::new(name, ttl(1000))
        .unwrap()
        .concurrency(concurrency)
        .checker(false)
}

/// Waits until `id` is in `state`.
async fn until_state(store: &Arc<dyn Store>, id: ItemId, state: ItemState, within: Duration) {
    let until = Instant::now() + within;
    loop {
        let now = store.item(id).await.unwrap().map(|r| r.state);
        if now == Some(state) {
            return;
        }
        assert!(
            Instant::now() < until,
            "item {id} is {now:?}, not {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_worker_runs_every_job_at_most_concurrency_at_a_time() {
    let store = memory();
    let ids = Queue::new(store.clone())
        .enqueue_many(&vec![b"job".to_vec(); 20])
        .await
        .unwrap();
    assert_eq!(ids.len(), 20);
    let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (n, m) = (now.clone(), most.clone());
    let worker = Worker::start(store.clone(), config("w", 4), move |job| {
        let (now, most) = (n.clone(), m.clone());
        async move {
            assert_eq!(job.payload(), b"job");
            job.check()?;
            let running = now.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(running, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(10)).await;
            now.fetch_sub(1, Ordering::SeqCst);
            Ok(())
        }
    })
    .await
    .unwrap();
    all_done(&store, Duration::from_secs(5)).await;
    let report = worker.shutdown(Duration::from_secs(1)).await.unwrap();
    assert_eq!(report.completed, 20);
    assert_eq!(
        most.load(Ordering::SeqCst),
        4,
        "never more, and at times all four"
    );
    assert_eq!(
        store.item(ids[0]).await.unwrap(),
        None,
        "completed items are gone"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_job_is_tried_again_then_dead_lettered_and_a_fail_at_once() {
    let store = memory();
    let queue = Queue::new(store.clone());
    let retried = queue
        .enqueue_with(b"retry", EnqueueOptions::default().max_attempts(2))
        .await
        .unwrap();
    let failed = queue
        .enqueue_with(b"fail", EnqueueOptions::default().max_attempts(5))
        .await
        .unwrap();
    let worker = Worker::start(store.clone(), config("w", 2), |job| async move {
        match job.payload() {
            b"retry" => Err(std::io::Error::other("disk full"))?,
            _ => Err(JobError::fail("malformed")),
        }
    })
    .await
    .unwrap();
    until_state(
        &store,
        retried,
        ItemState::DeadLettered,
        Duration::from_secs(5),
    )
    .await;
    until_state(
        &store,
        failed,
        ItemState::DeadLettered,
        Duration::from_secs(5),
    )
    .await;
    let report = worker.shutdown(Duration::from_secs(1)).await.unwrap();
    assert_eq!((report.retried, report.dead_lettered), (1, 2), "{report:?}");
    let failed = store.item(failed).await.unwrap().unwrap();
    assert_eq!(failed.item.attempts, 1, "a fail is not tried again");
    // Each dead letter says why: its handler's error.
    assert_eq!(failed.last_error.as_deref(), Some("malformed"));
    let retried = store.item(retried).await.unwrap().unwrap();
    assert_eq!(retried.last_error.as_deref(), Some("disk full"));
}

/// A failed job waits its backoff before the next attempt, by the store's clock:
/// `retry_first` before the second attempt, twice that before the third (each drawn
/// between its half and itself).
#[tokio::test(start_paused = true)]
async fn a_failed_job_is_retried_after_a_backoff_that_doubles() {
    fastrand::seed(5);
    let store = memory();
    let id = Queue::new(store.clone())
        .enqueue_with(b"flaky", EnqueueOptions::default().max_attempts(3))
        .await
        .unwrap();
    let first = Duration::from_secs(4);
    let config = config("w", 1).retry_backoff(first, Duration::from_secs(60));
    let runs = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = runs.clone();
    let worker = Worker::start(store.clone(), config, move |_job| {
        seen.lock().unwrap().push(Instant::now());
        async move { Err(std::io::Error::other("not yet"))? }
    })
    .await
    .unwrap();
    until_state(&store, id, ItemState::DeadLettered, Duration::from_secs(60)).await;
    worker.shutdown(Duration::from_secs(1)).await.unwrap();
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 3, "three attempts");
    let (a, b) = (runs[1] - runs[0], runs[2] - runs[1]);
    let slack = Duration::from_millis(100);
    assert!(a >= first / 2 && a <= first + slack, "first wait {a:?}");
    assert!(b >= first && b <= first * 2 + slack, "second wait {b:?}");
}

/// A handler that says how long to wait (`JobError::retry_in`, a `Retry-After`) gets
/// that wait instead of the worker's backoff.
#[tokio::test(start_paused = true)]
async fn a_handler_s_own_wait_replaces_the_backoff() {
    let store = memory();
    let id = Queue::new(store.clone())
        .enqueue_with(b"rate limited", EnqueueOptions::default().max_attempts(2))
        .await
        .unwrap();
    // A backoff far shorter than the handler's wait: only the handler's can explain
    // a pause of a minute.
    let config = config("w", 1).retry_backoff(Duration::from_millis(10), Duration::from_millis(10));
    let runs = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = runs.clone();
    let worker = Worker::start(store.clone(), config, move |_job| {
        seen.lock().unwrap().push(Instant::now());
        async move {
            let busy = std::io::Error::other("429: retry after 60 s");
            Err(JobError::retry_in(Duration::from_secs(60), busy))
        }
    })
    .await
    .unwrap();
    until_state(
        &store,
        id,
        ItemState::DeadLettered,
        Duration::from_secs(300),
    )
    .await;
    worker.shutdown(Duration::from_secs(1)).await.unwrap();
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 2, "two attempts");
    let waited = runs[1] - runs[0];
    let slack = Duration::from_millis(100);
    assert!(
        waited >= Duration::from_secs(60) && waited <= Duration::from_secs(60) + slack,
        "waited {waited:?}"
    );
}

/// A job enqueued with a delay starts when it is due, not at the worker's next poll:
/// the worker sleeps until the store's `next_due`.
#[tokio::test(start_paused = true)]
async fn a_scheduled_job_starts_when_due_not_at_the_next_poll() {
    let store = memory();
    let started = Arc::new(std::sync::Mutex::new(None));
    let seen = started.clone();
    // An hour between polls: only the due time can wake it in time.
    let config = config("w", 1).poll(Duration::from_secs(3600));
    let worker = Worker::start(store.clone(), config, move |_job| {
        *seen.lock().unwrap() = Some(Instant::now());
        async { Ok(()) }
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let delay = Duration::from_secs(90);
    let enqueued = Instant::now();
    Queue::new(store.clone())
        .enqueue_with(b"later", EnqueueOptions::default().delay(delay))
        .await
        .unwrap();
    all_done(&store, Duration::from_secs(600)).await;
    worker.shutdown(Duration::from_secs(1)).await.unwrap();
    let started = started.lock().unwrap().expect("the job ran");
    let late = (started - enqueued)
        .checked_sub(delay)
        .expect("never early");
    assert!(late <= Duration::from_millis(100), "started {late:?} late");
}

#[tokio::test(start_paused = true)]
async fn an_idle_worker_claims_at_once_when_an_item_is_enqueued() {
    let store = memory();
    // An hour between polls: only the store's signal can wake it in time.
    let worker = Worker::start(
        store.clone(),
        config("w", 1).poll(Duration::from_secs(3600)),
        |_| async { Ok(()) },
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(100)).await;
    let start = Instant::now();
    Queue::new(store.clone()).enqueue(b"x").await.unwrap();
    all_done(&store, Duration::from_secs(5)).await;
    assert!(
        start.elapsed() < Duration::from_millis(50),
        "the job ran {:?} after its enqueue",
        start.elapsed()
    );
    assert_eq!(worker.shutdown(Duration::ZERO).await.unwrap().completed, 1);
}

/// Sets its flag when dropped: the handler's future was dropped.
struct Dropped(Arc<AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A worker of one job at a time on `store` whose handler runs for `job` (for ever
/// when `None`) and sets `dropped` when its future is dropped; answered once the
/// handler has started on the queue's one item.
async fn started_worker(
    store: &Arc<dyn Store>,
    job: Option<Duration>,
    dropped: Arc<AtomicBool>,
) -> WorkerHandle {
    let started = Arc::new(AtomicBool::new(false));
    let s = started.clone();
    let worker = Worker::start(store.clone(), config("w", 1), move |_| {
        let (started, guard) = (s.clone(), Dropped(dropped.clone()));
        async move {
            let _guard = guard;
            started.store(true, Ordering::SeqCst);
            match job {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
            Ok(())
        }
    })
    .await
    .unwrap();
    while !started.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    worker
}

#[tokio::test(start_paused = true)]
async fn a_lost_lease_drops_the_running_handlers_at_once() {
    let store = memory();
    let id = Queue::new(store.clone()).enqueue(b"x").await.unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let worker = started_worker(&store, None, dropped.clone()).await;
    // As a killed process: the lease is left to expire; the work must stop now.
    worker.member().clone().orphan();
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(dropped.load(Ordering::SeqCst), "the handler still runs");
    let owned = store.item(id).await.unwrap().unwrap().state;
    assert!(
        matches!(owned, ItemState::Owned(_)),
        "{owned:?}: a checker requeues it"
    );
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_lets_jobs_finish_within_the_grace() {
    let store = memory();
    Queue::new(store.clone()).enqueue(b"x").await.unwrap();
    let worker = started_worker(&store, Some(Duration::from_millis(300)), Arc::default()).await;
    let report = worker.shutdown(Duration::from_secs(1)).await.unwrap();
    assert_eq!((report.completed, report.stopped), (1, 0));
    assert_eq!(store.item_counts().await.unwrap().pending, 0);
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_past_the_grace_stops_the_job_and_hands_it_back() {
    let store = memory();
    let id = Queue::new(store.clone()).enqueue(b"x").await.unwrap();
    let worker = started_worker(&store, None, Arc::default()).await;
    let report = tokio::time::timeout(
        Duration::from_secs(5),
        worker.shutdown(Duration::from_millis(100)),
    )
    .await
    .expect("the shutdown stops the job that outlived its grace")
    .unwrap();
    assert_eq!((report.completed, report.stopped), (0, 1));
    let back = store.item(id).await.unwrap().unwrap();
    assert_eq!((back.state, back.item.attempts), (ItemState::Pending, 1));
}

#[tokio::test(start_paused = true)]
async fn a_worker_s_checker_brings_a_dead_worker_s_job_back_to_a_live_one() {
    let store = memory();
    let id = Queue::new(store.clone()).enqueue(b"x").await.unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    // The first run hangs (its worker is about to die); the second completes.
    let handler = move |_| {
        let runs = r.clone();
        async move {
            if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                std::future::pending::<()>().await;
            }
            Ok(())
        }
    };
    let doomed = Worker::start(store.clone(), config("doomed", 1), handler.clone())
        .await
        .unwrap();
    while runs.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    doomed.member().clone().orphan();
    let with_checker = WorkerConfig::new("alive", ttl(1000))
        .unwrap()
        .concurrency(1);
    let alive = Worker::start(store.clone(), with_checker, handler)
        .await
        .unwrap();
    // The dead worker's lease expires after its ttl; the live worker's checker
    // declares it dead and requeues the job, which the live worker then runs.
    all_done(&store, Duration::from_secs(5)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(store.item(id).await.unwrap(), None);
    assert_eq!(alive.shutdown(Duration::ZERO).await.unwrap().completed, 1);
    drop(doomed);
}

#[tokio::test]
async fn a_zero_concurrency_or_poll_is_refused() {
    let store = memory();
    let zero = config("w", 0);
    let refused = Worker::start(store.clone(), zero, |_| async { Ok(()) }).await;
    assert!(matches!(
        refused,
        Err(Error::InvalidInput {
            what: "concurrency",
            problem: InputProblem::Zero
        })
    ));
    let still = config("w", 1).poll(Duration::ZERO);
    let refused = Worker::start(store, still, |_| async { Ok(()) }).await;
    assert!(matches!(
        refused,
        Err(Error::InvalidInput { what: "poll", .. })
    ));
}

/// Counts the claims that reach the store, each taking a round trip of 5 ms.
#[derive(Debug, Default)]
struct SlowClaims {
    claims: AtomicUsize,
}

#[liveness_core::async_trait]
impl liveness_core::Intercept for SlowClaims {
    async fn call(
        &self,
        req: liveness_core::Request,
        next: liveness_core::Next,
    ) -> liveness_core::Result<liveness_core::Reply> {
        if req.op() == liveness_core::Op::Claim {
            self.claims.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        next.run(req).await
    }
}

/// The slots that jobs free while a claim is out are claimed together by the next
/// claim: on a store with a round trip, jobs that end one by one do not cost a claim
/// each.
#[tokio::test(start_paused = true)]
async fn jobs_that_end_during_a_claim_are_replaced_by_one_claim() {
    let probe = Arc::new(SlowClaims::default());
    let store: Arc<dyn Store> = liveness_core::StoreBuilder::new(memory())
        .layer(probe.clone())
        .build();
    Queue::new(store.clone())
        .enqueue_many(&vec![b"job".to_vec(); 400])
        .await
        .unwrap();
    let worker = Worker::start(store.clone(), config("w", 20), |_| async {
        tokio::time::sleep(Duration::from_millis(1)).await;
        Ok(())
    })
    .await
    .unwrap();
    all_done(&store, Duration::from_secs(30)).await;
    assert_eq!(
        worker.shutdown(Duration::ZERO).await.unwrap().completed,
        400
    );
    let claims = probe.claims.load(Ordering::SeqCst);
    assert!(claims < 100, "{claims} claims for 400 jobs, 20 at a time");
}

/// Typed jobs (feature `serde`): what `enqueue_json` wrote, `Job::json` reads back;
/// a payload that is not the handler's type is dead-lettered at once, untried again.
#[cfg(feature = "serde")]
#[tokio::test(start_paused = true)]
async fn typed_jobs_read_back_and_a_foreign_payload_is_dead_lettered_at_once() {
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Resize {
        image: u64,
        width: u32,
    }
    let store = memory();
    let queue = Queue::new(store.clone());
    let typed = queue
        .enqueue_json(&Resize {
            image: 42,
            width: 640,
        })
        .await
        .unwrap();
    let foreign = queue.enqueue(b"not json").await.unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    let worker = Worker::start(store.clone(), config("w", 2), move |job| {
        let seen = s.clone();
        async move {
            let resize: Resize = job.json()?;
            seen.lock().unwrap().push(resize);
            Ok(())
        }
    })
    .await
    .unwrap();
    until_state(
        &store,
        foreign,
        ItemState::DeadLettered,
        Duration::from_secs(5),
    )
    .await;
    all_done(&store, Duration::from_secs(5)).await;
    let report = worker.shutdown(Duration::from_secs(1)).await.unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [Resize {
            image: 42,
            width: 640
        }]
    );
    assert_eq!(
        (report.completed, report.dead_lettered, report.retried),
        (1, 1, 0)
    );
    assert_eq!(store.item(typed).await.unwrap(), None, "completed");
    let record = store.item(foreign).await.unwrap().unwrap();
    assert_eq!(record.item.attempts, 1, "not tried again: {record:?}");
}

/// A worker claims only from the queues it names, the earlier first: with one slot,
/// every urgent job runs before any mail, and a job of another queue waits for a
/// worker that names it. A queue list with a name twice is refused.
#[tokio::test(start_paused = true)]
async fn a_worker_runs_its_queues_in_order_and_no_other() {
    let store = memory();
    let mail = Queue::named(store.clone(), "mail").unwrap();
    let urgent = Queue::named(store.clone(), "urgent").unwrap();
    mail.enqueue_many(&[b"m1", b"m2"]).await.unwrap();
    urgent.enqueue_many(&[b"u1", b"u2"]).await.unwrap();
    let other = Queue::new(store.clone()).enqueue(b"d1").await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = order.clone();
    let queues = [
        QueueName::new("urgent").unwrap(),
        QueueName::new("mail").unwrap(),
    ];
    let twice = config("w", 1).queues([queues[0], queues[0]]);
    let refused = Worker::start(store.clone(), twice, |_| async { Ok(()) }).await;
    assert!(matches!(
        refused,
        Err(Error::InvalidInput { what: "queues", .. })
    ));
    let worker = Worker::start(store.clone(), config("w", 1).queues(queues), move |job| {
        let seen = seen.clone();
        async move {
            let name = String::from_utf8_lossy(job.payload()).into_owned();
            seen.lock().unwrap().push((job.queue().to_string(), name));
            Ok(())
        }
    })
    .await
    .unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while order.lock().unwrap().len() < 4 {
        assert!(Instant::now() < until, "ran {:?}", order.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    worker.shutdown(Duration::from_secs(1)).await.unwrap();
    let ran: Vec<(String, String)> = order.lock().unwrap().clone();
    let want = [
        ("urgent", "u1"),
        ("urgent", "u2"),
        ("mail", "m1"),
        ("mail", "m2"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(q, p)| (q.to_string(), p.to_string()))
        .collect();
    assert_eq!(ran, want);
    let left = store.item(other).await.unwrap().map(|r| r.state);
    assert_eq!(
        left,
        Some(ItemState::Pending),
        "the default queue is not named"
    );
}

/// Each job's end goes to the worker's member's bus, once per claim, with the
/// member's key and token and the item: completed, retried, dead-lettered, and
/// stopped when the lease is lost under a running handler.
#[tokio::test(start_paused = true)]
async fn each_job_s_end_is_an_event_on_the_worker_s_bus() {
    use liveness_core::{Event, EventBus, JobEnd};
    let store = memory();
    let queue = Queue::new(store.clone());
    let retry_once = EnqueueOptions::default().max_attempts(2);
    let ok = queue.enqueue(b"ok").await.unwrap();
    let retried = queue.enqueue_with(b"retry", retry_once).await.unwrap();
    let failed = queue.enqueue(b"fail").await.unwrap();
    let hangs = queue.enqueue(b"hang").await.unwrap();
    let bus = EventBus::default();
    let mut events = bus.subscribe();
    let config = config("w", 4)
        .events(bus)
        .retry_backoff(Duration::ZERO, Duration::ZERO);
    let worker = Worker::start(store.clone(), config, |job| async move {
        match job.payload() {
            b"ok" => Ok(()),
            b"retry" => Err(std::io::Error::other("again"))?,
            b"fail" => Err(JobError::fail("no")),
            _ => std::future::pending().await,
        }
    })
    .await
    .unwrap();
    for id in [retried, failed] {
        until_state(&store, id, ItemState::DeadLettered, Duration::from_secs(5)).await;
    }
    let key = worker.member().key().clone();
    let token = worker.member().check().unwrap();
    worker.member().clone().orphan();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let mut ends = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let Event::JobEnded {
            key: k,
            token: t,
            id,
            queue,
            end,
        } = event
        {
            assert_eq!((&k, t, queue), (&key, token, QueueName::DEFAULT));
            ends.push((id, end));
        }
    }
    ends.sort_by_key(|(id, end)| (*id, format!("{end:?}")));
    assert_eq!(
        ends,
        [
            (ok, JobEnd::Completed),
            (retried, JobEnd::DeadLettered),
            (retried, JobEnd::Retried),
            (failed, JobEnd::DeadLettered),
            (hangs, JobEnd::Stopped),
        ]
    );
}
