//! A dead session's sweep as a checker makes it: `sweep` of the session's token, call
//! after call, each call declaring at most one batch of the session's members dead,
//! timed.

use std::time::Duration;

use liveness_core::{FencingToken, Result, Store, Sweep};
use tokio::time::Instant;

/// What one session's sweep took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SweepFigures {
    /// The `sweep` calls made, the last one included.
    pub calls: usize,
    /// The members they declared dead.
    pub members: usize,
    /// The longest of the calls.
    pub longest: Duration,
    /// The whole sweep, from the first call to the end of the last `done`.
    pub took: Duration,
}

/// Sweeps the dead session `token` on `store`: calls `sweep(token)` until `done`,
/// asked after each call with its answer, says the sweep is over (for a sweep that
/// ends with the first call that declares no member dead:
/// `async |moved| moved.members.is_empty()`).
///
/// # Errors
///
/// The first error a call answers.
pub async fn sweep_members<S: Store + ?Sized>(
    store: &S,
    token: FencingToken,
    mut done: impl AsyncFnMut(&Sweep) -> bool,
) -> Result<SweepFigures> {
    let started = Instant::now();
    let mut figures = SweepFigures::default();
    loop {
        let call = Instant::now();
        let moved = store.sweep(token).await?;
        figures.longest = figures.longest.max(call.elapsed());
        figures.calls += 1;
        figures.members += moved.members.len();
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
    async fn a_released_session_is_swept_in_batches_until_a_call_declares_no_member_dead() {
        let caps = liveness_core::Capabilities::default().max_batch(2);
        let store = liveness_core::MemoryServer::new()
            .with_capabilities(caps)
            .store(&crate::fresh_namespace());
        let ttl = Ttl::from_secs(30).unwrap_or_else(|e| panic!("{e}"));
        let (session, _members) = session_with_members(&store, "p0", "sweep", ttl, 5).await;
        assert!(store
            .release(&session)
            .await
            .unwrap_or_else(|e| panic!("{e}")));
        let figures = sweep_members(&store, session.token, async |moved| {
            moved.members.is_empty()
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        // Batches of 2, 2 and 1, then the call that declares no member dead.
        assert_eq!((figures.members, figures.calls), (5, 4));
        assert!(figures.longest <= figures.took);
    }
}
