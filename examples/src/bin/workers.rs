//! A work queue in one process, the job model in one screen: a producer enqueues
//! jobs (one scheduled for later, one that fails on its first try), three workers
//! run them, one worker dies in the middle of its jobs without leaving, and the
//! checker the workers run (one of them at a time) declares its death and requeues
//! its jobs, which live workers then finish. The flaky job is tried again after a
//! backoff; the scheduled one runs when it is due by the store's clock. Prints the
//! events as they happen.
//!
//! `cargo run -p examples --bin workers [STORE_URL]` (default `memory://`).

use std::time::Duration;

use liveness::{
    EnqueueOptions, Event, EventBus, JobEnd, JobError, Queue, Ttl, Worker, WorkerConfig,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = examples::store_from_args().await?;
    let bus = EventBus::default();
    let mut events = bus.subscribe();
    tokio::spawn(async move {
        while let Ok(e) = events.recv().await {
            match e {
                Event::Joined { key, token, .. } => println!("joined   {key} token {token}"),
                Event::Died { key, requeued, .. } => {
                    println!("died     {key}: {requeued} jobs requeued")
                }
                Event::JobEnded { id, end, .. } if end != JobEnd::Completed => {
                    println!("job {id}   {end:?}")
                }
                _ => {}
            }
        }
    });
    let queue = Queue::new(store.clone());
    let jobs: Vec<String> = (0..30).map(|i| format!("job {i}")).collect();
    queue.enqueue_many(&jobs).await?;
    let flaky = queue.enqueue(b"flaky").await?;
    let later = EnqueueOptions::default().delay(Duration::from_millis(1500));
    let scheduled = queue.enqueue_with(b"scheduled", later).await?;
    let enqueued = std::time::Instant::now();
    println!("job {flaky} fails once; job {scheduled} is due in 1.5 s");

    let mut workers = Vec::new();
    for i in 0..3 {
        let config = WorkerConfig::new(&format!("worker-{i}"), Ttl::from_millis(1000)?)?
            .concurrency(2)
            .retry_backoff(Duration::from_millis(200), Duration::from_secs(2))
            .events(bus.clone());
        let worker = Worker::start(store.clone(), config, move |job| async move {
            if job.payload() == b"flaky" && job.attempts() == 1 {
                return Err(JobError::retry("the mail server said try later"));
            }
            if job.payload() == b"scheduled" {
                let after = enqueued.elapsed().as_secs_f64();
                println!("job {}   runs {after:.1} s after its enqueue", job.id());
            }
            // A job takes a while; it checks its lease before its side effect.
            tokio::time::sleep(Duration::from_millis(20)).await;
            job.check()?;
            Ok(())
        })
        .await?;
        workers.push(worker);
    }
    // worker-0 dies holding its jobs: a crash releases nothing, the checker declares
    // the death when its lease expires by the store's clock.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let doomed = workers.remove(0);
    println!("worker-0 dies in the middle of its jobs");
    doomed.member().clone().orphan();
    drop(doomed);

    while store.item_counts().await?.pending + store.item_counts().await?.owned > 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "all 32 jobs done; counts now {:?}",
        store.item_counts().await?
    );
    for worker in workers {
        worker.shutdown(Duration::from_secs(1)).await?;
    }
    Ok(())
}
