//! A work queue in one process: a few members claim and complete items, a checker
//! runs beside them, one member dies without leaving, and its items are requeued and
//! finished by the others. Prints the events as they happen.
//!
//! `cargo run -p examples --bin workers [STORE_URL]` (default `memory://`).

use std::time::Duration;

use liveness::{
    Checker, CheckerConfig, EnqueueOptions, Event, EventBus, Member, MemberConfig, Ttl,
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
                Event::Died {
                    key,
                    token,
                    requeued,
                    ..
                } => {
                    println!("died     {key} token {token}: {requeued} items requeued")
                }
                Event::Left { key, .. } => println!("left     {key}"),
                _ => {}
            }
        }
    });
    let checker = Checker::new(store.clone(), CheckerConfig::default().events(bus.clone())).spawn();
    for i in 0..30 {
        store
            .enqueue(format!("job {i}").as_bytes(), EnqueueOptions::default())
            .await?;
    }
    let ttl = Ttl::from_millis(1000)?;
    let mut members = Vec::new();
    for i in 0..3 {
        let config = MemberConfig::new(&format!("worker-{i}"), ttl)?.events(bus.clone());
        members.push(Member::join(store.clone(), config).await?);
    }
    // worker-0 takes five items and dies holding them.
    let doomed = members.remove(0);
    let held = doomed.claim(5).await?;
    println!("worker-0 claimed {} items and dies", held.len());
    // A crash: nothing is released (dropping the member would hand the items back
    // itself after the stop margin); the checker declares the death at its expiry.
    doomed.orphan();
    let mut done = 0;
    while done < 30 {
        let mut progressed = false;
        for m in &members {
            for job in m.claim(2).await? {
                tokio::time::sleep(Duration::from_millis(20)).await;
                m.complete(&job).await?;
                done += 1;
                progressed = true;
            }
        }
        if !progressed {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    println!(
        "all 30 items done; counts now {:?}",
        store.item_counts().await?
    );
    for m in members {
        m.leave(Duration::from_secs(1)).await?;
    }
    checker.stop().await;
    Ok(())
}
