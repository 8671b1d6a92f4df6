//! The `liveness` binary as an operator runs it, against real stores: a SQLite file,
//! and Redis and PostgreSQL servers the test kit starts.
//!
//! Workers are real processes (this test binary re-executed as `worker_process`), and
//! the killed one is killed with SIGKILL: the store sees exactly what it sees when a
//! worker host dies.

use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{bounded, fresh_ns, http_get, rt, signal, Worker, BIN};
use liveness::EnqueueOptions;
use liveness_testkit::fixtures::{dead_letters, FAILER_ERROR};
use serde_json::Value;

mod common;

/// The longest any wait in these tests lasts before it fails.
const PATIENCE: Duration = Duration::from_secs(60);

/// Runs `liveness --store URL ARGS…` to completion.
fn liveness(url: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--store")
        .arg(url)
        .args(args)
        .output()
        .unwrap()
}

/// Runs `liveness … --json` and parses what it printed; panics unless it exited 0.
fn liveness_json(url: &str, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = liveness(url, &all);
    assert!(
        out.status.success(),
        "liveness {all:?}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Asserts that `stderr` ends in exactly one line of reason, `liveness: …` (a store's
/// own warnings, logged on connect, may come before it).
fn assert_one_reason(stderr: &[u8]) {
    let err = String::from_utf8_lossy(stderr);
    let reasons = err.lines().filter(|l| l.starts_with("liveness: ")).count();
    assert_eq!(reasons, 1, "{err}");
    assert!(
        err.trim_end()
            .lines()
            .last()
            .unwrap()
            .starts_with("liveness: "),
        "{err}"
    );
}

/// Polls `f` until it answers `Some`, failing after [`PATIENCE`].
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < until, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Not a test of its own: the worker process of [`Worker`].
#[test]
fn worker_process() {
    common::worker_process();
}

/// The names of the leases `members --json` lists.
fn member_names(url: &str) -> Vec<String> {
    let rows = liveness_json(url, &["members"]);
    let mut names: Vec<String> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == "live")
        .map(|r| r["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

/// The value of the metric `name` in namespace `ns` in a Prometheus text page.
fn metric(page: &str, name: &str, ns: &str) -> Option<f64> {
    page.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| l.contains(&format!("namespace=\"{ns}\"")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A `liveness check` process serving metrics on `port`.
fn start_checker(url: &str, port: u16) -> Child {
    Command::new(BIN)
        .args([
            "--store",
            url,
            "check",
            "--check-every",
            "200ms",
            "--metrics",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What `child`, which has exited, wrote to its piped stderr.
fn stderr_of(child: &mut Child) -> String {
    let mut err = String::new();
    let mut pipe = child.stderr.take().expect("stderr is piped");
    pipe.read_to_string(&mut err).unwrap();
    err
}

/// Sends SIGTERM to `child` and waits for it to exit; returns its status and stderr.
fn terminate(mut child: Child) -> (std::process::ExitStatus, String) {
    signal("-TERM", child.id()).unwrap();
    let status = wait_for("the checker to exit after SIGTERM", || {
        child.try_wait().unwrap()
    });
    (status, stderr_of(&mut child))
}

/// The whole operator story on one store: two workers, one killed; `members` shows
/// exactly the live ones, `liveness check` declares the death and requeues its items,
/// `deaths` shows it with its requeued count, the scraped metrics match, and the
/// checker exits cleanly on SIGTERM.
fn a_killed_worker_is_seen_by_every_command(url: &str, ns: &str, ttl_ms: u64) {
    rt().block_on(async {
        let store = liveness::connect(url).await.unwrap();
        for i in 0..3 {
            store
                .enqueue(format!("job {i}").as_bytes(), EnqueueOptions::default())
                .await
                .unwrap();
        }
    });
    let doomed = Worker::start(url, "doomed", 2, ttl_ms);
    let _steady = Worker::start(url, "steady", 0, ttl_ms);
    assert_eq!(member_names(url), ["doomed", "steady"]);
    let counts = liveness_json(url, &["items"]);
    assert_eq!(
        (counts["pending"].clone(), counts["owned"].clone()),
        (1.into(), 2.into())
    );

    doomed.kill();
    let port = liveness_testkit::free_port().unwrap();
    let checker = start_checker(url, port);
    let death = wait_for("the death in `liveness deaths`", || {
        let rows = liveness_json(url, &["deaths", "--since", "10m"]);
        rows.as_array()
            .unwrap()
            .iter()
            .find(|d| d["key"] == "members/doomed" && !d["requeued"].is_null())
            .cloned()
    });
    assert_eq!(death["cause"], "reaped", "{death}");
    assert_eq!(death["requeued"], 2, "{death}");
    assert_eq!(death["dead_lettered"], 0, "{death}");
    assert_eq!(member_names(url), ["steady"]);
    let counts = liveness_json(url, &["items"]);
    assert_eq!(
        (counts["pending"].clone(), counts["owned"].clone()),
        (3.into(), 0.into())
    );

    let page = wait_for("the metrics page", || {
        let (status, body) = http_get(port, "/metrics")?;
        (status.contains("200") && metric(&body, "liveness_deaths_total", ns) == Some(1.0))
            .then_some(body)
    });
    assert_eq!(
        metric(&page, "liveness_items_requeued_total", ns),
        Some(2.0),
        "{page}"
    );
    assert_eq!(
        metric(&page, "liveness_items_dead_lettered_total", ns),
        Some(0.0),
        "{page}"
    );
    assert!(
        metric(&page, "liveness_checker_rounds_total", ns).unwrap() >= 1.0,
        "{page}"
    );
    // Histograms come with buckets (which add up across a fleet), not as summaries.
    for histogram in [
        "liveness_checker_round_seconds",
        "liveness_checker_round_trips",
    ] {
        assert!(
            page.contains(&format!("{histogram}_bucket{{"))
                && page.contains(&format!("{histogram}_count{{"))
                && !page.contains(&format!("{histogram}{{")),
            "{page}"
        );
    }
    let (health, _) = http_get(port, "/health").unwrap();
    assert!(health.contains("200"), "{health}");

    let (status, log) = terminate(checker);
    assert!(status.success(), "{status:?}\n{log}");
    assert!(
        log.contains("died") && log.contains("members/doomed"),
        "{log}"
    );
    assert!(log.contains("checker stopped"), "{log}");
}

/// Dead letters: counted, listed, retried one by one and all at once; a retry of an
/// unknown or not-dead-lettered item is refused with status 2.
fn dead_letters_are_listed_and_retried(url: &str) {
    let (ids, retention) = rt().block_on(async {
        let store = liveness::connect(url).await.unwrap();
        let retention = store.capabilities().dead_letter_retention;
        (
            dead_letters(&store, 3, |i| format!("poison {i}")).await,
            retention,
        )
    });
    let counts = liveness_json(url, &["items"]);
    assert_eq!(counts["dead_lettered"], 3, "{counts}");
    // How long they are kept: the store's retention, or until an operator acts.
    let kept = counts
        .get("dead_letter_retention_s")
        .and_then(Value::as_u64);
    assert_eq!(kept, retention.map(|d| d.as_secs()), "{counts}");
    let text = liveness(url, &["items"]);
    let text = String::from_utf8_lossy(&text.stdout);
    let said = match retention {
        Some(_) => "after they were dead-lettered (by the store's clock), or until retried",
        None => "dead letters are kept by this store until retried",
    };
    assert!(text.contains(said), "{text}");
    let listed = liveness_json(url, &["items", "--state", "dead-lettered"]);
    let rows = listed.as_array().unwrap();
    let listed: Vec<u64> = rows.iter().map(|r| r["id"].as_u64().unwrap()).collect();
    assert_eq!(listed, ids);
    // Why each died: the failure's text.
    for row in rows {
        assert_eq!(row["last_error"], FAILER_ERROR, "{row}");
    }
    let text = liveness(url, &["items", "--state", "dead-lettered"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("LAST ERROR") && text.contains(FAILER_ERROR),
        "{text}"
    );

    let first = ids[0].to_string();
    assert_eq!(
        liveness_json(url, &["retry", &first])["retried"],
        Value::from(vec![ids[0]])
    );
    // Pending now: not a dead letter any more.
    let again = liveness(url, &["retry", &first]);
    assert_eq!(again.status.code(), Some(2), "{again:?}");
    let unknown = liveness(url, &["retry", "987654321"]);
    assert_eq!(unknown.status.code(), Some(2), "{unknown:?}");
    assert_one_reason(&unknown.stderr);

    let all = liveness_json(url, &["retry", "--all-dead-letters"]);
    assert_eq!(all["retried"], Value::from(vec![ids[1], ids[2]]));
    let counts = liveness_json(url, &["items"]);
    assert_eq!(
        (counts["pending"].clone(), counts["dead_lettered"].clone()),
        (3.into(), 0.into())
    );
    let pending = liveness_json(url, &["items", "--state", "pending"]);
    assert!(
        pending
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["attempts"] == 0),
        "{pending}"
    );

    // A pending item is cancelled; then it is gone, and a second cancel finds nothing.
    let gone = liveness_json(url, &["cancel", &first]);
    assert_eq!(gone["outcome"], "cancelled", "{gone}");
    assert_eq!(liveness_json(url, &["cancel", &first])["outcome"], "none");
    let counts = liveness_json(url, &["items"]);
    assert_eq!(counts["pending"], 2, "{counts}");
    assert!(
        counts.get("next_due_ms").is_none(),
        "nothing held back: {counts}"
    );

    // A job scheduled an hour ahead: pending, and `items` says when it is due.
    rt().block_on(async {
        let store = liveness::connect(url).await.unwrap();
        let hour = std::time::Duration::from_secs(3600);
        liveness::Queue::new(store)
            .enqueue_in(b"later", hour)
            .await
            .unwrap();
    });
    let counts = liveness_json(url, &["items"]);
    assert_eq!(counts["pending"], 3, "{counts}");
    let due = counts["next_due_ms"].as_u64().unwrap_or(0);
    assert!((3_500_000..=3_601_000).contains(&due), "{counts}");
    let text = liveness(url, &["items"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("the first is due in"), "{text}");
}

/// `liveness queues` counts each queue by state, in name order; `items --state` says
/// each item's queue (a column once some item is not in the default queue), and, on
/// a store that keeps item times (`times`), how long ago it was enqueued.
fn queues_are_counted_and_items_name_their_queue(url: &str, times: bool) {
    rt().block_on(async {
        let store = liveness::connect(url).await.unwrap();
        let mail = liveness::Queue::named(store.clone(), "mail").unwrap();
        mail.enqueue_many(&[b"m1", b"m2"]).await.unwrap();
        liveness::Queue::new(store).enqueue(b"d1").await.unwrap();
    });
    let queues = liveness_json(url, &["queues"]);
    let rows: Vec<(String, u64)> = queues
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["queue"].as_str().unwrap().to_owned(),
                r["pending"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [("default".to_owned(), 1), ("mail".to_owned(), 2)],
        "{queues}"
    );
    let text = liveness(url, &["queues"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("QUEUE") && text.contains("mail"), "{text}");
    let items = liveness_json(url, &["items", "--state", "pending"]);
    let named: Vec<&str> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["queue"].as_str().unwrap())
        .collect();
    assert_eq!(named, ["mail", "mail", "default"], "{items}");
    for row in items.as_array().unwrap() {
        let age = row.get("enqueued_ago_ms").and_then(Value::as_u64);
        assert_eq!(age.is_some(), times, "{row}");
        assert!(age.unwrap_or(0) < 60_000, "{row}");
        assert!(
            row.get("attempted_ago_ms").is_none(),
            "never claimed: {row}"
        );
    }
    let text = liveness(url, &["items", "--state", "pending"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("QUEUE") && text.contains("mail"), "{text}");
    // Every item cancelled: no queue is listed.
    for row in items.as_array().unwrap() {
        let id = row["id"].as_u64().unwrap().to_string();
        assert_eq!(liveness_json(url, &["cancel", &id])["outcome"], "cancelled");
    }
    let empty = liveness(url, &["queues"]);
    assert!(empty.status.success(), "{empty:?}");
    let empty = String::from_utf8_lossy(&empty.stdout);
    assert!(empty.contains("no items in any queue"), "{empty}");
}

fn sqlite_url(dir: &tempfile::TempDir, ns: &str) -> String {
    format!("sqlite://{}?ns={ns}", dir.path().join("ops.db").display())
}

#[test]
fn sqlite_a_killed_worker_is_seen_by_every_command() {
    let dir = tempfile::tempdir().unwrap();
    a_killed_worker_is_seen_by_every_command(&sqlite_url(&dir, "ops"), "ops", 1000);
}

#[test]
fn sqlite_dead_letters_are_listed_and_retried() {
    let dir = tempfile::tempdir().unwrap();
    dead_letters_are_listed_and_retried(&sqlite_url(&dir, "dlq"));
}

#[test]
fn sqlite_queues_are_counted_and_items_name_their_queue() {
    let dir = tempfile::tempdir().unwrap();
    queues_are_counted_and_items_name_their_queue(&sqlite_url(&dir, "queues"), true);
}

#[test]
fn redis_a_killed_worker_is_seen_by_every_command() {
    let Some(server) = liveness_testkit::redis::RedisServer::shared() else {
        return;
    };
    let ns = fresh_ns("cli");
    a_killed_worker_is_seen_by_every_command(&server.url_with(&format!("ns={ns}")), &ns, 1000);
}

#[test]
fn redis_dead_letters_are_listed_and_retried() {
    let Some(server) = liveness_testkit::redis::RedisServer::shared() else {
        return;
    };
    dead_letters_are_listed_and_retried(&server.url_with(&format!("ns={}", fresh_ns("dlq"))));
}

#[test]
fn postgres_a_killed_worker_is_seen_by_every_command() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    let ns = fresh_ns("cli");
    a_killed_worker_is_seen_by_every_command(&server.url_with(&format!("ns={ns}")), &ns, 1000);
}

#[test]
fn postgres_dead_letters_are_listed_and_retried() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    dead_letters_are_listed_and_retried(&server.url_with(&format!("ns={}", fresh_ns("dlq"))));
}

/// The etcd server's URL with the namespace `ns`.
fn etcd_url(server: &liveness_testkit::etcd::EtcdServer, ns: &str) -> String {
    server.url_with(&format!("ns={ns}"))
}

#[test]
fn etcd_a_killed_worker_is_seen_by_every_command() {
    let Some(server) = liveness_testkit::etcd::shared() else {
        return;
    };
    let ns = fresh_ns("cli");
    // etcd refuses ttls under its minimum lease ttl (2 s by default).
    a_killed_worker_is_seen_by_every_command(&etcd_url(server, &ns), &ns, 2000);
}

#[test]
fn etcd_dead_letters_are_listed_and_retried() {
    let Some(server) = liveness_testkit::etcd::shared() else {
        return;
    };
    dead_letters_are_listed_and_retried(&etcd_url(server, &fresh_ns("dlq")));
}

/// Waits until `/health` on `port` answers `code`; returns its body, checked to be one
/// line.
fn wait_health(port: u16, code: &str, why: &str) -> String {
    let body = wait_for(why, || {
        let (status, body) = http_get(port, "/health")?;
        status.contains(code).then_some(body)
    });
    assert_eq!(body.trim_end().lines().count(), 1, "{body:?}");
    body
}

/// `/metrics` still answers with the checker's counters, and any other path is 404.
fn assert_metrics_and_404(port: u16, ns: &str) {
    let (status, page) = http_get(port, "/metrics").unwrap();
    assert!(status.contains("200"), "{status}");
    assert!(
        metric(&page, "liveness_checker_rounds_total", ns).unwrap() >= 1.0,
        "{page}"
    );
    let (status, _) = http_get(port, "/nope").unwrap();
    assert!(status.contains("404"), "{status}");
}

/// The namespace of the `/health` tests.
const HEALTH_NS: &str = "health";

/// `/health` follows the store at `url` (namespace [`HEALTH_NS`]): 200 while rounds
/// succeed, 503 with a one-line reason while the store is gone (`down`), 200 again once
/// it is back (`up`); `/metrics` is served throughout and other paths are 404.
fn health_follows_the_store(url: &str, down: impl FnOnce(), up: impl FnOnce()) {
    let ns = HEALTH_NS;
    let port = liveness_testkit::free_port().unwrap();
    let checker = start_checker(url, port);
    let ok = wait_health(port, "200", "/health 200 while rounds succeed");
    assert!(ok.starts_with("ok"), "{ok}");
    eprintln!("/health with the store up: {ok}");
    assert_metrics_and_404(port, ns);

    down();
    let reason = wait_health(port, "503", "/health 503 with the store gone");
    eprintln!("/health with the store gone: {reason}");
    assert!(
        reason.starts_with("store unreachable") || reason.starts_with("rounds stuck"),
        "{reason}"
    );
    assert_metrics_and_404(port, ns);

    up();
    wait_health(port, "200", "/health 200 with the store back");
    assert_metrics_and_404(port, ns);

    let (status, log) = terminate(checker);
    assert!(status.success(), "{status:?}\n{log}");
}

/// Starts a stopped server process again, on the same port and data.
fn restart(process: Option<&mut liveness_testkit::ServerProcess>) {
    process
        .expect("a server the test started itself")
        .restart(PATIENCE)
        .unwrap()
}

#[test]
fn redis_health_follows_a_killed_and_a_paused_server() {
    let Some(server) =
        liveness_testkit::redis::RedisServer::spawn(liveness_testkit::redis::RedisOptions {
            durable: true,
            ..Default::default()
        })
    else {
        return;
    };
    let server = std::cell::RefCell::new(server);
    let url = server.borrow().url_with(&format!("ns={HEALTH_NS}"));
    // Killed, then started again on the same port and data.
    health_follows_the_store(
        &url,
        || server.borrow_mut().process_mut().unwrap().kill(),
        || restart(server.borrow_mut().process_mut()),
    );
    // Frozen (SIGSTOP): connected, answering nothing; then resumed.
    health_follows_the_store(
        &url,
        || server.borrow().process().unwrap().pause().unwrap(),
        || server.borrow().process().unwrap().resume().unwrap(),
    );
}

#[test]
fn postgres_health_follows_a_stopped_server() {
    let Some(server) = liveness_testkit::postgres::PgServer::start() else {
        return;
    };
    let server = std::cell::RefCell::new(server);
    let url = server.borrow().url_with(&format!("ns={HEALTH_NS}"));
    health_follows_the_store(
        &url,
        || {
            // A fast shutdown (SIGINT): every session ends, the port closes.
            let mut server = server.borrow_mut();
            let process = server.process().unwrap();
            signal("-INT", process.pid().unwrap()).unwrap();
            wait_for("postgres to stop", || {
                TcpStream::connect(("127.0.0.1", process.port()))
                    .is_err()
                    .then_some(())
            });
        },
        || restart(server.borrow_mut().process()),
    );
}

#[test]
fn a_bad_url_exits_2_with_a_one_line_reason() {
    for url in [
        "nosuch://host",
        "no scheme",
        "sqlite://",
        "redis://127.0.0.1:6379?bogus=1",
    ] {
        let out = liveness(url, &["members"]);
        assert_eq!(out.status.code(), Some(2), "{url}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{url}: {err}");
        assert!(err.starts_with("liveness: invalid"), "{url}: {err}");
        assert!(out.stdout.is_empty(), "{url}");
    }
    // Bad arguments too.
    let out = liveness("sqlite://x.db", &["items", "--state", "gone"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// Runs `liveness --store URL ARGS…`, killing it (and failing) when it has not ended
/// within 30 s.
fn liveness_bounded(url: &str, args: &[&str]) -> Output {
    bounded(Command::new(BIN).arg("--store").arg(url).args(args))
}

#[test]
fn a_duration_flag_out_of_range_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(&dir, "flags");
    for (args, flag) in [
        (&["check", "--check-every", "0s"][..], "--check-every"),
        (
            &["check", "--check-every", "100000000s"][..],
            "--check-every",
        ),
        (&["--timeout", "0s", "members"][..], "--timeout"),
        (&["--timeout", "100000000s", "members"][..], "--timeout"),
        (&["watch", "--every", "0s"][..], "--every"),
        (&["watch", "--every", "1ms"][..], "--every"),
        (&["watch", "--every", "100000000s"][..], "--every"),
        (&["deaths", "--since", "0s"][..], "--since"),
        (&["bench", "--seconds=-1"][..], "--seconds"),
        (&["bench", "--seconds=1e30"][..], "--seconds"),
    ] {
        let out = liveness_bounded(&url, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert_one_reason(&out.stderr);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("liveness: invalid {flag} ")),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn an_unreachable_store_exits_3() {
    // Nobody listens: refused at once.
    let port = liveness_testkit::free_port().unwrap();
    let out = liveness(&format!("redis://127.0.0.1:{port}"), &["members"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
}

#[test]
fn a_store_that_never_answers_exits_3_after_the_timeout() {
    // A server that accepts connections and never says a word.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let mut child = Command::new(BIN)
        .args(["--timeout", "1s", "--store"])
        .arg(format!("redis://127.0.0.1:{port}"))
        .arg("members")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_for("liveness to give up", || child.try_wait().unwrap());
    assert_eq!(status.code(), Some(3));
    let err = stderr_of(&mut child);
    assert_eq!(err.lines().count(), 1, "{err}");
    drop(silent);
}

#[test]
fn watch_redraws_until_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(&dir, "watched");
    let _worker = Worker::start(&url, "w", 0, 1000);
    let mut child = Command::new(BIN)
        .args(["--store", &url, "watch", "--every", "100ms", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for _ in 0..2 {
        let frame: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!(frame["members"][0]["name"], "w", "{frame}");
        assert_eq!(frame["items"]["pending"], 0, "{frame}");
    }
    signal("-INT", child.id()).unwrap();
    let status = wait_for("watch to exit on SIGINT", || child.try_wait().unwrap());
    assert!(status.success(), "{status:?}");
}

#[test]
fn bench_reports_every_figure() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(&dir, "app");
    let figures = liveness_json(
        &url,
        &[
            "bench",
            "--members",
            "50",
            "--concurrency",
            "1",
            "--seconds",
            "0.2",
            "--deaths",
            "2",
        ],
    );
    let what: Vec<&str> = figures
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["what"].as_str().unwrap())
        .collect();
    assert_eq!(
        what,
        [
            "renewals",
            "checker_round",
            "members_first_page",
            "checker_round",
            "detection"
        ]
    );
    assert!(figures[0]["value"].as_f64().unwrap() > 0.0, "{figures}");
    assert_eq!(figures[2]["setting"], "members=50 page=100", "{figures}");
}

/// `liveness completions SHELL` prints a completion script for the whole command,
/// without a store; an unknown shell is bad input.
#[test]
fn completions_are_printed_for_each_shell_without_a_store() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef liveness"),
        ("fish", "complete -c liveness"),
    ] {
        let out = Command::new(BIN)
            .args(["completions", shell])
            .env_remove("LIVENESS_STORE")
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(
            script.contains("members") && script.contains("store"),
            "{shell}"
        );
    }
    let out = Command::new(BIN)
        .args(["completions", "cmd"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn redis_queues_are_counted_and_items_name_their_queue() {
    let Some(server) = liveness_testkit::redis::RedisServer::shared() else {
        return;
    };
    let url = server.url_with(&format!("ns={}", fresh_ns("queues")));
    queues_are_counted_and_items_name_their_queue(&url, true);
}

#[test]
fn postgres_queues_are_counted_and_items_name_their_queue() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    let url = server.url_with(&format!("ns={}", fresh_ns("queues")));
    queues_are_counted_and_items_name_their_queue(&url, true);
}

#[test]
fn etcd_queues_are_counted_and_items_name_their_queue() {
    let Some(server) = liveness_testkit::etcd::shared() else {
        return;
    };
    let url = etcd_url(server, &fresh_ns("queues"));
    queues_are_counted_and_items_name_their_queue(&url, false);
}
