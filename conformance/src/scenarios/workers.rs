//! The worker runner on the store under test: each job runs to completion once, and a
//! worker that dies in the middle of its jobs has them run again by a live worker,
//! whose own checker declared the death (no other process runs a checker).

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use liveness_core::{ItemId, Queue, Session, SessionConfig, Ttl, Worker, WorkerConfig};
use tokio::time::Instant;

use crate::Ctx;

/// Ten jobs; a worker without a checker takes three and dies holding them; a live
/// worker, whose checker is the only one, runs all ten to completion, each once.
pub async fn a_dead_worker_s_jobs_run_again_on_a_live_worker(ctx: Ctx) {
    let s = &ctx.store;
    let ttl = ctx.machine_ttl();
    let jobs: Vec<String> = (0..10).map(|i| format!("job {i}")).collect();
    let ids = Queue::new(s.clone()).enqueue_many(&jobs).await.unwrap();
    // The doomed worker takes three jobs and hangs in them.
    let started = Arc::new(AtomicUsize::new(0));
    let seen = started.clone();
    let doomed_config = WorkerConfig::new("doomed", ttl)
        .unwrap()
        .concurrency(3)
        .checker(false);
    let doomed = Worker::start(s.clone(), doomed_config, move |_| {
        seen.fetch_add(1, Ordering::SeqCst);
        std::future::pending()
    })
    .await
    .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while started.load(Ordering::SeqCst) < 3 {
        assert!(Instant::now() < until, "the doomed worker took no jobs");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // It dies as a killed process does: nothing released.
    doomed.member().clone().orphan();
    drop(doomed);
    a_live_worker_runs_them_once_each(&ctx, ttl, ids).await;
}

/// Two workers riding one session ([`Worker::ride`]) run jobs; then their process
/// dies holding four jobs (its session orphaned, nothing released). A live worker,
/// whose checker is the only one, runs every job left to completion, each once; the
/// death history has one record for the session and, on a store without native
/// sessions (where each rider keeps a lease the session renews), one per rider.
pub async fn workers_riding_a_dead_session_have_their_jobs_run_again(ctx: Ctx) {
    let s = &ctx.store;
    let ttl = ctx.machine_ttl();
    let queue = Queue::new(s.clone());
    let session_config = SessionConfig::new("doomed", ttl).unwrap();
    let session = Session::open(s.clone(), session_config).await.unwrap();
    let started = Arc::new(AtomicUsize::new(0));
    let mut riders = Vec::new();
    for name in ["doomed-a", "doomed-b"] {
        let seen = started.clone();
        let config = WorkerConfig::new(name, ttl)
            .unwrap()
            .concurrency(2)
            .checker(false);
        let worker = Worker::ride(&session, config, move |job| {
            let hang = job.payload().starts_with(b"hang");
            seen.fetch_add(usize::from(hang), Ordering::SeqCst);
            async move {
                if hang {
                    std::future::pending::<()>().await;
                }
                Ok(())
            }
        })
        .await
        .unwrap();
        riders.push(worker);
    }
    let quick: Vec<String> = (0..4).map(|i| format!("quick {i}")).collect();
    queue.enqueue_many(&quick).await.unwrap();
    wait_until_no_work(&ctx, ttl.duration(), "the riding workers' quick jobs").await;
    let hangs: Vec<String> = (0..10).map(|i| format!("hang {i}")).collect();
    let ids = queue.enqueue_many(&hangs).await.unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while started.load(Ordering::SeqCst) < 4 {
        assert!(Instant::now() < until, "the riding workers took no jobs");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The process dies as a killed one does: nothing released.
    let session_key = session.key().clone();
    session.orphan();
    drop(riders);

    a_live_worker_runs_them_once_each(&ctx, ttl, ids).await;
    // With native sessions the riders die in the session's one record; a store
    // without them keeps a lease per rider, so each has a record of its own, once.
    let deaths = s.deaths(None, 1000).await.unwrap();
    let records = |name: &str| {
        deaths
            .iter()
            .filter(|d| d.key.name().as_str() == name)
            .count()
    };
    assert_eq!(records("doomed"), 1, "the session died once: {deaths:?}");
    assert_eq!(
        deaths
            .iter()
            .find(|d| d.key.name().as_str() == "doomed")
            .map(|d| &d.key),
        Some(&session_key)
    );
    let rider_records = usize::from(!ctx.caps().sessions);
    for rider in ["doomed-a", "doomed-b"] {
        assert_eq!(records(rider), rider_records, "{rider}: {deaths:?}");
    }
}

/// A live worker, whose checker is the only one, brings back the jobs a dead worker
/// held and runs every job left, `ids` exactly, each to completion once.
async fn a_live_worker_runs_them_once_each(ctx: &Ctx, ttl: Ttl, ids: Vec<ItemId>) {
    let done: Arc<Mutex<Vec<ItemId>>> = Arc::default();
    let record = done.clone();
    let alive_config = WorkerConfig::new("alive", ttl).unwrap().concurrency(4);
    let alive = Worker::start(ctx.store.clone(), alive_config, move |job| {
        let record = record.clone();
        async move {
            job.check()?;
            record.lock().unwrap().push(job.id());
            Ok(())
        }
    })
    .await
    .unwrap();
    let wait = ttl.duration() * 4 + Duration::from_secs(10);
    wait_until_no_work(
        ctx,
        wait,
        "the live worker's checker brings the dead one's back",
    )
    .await;
    let report = alive.shutdown(Duration::from_secs(5)).await.unwrap();
    assert_eq!(report.completed, ids.len() as u64, "{report:?}");
    let done = done.lock().unwrap().clone();
    let once: HashSet<ItemId> = done.iter().copied().collect();
    assert_eq!(done.len(), once.len(), "a job ran twice: {done:?}");
    assert_eq!(once, ids.into_iter().collect(), "every job ran");
}

/// Waits until the store holds no pending or owned item, for at most `wait`.
async fn wait_until_no_work(ctx: &Ctx, wait: Duration, what: &str) {
    let until = Instant::now() + wait;
    loop {
        let counts = ctx.store.item_counts().await.unwrap();
        if counts.pending + counts.owned == 0 {
            return;
        }
        assert!(Instant::now() < until, "{what}: left {counts:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
