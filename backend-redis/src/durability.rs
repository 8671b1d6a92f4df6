//! The durability check at connect: what the server says of its persistence and
//! replication, logged, and refused when something voids the guarantees unless the URL
//! says `durability=relaxed` ([`liveness_core::durability`]).
//!
//! `connect` asks the node that serves the namespace (core.rs, [`Report`]):
//! `CONFIG GET appendonly appendfsync maxmemory-policy` and
//! `INFO persistence memory replication`. What is refused, and why (measured in
//! restart and failover runs against real servers, see `docs/measurements/redis.md`):
//!
//! - `appendonly no`: a restart loses every lease, every item and the token counter
//!   (about 700 of 1,000 items gone in one run; tokens restarted at 1).
//! - `appendfsync` other than `always`: with `everysec`, one token was handed out twice
//!   across a `kill -9` (Redis may postpone the AOF write while a background fsync is
//!   slow, and acknowledges the command all the same); `no` leaves it to the kernel.
//! - `maxmemory-policy` other than `noeviction`: under memory pressure Redis deletes
//!   keys (lease records, items, the token counter) to make room; with `noeviction`
//!   writes fail instead (`OOM`, a permanent error) and nothing is lost.
//! - replicas (`INFO replication`: `connected_slaves` above 0, or `role:slave`) without
//!   `wait=N`: replication is asynchronous, so a failover can promote a replica that
//!   lacks the last `INCR` of the token counter; tokens go back, a token is handed out
//!   twice, and an old holder renews a new holder's lease under the same token.
//!
//! `CONFIG` may be renamed away or denied by an ACL (managed services do both). The
//! check then judges what `INFO` shows (`aof_enabled`, `maxmemory_policy`, the
//! replication) and says what it could not check: `appendfsync` is not in `INFO`. The
//! warning is logged at connect and a refusal's message repeats it.

use std::collections::HashMap;

use liveness_core::durability::{judge, Durability, UnsafeSetting};
use liveness_core::Result;

use crate::BACKEND;

/// What the server answered at connect; each part is the reply, or why it could not
/// be read (the server's error text).
#[derive(Debug)]
pub(crate) struct Report {
    /// `CONFIG GET appendonly appendfsync maxmemory-policy`.
    pub(crate) config: std::result::Result<HashMap<String, String>, String>,
    /// The `field:value` lines of `INFO persistence memory replication`.
    pub(crate) info: std::result::Result<HashMap<String, String>, String>,
}

/// The `field:value` lines of an `INFO` reply (section headers and blank lines
/// skipped).
pub(crate) fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// Judges `report` ([`judge`]): logs what was found and what could not be checked,
/// and fails under [`Durability::Strict`] when a setting voids the guarantees.
/// `wait` is the URL's `wait=N`.
pub(crate) fn check(report: &Report, durability: Durability, wait: Option<u32>) -> Result<()> {
    let (mut found, unchecked) = findings(report, wait);
    let info = report.info.as_ref().ok();
    let field = |name: &str| info.and_then(|i| i.get(name)).map_or("?", String::as_str);
    // What the server says of persistence and eviction: CONFIG GET's answer, or the
    // matching INFO fields where CONFIG is refused.
    let (source, settings) = match &report.config {
        Ok(config) => (
            "CONFIG GET",
            ["appendonly", "appendfsync", "maxmemory-policy"]
                .map(|name| (name, config.get(name).map_or("?", String::as_str))),
        ),
        Err(_) => (
            "INFO: CONFIG GET is refused",
            ["aof_enabled", "aof_last_write_status", "maxmemory_policy"]
                .map(|name| (name, field(name))),
        ),
    };
    let settings = settings
        .map(|(name, value)| format!("{name}={value}"))
        .join(" ");
    tracing::info!(
        settings = %settings,
        role = field("role"),
        connected_replicas = field("connected_slaves"),
        wait = ?wait,
        source,
        "redis durability settings"
    );
    if !unchecked.is_empty() {
        let note = not_checked(report, &unchecked);
        tracing::warn!(
            "redis: {note}: make sure the server has appendonly yes, appendfsync always \
             and maxmemory-policy noeviction, and no replica a failover could promote \
             without wait=N"
        );
        for setting in &mut found {
            setting.found = format!("{}; {note}", setting.found);
        }
    }
    judge(BACKEND, durability, found)
}

/// "could not check X, Y (why)": what `report` left unjudged.
fn not_checked(report: &Report, unchecked: &[&str]) -> String {
    let mut why = Vec::new();
    if let Err(e) = &report.config {
        why.push(format!(
            "CONFIG GET is refused here ({}) and INFO does not show appendfsync",
            e.trim()
        ));
    }
    if let Err(e) = &report.info {
        why.push(format!("INFO is refused here ({})", e.trim()));
    }
    format!(
        "could not check {} ({})",
        unchecked.join(", "),
        why.join("; ")
    )
}

/// The settings in `report` that void the guarantees, and the names of the ones it
/// could not check.
pub(crate) fn findings(
    report: &Report,
    wait: Option<u32>,
) -> (Vec<UnsafeSetting>, Vec<&'static str>) {
    let mut unchecked = Vec::new();
    let info = report.info.as_ref().ok();
    let mut out = match (&report.config, info) {
        (Ok(config), _) => unsafe_settings(config),
        (Err(_), Some(info)) => {
            unchecked.push("appendfsync");
            unsafe_info(info)
        }
        (Err(_), None) => {
            unchecked.extend(["appendonly", "appendfsync", "maxmemory-policy"]);
            Vec::new()
        }
    };
    match info {
        Some(info) => out.extend(replication(info, wait)),
        None => unchecked.push("replication"),
    }
    (out, unchecked)
}

/// The settings in `found` (a `CONFIG GET` reply) that void the guarantees.
pub(crate) fn unsafe_settings(found: &HashMap<String, String>) -> Vec<UnsafeSetting> {
    let get = |name: &str| found.get(name).map(|v| v.to_ascii_lowercase());
    let mut out = Vec::new();
    if let Some(v) = get("appendonly").filter(|v| v != "yes") {
        out.push(UnsafeSetting::new(
            "appendonly",
            v,
            APPENDONLY_WHY,
            "`CONFIG SET appendonly yes` and `appendonly yes` in redis.conf, \
             with `appendfsync always`",
        ));
    }
    if let Some(v) = get("appendfsync").filter(|v| v != "always") {
        out.push(UnsafeSetting::new(
            "appendfsync",
            v,
            "a write Redis acknowledged can be missing after a crash, and a token \
             can be handed out twice (seen with everysec across a kill -9)",
            "`appendfsync always` (CONFIG SET and redis.conf)",
        ));
    }
    if let Some(v) = get("maxmemory-policy").filter(|v| v != "noeviction") {
        out.push(eviction(v));
    }
    out
}

/// The settings in `info` (`INFO persistence memory` fields) that void the
/// guarantees, for a server that refuses `CONFIG GET`.
fn unsafe_info(info: &HashMap<String, String>) -> Vec<UnsafeSetting> {
    let mut out = Vec::new();
    if let Some(v) = info.get("aof_enabled").filter(|v| v.as_str() != "1") {
        out.push(UnsafeSetting::new(
            "appendonly",
            format!("no (INFO persistence: aof_enabled:{v})"),
            APPENDONLY_WHY,
            "`appendonly yes` with `appendfsync always` in the server's \
             configuration (on a managed service, its persistence setting)",
        ));
    }
    if let Some(v) = info
        .get("maxmemory_policy")
        .map(|v| v.to_ascii_lowercase())
        .filter(|v| v != "noeviction")
    {
        out.push(eviction(format!("{v} (INFO memory: maxmemory_policy)")));
    }
    out
}

/// What `appendonly no` breaks.
const APPENDONLY_WHY: &str = "a restart loses every lease, every item and the token \
                              counter (tokens start again at 1)";

/// An eviction policy other than `noeviction`, as found.
fn eviction(found: String) -> UnsafeSetting {
    UnsafeSetting::new(
        "maxmemory-policy",
        found,
        "under memory pressure Redis evicts keys: lease records, items or the \
         token counter",
        "`maxmemory-policy noeviction` (CONFIG SET and redis.conf)",
    )
}

/// A server with replicas (or itself a replica), from its `INFO replication`
/// fields, unless the URL's `wait=N` makes every handed-out token reach N replicas
/// first (then a warning when fewer are connected now).
fn replication(info: &HashMap<String, String>, wait: Option<u32>) -> Option<UnsafeSetting> {
    let role = info.get("role").map_or("", String::as_str);
    let replicas: u32 = info
        .get("connected_slaves")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let found = match role {
        "slave" => "role:slave (this server is a replica)".to_owned(),
        _ if replicas > 0 => format!("role:{role}, connected_slaves:{replicas}"),
        _ => return None,
    };
    match wait {
        None => Some(UnsafeSetting::new(
            "replication",
            found,
            "replication is asynchronous: a failover can promote a replica that \
             lacks the last writes, the token counter goes back, a token is handed \
             out twice and an old holder renews a new holder's lease under the \
             same token",
            "add `wait=N` to the URL (N replicas must acknowledge every acquire \
             before it answers; fewer make it fail with Unavailable)",
        )),
        Some(n) => {
            if role != "slave" && replicas < n {
                tracing::warn!(
                    wait = n,
                    connected_replicas = replicas,
                    "redis: wait={n} but {replicas} replica(s) connected: acquires fail \
                     with Unavailable until {n} acknowledge"
                );
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(aof: &str, fsync: &str, policy: &str) -> HashMap<String, String> {
        [
            ("appendonly", aof),
            ("appendfsync", fsync),
            ("maxmemory-policy", policy),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    fn names(s: &[UnsafeSetting]) -> Vec<&'static str> {
        s.iter().map(|u| u.setting).collect()
    }

    #[test]
    fn only_aof_always_and_noeviction_are_safe() {
        assert!(unsafe_settings(&settings("yes", "always", "noeviction")).is_empty());
        assert_eq!(
            names(&unsafe_settings(&settings("no", "everysec", "allkeys-lru"))),
            ["appendonly", "appendfsync", "maxmemory-policy"]
        );
        assert_eq!(
            names(&unsafe_settings(&settings("yes", "everysec", "noeviction"))),
            ["appendfsync"]
        );
        assert_eq!(
            names(&unsafe_settings(&settings("yes", "always", "volatile-lru"))),
            ["maxmemory-policy"]
        );
    }

    const INFO: &str = "# Persistence\r\nloading:0\r\naof_enabled:0\r\n\r\n# Memory\r\n\
                        maxmemory_policy:noeviction\r\n\r\n# Replication\r\nrole:master\r\n\
                        connected_slaves:0\r\n";

    fn report(config: Option<HashMap<String, String>>, info: &str) -> Report {
        Report {
            config: config.ok_or_else(|| "ERR unknown command 'CONFIG'".to_owned()),
            info: Ok(parse_info(info)),
        }
    }

    #[test]
    fn without_config_info_judges_aof_and_eviction_and_names_appendfsync_unchecked() {
        let (found, unchecked) = findings(&report(None, INFO), None);
        assert_eq!(names(&found), ["appendonly"]);
        assert!(found[0].found.contains("aof_enabled:0"), "{:?}", found[0]);
        assert_eq!(unchecked, ["appendfsync"]);
        let on = INFO
            .replace("aof_enabled:0", "aof_enabled:1")
            .replace("noeviction", "allkeys-lru");
        let (found, unchecked) = findings(&report(None, &on), None);
        assert_eq!(names(&found), ["maxmemory-policy"]);
        assert_eq!(unchecked, ["appendfsync"]);
        let err = check(&report(None, &on), Durability::Strict, None).unwrap_err();
        assert!(
            err.to_string().contains("could not check appendfsync"),
            "{err}"
        );
        let nothing = Report {
            config: Err("NOPERM".into()),
            info: Err("NOPERM".into()),
        };
        let (found, unchecked) = findings(&nothing, None);
        assert!(found.is_empty());
        assert_eq!(
            unchecked,
            [
                "appendonly",
                "appendfsync",
                "maxmemory-policy",
                "replication"
            ]
        );
        assert!(check(&nothing, Durability::Strict, None).is_ok());
    }

    #[test]
    fn replicas_are_refused_without_wait() {
        let safe = Some(settings("yes", "always", "noeviction"));
        let primary = INFO.replace("connected_slaves:0", "connected_slaves:1");
        let (found, _) = findings(&report(safe.clone(), &primary), None);
        assert_eq!(names(&found), ["replication"]);
        assert!(found[0].fix.contains("wait=N"));
        let replica = INFO.replace("role:master", "role:slave");
        assert_eq!(
            names(&findings(&report(safe.clone(), &replica), None).0),
            ["replication"]
        );
        assert!(findings(&report(safe.clone(), &primary), Some(1))
            .0
            .is_empty());
        assert!(findings(&report(safe, INFO), None).0.is_empty());
    }
}
