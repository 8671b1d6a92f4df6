//! The small internal interface the store logic runs on: one ordered key-value
//! transaction with FoundationDB's semantics (serializable, optimistic, read conflicts,
//! versionstamps, retry through `on_error`).
//!
//! Two implementations: the real client ([`crate::native`], feature `native`) and the
//! in-crate test double ([`crate::double`]). [`crate::FdbStore`] holds an
//! `Arc<dyn Database>`, so the SAME store logic runs on both.

use std::fmt::Debug;

use liveness_core::async_trait;
use liveness_core::Error;

use crate::BACKEND;

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

/// A failure of one transaction step.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DbError {
    /// From the test double.
    #[error(transparent)]
    Double(#[from] crate::double::DoubleError),
    /// From the real client.
    #[cfg(feature = "native")]
    #[error(transparent)]
    Native(foundationdb::FdbError),
}

impl DbError {
    /// True when the commit may have been applied although it reported failure
    /// (FoundationDB's `commit_unknown_result`): a retry must check what it finds.
    pub(crate) fn maybe_committed(&self) -> bool {
        match self {
            DbError::Double(e) => e.maybe_committed(),
            #[cfg(feature = "native")]
            DbError::Native(e) => e.is_maybe_committed(),
        }
    }

    /// The framework error for a failure that `on_error` refused to retry.
    pub(crate) fn into_error(self) -> Error {
        let transient = match &self {
            DbError::Double(e) => e.is_transient(),
            #[cfg(feature = "native")]
            DbError::Native(e) => crate::native::is_transient(e),
        };
        if transient {
            Error::unavailable(BACKEND, self)
        } else {
            Error::backend(BACKEND, self)
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
    /// Reads `[begin, end)` in key order (or reversed), at most `limit` pairs.
    async fn range(
        &mut self,
        begin: &[u8],
        end: &[u8],
        limit: usize,
        reverse: bool,
        snapshot: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, DbError>;
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

/// Runs a transaction body (an `async fn(&mut dyn Transaction, &Attempt, ..) ->
/// Result<T, Fail>` call) in FoundationDB's retry loop: commit, and on a retryable
/// failure `on_error` and run the body again. Evaluates to
/// `liveness_core::Result<(T, Option<Stamp>)>`.
macro_rules! transact {
    ($db:expr, |$tx:ident, $at:ident| $body:expr) => {{
        async {
            let mut txn = match $db.begin().await {
                Ok(txn) => txn,
                Err(e) => return Err(e.into_error()),
            };
            let mut attempt = $crate::kv::Attempt::default();
            loop {
                let outcome = {
                    let $tx: &mut dyn $crate::kv::Transaction = &mut *txn;
                    let $at = &attempt;
                    $body.await
                };
                let err = match outcome {
                    Ok(value) => match txn.commit().await {
                        Ok(stamp) => break Ok((value, stamp)),
                        Err(e) => e,
                    },
                    Err($crate::kv::Fail::Stop(e)) => break Err(e),
                    Err($crate::kv::Fail::Db(e)) => e,
                };
                attempt.maybe_committed |= err.maybe_committed();
                if let Err(e) = txn.on_error(err).await {
                    break Err(e.into_error());
                }
            }
        }
        .await
    }};
}

pub(crate) use transact;
