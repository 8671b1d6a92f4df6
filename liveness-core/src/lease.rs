//! Lease values: what `acquire` hands out, what `inspect` and `expired` report.

use std::time::Duration;

use crate::error::{Error, LostReason};
use crate::item::ItemId;
use crate::types::{FencingToken, HolderId, Key, Ttl};

/// A lease held by the caller: the proof of an acquisition, passed back to `renew`,
/// `release`, `claim`, `complete` and `fail`.
///
/// Only [`Lease::token`] identifies the acquisition; the other fields describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The leased key.
    pub key: Key,
    /// Who holds it.
    pub holder: HolderId,
    /// The fencing token of this acquisition.
    pub token: FencingToken,
    /// The ttl each renewal extends the lease by, counted by the store clock.
    pub ttl: Ttl,
    /// How long the lease had left by the store clock when the store answered (a
    /// duration, never an absolute time: it crosses machines safely).
    pub expires_in: Duration,
}

impl Lease {
    /// A lease the store just granted: the whole `ttl` left.
    pub fn granted(key: Key, holder: HolderId, token: FencingToken, ttl: Ttl) -> Lease {
        Lease {
            key,
            holder,
            token,
            ttl,
            expires_in: ttl.duration(),
        }
    }

    /// This lease as the store just renewed it: the same acquisition (token), its
    /// whole ttl left again.
    pub fn renewed(&self) -> Lease {
        Lease {
            expires_in: self.ttl.duration(),
            ..self.clone()
        }
    }

    /// The [`Error::Lost`] a store answers when this lease is no longer current.
    pub fn lost(&self, reason: LostReason) -> Error {
        Error::Lost {
            key: self.key.clone(),
            token: self.token,
            reason,
        }
    }

    /// The [`Error::Fenced`] a store answers when `item` is not owned by this lease's
    /// token.
    pub fn fenced(&self, item: ItemId) -> Error {
        Error::Fenced {
            item,
            token: self.token,
        }
    }
}

/// Whether a lease is live by the store clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseStatus {
    /// Live, with this much time left by the store clock.
    Live {
        /// Time left until expiry.
        remaining: Duration,
    },
    /// Past its expiry and not yet reaped.
    Expired,
}

/// What `inspect` reports about a key that has a lease record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseInfo {
    /// The key.
    pub key: Key,
    /// The current holder.
    pub holder: HolderId,
    /// The current token.
    pub token: FencingToken,
    /// The ttl of the current acquisition.
    pub ttl: Ttl,
    /// Live or expired, by the store clock.
    pub status: LeaseStatus,
}

impl LeaseInfo {
    /// True when the lease is live by the store clock.
    pub fn is_live(&self) -> bool {
        matches!(self.status, LeaseStatus::Live { .. })
    }
}

/// A lease past its expiry that nobody has reaped yet, as `expired` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpiredLease {
    /// The key.
    pub key: Key,
    /// Who held it.
    pub holder: HolderId,
    /// Its token: pass it to `reap`.
    pub token: FencingToken,
}

/// An entry of the dead set: a token that stopped being current (reaped or released)
/// and whose items may still need requeueing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadToken {
    /// The key the token was acquired on.
    pub key: Key,
    /// The dead token.
    pub token: FencingToken,
}
