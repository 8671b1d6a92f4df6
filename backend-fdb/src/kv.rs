//! The small internal interface the store logic runs on: one ordered key-value
//! transaction with FoundationDB's semantics (serializable, optimistic, read conflicts,
//! versionstamps, retry through `on_error`).
//!
//! Two implementations depend on it: the real client (`native.rs`, feature `native`)
//! and the in-crate test double ([`crate::double`]); it depends on neither.
//! [`crate::FdbStore`] holds an `Arc<dyn Database>`, so the SAME store logic runs on
//! both.

use std::fmt::Debug;

use liveness_core::{async_trait, BoxError, Error};

/// A complete versionstamp: the 8-byte big-endian commit version, then the 2-byte
/// order of the transaction within its commit batch. Unique per committed transaction
/// and increasing in commit order.
pub(crate) type Stamp = [u8; 10];

/// The placeholder a versionstamped mutation overwrites.
pub(crate) const INCOMPLETE: Stamp = [0xff; 10];

/// The commit version part of a stamp: comparable with read versions (a transaction
/// whose read version is at least this sees the stamp's commit).
pub(crate) fn stamp_version(stamp: &Stamp) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&stamp[..8]);
    u64::from_be_bytes(v)
}

/// How an implementation classifies one of its failures, for the store logic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Class {
    /// A later call may not meet it (a conflict, a timeout, an unreachable cluster):
    /// reported as `Unavailable` once `on_error` gives up.
    pub(crate) transient: bool,
    /// The commit may have been applied although it reported failure (FoundationDB's
    /// `commit_unknown_result`): a retry must check what it finds.
    pub(crate) maybe_committed: bool,
}

/// A failure of one transaction step: the implementation's own error, with its
/// [`Class`]. This interface knows nothing of its implementations; each one finds
/// its own error again with [`DbError::downcast_ref`] (in `on_error`).
#[derive(Debug)]
pub(crate) struct DbError {
    source: BoxError,
    class: Class,
}

impl DbError {
    /// An implementation's error and how it classifies it.
    pub(crate) fn new(source: impl Into<BoxError>, class: Class) -> Self {
        DbError {
            source: source.into(),
            class,
        }
    }

    /// True when the commit may have been applied although it reported failure: a
    /// retry must check what it finds.
    pub(crate) fn maybe_committed(&self) -> bool {
        self.class.maybe_committed
    }

    /// True when a later call may not meet this failure.
    pub(crate) fn is_transient(&self) -> bool {
        self.class.transient
    }

    /// The implementation's error, when it is a `T`.
    pub(crate) fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.source.downcast_ref()
    }
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.source, f)
    }
}

impl std::error::Error for DbError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.source()
    }
}

/// A key and its value.
pub(crate) type Pair = (Vec<u8>, Vec<u8>);

/// A range read: at most `limit` pairs of `[begin, end)`, in key order unless
/// `reverse`; a `snapshot` read adds no read conflict.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RangeRead<'a> {
    pub(crate) begin: &'a [u8],
    pub(crate) end: &'a [u8],
    pub(crate) limit: usize,
    pub(crate) reverse: bool,
    pub(crate) snapshot: bool,
}

impl<'a> RangeRead<'a> {
    /// The first `limit` pairs of `[begin, end)` in key order, adding a read
    /// conflict on what it reads.
    pub(crate) fn new(begin: &'a [u8], end: &'a [u8], limit: usize) -> Self {
        RangeRead {
            begin,
            end,
            limit,
            reverse: false,
            snapshot: false,
        }
    }

    /// True when the read cannot return anything (no limit, or an empty range).
    pub(crate) fn is_empty(&self) -> bool {
        self.limit == 0 || self.begin >= self.end
    }

    /// The same read, without a read conflict.
    pub(crate) fn snapshot(self) -> Self {
        RangeRead {
            snapshot: true,
            ..self
        }
    }

    /// The same read, last key first.
    pub(crate) fn reverse(self) -> Self {
        RangeRead {
            reverse: true,
            ..self
        }
    }
}

/// Opens transactions.
#[async_trait]
pub(crate) trait Database: Send + Sync + Debug {
    /// A new transaction.
    async fn begin(&self) -> Result<Box<dyn Transaction>, DbError>;
}

/// One FoundationDB-style transaction. Reads see the snapshot at the read version
/// plus this transaction's own writes; non-snapshot reads add read conflicts, so the
/// commit fails (retryably) if a transaction that committed after the read version
/// wrote anything they read.
#[async_trait]
pub(crate) trait Transaction: Send {
    /// The read version (fetched on first use, then fixed until `on_error`).
    async fn read_version(&mut self) -> Result<u64, DbError>;
    /// Reads one key.
    async fn get(&mut self, key: &[u8], snapshot: bool) -> Result<Option<Vec<u8>>, DbError>;
    /// Reads the key-value pairs `read` names.
    async fn range(&mut self, read: RangeRead<'_>) -> Result<Vec<Pair>, DbError>;
    /// Writes one key.
    fn set(&mut self, key: &[u8], value: &[u8]);
    /// Clears one key.
    fn clear(&mut self, key: &[u8]);
    /// Atomically adds `delta` to a little-endian i64 counter (no read conflict).
    fn add(&mut self, key: &[u8], delta: i64);
    /// `SetVersionstampedKey`: `key` ends with the 4-byte little-endian offset of a
    /// 10-byte placeholder that the commit's stamp replaces.
    fn set_versionstamped_key(&mut self, key: &[u8], value: &[u8]);
    /// `SetVersionstampedValue`: `value` ends with the 4-byte little-endian offset of
    /// a 10-byte placeholder that the commit's stamp replaces.
    fn set_versionstamped_value(&mut self, key: &[u8], value: &[u8]);
    /// Commits; returns the commit's stamp when a versionstamped mutation was made.
    async fn commit(&mut self) -> Result<Option<Stamp>, DbError>;
    /// FoundationDB's retry step: resets the transaction (with backoff) when `err` is
    /// retryable, else gives it back.
    async fn on_error(&mut self, err: DbError) -> Result<(), DbError>;
}

/// What a transaction body returns besides its value.
#[derive(Debug)]
pub(crate) enum Fail {
    /// A database step failed: go through `on_error` (retry or give up).
    Db(DbError),
    /// The operation's answer is an error (`Held`, `Lost`, ...): stop without
    /// committing.
    Stop(Error),
}

impl From<DbError> for Fail {
    fn from(e: DbError) -> Self {
        Fail::Db(e)
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Stop(e)
    }
}

/// What a body knows about earlier attempts of the same operation.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Attempt {
    /// An earlier attempt's commit may have been applied (unknown result).
    pub(crate) maybe_committed: bool,
}
