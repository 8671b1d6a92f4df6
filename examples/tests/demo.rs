//! Runs the demo binary end to end with small numbers: real worker processes, each
//! with one session and three worker runners riding it, a SIGKILL, a stuck member, a
//! SIGSTOP past the ttl, a scheduled job, a retried failure; checks its exit status
//! and its summary.

use std::process::{Command, Output};
use std::time::Duration;

use liveness::{Checker, CheckerConfig};

fn demo() -> Command {
    Command::new(env!("CARGO_BIN_EXE_demo"))
}

/// The whole-story demos run one at a time: each is three worker processes and a
/// timed story (a freeze must land while work is left), which two at once on a
/// 2-core machine can crowd out.
static STORY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    STORY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs the demo with 3 workers, 120 items of 20-60 ms, ttl 1 s, seed 7, and `extra`:
/// enough items that the freeze, which waits for a moment the frozen worker holds no
/// write lock, still finds work left on a loaded machine.
fn run_demo(extra: &[&str]) -> Output {
    let _turn = one_at_a_time();
    demo()
        .args(["--workers", "3", "--items", "120", "--ttl", "1s"])
        .args(["--work-ms", "20-60", "--seed", "7"])
        .args(extra)
        .output()
        .expect("run the demo")
}

/// Asserts that the run exited with status 0 and showed its whole story: every item
/// done, the SIGKILL and the SIGSTOP staged and each death shown, the frozen worker's
/// cancellation, refused late completion and re-join, the scheduled job and the
/// retried failure, every invariant. Returns its stdout.
fn assert_shows_the_story(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "demo failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    for expected in [
        "items: 120 enqueued, 120 done at least once, 0 lost, 0 dead-lettered",
        "SIGKILL -> worker-",
        "SIGSTOP -> worker-",
        "SIGCONT -> worker-",
        "(SIGKILL, token",
        "(SIGSTOP, token",
        "after SIGCONT: cancellation fired yes",
        "re-joined with new token",
        "was REFUSED by fencing: Error::Fenced",
        "invariant ok: each death declared exactly once",
        "declared dead, its items requeued",
        "declared dead while frozen, its items requeued",
        "'s late completion refused by fencing",
        // One process death per worker, counting the members that rode its session.
        "ONE process death with its 3 members",
        "ONE death of its session, with its 3 members",
        "shown: every member of worker-",
        "'s session re-opened and its members re-joined with new tokens",
        // The stuck job: one member released alone by its watchdog.
        "STALL -> worker-",
        "hangs on item #",
        "its WATCHDOG fired",
        "released it alone (cause stalled)",
        "shown: a stuck member's watchdog released it alone (cause stalled)",
        "shown: the stuck member's item requeued and done by another member",
        "shown: the stuck member's fellow members kept working, their process untouched",
        // The job model: a scheduled job run when due, a failed job retried.
        "scheduled job: item #",
        "shown: the scheduled job run once due, not before",
        "FAILED (on purpose)",
        "retried failure: item #",
        "shown: a failed job retried after its backoff and done",
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
    stdout
}

#[test]
fn demo_survives_a_kill_and_a_freeze() {
    assert_shows_the_story(&run_demo(&[]));
}

/// The README's Redis demo command, as printed, against a stock server (no AOF): the
/// URL it shows is accepted and the demo tells its whole story. Only the address is the
/// test server's, and the numbers are [`run_demo`]'s small ones.
#[test]
fn the_readme_s_redis_demo_line_runs_on_a_stock_server() {
    let readme = include_str!("../../README.md");
    let line = readme
        .lines()
        .find(|l| l.contains("--features redis --bin demo -- --store"))
        .expect("the README shows the Redis demo command");
    let url = line
        .split('\'')
        .nth(1)
        .expect("the README quotes the demo's Redis URL");
    if !liveness::schemes().contains(&"redis") {
        // `cargo test -p examples` alone builds without Redis; the workspace run (as CI
        // runs it) has it through the CLI's features.
        assert!(
            !liveness_testkit::in_ci(),
            "the demo was built without Redis"
        );
        eprintln!("SKIP: this build has no Redis backend (run the workspace's tests)");
        return;
    }
    let Some(server) = liveness_testkit::redis::RedisServer::start() else {
        return;
    };
    let (_, after_scheme) = server.url().split_once("://").expect("a server URL");
    let address = after_scheme
        .split(['/', '?'])
        .next()
        .expect("a server address");
    let url = url.replacen("127.0.0.1:6379", address, 1);
    assert!(
        url.contains(address),
        "the README's URL names 127.0.0.1:6379: {line}"
    );
    assert_shows_the_story(&run_demo(&["--store", &url]));
}

#[test]
fn help_explains_each_flag() {
    let out = demo().arg("--help").output().expect("run the demo");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let flags = "--store --workers --members-per-worker --progress-timeout --items --ttl \
                 --seed --work-ms --no-checker --plain --dashboard";
    for flag in flags.split_whitespace() {
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
        &["--members-per-worker", "1"][..],
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

/// Runs the demo (as [`run_demo`], and `extra`) on a fresh SQLite store beside a
/// checker outside it, as the README suggests (`liveness check`; here a `Checker` in
/// this process, polling every 5 ms so that it wins reaps from the demo's own).
/// Asserts the whole story shown, the frozen worker held as long as planned; returns
/// the demo's stdout.
fn demo_beside_a_checker(extra: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite://{}?ns=demo", dir.path().join("demo.db").display());
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let checker = rt.block_on(async {
        let store = liveness::connect(&url).await.expect("open the store");
        let config = CheckerConfig::default().check_every(Duration::from_millis(5));
        Checker::new(store, config).spawn()
    });
    let out = run_demo(&[&["--store", url.as_str()], extra].concat());
    rt.block_on(checker.stop());
    let stdout = assert_shows_the_story(&out);
    // Frozen for 2.5 s as planned (ttl 1 s), give or take a checker round: not held
    // until a timeout for a declaration the demo's own checker never made.
    let frozen = stdout
        .lines()
        .find_map(|l| {
            let (before, _) = l.split_once(" frozen: it wakes up")?;
            let (_, held) = before.rsplit_once(" after ")?;
            held.strip_suffix(" s")?.parse::<f64>().ok()
        })
        .expect("the demo resumed its frozen worker");
    assert!(
        frozen < 5.0,
        "the frozen worker was held {frozen} s:\n{stdout}"
    );
    stdout
}

/// Beside a checker that wins reaps from the demo's own, the demo still shows every
/// death: it reads them from the store's death history.
#[test]
fn demo_beside_an_outside_checker_shows_the_deaths_from_the_store() {
    demo_beside_a_checker(&[]);
}

/// With no checker of its own, every death is the outside checker's, and the demo
/// shows each one, from the store's death history, saying who declared it.
#[test]
fn demo_with_only_an_outside_checker_shows_every_death() {
    let stdout = demo_beside_a_checker(&["--no-checker"]);
    assert!(
        stdout.contains("store's death history: worker-"),
        "{stdout}"
    );
    let deaths: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("death of worker-") && l.contains(", token "))
        .filter(|l| l.contains("(SIGKILL, ") || l.contains("(SIGSTOP, "))
        .collect();
    assert_eq!(deaths.len(), 2, "{stdout}");
    for death in deaths {
        assert!(death.contains("by a checker beside the demo"), "{death}");
    }
}

/// A run that could not show what it promised (one item: the faults are never
/// staged) keeps every invariant, but does not say OK: its result line names what
/// was not shown, and it exits with status 3.
#[test]
fn demo_that_did_not_show_its_story_does_not_say_ok() {
    let out = demo()
        .args(["--workers", "2", "--items", "1", "--ttl", "1s"])
        .args(["--work-ms", "10-20", "--seed", "7"])
        .output()
        .expect("run the demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(!stdout.contains("result: OK"), "{stdout}");
    assert!(!stdout.contains("INVARIANT BROKEN"), "{stdout}");
    let result = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("result: "))
        .expect("a result line");
    assert!(
        result.starts_with("INCOMPLETE") && result.contains("NOT shown: a SIGKILL"),
        "{result}"
    );
}

/// `--dashboard ADDR` serves the fleet's page while the demo runs: fetched during the
/// run, it lists the demo's workers; the run still shows its whole story.
#[test]
fn the_demo_serves_its_dashboard_while_it_runs() {
    use std::io::{BufRead, BufReader, Read, Write};

    let _turn = one_at_a_time();
    let mut child = demo()
        .args(["--workers", "3", "--items", "120", "--ttl", "1s"])
        .args(["--work-ms", "20-60", "--seed", "7", "--plain"])
        .args(["--dashboard", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the demo");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let addr = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("no dashboard line:\n{}", seen.join("\n")))
            .unwrap();
        if let Some(rest) = line.strip_prefix("dashboard: http://") {
            break rest.trim_end_matches('/').to_owned();
        }
        seen.push(line);
    };
    // The workers join a moment after the page is up.
    let mut page = String::new();
    for _ in 0..50 {
        let mut conn = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            conn,
            "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        page.clear();
        conn.read_to_string(&mut page).unwrap();
        if page.contains("worker-") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("worker-"), "no worker on the page:\n{page}");
    let rest: Vec<String> = lines.map_while(|l| l.ok()).collect();
    let status = child.wait().unwrap();
    assert!(status.success(), "{}", rest.join("\n"));
    assert!(
        rest.iter().any(|l| l.contains("result: OK")),
        "{}",
        rest.join("\n")
    );
}
