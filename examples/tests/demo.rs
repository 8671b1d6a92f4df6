//! Runs the demo binary end to end with small numbers: real worker processes, a
//! SIGKILL, a SIGSTOP past the ttl; checks its exit status and its summary.

use std::process::Command;

fn demo() -> Command {
    Command::new(env!("CARGO_BIN_EXE_demo"))
}

#[test]
fn demo_survives_a_kill_and_a_freeze() {
    let out = demo()
        .args([
            "--workers",
            "3",
            "--items",
            "40",
            "--ttl",
            "1s",
            "--work-ms",
            "20-60",
            "--seed",
            "7",
        ])
        .output()
        .expect("run the demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "demo failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    for expected in [
        "items: 40 enqueued, 40 done at least once, 0 lost, 0 dead-lettered",
        "SIGKILL -> worker-",
        "SIGSTOP -> worker-",
        "SIGCONT -> worker-",
        "(SIGKILL, token",
        "(SIGSTOP, token",
        "after SIGCONT: cancellation fired yes",
        "re-joined with new token",
        "was REFUSED by the store: Error::Fenced",
        "invariant ok: each death declared exactly once",
        "declared dead while frozen, its items requeued",
        "'s late completion refused by fencing",
        "result: OK",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    assert!(!stdout.contains("INVARIANT BROKEN"), "{stdout}");
    assert!(!stdout.contains("NOT shown"), "{stdout}");
    // Not a terminal: plain lines, no escape codes.
    assert!(!stdout.contains('\x1b'), "escape codes in plain output");
    let refused = stdout
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("stale completions refused by fencing: ")
        })
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse::<u32>().ok())
        .expect("the summary counts refused completions");
    assert!(
        refused >= 1,
        "the frozen worker's late completion was refused"
    );
}

#[test]
fn help_explains_each_flag() {
    let out = demo().arg("--help").output().expect("run the demo");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--store",
        "--workers",
        "--items",
        "--ttl",
        "--seed",
        "--work-ms",
        "--plain",
    ] {
        assert!(
            help.contains(flag),
            "--help does not mention {flag}:\n{help}"
        );
    }
    assert!(
        !help.contains("worker --store"),
        "the worker subcommand stays hidden"
    );
}

#[test]
fn bad_setups_fail_with_status_2() {
    for args in [
        &["--store", "memory://?ns=x"][..],
        &["--store", "nosuch://x"][..],
        &["--workers", "1"][..],
    ] {
        let out = demo().args(args).output().expect("run the demo");
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
