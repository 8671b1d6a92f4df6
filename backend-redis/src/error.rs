//! Mapping Redis client errors onto the framework's [`Error`] kinds: the one place
//! where this backend decides what is worth retrying.

use liveness_core::Error;
use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::BACKEND;

/// Maps a client error: transport faults and transient server states (loading, a
/// busy script, failover in progress, cluster down) are `Unavailable`; everything
/// else (authentication, permissions, out of memory, script errors) is `Backend`.
pub(crate) fn map(e: RedisError) -> Error {
    Error::classify(BACKEND, e, is_transient)
}

/// True for transport faults and transient server states.
fn is_transient(e: &RedisError) -> bool {
    !is_permanent_io(e)
        && match e.kind() {
            ErrorKind::Io | ErrorKind::ClusterConnectionNotFound => true,
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ReadOnly
                // The slot moved (resharding, failover): the client does not follow
                // redirects itself (no re-sends), the caller retries.
                | ServerErrorKind::Moved
                | ServerErrorKind::Ask,
            ) => true,
            _ => {
                e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || matches!(e.code(), Some("BUSY") | Some("UNBLOCKED"))
            }
        }
}

/// A record this client cannot read (a corrupt record, a foreign key under the
/// namespace's prefix, a script of another version): [`liveness_core::Corrupt`],
/// with `what` saying what was wrong.
pub(crate) fn corrupt(what: impl Into<std::borrow::Cow<'static, str>>) -> Error {
    Error::corrupt(BACKEND, what)
}

/// True for I/O failures that retrying cannot fix: a TLS certificate that does not
/// verify, a handshake the server refuses, a permission error.
fn is_permanent_io(e: &RedisError) -> bool {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(mut err) = source {
        // The client keeps its I/O errors behind an `Arc`.
        if let Some(shared) = err.downcast_ref::<Shared>() {
            err = shared.as_ref();
        }
        if err.is::<rustls::Error>() {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::InvalidData
                    | std::io::ErrorKind::PermissionDenied
                    | std::io::ErrorKind::Unsupported
            ) || io
                .get_ref()
                .is_some_and(|inner| inner.is::<rustls::Error>())
            {
                return true;
            }
        }
        source = err.source();
    }
    false
}
