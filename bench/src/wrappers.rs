//! A forwarding store wrapper for tests and benches: counts store round trips, can
//! stall renewals (a member that is partitioned from the store, or paused), and can
//! lose the replies of claims the store applied, without touching the store itself.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use liveness_core::layer::Intercepted;
use liveness_core::{async_trait, Error, Intercept, Next, Op, Reply, Request, Result, Store};

/// Forwards every call to an inner store, counting them (a `*_many` call counts once:
/// one round trip on a store that implements it natively, one per entry on a store
/// that uses the trait's default loop); while
/// [`Wrapped::stall_renewals`] is on, `renew` calls hang (as if the network to the
/// store were cut) until it is turned off; while [`Wrapped::lose_claim_replies`] has
/// replies left to lose, a `claim` reaches the store, which applies it, and its answer
/// is replaced by [`Error::Unavailable`] (a reply lost on the way back).
#[derive(Debug)]
pub struct Wrapped {
    backend: &'static str,
    calls: AtomicU64,
    stalled: AtomicBool,
    lose_claims: AtomicU64,
    lose_completes: AtomicU64,
}

impl Wrapped {
    /// Wraps `inner`: the store, which dereferences to this wrapper's knobs.
    pub fn new(inner: Arc<dyn Store>) -> Intercepted<Wrapped> {
        let hook = Wrapped {
            backend: inner.backend(),
            calls: AtomicU64::new(0),
            stalled: AtomicBool::new(false),
            lose_claims: AtomicU64::new(0),
            lose_completes: AtomicU64::new(0),
        };
        Intercepted::new(inner, Arc::new(hook))
    }

    /// Loses the replies of the next `n` claims: the store applies each, and the
    /// caller gets [`Error::Unavailable`] instead of the items.
    pub fn lose_claim_replies(&self, n: u64) {
        self.lose_claims.store(n, Ordering::SeqCst);
    }

    /// Loses the replies of the next `n` completes, as
    /// [`Wrapped::lose_claim_replies`] does for claims.
    pub fn lose_complete_replies(&self, n: u64) {
        self.lose_completes.store(n, Ordering::SeqCst);
    }

    /// True (once per reply to lose) when this claim's reply is to be lost.
    fn lose_claim(&self) -> bool {
        take_one(&self.lose_claims)
    }
}

/// Takes one from a count of replies to lose; false when none is left.
fn take_one(count: &AtomicU64) -> bool {
    count
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

impl Wrapped {
    fn lost_reply(&self, op: &str) -> Error {
        Error::unavailable(
            self.backend,
            format!("the {op}'s reply was lost (injected)"),
        )
    }

    /// How many store calls went through so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Turns renewal stalling on or off.
    pub fn stall_renewals(&self, on: bool) {
        self.stalled.store(on, Ordering::SeqCst);
    }

    fn count(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl Intercept for Wrapped {
    async fn call(&self, req: Request, next: Next) -> Result<Reply> {
        let op = req.op();
        if matches!(op, Op::RenewMany) {
            while self.stalled.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        self.count();
        let answer = next.run(req).await?;
        let lost = match op {
            Op::Claim => self.lose_claim(),
            Op::Finish => take_one(&self.lose_completes),
            _ => false,
        };
        if lost {
            return Err(self.lost_reply(op.name()));
        }
        Ok(answer)
    }
}
