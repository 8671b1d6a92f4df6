//! A step of the host's wall clock (an NTP step, `date -s`) changes nothing: the
//! store clock is the boot clock.
//!
//! With the wall clock as the store clock, a step of it on every process of the file
//! made every live lease expire at once (+1 h) or hid a dead worker for the whole hour
//! (−1 h). Here the
//! wall clock of a second process is stepped with `faketime` (Debian package
//! `faketime`; `FAKETIME_DONT_FAKE_MONOTONIC=1` leaves the monotonic and boot clocks
//! alone, exactly as a real step does), and that process must see the same leases as
//! this one: the live lease live (another holder is refused), the dead one expired (it
//! lists it and wins its reap).
//!
//! The child is this test binary re-executed under `faketime` with `STEP_DB` set: the
//! `clock_step_child` test does nothing without that variable.
#![cfg(any(target_os = "linux", target_os = "android"))]

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use liveness_core::{
    Error, FencingToken, HolderId, Key, LeaseStatus, LeaseStore, Namespace, Space, Store, Ttl,
};
use liveness_sqlite::{SqliteConfig, SqliteStore};
use tokio::time::Instant;

/// Only turns a hang into a failure.
const DEADLINE: Duration = Duration::from_secs(60);

fn config(path: &str) -> SqliteConfig {
    SqliteConfig::new(path, Namespace::new("step_test").unwrap())
}

fn wall_ms() -> i128 {
    // The test compares the two processes' wall clocks to prove the step happened;
    // the store never reads this clock.
    i128::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// What a process whose wall clock was stepped sees. Prints one line per fact.
#[test]
fn clock_step_child() {
    let Ok(db) = std::env::var("STEP_DB") else {
        return;
    };
    let parent_wall: i128 = std::env::var("STEP_WALL").unwrap().parse().unwrap();
    let dead_token: u64 = std::env::var("STEP_DEAD_TOKEN").unwrap().parse().unwrap();
    println!("STEP wall_offset_s {}", (wall_ms() - parent_wall) / 1000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let store = SqliteStore::connect(config(&db)).await.unwrap();
        let alive = Key::member("alive").unwrap();
        let dead = Key::member("dead").unwrap();
        let status = store.inspect(&alive).await.unwrap().unwrap().status;
        println!(
            "STEP alive_live {}",
            matches!(status, LeaseStatus::Live { .. })
        );
        let taken = store
            .acquire(
                &alive,
                &HolderId::new("intruder").unwrap(),
                Ttl::from_secs(60).unwrap(),
            )
            .await;
        println!(
            "STEP alive_refused {}",
            matches!(taken, Err(Error::Held { .. }))
        );
        let listed = store
            .expired(&Space::members(), 10)
            .await
            .unwrap()
            .iter()
            .any(|e| e.key == dead);
        println!("STEP dead_listed {listed}");
        let reaped = store.reap(&dead, FencingToken(dead_token)).await.unwrap();
        println!("STEP dead_reaped {reaped}");
    });
}

/// Whether `faketime` runs here (used, not looked for).
fn faketime_works() -> bool {
    Command::new("faketime")
        .args(["-f", "+1h", "true"])
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// One run: this process holds a live lease and leaves a dead one expired; a child
/// whose wall clock is stepped by `step` reports what it sees.
async fn stepped(step: &str) -> Vec<(String, String)> {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("step.db").to_str().unwrap().to_owned();
    let store = SqliteStore::connect(config(&db)).await.unwrap();
    let holder = HolderId::new("worker").unwrap();
    let alive = Key::member("alive").unwrap();
    let dead = Key::member("dead").unwrap();
    store
        .acquire(&alive, &holder, Ttl::from_secs(600).unwrap())
        .await
        .unwrap();
    // The killed worker: a 1 ms lease nobody renews.
    let gone = store
        .acquire(&dead, &holder, Ttl::from_millis(1).unwrap())
        .await
        .unwrap();
    let until = Instant::now() + DEADLINE;
    while store.inspect(&dead).await.unwrap().unwrap().status != LeaseStatus::Expired {
        assert!(Instant::now() < until, "the 1 ms lease never expired");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    let exe = std::env::current_exe().unwrap();
    let child = Command::new("faketime")
        .args(["-f", step])
        .arg(exe)
        .args([
            "clock_step_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("STEP_DB", &db)
        .env("STEP_WALL", wall_ms().to_string())
        .env("STEP_DEAD_TOKEN", gone.token.0.to_string())
        .output();
    let out = tokio::time::timeout(DEADLINE, tokio::task::spawn_blocking(|| child))
        .await
        .expect("the child hung")
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "child under faketime {step} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The harness prints "test clock_step_child ... " without a newline before the
    // child's first line: look at what follows the marker.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.find("STEP ").map(|at| &l[at + 5..]))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_step_changes_nothing() {
    if std::env::var("STEP_DB").is_ok() {
        return;
    }
    if !faketime_works() {
        liveness_conformance::skip::no_store(
            "a_wall_clock_step_changes_nothing",
            "`faketime` does not run here: install the Debian package faketime",
        );
        return;
    }
    let mut wrong = Vec::new();
    for (step, offset) in [("+1h", 3600), ("-1h", -3600)] {
        let seen = stepped(step).await;
        let get = |k: &str| {
            seen.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("{step}: the child did not report {k}: {seen:?}"))
        };
        // The child's wall clock really was stepped (else this test proves nothing).
        let off: i64 = get("wall_offset_s").parse().unwrap();
        assert!(
            (off - offset).abs() < 60,
            "{step}: the child's wall clock is off by {off} s"
        );
        // With a wall-clock store clock, +1 h would expire the live lease and let an
        // intruder take it; −1 h would keep the dead worker's lease live, so nobody
        // would detect it.
        for fact in ["alive_live", "alive_refused", "dead_listed", "dead_reaped"] {
            if get(fact) != "true" {
                wrong.push(format!("{step}: {fact} is {}", get(fact)));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "a wall-clock step changed what the store decides: {wrong:?}"
    );
}
