//! The worker runner on the store under test: each job runs to completion once, and a
//! worker that dies in the middle of its jobs has them run again by a live worker,
//! whose own checker declared the death (no other process runs a checker).

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use liveness_core::{ItemId, Queue, Worker, WorkerConfig};
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
    let done: Arc<Mutex<Vec<ItemId>>> = Arc::default();
    let record = done.clone();
    let alive_config = WorkerConfig::new("alive", ttl).unwrap().concurrency(4);
    let alive = Worker::start(s.clone(), alive_config, move |job| {
        let record = record.clone();
        async move {
            job.check()?;
            record.lock().unwrap().push(job.id());
            Ok(())
        }
    })
    .await
    .unwrap();
    let until = Instant::now() + ttl.duration() * 4 + Duration::from_secs(10);
    loop {
        let counts = s.item_counts().await.unwrap();
        if counts.pending + counts.owned == 0 {
            break;
        }
        assert!(
            Instant::now() < until,
            "jobs left {counts:?}: the live worker's checker did not bring the dead one's back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let report = alive.shutdown(Duration::from_secs(5)).await.unwrap();
    assert_eq!(report.completed, 10, "{report:?}");
    let done = done.lock().unwrap().clone();
    let once: HashSet<ItemId> = done.iter().copied().collect();
    assert_eq!(
        done.len(),
        once.len(),
        "a job ran twice to completion: {done:?}"
    );
    assert_eq!(once, ids.into_iter().collect(), "every job ran");
}
