//! The small use-case programs run to completion and show what they claim.

use std::process::Command;

fn run(bin: &str) -> String {
    let out = Command::new(bin).output().expect("program starts");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{bin} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn dispatcher_fences_the_stale_leader() {
    let out = run(env!("CARGO_BIN_EXE_dispatcher"));
    assert!(out.contains("REFUSED (stale token)"), "{out}");
    assert!(out.contains("fencing held"), "{out}");
}

#[test]
fn workers_finish_every_item_after_a_death() {
    let out = run(env!("CARGO_BIN_EXE_workers"));
    assert!(out.contains("died     members/worker-0"), "{out}");
    assert!(
        out.contains("Retried"),
        "the flaky job is tried again: {out}"
    );
    assert!(
        out.contains("s after its enqueue"),
        "the scheduled job runs: {out}"
    );
    assert!(out.contains("all 32 jobs done"), "{out}");
}
