//! The durability check at connect: the server's `fsync`,
//! `synchronous_commit` and `full_page_writes` as this session sees them (from
//! `pg_settings`, which every role may read), logged, and refused when a setting
//! voids the guarantees unless the URL says `durability=relaxed`
//! ([`liveness_core::durability`]).
//!
//! - `fsync=off`: a crash of the server's machine can lose committed transactions,
//!   or corrupt the cluster; the token sequence can go back.
//! - `synchronous_commit=off`: a commit is acknowledged before its WAL reaches disk; a
//!   crash of the server loses the last acknowledged commits (a granted lease, a
//!   claimed item, a token). `local`, `remote_write`, `on` and `remote_apply` all
//!   flush the local WAL first and are accepted.
//! - `full_page_writes=off` is logged as a warning but accepted: it is only safe on
//!   storage that cannot tear pages (ZFS, some battery-backed controllers), which the
//!   check cannot see.
//! - Streaming standbys that a commit does not wait for (`synchronous_standby_names`
//!   empty, or `synchronous_commit=local`) are logged as a warning but accepted: a
//!   failover to one loses the last acknowledged commits (a release, a completion, a
//!   claim: a lease or an item comes back). Tokens still never go back: they carry the
//!   server's timeline, which a promotion moves up.

use liveness_core::durability::{judge, Durability, UnsafeSetting};
use liveness_core::Result;
use sqlx::PgPool;

use crate::BACKEND;

/// Reads the settings through `pool` and judges them ([`judge`]).
pub(crate) async fn check(pool: &PgPool, durability: Durability) -> Result<()> {
    let rows: Vec<(String, String)> = match sqlx::query_as(
        "SELECT name, setting FROM pg_settings \
         WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', \
                        'synchronous_standby_names')",
    )
    .fetch_all(pool)
    .await
    {
        Ok(rows) => rows,
        Err(e) => {
            tracing::warn!(
                error = %e,
                "postgres: cannot read pg_settings; cannot check that the server \
                 flushes every commit (fsync on, synchronous_commit not off): make sure \
                 it does"
            );
            return Ok(());
        }
    };
    let get = |name: &str| {
        rows.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    };
    tracing::info!(
        fsync = get("fsync"),
        synchronous_commit = get("synchronous_commit"),
        full_page_writes = get("full_page_writes"),
        "postgres durability settings"
    );
    if get("full_page_writes") == "off" {
        tracing::warn!(
            "postgres: full_page_writes is off: safe only on storage that cannot tear \
             pages; otherwise a crash can corrupt the store"
        );
    }
    // Every role may count the rows of pg_stat_replication (their details are for
    // privileged roles only); a server that does not say is not warned about.
    let standbys: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_replication")
        .fetch_one(pool)
        .await
        .unwrap_or(0);
    if let Some(why) = asynchronous_standbys(&rows, standbys) {
        tracing::warn!(
            standbys,
            synchronous_standby_names = get("synchronous_standby_names"),
            synchronous_commit = get("synchronous_commit"),
            "postgres: {why}"
        );
    }
    judge(BACKEND, durability, unsafe_settings(&rows))
}

/// Why a failover may lose acknowledged commits, when the server streams to
/// `standbys` standbys but a commit waits for none of them.
pub(crate) fn asynchronous_standbys(
    rows: &[(String, String)],
    standbys: i64,
) -> Option<&'static str> {
    let get = |name: &str| {
        rows.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.trim())
            .unwrap_or("")
    };
    if standbys == 0 {
        return None;
    }
    if get("synchronous_standby_names").is_empty() {
        return Some(
            "the server streams to standbys asynchronously (synchronous_standby_names is \
             empty): a failover to one loses the last acknowledged commits (a release, a \
             completion, a claim); set synchronous_standby_names for a standby you fail \
             over to",
        );
    }
    if matches!(get("synchronous_commit"), "local" | "off") {
        return Some(
            "commits do not wait for the synchronous standby (synchronous_commit is local \
             or off): a failover to it loses the last acknowledged commits; set \
             synchronous_commit = on",
        );
    }
    None
}

/// The settings in `rows` (name, value) that void the guarantees.
pub(crate) fn unsafe_settings(rows: &[(String, String)]) -> Vec<UnsafeSetting> {
    let mut out = Vec::new();
    for (name, value) in rows {
        match (name.as_str(), value.as_str()) {
            ("fsync", "off") => out.push(UnsafeSetting::new(
                "fsync",
                value.clone(),
                "a crash of the server's machine can lose committed transactions \
                 (leases, items, tokens) or corrupt the database",
                "`fsync = on` in postgresql.conf (the default), then reload",
            )),
            ("synchronous_commit", "off") => out.push(UnsafeSetting::new(
                "synchronous_commit",
                value.clone(),
                "commits are acknowledged before they are on disk: a server crash \
                 loses the last ones, and a token can be handed out twice",
                "`synchronous_commit = on` (the default) for the server, the \
                 database or the role this store connects as",
            )),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(fsync: &str, commit: &str) -> Vec<(String, String)> {
        vec![
            ("fsync".into(), fsync.into()),
            ("full_page_writes".into(), "off".into()),
            ("synchronous_commit".into(), commit.into()),
        ]
    }

    #[test]
    fn standbys_a_commit_does_not_wait_for_are_warned_about() {
        let rows = |names: &str, commit: &str| {
            vec![
                ("synchronous_standby_names".to_owned(), names.to_owned()),
                ("synchronous_commit".to_owned(), commit.to_owned()),
            ]
        };
        assert!(asynchronous_standbys(&rows("", "on"), 0).is_none());
        assert!(asynchronous_standbys(&rows("*", "on"), 1).is_none());
        assert!(asynchronous_standbys(&rows("*", "remote_apply"), 1).is_none());
        assert!(asynchronous_standbys(&rows("", "on"), 1).is_some());
        assert!(asynchronous_standbys(&rows("*", "local"), 2).is_some());
    }

    #[test]
    fn fsync_off_and_synchronous_commit_off_are_unsafe() {
        for commit in ["on", "local", "remote_write", "remote_apply"] {
            assert!(unsafe_settings(&rows("on", commit)).is_empty(), "{commit}");
        }
        let names = |s: Vec<UnsafeSetting>| s.iter().map(|u| u.setting).collect::<Vec<_>>();
        assert_eq!(
            names(unsafe_settings(&rows("off", "off"))),
            ["fsync", "synchronous_commit"]
        );
        assert_eq!(
            names(unsafe_settings(&rows("on", "off"))),
            ["synchronous_commit"]
        );
    }
}
