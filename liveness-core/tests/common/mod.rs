//! Helpers shared by the integration tests of this crate (each test binary uses
//! some of them).
#![allow(dead_code)]

pub mod probe;

use std::sync::Arc;
use std::time::Duration;

use liveness_core::{
    Clock, EnqueueOptions, ItemId, Key, ManualClock, Member, MemberConfig, MemoryServer, Namespace,
    Store, TokioClock, Ttl,
};
use tokio::time::Instant;

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

pub fn ns() -> Namespace {
    Namespace::new("test").unwrap()
}

pub fn ttl(ms: u64) -> Ttl {
    Ttl::from_millis(ms).unwrap()
}

/// A fresh store on the memory model, in the namespace `test`.
pub fn memory() -> Arc<dyn Store> {
    Arc::new(MemoryServer::new().store(&ns()))
}

/// Joins `store` as member `name` with a ttl of `ttl_ms`.
pub async fn join(store: &Arc<dyn Store>, name: &str, ttl_ms: u64) -> Member {
    Member::join(store.clone(), MemberConfig::new(name, ttl(ttl_ms)).unwrap())
        .await
        .unwrap()
}

/// Enqueues one item with the payload `job`.
pub async fn enqueue_job(store: &Arc<dyn Store>) -> ItemId {
    store
        .enqueue(b"job", EnqueueOptions::default())
        .await
        .unwrap()
}

/// Records, on tokio's (paused) clock, when `cancel` fires.
pub fn when_fired(cancel: liveness_core::CancellationToken) -> tokio::task::JoinHandle<Instant> {
    tokio::spawn(async move {
        cancel.cancelled().await;
        Instant::now()
    })
}

/// Whether `store` holds `key` live (`inspect` answers a record, which is live).
pub async fn live(store: &Arc<dyn Store>, key: &Key) -> bool {
    store.inspect(key).await.unwrap().unwrap().is_live()
}

/// Waits (by tokio's clock, at most `within`) until no item is pending or owned.
pub async fn all_done(store: &Arc<dyn Store>, within: Duration) {
    let until = Instant::now() + within;
    loop {
        let counts = store.item_counts().await.unwrap();
        if counts.pending + counts.owned == 0 {
            return;
        }
        assert!(Instant::now() < until, "items left: {counts:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
