//! `members` and `deaths` on a store that serves sessions natively (Redis, from the
//! test kit): members grouped under the session they ride, the one-line-per-session
//! summary, the `session` field, and a session's death counting its members.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{fresh_ns, rt};
use liveness::{Checker, CheckerConfig, HolderId, Key, Name, Space, Ttl};
use serde_json::Value;

mod common;

/// Runs `liveness --store URL ARGS…`; panics unless it exited 0.
fn liveness(url: &str, args: &[&str]) -> Output {
    let out = Command::new(common::BIN)
        .arg("--store")
        .arg(url)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "liveness {args:?}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// What `liveness ARGS…` printed, as text.
fn text(url: &str, args: &[&str]) -> String {
    String::from_utf8(liveness(url, args).stdout).unwrap()
}

/// What `liveness ARGS… --json` printed, parsed.
fn json(url: &str, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    serde_json::from_slice(&liveness(url, &all).stdout).unwrap()
}

/// The lines of `members`' table below its store line, indentation kept.
fn table_lines(out: &str) -> Vec<String> {
    out.lines().skip(1).map(str::to_owned).collect()
}

#[test]
fn redis_members_group_by_session_and_its_death_counts_them() {
    let Some(server) = liveness_testkit::redis::RedisServer::shared() else {
        return;
    };
    let url = server.url_with(&format!("ns={}", fresh_ns("sessions")));
    let rt = rt();
    let store = rt.block_on(liveness::connect(&url)).unwrap();
    assert!(store.capabilities().sessions, "Redis serves sessions");
    let holder = HolderId::new("host-a/4242").unwrap();
    let ttl = Ttl::from_secs(60).unwrap();
    let session_key = Key::new(Space::sessions(), Name::new("p-1").unwrap());
    let session = rt
        .block_on(store.acquire(&session_key, &holder, ttl))
        .unwrap();
    for name in ["w-1", "w-2", "w-3"] {
        let key = Key::member(name).unwrap();
        rt.block_on(store.join_session(&session, &key, &holder))
            .unwrap();
    }
    // A lease of its own, first by name: listed after the session's members.
    rt.block_on(store.acquire(&Key::member("alpha").unwrap(), &holder, ttl))
        .unwrap();

    let out = text(&url, &["members"]);
    let lines = table_lines(&out);
    assert_eq!(lines.len(), 7, "{out}");
    assert!(lines[0].starts_with("  NAME"), "{out}");
    assert!(
        lines[1].starts_with("sessions/p-1: 3 members, ") && lines[1].ends_with("s left"),
        "{out}"
    );
    for (line, name) in lines[2..5].iter().zip(["w-1", "w-2", "w-3"]) {
        assert!(line.starts_with(&format!("  {name} ")), "{out}");
    }
    assert_eq!(lines[5], "own leases: 1 member", "{out}");
    assert!(lines[6].starts_with("  alpha "), "{out}");

    // --flat: the old table, in name order, no session lines.
    let flat = text(&url, &["members", "--flat"]);
    let lines = table_lines(&flat);
    assert_eq!(lines.len(), 5, "{flat}");
    assert!(lines[1].starts_with("alpha "), "{flat}");
    assert!(!flat.contains("sessions/p-1"), "{flat}");

    // --json: name order, each member naming its session.
    let rows = json(&url, &["members"]);
    let sessions: Vec<(&str, &Value)> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), &r["session"]))
        .collect();
    let p1 = Value::from("sessions/p-1");
    assert_eq!(
        sessions,
        [
            ("alpha", &Value::Null),
            ("w-1", &p1),
            ("w-2", &p1),
            ("w-3", &p1)
        ]
    );

    // One line per session.
    let summary = json(&url, &["members", "--sessions"]);
    let one = summary.as_array().unwrap();
    assert_eq!(one.len(), 1, "{summary}");
    assert_eq!(one[0]["key"], "sessions/p-1", "{summary}");
    assert_eq!(one[0]["holder"], "host-a/4242", "{summary}");
    assert_eq!(one[0]["token"], session.token.0, "{summary}");
    assert_eq!(one[0]["members"], 3, "{summary}");
    assert_eq!(one[0]["status"], "live", "{summary}");
    assert!(one[0]["remaining_ms"].as_u64().unwrap() > 0, "{summary}");
    let human = text(&url, &["members", "--sessions"]);
    let lines = table_lines(&human);
    assert!(lines[0].starts_with("SESSION"), "{human}");
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        row[..4],
        [
            "sessions/p-1",
            "host-a/4242",
            &session.token.0.to_string(),
            "3"
        ],
        "{human}"
    );
    assert!(
        human.contains("counted over 4 members of members, 1 with a lease of their own"),
        "{human}"
    );
    // Stopped at the limit: the summary says its counts may be short.
    let short = text(&url, &["members", "--sessions", "--limit", "2"]);
    assert!(short.contains("stopped at --limit 2"), "{short}");

    // The process dies: one death record, which counts its members once swept.
    assert!(rt.block_on(store.release(&session)).unwrap());
    let checker = Checker::new(store.clone(), CheckerConfig::default());
    let until = Instant::now() + Duration::from_secs(30);
    let death = loop {
        rt.block_on(checker.round()).unwrap();
        let deaths = json(&url, &["deaths"]);
        let found = deaths
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["key"] == "sessions/p-1" && d["members"] == 3)
            .cloned();
        if let Some(death) = found {
            assert_eq!(
                deaths.as_array().unwrap().len(),
                1,
                "no record per member: {deaths}"
            );
            break death;
        }
        assert!(
            Instant::now() < until,
            "no member count on the death: {deaths}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(death["cause"], "released", "{death}");
    let out = text(&url, &["deaths"]);
    let lines = table_lines(&out);
    assert!(
        lines[0].contains("CAUSE     MEMBERS  REQUEUED  DEAD-LETTERED"),
        "{out}"
    );
    assert!(lines[1].contains("released  3        0         0"), "{out}");
    // Its members are gone with it: the table is flat again.
    let left = text(&url, &["members"]);
    assert_eq!(table_lines(&left).len(), 2, "{left}");
    assert!(!left.contains("own leases"), "{left}");
}
