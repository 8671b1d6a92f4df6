//! Mapping transaction failures onto the framework's [`Error`] kinds: the one place
//! where this backend decides what is worth retrying, and the FoundationDB error
//! codes it counts as transient.

use liveness_core::Error;

use crate::kv::DbError;
use crate::BACKEND;

/// Maps a failure that `on_error` refused to retry: transient ones to
/// [`Error::Unavailable`], everything else to [`Error::Backend`].
pub(crate) fn map(e: DbError) -> Error {
    Error::classify(BACKEND, e, DbError::is_transient)
}

/// Faults of the real client that a later call may not meet: retryable ones,
/// timeouts, an unreachable or recovering cluster, throttling.
#[cfg(feature = "native")]
pub(crate) fn is_transient(e: &foundationdb::FdbError) -> bool {
    e.is_retryable()
        || matches!(
            e.code(),
            1004 // timed_out
                | 1031 // transaction_timed_out
                | 1037 // process_behind
                | 1213 // tag_throttled
                | 1510 // cluster unreachable on connect (no_cluster_file_found excluded)
        )
}

/// A record that does not decode ([`liveness_core::Corrupt`]): `what` says which
/// record or value of the namespace's subspace, and why.
pub(crate) fn corrupt(what: impl Into<std::borrow::Cow<'static, str>>) -> Error {
    Error::corrupt(BACKEND, what)
}

/// The error of [`connect`](crate::connect) in a build without the `native` feature.
#[derive(Debug, thiserror::Error)]
#[error("backend-fdb was built without its `native` feature (the FoundationDB client, libfdb_c); enable the `fdb` feature of `liveness`")]
pub struct NotCompiled;
