#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use liveness_core::{
    Capabilities, HolderId, Key, Lease, LeaseInfo, LeaseStatus, Space, Store, Ttl,
};

pub mod faults;
pub mod fixtures;
pub mod fleet;
pub mod property;
pub mod scale;
pub mod scenarios;
pub mod sim;
pub mod url_rules;

// The bench kit and the pieces the suite shares with it live in `liveness-bench` (a
// crate without proptest, which the `liveness` CLI can depend on); the suite's users
// reach them here as before.
pub use liveness_bench as bench;
pub use liveness_bench::util as bench_util;
pub use liveness_bench::{
    factory, fresh_namespace, memory_factory, skip, wrappers, Factory, StoreFuture,
};

/// What a scenario gets: a store on a fresh namespace, the factory (for a second
/// namespace), and ttls scaled to the store's declared minimum.
#[derive(Clone)]
pub struct Ctx {
    /// The store under test, on a fresh namespace.
    pub store: Arc<dyn Store>,
    /// The factory, for scenarios that need a second namespace.
    pub factory: Factory,
    /// A short ttl: the store's minimum, at least 400 ms. Expiry waits use it.
    pub ttl: Ttl,
    /// A ttl that never expires within a scenario: at least 60 s.
    pub long: Ttl,
}

impl Ctx {
    /// Builds the context for `store`, choosing ttls from its capabilities.
    pub fn new(store: Arc<dyn Store>, factory: Factory) -> Ctx {
        let caps = store.capabilities();
        let short = caps.min_ttl.max(Duration::from_millis(400));
        let long = (caps.min_ttl * 10)
            .max(Duration::from_secs(60))
            .min(caps.max_ttl);
        let ttl = Ttl::new(round_up_ms(short)).unwrap_or_else(|e| panic!("short ttl: {e}"));
        let long = Ttl::new(round_up_ms(long)).unwrap_or_else(|e| panic!("long ttl: {e}"));
        Ctx {
            store,
            factory,
            ttl,
            long,
        }
    }

    /// The ttl of the member and election scenarios: the store's minimum, at least
    /// 1.5 s, so that the default safety margin (ttl / 5) stays well above the timer
    /// delays of a loaded test machine.
    pub fn machine_ttl(&self) -> Ttl {
        let d = self.caps().min_ttl.max(Duration::from_millis(1500));
        Ttl::new(round_up_ms(d)).unwrap_or_else(|e| panic!("machine ttl: {e}"))
    }

    /// Acquires `key` for `holder` with `ttl`; panics (failing the scenario) when the
    /// store refuses.
    pub async fn grant(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Lease {
        self.store
            .acquire(key, holder, ttl)
            .await
            .unwrap_or_else(|e| panic!("acquire {key} for {holder}: {e}"))
    }

    /// The record of the lease on `key`; panics (failing the scenario) when there is
    /// none or the store fails.
    pub async fn info(&self, key: &Key) -> LeaseInfo {
        self.store
            .inspect(key)
            .await
            .unwrap_or_else(|e| panic!("inspect {key}: {e}"))
            .unwrap_or_else(|| panic!("no lease record on {key}"))
    }

    /// The store's capabilities.
    pub fn caps(&self) -> Capabilities {
        self.store.capabilities()
    }

    /// A store on another fresh namespace of the same backend.
    pub async fn other_namespace(&self) -> Arc<dyn Store> {
        (self.factory)()
            .await
            .unwrap_or_else(|| panic!("the factory gave a first store but no second"))
    }

    /// The longest a scenario waits for one lease to expire: four ttls plus two
    /// seconds (observer-local stores need one ttl of observation first).
    pub fn expiry_deadline(&self) -> Duration {
        self.ttl.duration() * 4 + Duration::from_secs(2)
    }

    /// Waits until the store reports the lease on `key` expired (polling `inspect`
    /// and `expired`, which is what observes leases on observer-local stores).
    /// Panics at [`Ctx::expiry_deadline`].
    pub async fn wait_expired(&self, key: &Key) {
        let until = tokio::time::Instant::now() + self.expiry_deadline();
        let step = (self.ttl.duration() / 10).max(Duration::from_millis(5));
        loop {
            let _ = self.store.expired(key.space(), 1000).await;
            match self.store.inspect(key).await {
                Ok(Some(info)) if info.status == LeaseStatus::Expired => return,
                Ok(None) => panic!("lease {key} vanished while waiting for it to expire"),
                Ok(Some(_)) => {}
                Err(e) => panic!("inspect {key} failed while waiting for expiry: {e}"),
            }
            assert!(
                tokio::time::Instant::now() < until,
                "lease {key} did not expire within {:?}",
                self.expiry_deadline()
            );
            tokio::time::sleep(step).await;
        }
    }

    /// Waits until `expired(space)` lists `key`.
    pub async fn wait_listed_expired(&self, key: &Key) {
        let until = tokio::time::Instant::now() + self.expiry_deadline();
        let step = (self.ttl.duration() / 10).max(Duration::from_millis(5));
        loop {
            let list = self
                .store
                .expired(key.space(), 1000)
                .await
                .unwrap_or_else(|e| panic!("expired failed: {e}"));
            if list.iter().any(|l| &l.key == key) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < until,
                "lease {key} was not listed expired within {:?}",
                self.expiry_deadline()
            );
            tokio::time::sleep(step).await;
        }
    }
}

fn round_up_ms(d: Duration) -> Duration {
    let ms = d.as_nanos().div_ceil(1_000_000);
    Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
}

/// A key in the members space with a random suffix.
pub fn member_key(prefix: &str) -> Key {
    Key::member(&format!("{prefix}-{:08x}", fastrand::u32(..)))
        .unwrap_or_else(|e| panic!("member key: {e}"))
}

/// A lease on the members key `name`, held by `w` for 60 s: one that stays live
/// through a test (what a batch test mixes in among expired ones).
pub async fn live_lease(store: &dyn Store, name: &str) -> Lease {
    let key = Key::member(name).unwrap_or_else(|e| panic!("member key: {e}"));
    let holder = HolderId::new("w").unwrap_or_else(|e| panic!("holder: {e}"));
    let ttl = Ttl::from_secs(60).unwrap_or_else(|e| panic!("ttl: {e}"));
    store
        .acquire(&key, &holder, ttl)
        .await
        .unwrap_or_else(|e| panic!("acquire {name}: {e}"))
}

/// The members space.
pub fn members() -> Space {
    Space::members()
}

/// How long one scenario may run before it is failed as hung.
pub const SCENARIO_TIMEOUT: Duration = Duration::from_secs(180);

/// Runs one named scenario against a fresh store from `factory` on a new
/// multi-threaded runtime. Used by [`suite!`]; call it directly to run one scenario.
///
/// A factory that returns `None` fails the scenario (it panics), unless
/// `LIVENESS_ALLOW_SKIP=1` is set outside CI: see [`skip`].
pub fn run(name: &str, factory: Factory) {
    let Some(scenario) = scenarios::SCENARIOS.iter().find(|s| s.name == name) else {
        panic!("no scenario named {name}");
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    rt.block_on(async {
        let Some(store) = factory().await else {
            skip::no_store(name, "the factory returned None");
            return;
        };
        let caps = store.capabilities();
        let offers_all = caps.items && caps.operator_views;
        if !scenario.leases && !offers_all {
            panic!(
                "scenario {name} needs work items and the operator's views, which this \
                 store does not offer (Capabilities::items, operator_views): a store of \
                 elections alone runs liveness_conformance::suite!(leases_only: factory)"
            );
        }
        let ctx = Ctx::new(store, factory.clone());
        match tokio::time::timeout(SCENARIO_TIMEOUT, (scenario.run)(ctx)).await {
            Ok(()) => {}
            Err(_) => panic!("scenario {name} did not finish within {SCENARIO_TIMEOUT:?}"),
        }
    });
}

/// Expands to one `#[test]` per conformance scenario, plus the property test and the
/// fault simulation (`fault_simulation`, [`sim::run_seeds`], and
/// `fault_simulation_sessions`, [`sim::run_session_seed`]: processes hosting members
/// riding one session), all run against stores made by `factory` (an `async fn() ->
/// Option<Arc<dyn Store>>` that returns a store on a fresh namespace each call). A
/// `None` from the factory fails every test, unless `LIVENESS_ALLOW_SKIP=1` is set
/// outside CI (see [`skip`]).
///
/// ```ignore
/// async fn factory() -> Option<Arc<dyn liveness_core::Store>> {
///     Some(Arc::new(MyStore::new(liveness_conformance::fresh_namespace())))
/// }
/// liveness_conformance::suite!(factory);
/// // or, with another default property-test case count (PROPTEST_CASES overrides it):
/// liveness_conformance::suite!(factory, cases = 64);
/// ```
///
/// A store of elections alone (`Capabilities { items: false, operator_views: false,
/// .. }`, with `impl ItemStore for MyStore {}` and `impl OperatorStore for MyStore {}`)
/// runs the scenarios of the lease contract, the members and the elections only:
///
/// ```ignore
/// liveness_conformance::suite!(leases_only: factory);
/// ```
#[macro_export]
macro_rules! suite {
    (leases_only: $factory:expr) => {
        $crate::__scenarios!(@list leases $factory);
    };
    ($factory:expr) => {
        $crate::suite!($factory, cases = 256);
    };
    ($factory:expr, cases = $cases:expr) => {
        $crate::__scenarios!(@list tests $factory);

        #[test]
        fn property_matches_model() {
            $crate::property::run($crate::factory($factory), $cases);
        }

        #[test]
        fn fault_simulation() {
            $crate::sim::run_seeds($crate::factory($factory));
        }

        #[test]
        fn fault_simulation_sessions() {
            $crate::sim::run_session_seed($crate::factory($factory));
        }
    };
}
