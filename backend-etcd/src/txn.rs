//! Building and reading etcd transactions: the compares and operations every
//! multi-key change is made of, and the range responses it reads back.

use etcd_client::{
    Compare, CompareOp, GetOptions, GetResponse, KeyValue, TxnOp, TxnOpResponse, TxnResponse,
};
use liveness_core::FencingToken;

/// How many times an optimistic transaction is retried under contention.
pub(crate) const MAX_TRIES: usize = 64;

/// The key's version is `v` (0: the key does not exist).
pub(crate) fn version(k: &str, v: i64) -> Compare {
    Compare::version(k, CompareOp::Equal, v)
}

/// The key was last modified at revision `v`.
pub(crate) fn mod_rev(k: &str, v: i64) -> Compare {
    Compare::mod_revision(k, CompareOp::Equal, v)
}

/// The key was created at revision `v` (a lease-bound key: its token).
pub(crate) fn create_rev(k: &str, v: i64) -> Compare {
    Compare::create_revision(k, CompareOp::Equal, v)
}

/// The key exists.
pub(crate) fn exists(k: &str) -> Compare {
    Compare::version(k, CompareOp::Greater, 0)
}

/// Reads one key.
pub(crate) fn get(k: &str) -> TxnOp {
    TxnOp::get(k, None)
}

/// Writes one key (not lease-bound).
pub(crate) fn put(k: &str, v: impl Into<Vec<u8>>) -> TxnOp {
    TxnOp::put(k, v, None)
}

/// Deletes one key.
pub(crate) fn del(k: &str) -> TxnOp {
    TxnOp::delete(k, None)
}

/// A token as a revision (tokens are revisions; a larger one matches nothing).
pub(crate) fn token_i64(t: FencingToken) -> i64 {
    i64::try_from(t.0).unwrap_or(i64::MAX)
}

/// The range responses of a transaction, in order (puts and deletes skipped).
pub(crate) fn ranges(resp: &TxnResponse) -> Vec<GetResponse> {
    resp.op_responses()
        .into_iter()
        .filter_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g),
            _ => None,
        })
        .collect()
}

/// The first key-value of a range response.
pub(crate) fn first(g: Option<&GetResponse>) -> Option<KeyValue> {
    g.and_then(|g| g.kvs().first().cloned())
}

/// The revision a transaction committed at.
pub(crate) fn revision(resp: &TxnResponse) -> i64 {
    resp.header().map(|h| h.revision()).unwrap_or(0)
}

/// The key-values of a transaction's first range.
pub(crate) fn first_range(resp: &TxnResponse) -> Vec<KeyValue> {
    ranges(resp)
        .into_iter()
        .next()
        .map(|mut g| g.take_kvs())
        .unwrap_or_default()
}

/// A range read of at most `limit` keys under a prefix, in key order.
pub(crate) fn under(limit: usize) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_limit(i64::try_from(limit).unwrap_or(i64::MAX))
}
