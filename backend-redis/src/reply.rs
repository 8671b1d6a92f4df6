//! Decoding script replies: each reader names the operation, so a reply that does not
//! parse is reported as a corrupt record of that operation.

use liveness_core::Error;
use redis::Value;

use crate::error::unexpected;

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

/// A record reply: its fields in order, or `None` for nil (no such record).
pub(crate) fn record(
    op: &'static str,
    v: Value,
) -> Result<Option<std::vec::IntoIter<Value>>, Error> {
    match v {
        Value::Nil => Ok(None),
        v => Ok(Some(array(op, v)?.into_iter())),
    }
}
