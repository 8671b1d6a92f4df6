//! The whole conformance suite (every scenario and the property test) run by three
//! OS processes at once on ONE database file: this process and two copies of this
//! test binary re-executed with `MPC_DB` set. Each scenario uses a fresh namespace,
//! so the processes share the file, its locks and its counters table, not their
//! state.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use liveness_conformance::scenarios::SCENARIOS;
use liveness_core::Store;
use liveness_sqlite::{SqliteConfig, SqliteStore, Synchronous};

/// Runs every scenario on `threads` threads, then the property test; panics on the
/// first failure.
/// Scenarios each process runs at once: 12 in all on one file.
const THREADS: usize = 4;

fn run_suite(db: &str, threads: usize) {
    let db = db.to_owned();
    let factory = liveness_conformance::factory(move || {
        // What this test checks is that processes sharing one file agree (locks,
        // counters, the boot clock), not what a power loss keeps: `synchronous=normal`
        // keeps WAL commits atomic and ordered across processes, without an fsync per
        // commit, whose queue under 3 processes made 400 ms leases expire between a
        // scenario's steps on a loaded machine.
        let config = SqliteConfig::new(&db, liveness_conformance::fresh_namespace())
            .with_synchronous(Synchronous::Normal);
        async move {
            let store: Arc<dyn Store> = Arc::new(
                SqliteStore::connect(config)
                    .await
                    .expect("open the sqlite store"),
            );
            Some(store)
        }
    });
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(scenario) = SCENARIOS.get(i) else {
                    break;
                };
                liveness_conformance::run(scenario.name, factory.clone());
            });
        }
    });
    liveness_conformance::property::run(factory, 16);
}

#[test]
fn conformance_child() {
    if let Ok(db) = std::env::var("MPC_DB") {
        run_suite(&db, THREADS);
    }
}

#[test]
fn conformance_in_three_processes_on_one_file() {
    if std::env::var("MPC_DB").is_ok() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("shared.db");
    let db = db.to_str().expect("utf-8 path").to_owned();
    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(std::env::current_exe().expect("current exe"))
                .args([
                    "conformance_child",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("MPC_DB", &db)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn child")
        })
        .collect();
    run_suite(&db, THREADS);
    for child in children {
        let out = child.wait_with_output().expect("child output");
        assert!(
            out.status.success(),
            "a child process failed the suite ({:?}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
