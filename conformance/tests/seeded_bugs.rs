//! The batch scenarios catch what they are written for: a store that forwards every
//! call to the memory store except for one seeded bug in one batch method fails the
//! scenarios that check that method, and the memory store itself passes them.
//!
//! Each bug answers like a correct store would at a glance (`Ok`, one answer per
//! entry; the input checks in front refuse oversized batches and foreign leases) and is wrong in
//! what it does to the store, at one position of the batch: the kind of bug a native
//! batch method hides from a suite that reads only the answers.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

use liveness_core::layer::Intercepted;
use liveness_core::{
    async_trait, Error, FencingToken, Intercept, Lease, MemoryServer, Next, Reply, Request, Result,
    Store, Sweep,
};

/// The one thing the seeded store does wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    /// None: the memory store as it is (the control).
    None,
    /// `renew_many` answers every lease `Ok` with its full ttl left, and renews none
    /// (it never reaches the inner store).
    RenewManyNeverExtends,
    /// `renew_many` answers each lease what `renew` would (`Ok` with its full ttl for a
    /// current, live lease; the inner store's `Lost` otherwise), and renews none.
    RenewManyAnswersWithoutExtending,
    /// `renew_many` answers its first lease `Ok`, unchanged, without renewing it.
    RenewManySkipsFirst,
    /// `reap_many` answers its first entry `false` without reaping it.
    ReapManySkipsFirst,
    /// `reap_many` answers its last entry `false` without reaping it.
    ReapManySkipsLast,
    /// `sweep_many` answers its last token empty without requeueing it.
    SweepManySkipsLast,
    /// `acquire_many` answers its middle entry (of three or more) `Held`, naming the
    /// caller and the token before it, without acquiring it.
    AcquireManyDropsMiddle,
}

/// One [`Bug`] seeded into one batch method of the store behind it: a layer that sends
/// every other call (and every other entry of that method) on unchanged. The store
/// under it is the memory store; the suite's `factory` puts the input checks in front.
#[derive(Debug)]
struct Seeded {
    bug: Bug,
}

#[async_trait]
impl Intercept for Seeded {
    async fn call(&self, req: Request, next: Next) -> Result<Reply> {
        let store = next.store().clone();
        Ok(match (self.bug, req) {
            (Bug::AcquireManyDropsMiddle, Request::AcquireMany { asks }) if asks.len() >= 3 => {
                let middle = asks.len() / 2;
                let mut answers = store.acquire_many(&asks[..middle]).await?;
                let before = match answers.last() {
                    Some(Ok(lease)) => lease.token,
                    _ => FencingToken(1),
                };
                answers.push(Err(Error::Held {
                    key: asks[middle].key.clone(),
                    holder: asks[middle].holder.clone(),
                    token: before,
                }));
                answers.extend(store.acquire_many(&asks[middle + 1..]).await?);
                Reply::AcquireMany(answers)
            }
            (Bug::RenewManyNeverExtends, Request::RenewMany { leases }) => {
                Reply::RenewMany(leases.iter().map(|l| Ok(full_ttl(l))).collect())
            }
            (Bug::RenewManyAnswersWithoutExtending, Request::RenewMany { leases }) => {
                let mut answers = Vec::with_capacity(leases.len());
                for lease in &leases {
                    let info = store.inspect(&lease.key).await?;
                    let current = info.is_some_and(|i| i.is_live() && i.token == lease.token);
                    answers.push(match current {
                        true => Ok(full_ttl(lease)),
                        // Lost: the inner store changes nothing.
                        false => store.renew(lease).await,
                    });
                }
                Reply::RenewMany(answers)
            }
            (Bug::RenewManySkipsFirst, Request::RenewMany { leases }) if !leases.is_empty() => {
                let mut answers = vec![Ok(leases[0].clone())];
                answers.extend(store.renew_many(&leases[1..]).await?);
                Reply::RenewMany(answers)
            }
            (Bug::ReapManySkipsFirst, Request::ReapMany { expired: pairs })
                if !pairs.is_empty() =>
            {
                let mut answers = vec![Ok(false)];
                answers.extend(store.reap_many(&pairs[1..]).await?);
                Reply::ReapMany(answers)
            }
            (Bug::ReapManySkipsLast, Request::ReapMany { expired: pairs }) if !pairs.is_empty() => {
                let mut answers = store.reap_many(&pairs[..pairs.len() - 1]).await?;
                answers.push(Ok(false));
                Reply::ReapMany(answers)
            }
            (Bug::SweepManySkipsLast, Request::SweepMany { tokens }) if !tokens.is_empty() => {
                let last = tokens.len() - 1;
                let mut answers = store.sweep_many(&tokens[..last]).await?;
                answers.push(Ok(Sweep::default()));
                Reply::SweepMany(answers)
            }
            (_, req) => return next.run(req).await,
        })
    }
}

/// `lease` with its whole ttl left: what a renewal of it would answer.
fn full_ttl(lease: &Lease) -> Lease {
    lease.renewed()
}

fn server() -> &'static MemoryServer {
    static SERVER: OnceLock<MemoryServer> = OnceLock::new();
    SERVER.get_or_init(MemoryServer::new)
}

/// A factory of fresh namespaces on the memory server, each behind a store with `bug`.
fn seeded(bug: Bug) -> liveness_conformance::Factory {
    liveness_conformance::factory(move || {
        let inner: Arc<dyn Store> =
            Arc::new(server().store(&liveness_conformance::fresh_namespace()));
        let store: Arc<dyn Store> = Arc::new(Intercepted::new(inner, Arc::new(Seeded { bug })));
        async move { Some(store) }
    })
}

/// Runs scenario `name` on stores with `bug`: `Err` with its failure message when it
/// fails.
fn outcome(name: &str, bug: Bug) -> std::result::Result<(), String> {
    catch_unwind(AssertUnwindSafe(|| {
        liveness_conformance::run(name, seeded(bug));
    }))
    .map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".to_string())
    })
}

/// Asserts that scenario `name` fails on stores with `bug`, with a message that
/// contains `says` (the method and the entry it points at).
fn caught(name: &str, bug: Bug, says: &str) {
    match outcome(name, bug) {
        Ok(()) => panic!("{name} passed a store with the seeded bug {bug:?}"),
        Err(message) => assert!(
            message.contains(says),
            "{name} failed on {bug:?}, but its message does not point at {says:?}: {message}"
        ),
    }
}

/// The scenarios these bugs are seeded for.
const SCENARIOS: &[&str] = &[
    "acquire_many_takes_each_entry_at_every_position",
    "renew_many_extends_each_entry_at_every_position",
    "reap_many_reaps_each_entry_at_every_position",
    "sweep_many_requeues_each_token_at_every_position",
    "members_renewed_through_a_batcher_stay_live",
];

/// The control: the memory store itself passes every scenario the bugs are seeded for.
#[test]
fn the_memory_store_passes() {
    for name in SCENARIOS {
        if let Err(message) = outcome(name, Bug::None) {
            panic!("{name} failed on the memory store: {message}");
        }
    }
}

/// A `renew_many` that answers `Ok` with the full ttl but extends nothing: the store
/// still has the acquire's ttl, and members renewing through a batcher expire.
#[test]
fn renew_many_that_never_extends_is_caught() {
    caught(
        "renew_many_extends_each_entry_at_every_position",
        Bug::RenewManyNeverExtends,
        "renew_many entry 0 of a batch of 1",
    );
    caught(
        "members_renewed_through_a_batcher_stay_live",
        Bug::RenewManyNeverExtends,
        "a renew_many that answers Ok without extending does this",
    );
}

/// A `renew_many` that answers each lease what `renew` would (`Lost` included) and
/// extends none.
#[test]
fn renew_many_answering_without_extending_is_caught() {
    caught(
        "renew_many_extends_each_entry_at_every_position",
        Bug::RenewManyAnswersWithoutExtending,
        "renew_many entry 0 of a batch of 1",
    );
    caught(
        "members_renewed_through_a_batcher_stay_live",
        Bug::RenewManyAnswersWithoutExtending,
        "a renew_many that answers Ok without extending does this",
    );
}

/// A `renew_many` that skips its first lease (answers it `Ok`, unchanged).
#[test]
fn renew_many_skipping_its_first_lease_is_caught() {
    caught(
        "renew_many_extends_each_entry_at_every_position",
        Bug::RenewManySkipsFirst,
        "renew_many entry 0 of a batch of 1",
    );
}

/// A `reap_many` that skips its first entry (answers `false` without reaping).
#[test]
fn reap_many_skipping_its_first_entry_is_caught() {
    caught(
        "reap_many_reaps_each_entry_at_every_position",
        Bug::ReapManySkipsFirst,
        "reap_many entry 0 of a batch of 1",
    );
}

/// A `reap_many` that skips its last entry.
#[test]
fn reap_many_skipping_its_last_entry_is_caught() {
    caught(
        "reap_many_reaps_each_entry_at_every_position",
        Bug::ReapManySkipsLast,
        "reap_many entry 0 of a batch of 1",
    );
}

/// A `sweep_many` that skips its last token (answers it empty).
#[test]
fn sweep_many_skipping_its_last_token_is_caught() {
    caught(
        "sweep_many_requeues_each_token_at_every_position",
        Bug::SweepManySkipsLast,
        "sweep_many entry 0 of a batch of 1",
    );
}

/// An `acquire_many` that drops its middle entry (answers `Held` without acquiring).
#[test]
fn acquire_many_dropping_its_middle_entry_is_caught() {
    caught(
        "acquire_many_takes_each_entry_at_every_position",
        Bug::AcquireManyDropsMiddle,
        "acquire_many entry 1 of a batch of 3",
    );
}
