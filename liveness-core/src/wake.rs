//! Wake-up signals: the `tokio::sync::watch` channel of `u64` that a store hands out
//! from [`LeaseStore::wakeups`](crate::LeaseStore::wakeups). The sender [`tick`]s it
//! when something happened that a checker or an election should look at; a waiter
//! selects on [`woken`] beside its own timer.
//!
//! ```
//! use liveness_core::wake::{tick, woken};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let (tx, rx) = tokio::sync::watch::channel(0u64);
//! let mut wake = Some(rx);
//! tick(&tx);
//! woken(&mut wake).await; // resolves: the signal ticked
//! # }
//! ```

use tokio::sync::watch;

/// Ticks the signal: every receiver's next [`woken`] resolves. Never blocks, and
/// works with no receiver at all.
pub fn tick(wake: &watch::Sender<u64>) {
    wake.send_modify(|n| *n = n.wrapping_add(1));
}

/// Resolves when the store's wake-up signal ticks; never, when the store has none or
/// its signal is gone (the caller's timer then decides).
pub async fn woken(wake: &mut Option<watch::Receiver<u64>>) {
    let ticked = match wake.as_mut() {
        Some(rx) => rx.changed().await.is_ok(),
        None => false,
    };
    if !ticked {
        std::future::pending::<()>().await;
    }
}
