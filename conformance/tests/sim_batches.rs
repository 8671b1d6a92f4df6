//! The fault simulation runs a store's own batch methods: a bug seeded into a
//! store's native `reap_many` is caught by the simulation's oracle. (When the
//! fault-injecting layer split every batch into single calls, the checker's
//! `reap_many` never reached the store's own, and this bug went unseen.)

use std::sync::Arc;

use liveness_conformance::sim::{simulate, SimConfig};
use liveness_core::layer::Intercepted;
use liveness_core::{
    async_trait, checked, Intercept, MemoryServer, Next, Reply, Request, Result, Store, Ttl,
};

/// A store whose native `reap_many` answers `true` for its last entry without
/// reaping it: the checker declares a death the store never recorded.
#[derive(Debug)]
struct ReapManySkipsItsLast;

#[async_trait]
impl Intercept for ReapManySkipsItsLast {
    async fn call(&self, req: Request, next: Next) -> Result<Reply> {
        let Request::ReapMany { expired: mut pairs } = req else {
            return next.run(req).await;
        };
        let Some(_skipped) = pairs.pop() else {
            return next.run(Request::ReapMany { expired: pairs }).await;
        };
        let mut answers = match next.run(Request::ReapMany { expired: pairs }).await? {
            Reply::ReapMany(answers) => answers,
            other => return Ok(other),
        };
        answers.push(Ok(true));
        Ok(Reply::ReapMany(answers))
    }
}

fn memory() -> Arc<dyn Store> {
    let ns = liveness_conformance::fresh_namespace();
    Arc::new(MemoryServer::new().store(&ns))
}

fn config() -> SimConfig {
    SimConfig::new(1, Ttl::from_millis(1500).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_reap_many_bug_is_caught_by_the_simulation() {
    let buggy: Arc<dyn Store> =
        Arc::new(Intercepted::new(memory(), Arc::new(ReapManySkipsItsLast)));
    let outcome = simulate(checked(buggy), config()).await;
    outcome.assert_caught("the seeded reap_many bug", &["reaped", "times"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_run_without_the_bug_is_clean() {
    let outcome = simulate(checked(memory()), config()).await;
    assert!(outcome.violations.is_empty(), "{:?}", outcome.violations);
}
