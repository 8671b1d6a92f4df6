//! Where the drain of a dead session stands ([`DrainState`], read from its state
//! keys) and what one drain transaction came to ([`Drained`]). The drain itself is
//! `EtcdStore::drain_batch` (`session.rs`); the sweep that drives it is `deaths.rs`.

use etcd_client::{Compare, GetOptions, KeyValue, TxnOp};
use liveness_core::{ExpiredLease, FencingToken, Result};

use crate::core::counter_at;
use crate::keys::{Keys, INDEX_BATCH};

/// What one drain transaction ([`EtcdStore::drain_batch`]) came to.
pub(crate) enum Drained {
    /// These members were retired; `true` when more may remain.
    Retired(Vec<ExpiredLease>, bool),
    /// The transaction lost a race (another sweeper, a release): read again.
    Conflict,
}

/// Where the drain of a dead session stands, as read from its state keys
/// (`ss/<session token>/`): how far its member index reaches and the cursor.
pub(crate) struct DrainState {
    /// The first batch past every batch a join filed an entry under.
    pub(crate) end: u64,
    /// The first batch that may still hold an entry (every batch below is empty).
    pub(crate) cursor: u64,
    /// The cursor is still as read.
    pub(crate) cursor_cmp: Compare,
}

impl DrainState {
    /// The read of the session state keys of `token` (two keys at most; none for a
    /// token that is not a session's, or a session nobody joined).
    pub(crate) fn read(k: &Keys, token: FencingToken) -> TxnOp {
        TxnOp::get(
            k.session_state(token),
            Some(GetOptions::new().with_prefix()),
        )
    }

    /// The state of `token`'s drain from `kvs`, as [`DrainState::read`] read them.
    pub(crate) fn of(k: &Keys, token: FencingToken, kvs: &[KeyValue]) -> Result<DrainState> {
        let (joins, cursor) = (k.session_joins(token), k.session_cursor(token));
        let find = |key: &str| kvs.iter().find(|kv| kv.key() == key.as_bytes());
        // The joins that read counts 0..n filed their entries under batches below
        // ⌈n / INDEX_BATCH⌉; once the session is dead no join adds one.
        let joined = find(&joins).map_or(0, |kv| u64::try_from(kv.version()).unwrap_or(0));
        let (cursor_cmp, at) = counter_at(&cursor, find(&cursor))?;
        Ok(DrainState {
            end: joined.div_ceil(INDEX_BATCH),
            cursor: at,
            cursor_cmp,
        })
    }

    /// True when the member index may still hold an entry.
    pub(crate) fn members_left(&self) -> bool {
        self.cursor < self.end
    }
}
