//! A work queue in one process: a producer enqueues jobs, three workers run them,
//! one worker dies in the middle of a job without leaving, and the checker the
//! workers run (one of them at a time) declares its death and requeues its job,
//! which a live worker then finishes. Prints the events as they happen.
//!
//! `cargo run -p examples --bin workers [STORE_URL]` (default `memory://`).

use std::time::Duration;

use liveness::{Event, EventBus, Queue, Ttl, Worker, WorkerConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = examples::store_from_args().await?;
    let bus = EventBus::default();
    let mut events = bus.subscribe();
    tokio::spawn(async move {
        while let Ok(e) = events.recv().await {
            match e {
                Event::Joined { key, token, .. } => println!("joined   {key} token {token}"),
                Event::Died {
                    key,
                    token,
                    requeued,
                    ..
                } => println!("died     {key} token {token}: {requeued} items requeued"),
                Event::Left { key, .. } => println!("left     {key}"),
                _ => {}
            }
        }
    });
    let jobs: Vec<String> = (0..30).map(|i| format!("job {i}")).collect();
    Queue::new(store.clone()).enqueue_many(&jobs).await?;

    let mut workers = Vec::new();
    for i in 0..3 {
        let config = WorkerConfig::new(&format!("worker-{i}"), Ttl::from_millis(1000)?)?
            .concurrency(2)
            .events(bus.clone());
        let worker = Worker::start(store.clone(), config, |job| async move {
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
        "all 30 items done; counts now {:?}",
        store.item_counts().await?
    );
    for worker in workers {
        worker.shutdown(Duration::from_secs(1)).await?;
    }
    Ok(())
}
