//! Pieces the backends' benches share for their bare-primitive loops (the baselines
//! printed beside the kit's [figures](crate)): the leases they renew and the timed
//! loop that counts operations per second. Re-exported as
//! `liveness_conformance::bench_util`.

use std::future::Future;
use std::time::Duration;

use liveness_core::{Acquire, HolderId, Key, Lease, Result, Store, Ttl};
use tokio::time::Instant;

use crate::fixtures::acquire_member;

/// Acquires `n` member leases `{prefix}0`, `{prefix}1`, … for `holder`, one at a
/// time, so that every lease is taken before a loop's clock starts.
///
/// # Panics
///
/// When a name is not a valid key or holder, or the store refuses: a bench's set-up.
pub async fn member_leases<S: Store + ?Sized>(
    store: &S,
    prefix: &str,
    n: usize,
    holder: &str,
    ttl: Ttl,
) -> Vec<Lease> {
    let mut leases = Vec::with_capacity(n);
    for i in 0..n {
        leases.push(acquire_member(store, &format!("{prefix}{i}"), holder, ttl).await);
    }
    leases
}

/// Takes `n` member leases `{prefix}0`, `{prefix}1`, … for `holder` in `acquire_many`
/// calls of at most 1,000 (a fleet too large to take one lease at a time). The first
/// refusal ends it with that error.
pub async fn member_leases_batched<S: Store + ?Sized>(
    store: &S,
    prefix: &str,
    n: usize,
    holder: &HolderId,
    ttl: Ttl,
) -> Result<Vec<Lease>> {
    let batch = store.capabilities().max_batch.clamp(1, 1000);
    let mut leases = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(batch) {
        let asks = chunk
            .iter()
            .map(|i| {
                Ok(Acquire::new(
                    Key::member(&format!("{prefix}{i}"))?,
                    holder.clone(),
                    ttl,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        for taken in store.acquire_many(&asks).await? {
            leases.push(taken?);
        }
    }
    Ok(leases)
}

/// Runs `op` in a loop for `seconds` on each of `workers`, each in its own task, and
/// answers how many calls per second answered `true` (see
/// [`per_second`](crate::per_second)).
///
/// `op` takes its worker's state and hands it back with its answer, so the state
/// may hold what the operation uses mutably (a dedicated connection).
pub async fn ops_per_second<T, F, Fut>(workers: Vec<T>, seconds: f64, op: F) -> f64
where
    T: Send + 'static,
    F: Fn(T) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = (T, bool)> + Send,
{
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|mut worker| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < until {
                    let (back, done) = op(worker).await;
                    worker = back;
                    if done {
                        n += 1;
                    }
                }
                n
            })
        })
        .collect();
    crate::per_second(start, tasks).await
}
