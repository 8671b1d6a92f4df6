//! The fault simulation in sessions mode on the memory store: processes host several
//! members riding one session, and kills, freezes and lost replies hit whole
//! processes. A few seeds run clean; a sweep that declares a member dead twice, and
//! members that keep acting past their session's deadline, are caught.

use std::sync::Arc;

use liveness_conformance::sim::{simulate, Outcome, SimConfig};
use liveness_core::layer::Intercepted;
use liveness_core::{
    async_trait, checked, Intercept, MemoryServer, Next, Reply, Request, Result, Store, Sweep, Ttl,
};

fn memory() -> Arc<dyn Store> {
    let ns = liveness_conformance::fresh_namespace();
    let store: Arc<dyn Store> = Arc::new(MemoryServer::new().store(&ns));
    assert!(store.capabilities().sessions);
    store
}

fn config(seed: u64) -> SimConfig {
    SimConfig::new(seed, Ttl::from_millis(1500).unwrap()).with_sessions(2)
}

async fn run(store: Arc<dyn Store>, config: SimConfig) -> Outcome {
    let outcome = simulate(checked(store), config).await;
    eprintln!(
        "seed {}: {:?}; chaos: {}",
        outcome.seed,
        outcome.injected,
        outcome.schedule.join(", ")
    );
    outcome
}

fn assert_clean(outcome: &Outcome) {
    assert!(
        outcome.schedule.iter().any(|s| s.contains("Kill")),
        "no process was killed: {:?}",
        outcome.schedule
    );
    assert!(
        outcome.violations.is_empty(),
        "seed {}: {:?}\n{}",
        outcome.seed,
        outcome.violations,
        outcome.tail
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_hosts_survive_kills_freezes_and_lost_replies_seed_1() {
    assert_clean(&run(memory(), config(1)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_hosts_survive_kills_freezes_and_lost_replies_seed_2() {
    assert_clean(&run(memory(), config(2)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_hosts_survive_kills_freezes_and_lost_replies_seed_3() {
    assert_clean(&run(memory(), config(3)).await);
}

/// A store whose sweep of a dead session declares its first member dead twice in the
/// same answer: the checker reports that death twice.
#[derive(Debug)]
struct SweepDeclaresOneTwice;

fn twice(mut moved: Sweep) -> Sweep {
    if let Some(first) = moved.members.first().cloned() {
        moved.members.push(first);
    }
    moved
}

#[async_trait]
impl Intercept for SweepDeclaresOneTwice {
    async fn call(&self, req: Request, next: Next) -> Result<Reply> {
        Ok(match next.run(req).await? {
            Reply::SweepMany(answers) => {
                Reply::SweepMany(answers.into_iter().map(|a| a.map(twice)).collect())
            }
            other => other,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_that_declares_a_member_dead_twice_is_caught() {
    let buggy: Arc<dyn Store> =
        Arc::new(Intercepted::new(memory(), Arc::new(SweepDeclaresOneTwice)));
    let outcome = run(buggy, config(1)).await;
    outcome.assert_caught(
        "the sweep's double declaration",
        &["declared dead by a session's sweep", "2 times"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_acting_past_their_session_deadline_are_caught() {
    let config = SimConfig {
        careless: true,
        ..config(7)
    };
    let outcome = run(memory(), config).await;
    outcome.assert_caught(
        "members acting past their session's deadline",
        &["past its deadline"],
    );
}
