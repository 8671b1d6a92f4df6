//! The dashboard of `liveness check --http`, in a real headless Chromium, as an
//! operator sees it: a fleet of worker processes on a SQLite file, one of them killed
//! with SIGKILL; the page follows without a reload, and its retry buttons work only
//! with the access token.
//!
//! Needs Debian's `chromium` and `chromium-driver`; without them the test fails under
//! CI and prints SKIP otherwise (with `LIVENESS_ALLOW_SKIP=1`, see the test kit).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{http_get, rt, Worker, BIN};
use fantoccini::{Client, ClientBuilder, Locator};
use liveness::EnqueueOptions;
use liveness_testkit::fixtures::dead_letters;
use serde_json::{json, Value};

mod common;

/// The longest any wait in this test lasts before it fails.
const PATIENCE: Duration = Duration::from_secs(60);
/// The workers' ttl.
const TTL_MS: u64 = 1000;
/// The dashboard's access token.
const TOKEN: &str = "browser-test-token";

/// Not a test of its own: the worker process of [`Worker`].
#[test]
fn worker_process() {
    common::worker_process();
}

/// The checker daemon, stopped on drop.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `liveness --store URL ARGS… --json`; panics unless it exited 0.
fn liveness_json(url: &str, args: &[&str]) -> Value {
    let out = Command::new(BIN)
        .args(["--store", url])
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success(), "liveness {args:?}: {out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The status line of a GET of `path` on 127.0.0.1:`port`.
fn http_status(port: u16, path: &str) -> Option<String> {
    http_get(port, path).map(|(status, _)| status)
}

/// Runs `script` in the page (its DOM as it is now, however often the live part was
/// swapped) and answers what it returns.
async fn eval(client: &Client, script: &str) -> Value {
    client.execute(script, Vec::new()).await.unwrap()
}

/// Polls `script` until it returns something truthy, failing after `within`.
async fn until(client: &Client, what: &str, within: Duration, script: &str) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let v = eval(client, script).await;
        if !(v.is_null() || v == json!(false) || v == json!([]) || v == json!("")) {
            return v;
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Clicks the element `css`, again when the live part was swapped under the click.
async fn click(client: &Client, css: &str) {
    for _ in 0..10 {
        if let Ok(el) = client.find(Locator::Css(css)).await {
            if el.click().await.is_ok() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("cannot click {css}");
}

/// The page's navigation timing: when the response ended, when its DOM was ready, when
/// it loaded (milliseconds since the request), and its paint entries.
const TIMING: &str = "const n = performance.getEntriesByType('navigation')[0];
    const p = performance.getEntriesByType('paint').map(e => [e.name, e.startTime]);
    return { response: n.responseEnd, dom: n.domContentLoadedEventEnd, load: n.loadEventEnd, paint: p }";

/// The names in the members list.
const MEMBERS: &str =
    "return Array.from(document.querySelectorAll('#members tr.member')).map(r => r.dataset.name)";

/// The ids of the items a state lists, as `liveness items --state STATE --json` says.
fn item_ids(url: &str, state: &str) -> Vec<u64> {
    let rows = liveness_json(url, &["items", "--state", state]);
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().unwrap())
        .collect()
}

#[test]
fn sqlite_fleet_in_a_real_browser() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?ns=fleet",
        dir.path().join("fleet.db").display()
    );
    fleet_in_a_real_browser(&url, dir.path());
}

/// The same on a Redis server (the test kit's): a server backend behind the page.
#[test]
fn redis_fleet_in_a_real_browser() {
    let Some(server) = liveness_testkit::redis::RedisServer::shared() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ns = format!("fleet{}", std::process::id());
    fleet_in_a_real_browser(&server.url_with(&format!("ns={ns}")), dir.path());
}

/// A fleet of three workers on `url`, the checker daemon serving its dashboard, and
/// headless Chromium looking at it: the checks of the module's doc. `dir` holds the
/// access token's file.
fn fleet_in_a_real_browser(url: &str, dir: &Path) {
    // One browser and one fleet at a time: two at once on a small machine starve the
    // workers' 1 s leases.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(driver) = liveness_testkit::chromium::ChromeDriver::start() else {
        return;
    };
    let url = url.to_owned();
    // Two dead letters (failed by a member that then left), and work for the fleet.
    let dead = rt().block_on(async {
        let store = liveness::connect(&url).await.unwrap();
        let dead = dead_letters(&store, 2, |i| {
            format!("{{\"order\": {i}, \"poison\": true}}")
        })
        .await;
        for i in 0..5 {
            store
                .enqueue(format!("job {i}").as_bytes(), EnqueueOptions::default())
                .await
                .unwrap();
        }
        dead
    });
    let doomed = Worker::start(&url, "worker-doomed", 3, TTL_MS);
    let _steady = Worker::start(&url, "worker-steady", 1, TTL_MS);
    let _idle = Worker::start(&url, "worker-idle", 0, TTL_MS);

    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let port = liveness_testkit::free_port().unwrap();
    let _daemon = Daemon(
        Command::new(BIN)
            .args(["--store", &url, "check", "--check-every", "200ms", "--http"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--allow-actions")
            .arg("--access-token-file")
            .arg(&token_file)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + PATIENCE;
    while !http_status(port, "/health").is_some_and(|s| s.contains("200")) {
        assert!(
            Instant::now() < deadline,
            "the checker never became healthy"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    rt().block_on(async {
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({ "binary": driver.browser(), "args": driver.chrome_args() }),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&driver.url())
            .await
            .expect("a Chromium session");
        let page = format!("http://127.0.0.1:{port}/");
        let started = Instant::now();
        client.goto(&page).await.unwrap();
        eprintln!("page loaded in {:?}", started.elapsed());
        let timing = eval(&client, TIMING).await;
        eprintln!("navigation timing (ms since the request): {timing}");

        // The live workers are listed; the worker that left is not.
        let names = until(&client, "the members", PATIENCE, MEMBERS).await;
        assert_eq!(
            names,
            json!(["worker-doomed", "worker-idle", "worker-steady"])
        );
        // Mark this document: a reload would lose the mark.
        eval(&client, "window.__notReloaded = true; return true").await;

        // SIGKILL: the worker moves to the deaths list by itself, within ttl + 2 s.
        // (Its token as it is killed: on a loaded machine a worker may have lost its
        // lease and re-joined before, with a death of its own in the list.)
        let members = liveness_json(&url, &["members"]);
        let token = members
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["key"] == "members/worker-doomed")
            .map(|m| m["token"].clone())
            .unwrap();
        let killed_at = Instant::now();
        drop(doomed);
        let requeued = until(
            &client,
            "the killed worker in the deaths list",
            Duration::from_millis(TTL_MS) + Duration::from_secs(2),
            &format!(
                "const r = document.querySelector('#deaths tr.death[data-token=\"{token}\"]');
                 return r && r.dataset.requeued !== '…' ? r.dataset.requeued : null"
            ),
        )
        .await;
        let seen_after = killed_at.elapsed();
        eprintln!("the death was on the page {seen_after:?} after the SIGKILL");
        assert_eq!(eval(&client, "return window.__notReloaded === true").await, json!(true));
        let names = until(
            &client,
            "the killed worker gone from the members",
            Duration::from_secs(3),
            &format!("const n = ({})(); return n.includes('worker-doomed') ? null : n", MEMBERS.replace("return ", "() => ")),
        )
        .await;
        assert_eq!(names, json!(["worker-idle", "worker-steady"]));
        // Its requeued count is what `liveness deaths` says of the same death, and its
        // three items went back exactly once over all its deaths.
        let deaths = liveness_json(&url, &["deaths"]);
        let doomed: Vec<&Value> = deaths
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["key"] == "members/worker-doomed")
            .collect();
        let death = doomed.iter().find(|d| d["token"] == token).unwrap();
        assert_eq!(requeued, json!(death["requeued"].to_string()), "{death}");
        let total: u64 = doomed.iter().map(|d| d["requeued"].as_u64().unwrap_or(0)).sum();
        assert_eq!(total, 3, "{doomed:?}");

        // Without the token: refused, and the page says so; nothing moves.
        let retry = format!("#items button.retry[data-id=\"{}\"]", dead[0]);
        click(&client, &retry).await;
        let said = until(
            &client,
            "the refusal",
            Duration::from_secs(5),
            "const m = document.getElementById('msg'); return m.textContent.includes('refused') ? m.textContent : null",
        )
        .await;
        eprintln!("without the token: {said}");
        assert!(said.as_str().unwrap().contains("no access token"), "{said}");
        assert_eq!(item_ids(&url, "dead-lettered"), dead);

        // With the token: the dead letter is pending again.
        client
            .find(Locator::Id("token"))
            .await
            .unwrap()
            .send_keys(TOKEN)
            .await
            .unwrap();
        click(&client, &retry).await;
        until(
            &client,
            "the retry's answer",
            Duration::from_secs(5),
            "return document.getElementById('msg').textContent.includes('pending again')",
        )
        .await;
        assert!(item_ids(&url, "pending").contains(&dead[0]));
        assert_eq!(item_ids(&url, "dead-lettered"), dead[1..]);
        until(
            &client,
            "the retried item gone from the dead letters",
            Duration::from_secs(3),
            &format!("return !document.querySelector('{retry}')"),
        )
        .await;

        // Discard asks first: declined, nothing moves; accepted, the dead letter is
        // gone. (The page's own confirm is stubbed: a native dialog would block the
        // driver.)
        let discard = format!("#items button.cancel[data-id=\"{}\"]", dead[1]);
        eval(&client, "window.confirm = () => false; return true").await;
        click(&client, &discard).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(item_ids(&url, "dead-lettered"), dead[1..], "declined: kept");
        eval(&client, "window.confirm = () => true; return true").await;
        click(&client, &discard).await;
        until(
            &client,
            "the discard's answer",
            Duration::from_secs(5),
            "return document.getElementById('msg').textContent.includes('discarded')",
        )
        .await;
        assert_eq!(item_ids(&url, "dead-lettered"), dead[2..]);

        // Loaded again, with a warm browser: how soon the page is there.
        client.refresh().await.unwrap();
        let timing = eval(&client, TIMING).await;
        // Printed, not asserted: a timing is a measurement, not a test.
        eprintln!("FIGURES dashboard navigation timing, warm (ms since the request): {timing}");

        // For the README: the page after all that.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // Saved under the target folder, one per backend; for the SQLite fleet,
        // `LIVENESS_SCREENSHOT=docs/dashboard.png` (relative to the workspace)
        // refreshes the README's picture instead.
        let png = client.screenshot().await.unwrap();
        let scheme = url.split(':').next().unwrap_or("store");
        let to = match std::env::var_os("LIVENESS_SCREENSHOT") {
            Some(path) if scheme == "sqlite" => {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
            }
            _ => Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("dashboard-{scheme}.png")),
        };
        std::fs::write(&to, png).unwrap();
        eprintln!("screenshot: {}", to.display());
        client.close().await.unwrap();
    });
}

/// `--allow-actions` without a token (or with a short one) is bad input, exit 2,
/// before anything is bound; without `--http` it is refused by the parser.
#[test]
fn actions_need_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?ns=fleet", dir.path().join("t.db").display());
    let port = liveness_testkit::free_port().unwrap().to_string();
    let run = |extra: &[&str], token: Option<&str>| {
        let mut cmd = Command::new(BIN);
        cmd.args(["--store", &url, "check", "--http", &port])
            .args(extra)
            .env_remove("LIVENESS_DASHBOARD_TOKEN");
        if let Some(token) = token {
            cmd.env("LIVENESS_DASHBOARD_TOKEN", token);
        }
        cmd.output().unwrap()
    };
    let none = run(&["--allow-actions"], None);
    assert_eq!(none.status.code(), Some(2), "{none:?}");
    let err = String::from_utf8_lossy(&none.stderr);
    assert!(err.contains("access token"), "{err}");
    let short = run(&["--allow-actions"], Some("short"));
    assert_eq!(short.status.code(), Some(2), "{short:?}");
    let missing = dir.path().join("no-such-file");
    let unreadable = run(
        &[
            "--allow-actions",
            "--access-token-file",
            missing.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(unreadable.status.code(), Some(2), "{unreadable:?}");
    let no_http = Command::new(BIN)
        .args(["--store", &url, "check", "--allow-actions"])
        .output()
        .unwrap();
    assert_eq!(no_http.status.code(), Some(2), "{no_http:?}");
}
