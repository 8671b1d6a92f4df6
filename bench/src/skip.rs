//! What happens when there is no store to test: never a silent pass.
//!
//! A factory that returns `None` (its server is missing, its URL is unset) would
//! otherwise make every test of the suite show as *passed*: cargo's test harness
//! captures whatever a passing test prints, so a "skipped because ..." line is never
//! seen, and a CI job that lost its server stays green. The rule, for the suite, the
//! property test, the bench kit and the workspace's test kit alike:
//!
//! | `CI` set | `LIVENESS_ALLOW_SKIP=1` | a missing store |
//! | --- | --- | --- |
//! | yes | any | the test **fails**, naming what is missing |
//! | no | no | the test **fails**, naming what is missing and how to skip |
//! | no | yes | the test is skipped: one `SKIP` line on the process's stderr, past the harness's capture |
//!
//! "Set" means set to anything but empty, `0` or `false`. Under CI nothing can turn a
//! missing store into a pass: a CI job that must run without some backend leaves that
//! backend's tests out (`cargo test --workspace --exclude ...`) instead.

use std::io::Write;

/// The environment variable that lets a missing store skip a test outside CI.
pub const ALLOW_SKIP: &str = "LIVENESS_ALLOW_SKIP";

/// What a test does when it has no store to test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoStore {
    /// Fail the test (panic) with the reason.
    Fail,
    /// Skip: print one `SKIP` line that the test harness does not capture, and pass.
    Skip,
}

impl NoStore {
    /// The rule of the module docs: skip only outside CI and only when skipping was
    /// asked for; fail otherwise.
    pub fn decide(ci: bool, allow_skip: bool) -> NoStore {
        if allow_skip && !ci {
            NoStore::Skip
        } else {
            NoStore::Fail
        }
    }

    /// [`NoStore::decide`] with `CI` and [`ALLOW_SKIP`] read from the environment.
    pub fn from_env() -> NoStore {
        NoStore::decide(in_ci(), flag(ALLOW_SKIP))
    }
}

/// True when running under CI (`CI` set to anything but empty, `0` or `false`).
pub fn in_ci() -> bool {
    flag("CI")
}

fn flag(name: &str) -> bool {
    matches!(std::env::var(name), Ok(v) if !v.is_empty() && v != "0" && v != "false")
}

/// Reports that `what` (a test's or a server's name) has no store because of `why`:
/// panics (fails the test) unless [`NoStore::from_env`] says skip; then writes one
/// `SKIP` line straight to the process's stderr (cargo's capture does not hide it) and
/// returns, so the caller can return early.
pub fn no_store(what: &str, why: &str) {
    match NoStore::from_env() {
        NoStore::Fail if in_ci() => panic!(
            "{what}: no store to test ({why}), so nothing was tested. CI is set: a missing \
             store is a failure, never a skip."
        ),
        NoStore::Fail => panic!(
            "{what}: no store to test ({why}), so nothing was tested. Make the store \
             available, or set {ALLOW_SKIP}=1 to skip outside CI."
        ),
        NoStore::Skip => {
            let line = format!("SKIP {what}: no store to test ({why}); {ALLOW_SKIP} is set\n");
            // Past the harness's capture on purpose: `eprintln!` would be swallowed.
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::NoStore;

    #[test]
    fn only_an_explicit_request_outside_ci_skips() {
        assert_eq!(NoStore::decide(false, false), NoStore::Fail);
        assert_eq!(NoStore::decide(true, false), NoStore::Fail);
        assert_eq!(NoStore::decide(true, true), NoStore::Fail);
        assert_eq!(NoStore::decide(false, true), NoStore::Skip);
    }
}
