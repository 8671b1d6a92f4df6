//! Opening existing stores only ([`SqliteConfig::with_existing_only`]): a missing file,
//! a database without the liveness tables, or a namespace the file does not hold is
//! refused as bad input, and nothing is created or changed; a store that is there opens
//! as usual. And a file that cannot be opened at all is bad input naming its path.

use liveness_conformance::fixtures::acquire_member;
use liveness_core::{Error, InputProblem, LeaseStore, Ttl};
use liveness_sqlite::SqliteStore;
use liveness_testkit::files_in;
use sqlx::Row;

mod common;

const NS: &str = "existing_test";

/// Asserts `err` is bad input about `what`, its message containing every one of `says`.
fn assert_invalid(err: &Error, what: &str, says: &[&str]) {
    match err {
        Error::InvalidInput {
            what: got,
            problem: InputProblem::BadValue { .. },
        } => assert_eq!(*got, what, "{err}"),
        other => panic!("expected InvalidInput about {what}, got {other:?}"),
    }
    for s in says {
        assert!(err.to_string().contains(s), "{s:?} not in: {err}");
    }
}

#[tokio::test]
async fn a_missing_file_is_refused_and_not_created() {
    let (dir, path) = common::scratch("nope.db");
    let err = SqliteStore::connect(common::config(&path, NS).with_existing_only(true))
        .await
        .unwrap_err();
    assert_invalid(&err, "path", &["nope.db", "existing"]);
    assert!(
        files_in(dir.path()).is_empty(),
        "{:?}",
        files_in(dir.path())
    );
}

#[tokio::test]
async fn an_application_database_is_refused_and_left_unchanged() {
    let (_dir, path) = common::scratch("app.db");
    let mut app = common::raw_connection(&path).await;
    sqlx::query("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        .execute(&mut app)
        .await
        .unwrap();
    let err = SqliteStore::connect(common::config(&path, NS).with_existing_only(true))
        .await
        .unwrap_err();
    assert_invalid(&err, "path", &["app.db", "no liveness tables"]);
    let tables: Vec<String> = sqlx::query("SELECT name FROM sqlite_master WHERE type = 'table'")
        .fetch_all(&mut app)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(tables, ["users"]);
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut app)
        .await
        .unwrap();
    assert_eq!(mode, "delete", "the journal mode was changed");
}

#[tokio::test]
async fn a_missing_namespace_is_refused_naming_the_ones_held() {
    let (_dir, path) = common::scratch("ops.db");
    let store = common::open(&path, "jobs").await;
    acquire_member(&store, "w", "h", Ttl::from_secs(60).unwrap()).await;
    store.close().await;

    let err = SqliteStore::connect(common::config(&path, "nope").with_existing_only(true))
        .await
        .unwrap_err();
    assert_invalid(&err, "namespace", &["ns=nope", "ops.db", "jobs"]);
    // Nothing was written for it.
    let again = common::open(&path, "jobs").await;
    let held: Vec<String> = sqlx::query_scalar("SELECT ns FROM liveness_counters")
        .fetch_all(again.pool())
        .await
        .unwrap();
    assert_eq!(held, ["jobs"]);
}

#[tokio::test]
async fn a_store_that_is_there_opens() {
    let (_dir, path) = common::scratch("ops.db");
    let store = common::open(&path, NS).await;
    let lease = acquire_member(&store, "w", "h", Ttl::from_secs(60).unwrap()).await;
    store.close().await;

    let reader = SqliteStore::connect(common::config(&path, NS).with_existing_only(true))
        .await
        .unwrap();
    assert_eq!(
        reader.inspect(&lease.key).await.unwrap().unwrap().token,
        lease.token
    );
}

#[tokio::test]
async fn a_file_that_cannot_be_opened_names_its_path() {
    let (dir, _) = common::scratch("x.db");
    let path = dir.path().join("no_such_folder").join("x.db");
    let err = SqliteStore::connect(common::config(&path, NS))
        .await
        .unwrap_err();
    assert_invalid(&err, "path", &["no_such_folder/x.db", "folder"]);

    // A relative path says what it is relative to.
    let relative = std::path::Path::new("no_such_folder_here/x.db");
    let err = SqliteStore::connect(common::config(relative, NS))
        .await
        .unwrap_err();
    let cwd = std::env::current_dir().unwrap();
    assert_invalid(
        &err,
        "path",
        &[
            "no_such_folder_here/x.db",
            &format!("relative to {}", cwd.display()),
        ],
    );
}
