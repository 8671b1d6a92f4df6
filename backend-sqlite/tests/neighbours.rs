//! A process writing flat out on the file (64 tasks claiming and completing, and
//! joins of 1,000 members at a time) does not starve another process's renewals:
//! sessions with a 2 s ttl renewed every ttl / 3 in the other process are never lost.
//!
//! The writer is this test binary re-executed with `NB_ROLE=hog`: the
//! `neighbours_child` test below does nothing unless that variable is there.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use liveness_core::{
    EnqueueOptions, Error, HolderId, ItemStore, Key, LeaseStore, Name, Namespace, Space, Store, Ttl,
};
use liveness_sqlite::{SqliteConfig, SqliteStore};
use tokio::time::Instant;

fn config(path: &str, ns: &str) -> SqliteConfig {
    SqliteConfig::new(path, Namespace::new(ns).expect("namespace"))
}

/// The hog: writes flat out until its parent closes its stdin (or 60 s pass).
#[test]
fn neighbours_child() {
    if std::env::var("NB_ROLE").is_err() {
        return;
    }
    let path = std::env::var("NB_DB").expect("NB_DB");
    let ns = std::env::var("NB_NS").expect("NB_NS");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let store = Arc::new(
            SqliteStore::connect(config(&path, &ns))
                .await
                .expect("connect"),
        );
        let until = Instant::now() + Duration::from_secs(60);
        let ttl = Ttl::from_secs(60).expect("ttl");
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..64 {
            let store = store.clone();
            tasks.spawn(async move {
                let key = Key::member(&format!("hog-{w}")).expect("key");
                let holder = HolderId::new(format!("hog-{w}")).expect("holder");
                let lease = store.acquire(&key, &holder, ttl).await.expect("acquire");
                while Instant::now() < until {
                    let _ = store.enqueue(b"job", EnqueueOptions::default()).await;
                    if let Ok(items) = store.claim(&lease, 1).await {
                        for item in items {
                            let _ = store.complete(&lease, item.id).await;
                        }
                    }
                }
            });
        }
        // Joins of max_batch members at a time into sessions of its own.
        let joiner = store.clone();
        tasks.spawn(async move {
            let mut round = 0;
            while Instant::now() < until {
                round += 1;
                let name = Name::new(format!("hog-s{round}")).expect("name");
                let key = Key::new(Space::sessions(), name);
                let holder = HolderId::new("hog").expect("holder");
                let Ok(session) = joiner.acquire(&key, &holder, ttl).await else {
                    continue;
                };
                let asks: Vec<_> = (0..1000)
                    .map(|i| {
                        let key = Key::member(&format!("hog-r{round}-{i}")).expect("key");
                        (key, holder.clone())
                    })
                    .collect();
                let _ = joiner.join_session_many(&session, &asks).await;
            }
        });
        let stdin = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
        });
        tokio::select! {
            _ = stdin => {}
            _ = async { while tasks.join_next().await.is_some() {} } => {}
        }
        std::process::exit(0);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_writing_flat_out_starves_no_neighbour_s_renewals() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("neighbours.db");
    let db = db.to_str().expect("path").to_string();
    let ns = liveness_conformance::fresh_namespace().as_str().to_string();
    let store = Arc::new(
        SqliteStore::connect(config(&db, &ns))
            .await
            .expect("connect"),
    );
    let ttl = Ttl::from_secs(2).expect("ttl");
    let mut leases = Vec::new();
    for i in 0..20 {
        let key = Key::new(
            Space::sessions(),
            Name::new(format!("calm-{i}")).expect("name"),
        );
        let holder = HolderId::new("calm").expect("holder");
        leases.push(store.acquire(&key, &holder, ttl).await.expect("acquire"));
    }
    let exe = std::env::current_exe().expect("current exe");
    let mut hog = Command::new(exe)
        .args(["--exact", "neighbours_child", "--nocapture"])
        .env("NB_ROLE", "hog")
        .env("NB_DB", &db)
        .env("NB_NS", &ns)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn the hog");
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Renew each session every ttl / 3 for 12 s: the slowest renewal must leave the
    // session its deadline (ttl − margin from the send time, well under the ttl).
    let mut slowest = Duration::ZERO;
    let mut lost = 0;
    let until = Instant::now() + Duration::from_secs(12);
    while Instant::now() < until {
        let round = Instant::now();
        for lease in &mut leases {
            let sent = Instant::now();
            match store.renew(lease).await {
                Ok(l) => *lease = l,
                Err(Error::Lost { .. }) => lost += 1,
                Err(e) => panic!("renew: {e}"),
            }
            slowest = slowest.max(sent.elapsed());
        }
        tokio::time::sleep_until(round + ttl.duration() / 3).await;
    }
    drop(hog.stdin.take());
    let _ = hog.wait();
    println!("slowest renewal beside the hog: {slowest:?}, lost: {lost}");
    assert_eq!(lost, 0, "sessions lost beside a process writing flat out");
    assert!(
        slowest < ttl.duration() / 2,
        "a renewal waited {slowest:?} behind another process's writes"
    );
}
