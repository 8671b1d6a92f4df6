//! Decoding script replies and mapping client errors onto [`liveness_core::Error`].

use liveness_core::Error;
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use crate::BACKEND;

/// A script answered something this client does not understand (a corrupt record, a
/// foreign key under the namespace's prefix, a script of another version).
#[derive(Debug)]
pub(crate) struct UnexpectedReply {
    /// The operation whose reply did not parse.
    pub(crate) op: &'static str,
    /// What was wrong with it.
    pub(crate) problem: &'static str,
}

impl std::fmt::Display for UnexpectedReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unexpected reply to {}: {}", self.op, self.problem)
    }
}

impl std::error::Error for UnexpectedReply {}

/// Shorthand for a permanent error about a malformed reply.
pub(crate) fn unexpected(op: &'static str, problem: &'static str) -> Error {
    Error::backend(BACKEND, UnexpectedReply { op, problem })
}

/// Maps a client error: transport faults and transient server states (loading, a
/// busy script, failover in progress, cluster down) are `Unavailable`; everything
/// else (authentication, permissions, out of memory, script errors) is `Backend`.
pub(crate) fn map_err(e: RedisError) -> Error {
    let transient = !is_permanent_io(&e)
        && match e.kind() {
            ErrorKind::Io | ErrorKind::ClusterConnectionNotFound => true,
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ReadOnly,
            ) => true,
            _ => {
                e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || matches!(e.code(), Some("BUSY") | Some("UNBLOCKED"))
            }
        };
    if transient {
        Error::unavailable(BACKEND, e)
    } else {
        Error::backend(BACKEND, e)
    }
}

/// A reply as an integer (an integer reply, or a bulk string of digits).
pub(crate) fn int(op: &'static str, v: &Value) -> Result<i64, Error> {
    match v {
        Value::Int(n) => Ok(*n),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| unexpected(op, "a number that does not parse")),
        Value::SimpleString(s) => s
            .parse()
            .map_err(|_| unexpected(op, "a number that does not parse")),
        _ => Err(unexpected(op, "expected a number")),
    }
}

/// A reply as an unsigned integer.
pub(crate) fn uint(op: &'static str, v: &Value) -> Result<u64, Error> {
    u64::try_from(int(op, v)?).map_err(|_| unexpected(op, "a negative number"))
}

/// A reply as a u32.
pub(crate) fn u32_(op: &'static str, v: &Value) -> Result<u32, Error> {
    u32::try_from(int(op, v)?).map_err(|_| unexpected(op, "a number out of range"))
}

/// A reply as bytes.
pub(crate) fn bytes(op: &'static str, v: Value) -> Result<Vec<u8>, Error> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        _ => Err(unexpected(op, "expected a string")),
    }
}

/// A reply as UTF-8 text.
pub(crate) fn text(op: &'static str, v: Value) -> Result<String, Error> {
    String::from_utf8(bytes(op, v)?).map_err(|_| unexpected(op, "a string that is not UTF-8"))
}

/// A reply as an array (nil is an empty array).
pub(crate) fn array(op: &'static str, v: Value) -> Result<Vec<Value>, Error> {
    match v {
        Value::Array(items) | Value::Set(items) => Ok(items),
        Value::Nil => Ok(Vec::new()),
        _ => Err(unexpected(op, "expected an array")),
    }
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
