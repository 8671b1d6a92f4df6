//! Where the sweep of a dead session's members stands ([`MemberSweep`], read from
//! its state keys) and what one member-sweep transaction came to ([`MembersSwept`]).
//! The step itself is `EtcdStore::sweep_members` (`session.rs`); the sweep of the
//! token that drives it is `deaths.rs`.

use etcd_client::{Compare, GetOptions, KeyValue, TxnOp};
use liveness_core::{ExpiredLease, FencingToken, Result};

use crate::core::counter_at;
use crate::keys::{Keys, INDEX_BATCH};

/// What one member-sweep transaction ([`EtcdStore::sweep_members`]) came to.
pub(crate) enum MembersSwept {
    /// These members were declared dead; `true` when more may remain.
    DeclaredDead(Vec<ExpiredLease>, bool),
    /// The transaction lost a race (another sweeper, a release): read again.
    Conflict,
}

/// Where the sweep of a dead session's members stands, as read from its state keys
/// (`ss/<session token>/`): how far its member index reaches and the cursor.
pub(crate) struct MemberSweep {
    /// The first batch past every batch a join filed an entry under.
    pub(crate) end: u64,
    /// The first batch that may still hold an entry (every batch below is empty).
    pub(crate) cursor: u64,
    /// The cursor is still as read.
    pub(crate) cursor_cmp: Compare,
}

impl MemberSweep {
    /// The read of the session state keys of `token` (two keys at most; none for a
    /// token that is not a session's, or a session nobody joined).
    pub(crate) fn read(k: &Keys, token: FencingToken) -> TxnOp {
        TxnOp::get(
            k.session_state(token),
            Some(GetOptions::new().with_prefix()),
        )
    }

    /// Where the sweep of `token`'s members stands, from `kvs` as
    /// [`MemberSweep::read`] read them.
    pub(crate) fn of(k: &Keys, token: FencingToken, kvs: &[KeyValue]) -> Result<MemberSweep> {
        let (joins, cursor) = (k.session_joins(token), k.session_cursor(token));
        let find = |key: &str| kvs.iter().find(|kv| kv.key() == key.as_bytes());
        // The joins that read counts 0..n filed their entries under batches below
        // ⌈n / INDEX_BATCH⌉; once the session is dead no join adds one.
        let joined = find(&joins).map_or(0, |kv| u64::try_from(kv.version()).unwrap_or(0));
        let (cursor_cmp, at) = counter_at(&cursor, find(&cursor))?;
        Ok(MemberSweep {
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
