//! The trait's default batches: each entry of a `*_many` call answered by its own
//! single call, one after the other, in order. A native batch may fall back to them
//! for a batch its one step cannot take.

use std::future::Future;

use crate::error::{BatchResult, Result};
use crate::item::Requeued;
use crate::lease::{Acquire, Lease};
use crate::store::{check_batch, ItemStore, LeaseStore};
use crate::types::{FencingToken, Key};

/// Answers each entry of a batch by its own `call`, one after the other, in order.
async fn one_by_one<'a, E, T, F>(entries: &'a [E], call: impl Fn(&'a E) -> F) -> Vec<Result<T>>
where
    F: Future<Output = Result<T>>,
{
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        out.push(call(entry).await);
    }
    out
}

/// [`LeaseStore::acquire_many`] as one `acquire` after the other (the trait's
/// default). A native `acquire_many` may fall back to it for a batch its one step
/// cannot take.
pub async fn acquire_each<S: LeaseStore + ?Sized>(
    store: &S,
    asks: &[Acquire],
) -> BatchResult<Lease> {
    check_batch(store.capabilities(), "acquires", asks.len())?;
    Ok(one_by_one(asks, |ask| store.acquire(&ask.key, &ask.holder, ask.ttl)).await)
}

/// [`LeaseStore::renew_many`] as one `renew` after the other (the trait's default).
/// A native `renew_many` falls back to it for a batch its one step cannot take, such
/// as one with a foreign lease (each `renew` then refuses just that one).
pub async fn renew_each<S: LeaseStore + ?Sized>(store: &S, leases: &[Lease]) -> BatchResult<Lease> {
    check_batch(store.capabilities(), "leases", leases.len())?;
    Ok(one_by_one(leases, |lease| store.renew(lease)).await)
}

/// [`LeaseStore::reap_many`] as one `reap` after the other (the trait's default).
pub(crate) async fn reap_each<S: LeaseStore + ?Sized>(
    store: &S,
    expired: &[(Key, FencingToken)],
) -> BatchResult<bool> {
    check_batch(store.capabilities(), "expired", expired.len())?;
    Ok(one_by_one(expired, |(key, token)| store.reap(key, *token)).await)
}

/// [`ItemStore::requeue_orphans_many`] as one `requeue_orphans` after the other (the
/// trait's default).
pub(crate) async fn requeue_each<S: ItemStore + ?Sized>(
    store: &S,
    tokens: &[FencingToken],
) -> BatchResult<Requeued> {
    Ok(one_by_one(tokens, |token| store.requeue_orphans(*token)).await)
}
