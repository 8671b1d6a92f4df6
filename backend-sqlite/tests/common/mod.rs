//! Fixtures the SQLite integration tests share: each test file names its own
//! namespace, and each test opens its stores on a file in a fresh temporary directory.
#![allow(dead_code)] // every test file uses only part of it

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use liveness_core::Namespace;
use liveness_sqlite::{SqliteConfig, SqliteStore};
use tempfile::TempDir;

/// The configuration of a store on the file `path`, namespace `ns`.
pub fn config(path: &Path, ns: &str) -> SqliteConfig {
    SqliteConfig::new(path, Namespace::new(ns).unwrap())
}

/// A store on the file `path` (created if new), namespace `ns`.
pub async fn open(path: &Path, ns: &str) -> SqliteStore {
    SqliteStore::connect(config(path, ns)).await.unwrap()
}

/// A fresh temporary directory (removed when dropped) and the path of `file` in it.
pub fn scratch(file: &str) -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file);
    (dir, path)
}

/// A plain connection to the file `path` (created if missing), as an application or
/// another process has it, outside any store.
pub async fn raw_connection(path: &Path) -> sqlx::SqliteConnection {
    use sqlx::Connection;
    let url = format!("sqlite://{}?mode=rwc", path.display());
    sqlx::SqliteConnection::connect(&url).await.unwrap()
}

/// Counts the commits of the store's only connection (SQLite's commit hook).
pub async fn commit_counter(store: &SqliteStore) -> Arc<AtomicU64> {
    let commits = Arc::new(AtomicU64::new(0));
    let mut conn = store.pool().acquire().await.unwrap();
    let mut handle = conn.lock_handle().await.unwrap();
    let seen = commits.clone();
    handle.set_commit_hook(move || {
        seen.fetch_add(1, Ordering::SeqCst);
        true
    });
    commits
}
