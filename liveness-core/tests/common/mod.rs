//! Helpers shared by the integration tests of this crate.

use std::sync::Arc;
use std::time::Duration;

use liveness_core::{Clock, ManualClock, TokioClock};

/// A host clock for tests: monotonic time is tokio's (paused) time; boot time adds a
/// suspend that the test injects by hand, as a laptop lid or a VM suspend does.
#[derive(Debug, Clone)]
pub struct SuspendableHost {
    tokio: TokioClock,
    suspended: ManualClock,
}

impl SuspendableHost {
    /// A host that has not been suspended yet, and the clock that suspends it
    /// (advance it by the length of a suspend).
    pub fn new() -> (SuspendableHost, ManualClock) {
        let suspended = ManualClock::new();
        let host = SuspendableHost {
            tokio: TokioClock::new(),
            suspended: suspended.clone(),
        };
        (host, suspended)
    }

    /// [`SuspendableHost::new`], as the clock a member or an election takes.
    pub fn shared() -> (Arc<dyn Clock>, ManualClock) {
        let (host, suspended) = SuspendableHost::new();
        (Arc::new(host), suspended)
    }
}

impl Clock for SuspendableHost {
    fn now(&self) -> Duration {
        self.tokio.now()
    }
    fn boot(&self) -> Duration {
        self.tokio.now() + self.suspended.now()
    }
}
