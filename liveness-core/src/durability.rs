//! Refusing servers whose settings void the guarantees.
//!
//! A store server that loses acknowledged writes on a restart (Redis without AOF, or
//! with `appendfsync everysec`; PostgreSQL with `fsync=off`) hands a fencing token out
//! twice and silently forgets leases and items: workers see an empty queue, and
//! `item(id)` answers `None` for a wiped item exactly as for a completed one. So a
//! backend that can read its server's durability settings does so at connect, logs
//! what it found, and refuses a setting that voids the guarantees with
//! [`Error::Backend`] whose source is an [`UnsafeSetting`] naming the setting and the
//! fix — unless the URL says `durability=relaxed` ([`DURABILITY`]), the user's
//! explicit acceptance of weaker guarantees (a test server, a cache-grade Redis).
//! Then the same findings are logged as warnings and the connection goes on.

use crate::url::{Param, StoreUrl};
use crate::{Error, FencingToken, Key, Result};

/// `durability`: `strict` (the default: refuse a server whose settings void the
/// guarantees) or `relaxed` (accept it, with a warning in the log). Declared by every
/// backend whose URL takes it.
pub const DURABILITY: Param = Param::word("durability", &["strict", "relaxed"]);

/// What the user accepts of the server's durability settings (the URL's
/// [`DURABILITY`] parameter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// Refuse a server whose settings void the guarantees (the default).
    #[default]
    Strict,
    /// Accept it: tokens may be handed out twice and leases and items lost when the
    /// server restarts. Only for servers whose data does not matter (tests).
    Relaxed,
}

impl Durability {
    /// The URL's `durability` parameter; [`Durability::Strict`] when absent. Fails
    /// with [`Error::InvalidInput`] (`BadValue`) on another word.
    pub fn from_url(url: &StoreUrl) -> Result<Durability> {
        Ok(match url.word(DURABILITY)? {
            Some("relaxed") => Durability::Relaxed,
            _ => Durability::Strict,
        })
    }
}

/// A server setting that voids the guarantees: the source of the [`Error::Backend`]
/// a strict connect fails with. Its message names the setting, what it was, why it
/// matters and the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unsafe server setting `{setting}` = `{found}`: {why}. Fix: {fix} \
     (or add `durability=relaxed` to the URL to accept weaker guarantees)"
)]
#[non_exhaustive]
pub struct UnsafeSetting {
    /// The setting's name, as the server spells it (`appendonly`, `fsync`).
    pub setting: &'static str,
    /// Its value as the server reported it.
    pub found: String,
    /// What it breaks.
    pub why: &'static str,
    /// What to set instead.
    pub fix: &'static str,
}

impl UnsafeSetting {
    /// The server setting `setting`, found at `found`, which breaks `why`; `fix` says
    /// what to set instead.
    pub fn new(
        setting: &'static str,
        found: impl Into<String>,
        why: &'static str,
        fix: &'static str,
    ) -> UnsafeSetting {
        UnsafeSetting {
            setting,
            found: found.into(),
            why,
            fix,
        }
    }
}

/// Applies `durability` to what a backend found: `Ok` when nothing is unsafe or the
/// user accepted it (each finding then logged as a warning); otherwise
/// [`Error::Backend`] for `backend` with the first unsafe setting as its source (the
/// others are logged).
pub fn judge(
    backend: &'static str,
    durability: Durability,
    unsafe_settings: Vec<UnsafeSetting>,
) -> Result<()> {
    let mut findings = unsafe_settings.into_iter();
    let Some(first) = findings.next() else {
        return Ok(());
    };
    match durability {
        Durability::Relaxed => {
            for s in std::iter::once(first).chain(findings) {
                tracing::warn!(backend, setting = s.setting, found = %s.found, "durability=relaxed: accepting an unsafe server setting: {s}");
            }
            Ok(())
        }
        Durability::Strict => {
            for s in findings {
                tracing::error!(backend, setting = s.setting, found = %s.found, "{s}");
            }
            Err(Error::backend(backend, first))
        }
    }
}

/// The store lost acknowledged state: a renewal found no record for a lease whose
/// token is above every token the namespace has handed out — the token counter went
/// back (a restart without persistence, a failover to a replica that lacked the last
/// writes, eviction). The source of the [`Error::Backend`] such a renewal fails with,
/// distinct from `Lost(Released)`: the lease was not released, the store forgot it,
/// and with it possibly items (`item(id)` then answers `None`) and the token counter
/// (tokens already used will be handed out again).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "store lost state: the lease on {key} with token {token} is gone and its token is \
     above every token the namespace has handed out; the server lost acknowledged writes \
     (restart without persistence, failover to a stale replica, eviction): leases and \
     items may be gone and tokens will repeat"
)]
#[non_exhaustive]
pub struct StoreLostState {
    /// The lease's key.
    pub key: Key,
    /// The lease's token, which the store no longer knows it issued.
    pub token: FencingToken,
}

impl StoreLostState {
    /// The lease on `key` under `token` is gone, and `token` is above every token the
    /// namespace handed out.
    pub fn new(key: Key, token: FencingToken) -> StoreLostState {
        StoreLostState { key, token }
    }

    /// The error a renewal of `lease` fails with when the store found no record of it
    /// and its token is above every token the namespace has handed out:
    /// [`Error::Backend`] from `backend` with this as its source (not retryable).
    pub fn of(backend: &'static str, lease: &crate::lease::Lease) -> Error {
        Error::backend(
            backend,
            StoreLostState {
                key: lease.key.clone(),
                token: lease.token,
            },
        )
    }

    /// True when `error` is a [`StoreLostState`] (the source of an
    /// [`Error::Backend`]).
    pub fn is_source_of(error: &Error) -> bool {
        matches!(error, Error::Backend { source, .. } if source.is::<StoreLostState>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unsafe_one() -> UnsafeSetting {
        UnsafeSetting {
            setting: "appendonly",
            found: "no".into(),
            why: "a restart loses everything",
            fix: "appendonly yes",
        }
    }

    #[test]
    fn strict_refuses_and_names_the_setting_relaxed_accepts() {
        assert!(judge("redis", Durability::Strict, vec![]).is_ok());
        let err = judge("redis", Durability::Strict, vec![unsafe_one()]).unwrap_err();
        assert!(!err.is_retryable());
        let text = err.to_string();
        assert!(text.contains("`appendonly` = `no`"), "{text}");
        assert!(text.contains("durability=relaxed"), "{text}");
        match &err {
            Error::Backend { source, .. } => {
                assert_eq!(source.downcast_ref::<UnsafeSetting>(), Some(&unsafe_one()))
            }
            other => panic!("{other:?}"),
        }
        assert!(judge("redis", Durability::Relaxed, vec![unsafe_one()]).is_ok());
    }
}
