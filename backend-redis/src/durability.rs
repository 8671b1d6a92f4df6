//! The durability check at connect: `CONFIG GET appendonly
//! appendfsync maxmemory-policy`, logged, and refused when a setting voids the
//! guarantees unless the URL says `durability=relaxed`
//! ([`liveness_core::durability`]).
//!
//! What is refused, and why (measured in restart runs against a real server, see
//! `docs/measurements/redis.md`):
//!
//! - `appendonly no`: a restart loses every lease, every item and the token counter
//!   (about 700 of 1,000 items gone in one run; tokens restarted at 1).
//! - `appendfsync` other than `always`: with `everysec`, one token was handed out twice
//!   across a `kill -9` (Redis may postpone the AOF write while a background fsync is
//!   slow, and acknowledges the command all the same); `no` leaves it to the kernel.
//! - `maxmemory-policy` other than `noeviction`: under memory pressure Redis deletes
//!   keys (lease records, items, the token counter) to make room; with `noeviction`
//!   writes fail instead (`OOM`, a permanent error) and nothing is lost.
//!
//! `CONFIG` may be renamed away or denied by an ACL (managed services do both): the
//! check then logs a warning and the connection goes on; the operator answers for the
//! settings.

use std::collections::HashMap;

use liveness_core::durability::{judge, Durability, UnsafeSetting};
use liveness_core::Result;
use redis::aio::ConnectionLike;

use crate::BACKEND;

/// Reads the settings through `conn` and judges them ([`judge`]).
pub(crate) async fn check(conn: &mut impl ConnectionLike, durability: Durability) -> Result<()> {
    let found: HashMap<String, String> = match redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .arg("appendfsync")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await
    {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(
                error = %e,
                "redis: CONFIG GET is not allowed here; cannot check that the server \
                 persists every write (appendonly yes, appendfsync always, \
                 maxmemory-policy noeviction): make sure it does"
            );
            return Ok(());
        }
    };
    let get = |name: &str| found.get(name).map(String::as_str).unwrap_or("");
    tracing::info!(
        appendonly = get("appendonly"),
        appendfsync = get("appendfsync"),
        maxmemory_policy = get("maxmemory-policy"),
        "redis durability settings"
    );
    judge(BACKEND, durability, unsafe_settings(&found))
}

/// The settings in `found` that void the guarantees.
pub(crate) fn unsafe_settings(found: &HashMap<String, String>) -> Vec<UnsafeSetting> {
    let get = |name: &str| found.get(name).map(|v| v.to_ascii_lowercase());
    let mut out = Vec::new();
    if let Some(v) = get("appendonly").filter(|v| v != "yes") {
        out.push(UnsafeSetting {
            setting: "appendonly",
            found: v,
            why: "a restart loses every lease, every item and the token counter \
                  (tokens start again at 1)",
            fix: "`CONFIG SET appendonly yes` and `appendonly yes` in redis.conf, \
                  with `appendfsync always`",
        });
    }
    if let Some(v) = get("appendfsync").filter(|v| v != "always") {
        out.push(UnsafeSetting {
            setting: "appendfsync",
            found: v,
            why: "a write Redis acknowledged can be missing after a crash, and a token \
                  can be handed out twice (seen with everysec across a kill -9)",
            fix: "`appendfsync always` (CONFIG SET and redis.conf)",
        });
    }
    if let Some(v) = get("maxmemory-policy").filter(|v| v != "noeviction") {
        out.push(UnsafeSetting {
            setting: "maxmemory-policy",
            found: v,
            why: "under memory pressure Redis evicts keys: lease records, items or the \
                  token counter",
            fix: "`maxmemory-policy noeviction` (CONFIG SET and redis.conf)",
        });
    }
    out
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

    #[test]
    fn only_aof_always_and_noeviction_are_safe() {
        assert!(unsafe_settings(&settings("yes", "always", "noeviction")).is_empty());
        let names = |s: Vec<UnsafeSetting>| s.iter().map(|u| u.setting).collect::<Vec<_>>();
        assert_eq!(
            names(unsafe_settings(&settings("no", "everysec", "allkeys-lru"))),
            ["appendonly", "appendfsync", "maxmemory-policy"]
        );
        assert_eq!(
            names(unsafe_settings(&settings("yes", "everysec", "noeviction"))),
            ["appendfsync"]
        );
        assert_eq!(
            names(unsafe_settings(&settings("yes", "always", "volatile-lru"))),
            ["maxmemory-policy"]
        );
    }
}
