//! How the store traits' default batches answer: each entry of a `*_many` call by its
//! own single call, one after the other, in order (`acquire_each` and its siblings in
//! [`store`](crate::store) are built on it). It knows nothing of the traits.

use std::future::Future;

use crate::error::Result;

/// Answers each entry of a batch by its own `call`, one after the other, in order.
pub(crate) async fn one_by_one<'a, E, T, F>(
    entries: &'a [E],
    call: impl Fn(&'a E) -> F,
) -> Vec<Result<T>>
where
    F: Future<Output = Result<T>>,
{
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        out.push(call(entry).await);
    }
    out
}
