//! The `liveness` binary pointed at the wrong place, or given a bad flag: reading
//! commands never answer "nobody is here" for a store that is not there, never create
//! or change it, and every refusal is exit 2 with one line naming the thing.

use std::path::Path;
use std::process::{Command, Output};

use common::{bounded, fresh_ns, rt, BIN};
use liveness_testkit::files_in;

mod common;

/// The reading commands: none of them may create or change a store.
const READERS: &[&[&str]] = &[
    &["members"],
    &["deaths"],
    &["items"],
    &["items", "--state", "dead-lettered"],
    &["watch"],
];

/// Runs `liveness ARGS…` in `dir`, killing it (and failing) when it has not ended
/// within 30 s.
fn run_in(dir: &Path, args: &[&str]) -> Output {
    bounded(
        Command::new(BIN)
            .args(args)
            .current_dir(dir)
            .env_remove("LIVENESS_STORE"),
    )
}

/// Runs `liveness --store URL ARGS…` in the working directory.
fn liveness(url: &str, args: &[&str]) -> Output {
    let mut all = vec!["--store", url];
    all.extend_from_slice(args);
    run_in(Path::new("."), &all)
}

/// Asserts `out` is a refusal: exit 2, nothing on stdout, and on stderr one line of
/// reason, `liveness: …`, the last (a store's own warnings, logged on connect, may come
/// before it), which contains every one of `says`. Returns that line.
fn assert_refused(out: &Output, says: &[&str]) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let reasons = err.lines().filter(|l| l.starts_with("liveness: ")).count();
    assert_eq!(reasons, 1, "{err}");
    let reason = err.trim_end().lines().last().unwrap_or_default().to_owned();
    assert!(reason.starts_with("liveness: "), "{err}");
    for s in says {
        assert!(reason.contains(s), "{s:?} not in: {reason}");
    }
    reason
}

/// Puts an item in the store at `url` (creating it), so that the namespace is there.
fn populate(url: &str) {
    rt().block_on(async {
        let store = liveness::connect(url).await.unwrap();
        store.enqueue(b"x", Default::default()).await.unwrap();
    });
}

/// Whether `url` names a store that is there, as the reading commands judge it.
fn is_there(url: &str) -> bool {
    rt().block_on(async { liveness::connect_existing(url).await.is_ok() })
}

#[test]
fn a_mistyped_sqlite_file_exits_2_naming_it_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?ns=ops", dir.path().join("nope.db").display());
    for args in READERS {
        let out = liveness(&url, args);
        assert_refused(&out, &["nope.db"]);
        assert!(files_in(dir.path()).is_empty(), "{args:?}");
    }
    // Writing commands still create the store they are pointed at.
    let out = liveness(&url, &["retry", "--all-dead-letters"]);
    assert!(out.status.success(), "{out:?}");
    assert!(files_in(dir.path()).contains(&"nope.db".to_owned()));
}

#[test]
fn a_wrong_or_missing_namespace_exits_2_naming_the_ones_held() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ops.db");
    populate(&format!("sqlite://{}?ns=ops", file.display()));
    for (url, ns) in [
        (format!("sqlite://{}?ns=opz", file.display()), "opz"),
        (format!("sqlite://{}", file.display()), "default"),
    ] {
        for args in READERS {
            let out = liveness(&url, args);
            assert_refused(&out, &[&format!("ns={ns}"), "ops.db", "it holds: ops"]);
        }
        assert!(!is_there(&url), "{url} was created by looking");
    }
}

#[test]
fn an_application_database_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("app.db");
    // An application's database: a table of its own where `sqlite3` is at hand, else
    // an empty database (a file of zero bytes).
    let made = Command::new("sqlite3")
        .arg(&file)
        .arg("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);")
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        std::fs::write(&file, b"").unwrap();
    }
    let before = std::fs::read(&file).unwrap();
    let url = format!("sqlite://{}?ns=app", file.display());
    for args in READERS {
        let out = liveness(&url, args);
        assert_refused(&out, &["app.db", "no liveness tables"]);
    }
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "the file was changed"
    );
    assert_eq!(files_in(dir.path()), ["app.db"]);
}

#[test]
fn every_table_names_its_store_and_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?ns=ops", dir.path().join("ops.db").display());
    populate(&url);
    for args in [
        &["members"][..],
        &["deaths"],
        &["items"],
        &["items", "--state", "pending"],
    ] {
        let out = liveness(&url, args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let first = text.lines().next().unwrap_or_default();
        assert!(
            first.contains(&url) && first.contains("namespace ops"),
            "{args:?}: {text}"
        );
        // JSON stays one document, without the header.
        let mut json = args.to_vec();
        json.push("--json");
        let out = liveness(&url, &json);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap();
    }
}

#[test]
fn a_file_that_cannot_be_opened_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let absolute = dir.path().join("no_such_folder").join("x.db");
    let out = liveness(
        &format!("sqlite://{}?ns=a", absolute.display()),
        &["retry", "--all-dead-letters"],
    );
    assert_refused(&out, &[&absolute.display().to_string(), "folder"]);
    // Two slashes: a path relative to the working directory, which the message names.
    let out = run_in(
        dir.path(),
        &[
            "--store",
            "sqlite://no_such_folder/x.db",
            "retry",
            "--all-dead-letters",
        ],
    );
    let cwd = std::fs::canonicalize(dir.path()).unwrap();
    assert_refused(
        &out,
        &[
            "no_such_folder/x.db",
            &format!("relative to {}", cwd.display()),
        ],
    );
    assert!(files_in(dir.path()).is_empty());
}

#[test]
fn a_limit_or_since_out_of_range_exits_2_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?ns=ops", dir.path().join("ops.db").display());
    for (args, flag) in [
        (&["members", "--limit", "0"][..], "--limit"),
        (&["members", "--limit", "-1"][..], "--limit"),
        (&["deaths", "--limit", "0"][..], "--limit"),
        (&["items", "--limit=-1"][..], "--limit"),
        (
            &["items", "--state", "pending", "--limit", "0"][..],
            "--limit",
        ),
        (&["deaths", "--since", "-5m"][..], "--since"),
    ] {
        let out = liveness(&url, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(!err.contains("unexpected argument"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    assert!(files_in(dir.path()).is_empty());
}

#[test]
fn store_goes_anywhere_like_json() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?ns=ops", dir.path().join("ops.db").display());
    populate(&url);
    let out = run_in(Path::new("."), &["items", "--store", &url, "--json"]);
    assert!(out.status.success(), "{out:?}");
    let counts: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(counts["pending"], 1, "{counts}");
    // And without any store: one line saying how to give one.
    let out = run_in(Path::new("."), &["members"]);
    assert_refused(&out, &["--store", "LIVENESS_STORE"]);
}

#[test]
fn check_refuses_json() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?ns=ops", dir.path().join("ops.db").display());
    let out = liveness(&url, &["check", "--json"]);
    assert_refused(&out, &["--json", "check"]);
    assert!(files_in(dir.path()).is_empty());
}

#[test]
fn a_compiled_out_backend_names_its_cargo_feature() {
    let out = liveness("fdb:///etc/foundationdb/fdb.cluster", &["members"]);
    assert_refused(&out, &["cargo feature `fdb`"]);
}

/// On a server store: a namespace that is not there is refused by every reading
/// command (naming it, and `held`, a namespace the store lists) and is still not there
/// afterwards; one that is there is read.
fn server_namespace_is_checked(url_of: impl Fn(&str) -> String, lists: bool) {
    let held = fresh_ns("held");
    populate(&url_of(&held));
    let missing = url_of(&fresh_ns("nope"));
    for args in READERS {
        let out = liveness(&missing, args);
        let ns = missing.rsplit("ns=").next().unwrap();
        let mut says = vec![format!("ns={ns}")];
        if lists {
            says.push(held.clone());
        }
        let says: Vec<&str> = says.iter().map(String::as_str).collect();
        assert_refused(&out, &says);
    }
    assert!(!is_there(&missing), "{missing} was created by looking");
    let out = liveness(&url_of(&held), &["items", "--json"]);
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn redis_a_missing_namespace_exits_2() {
    let Some(server) = liveness_testkit::redis::RedisServer::shared() else {
        return;
    };
    server_namespace_is_checked(|ns| server.url_with(&format!("ns={ns}")), true);
}

#[test]
fn postgres_a_missing_namespace_exits_2() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    server_namespace_is_checked(|ns| server.url_with(&format!("ns={ns}")), true);
}

#[test]
fn etcd_a_missing_namespace_exits_2() {
    let Some(server) = liveness_testkit::etcd::shared() else {
        return;
    };
    server_namespace_is_checked(|ns| server.url_with(&format!("ns={ns}")), false);
}
