//! The drain of a dead session's token as a checker sweeps it: `requeue_orphans` of
//! the token, call after call, each call retiring at most one batch of the session's
//! members, timed.

use std::time::Duration;

use liveness_core::{FencingToken, Requeued, Result, Store};
use tokio::time::Instant;

/// What one drain took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drain {
    /// The `requeue_orphans` calls made, the last one included.
    pub calls: usize,
    /// The members they retired.
    pub retired: usize,
    /// The longest of the calls.
    pub longest: Duration,
    /// The whole drain, from the first call to the end of the last `done`.
    pub took: Duration,
}

/// Drains `token` on `store`: calls `requeue_orphans(token)` until `done`, asked after
/// each call with its answer, says the drain is over (for a drain that ends with the
/// first call that retires nothing: `async |moved| moved.retired.is_empty()`).
///
/// # Errors
///
/// The first error a call answers.
pub async fn drain<S: Store + ?Sized>(
    store: &S,
    token: FencingToken,
    mut done: impl AsyncFnMut(&Requeued) -> bool,
) -> Result<Drain> {
    let started = Instant::now();
    let mut figures = Drain::default();
    loop {
        let call = Instant::now();
        let moved = store.requeue_orphans(token).await?;
        figures.longest = figures.longest.max(call.elapsed());
        figures.calls += 1;
        figures.retired += moved.retired.len();
        if done(&moved).await {
            figures.took = started.elapsed();
            return Ok(figures);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::session_with_members;
    use liveness_core::{LeaseStore, Ttl};

    #[tokio::test]
    async fn a_released_session_is_drained_in_batches_until_a_call_retires_nothing() {
        let caps = liveness_core::Capabilities {
            max_batch: 2,
            ..liveness_core::Capabilities::default()
        };
        let store = liveness_core::MemoryServer::new()
            .with_capabilities(caps)
            .store(&crate::fresh_namespace());
        let ttl = Ttl::from_secs(30).unwrap_or_else(|e| panic!("{e}"));
        let (session, _members) = session_with_members(&store, "p0", "drain", ttl, 5).await;
        assert!(store
            .release(&session)
            .await
            .unwrap_or_else(|e| panic!("{e}")));
        let figures = drain(&store, session.token, async |moved| {
            moved.retired.is_empty()
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        // Batches of 2, 2 and 1, then the call that retires nothing.
        assert_eq!((figures.retired, figures.calls), (5, 4));
        assert!(figures.longest <= figures.took);
    }
}
