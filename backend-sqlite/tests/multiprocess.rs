//! Several OS processes sharing one database file: workers claim and complete items,
//! two of them crash while holding items, and every process (the parent too) races
//! to reap expired members. Checks that every expired lease is reaped exactly once
//! across processes, that every item is completed exactly once, and that nothing is
//! lost.
//!
//! The children are this test binary re-executed with `MP_ROLE` set: the
//! `multiprocess_child` test below does nothing unless that variable is there.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use liveness_core::{
    EnqueueOptions, Error, HolderId, ItemStore, Key, LeaseStore, Namespace, OperatorStore, Space,
    Store, Ttl,
};
use liveness_sqlite::{SqliteConfig, SqliteStore};
use tokio::time::Instant;

const ITEMS: u64 = 240;
const DEADLINE: Duration = Duration::from_secs(90);

fn config(path: &str, ns: &str) -> SqliteConfig {
    SqliteConfig::new(path, Namespace::new(ns).expect("namespace"))
}

/// Expired members reaped by this process, then the dead tokens' items swept. Prints one
/// `REAPED key token` line per reap won.
async fn reap_round(store: &SqliteStore) {
    let Ok(expired) = store.expired(&Space::members(), 100).await else {
        return;
    };
    for lease in expired {
        if let Ok(true) = store.reap(&lease.key, lease.token).await {
            println!("REAPED {} {}", lease.key, lease.token);
        }
    }
    if let Ok(dead) = store.dead_tokens(100).await {
        for d in dead {
            let _ = store.sweep(d.token).await;
        }
    }
}

#[test]
fn multiprocess_child() {
    let Ok(role) = std::env::var("MP_ROLE") else {
        return;
    };
    let path = std::env::var("MP_DB").expect("MP_DB");
    let ns = std::env::var("MP_NS").expect("MP_NS");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let store = SqliteStore::connect(config(&path, &ns))
            .await
            .expect("connect");
        let key = Key::member(&role).expect("key");
        let holder = HolderId::new(format!("{role}-{}", std::process::id())).expect("holder");
        let crasher = role.starts_with("crash");
        let ttl = Ttl::from_millis(if crasher { 500 } else { 5000 }).expect("ttl");
        let mut lease = store.acquire(&key, &holder, ttl).await.expect("acquire");
        let until = Instant::now() + DEADLINE;
        loop {
            assert!(Instant::now() < until, "child {role} ran past the deadline");
            match store.renew(&lease).await {
                Ok(l) => lease = l,
                Err(Error::Lost { .. }) => {
                    lease = store.acquire(&key, &holder, ttl).await.expect("re-acquire");
                }
                Err(e) if e.is_retryable() => continue,
                Err(e) => panic!("renew: {e}"),
            }
            let items = match store.claim(&lease, 4).await {
                Ok(items) => items,
                Err(Error::Lost { .. }) => continue,
                Err(e) if e.is_retryable() => continue,
                Err(e) => panic!("claim: {e}"),
            };
            if crasher && !items.is_empty() {
                // Complete half, then die holding the rest, without releasing.
                for item in &items[..items.len() / 2] {
                    store.complete(&lease, item.id).await.expect("complete");
                    println!("DONE {}", item.id.0);
                }
                println!("CRASH {role} holding {}", items.len() - items.len() / 2);
                std::process::exit(0);
            }
            for item in &items {
                match store.complete(&lease, item.id).await {
                    Ok(()) => {
                        println!("DONE {}", item.id.0);
                    }
                    Err(Error::Fenced { .. }) => {}
                    // Maybe applied, maybe not: the item is then either gone (done
                    // but unreported, caught by the final check) or still ours.
                    Err(e) if e.is_retryable() => eprintln!("complete {}: {e}", item.id),
                    Err(e) => panic!("complete: {e}"),
                }
            }
            if !crasher {
                reap_round(&store).await;
                let counts = store.item_counts().await.expect("counts");
                if counts.pending == 0 && counts.owned == 0 {
                    break;
                }
                if items.is_empty() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        let _ = store.release(&lease).await;
    });
}

fn spawn(role: &str, db: &str, ns: &str) -> std::process::Child {
    Command::new(std::env::current_exe().expect("current exe"))
        .args([
            "multiprocess_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("MP_ROLE", role)
        .env("MP_DB", db)
        .env("MP_NS", ns)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_share_one_file() {
    if std::env::var("MP_ROLE").is_ok() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("shared.db");
    let db = db.to_str().expect("utf-8 path").to_owned();
    let ns = liveness_conformance::fresh_namespace();
    let store = SqliteStore::connect(config(&db, ns.as_ref()))
        .await
        .expect("connect");
    for i in 0..ITEMS {
        store
            .enqueue(
                format!("item {i}").as_bytes(),
                EnqueueOptions::default().max_attempts(10),
            )
            .await
            .expect("enqueue");
    }
    // The crashers first: each claims a batch, completes half and dies holding the
    // rest. Then the workers, which must find them expired, reap them (racing each
    // other and this process) and finish their items.
    let crashers = ["crash_a", "crash_b"];
    let crashed: Vec<_> = crashers
        .iter()
        .map(|r| spawn(r, &db, ns.as_ref()))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|c| c.wait_with_output().expect("crasher output"))
        .collect();
    let roles = ["work_a", "work_b", "work_c"];
    let children: Vec<_> = roles.iter().map(|r| spawn(r, &db, ns.as_ref())).collect();

    // The parent reaps too, racing the workers, until every child has exited.
    let parent_store = store.clone();
    let stop = stop_flag();
    let reaper = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut lines = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(expired) = parent_store.expired(&Space::members(), 100).await {
                    for lease in expired {
                        if let Ok(true) = parent_store.reap(&lease.key, lease.token).await {
                            lines.push(format!("REAPED {} {}", lease.key, lease.token));
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            lines
        })
    };

    let outputs = tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .map(|c| c.wait_with_output().expect("child output"))
            .collect::<Vec<_>>()
    })
    .await
    .expect("join");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut lines: Vec<String> = reaper.await.expect("reaper");
    // Every process, the crashers first, must have exited cleanly; their lines count.
    let crasher_runs = crashers
        .iter()
        .zip(&crashed)
        .map(|(r, o)| ("crasher", r, o));
    let child_runs = roles.iter().zip(&outputs).map(|(r, o)| ("child", r, o));
    for (kind, role, out) in crasher_runs.chain(child_runs) {
        assert!(
            out.status.success(),
            "{kind} {role} failed: {:?}",
            out.status
        );
        lines.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_owned),
        );
    }

    let mut done: HashMap<u64, usize> = HashMap::new();
    let mut reaped: HashMap<String, usize> = HashMap::new();
    let mut crashes = 0;
    for line in &lines {
        // The test harness prints "test multiprocess_child ... " without a newline
        // before the child's first line: look at what follows the marker.
        let line = ["DONE ", "REAPED ", "CRASH "]
            .iter()
            .filter_map(|m| line.find(m).map(|at| &line[at..]))
            .next()
            .unwrap_or(line);
        if let Some(id) = line.strip_prefix("DONE ") {
            *done.entry(id.parse().expect("id")).or_default() += 1;
        } else if let Some(lease) = line.strip_prefix("REAPED ") {
            *reaped.entry(lease.to_owned()).or_default() += 1;
        } else if line.starts_with("CRASH ") {
            crashes += 1;
        }
    }
    assert_eq!(crashes, 2, "both crashers died holding items");
    for (lease, n) in &reaped {
        assert_eq!(*n, 1, "lease {lease} was reaped {n} times across processes");
    }
    assert!(
        reaped.keys().any(|k| k.starts_with("members/crash_a "))
            && reaped.keys().any(|k| k.starts_with("members/crash_b ")),
        "both crashed members were reaped: {reaped:?}"
    );
    let counts = store.item_counts().await.expect("counts");
    let missing: Vec<u64> = (1..=ITEMS).filter(|i| !done.contains_key(i)).collect();
    assert!(
        missing.is_empty(),
        "items never completed: {missing:?}; counts {counts:?}"
    );
    assert!(done.values().all(|n| *n == 1), "no item completed twice");
    let counts = store.item_counts().await.expect("counts");
    assert_eq!(
        (counts.pending, counts.owned, counts.dead_lettered),
        (0, 0, 0)
    );
}

fn stop_flag() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false))
}
