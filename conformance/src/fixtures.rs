//! One-line set-ups for the backends' own tests (what the suite cannot see: TLS,
//! faults, schemas), so each test shows only what it checks.

use std::time::Duration;

use liveness_core::{DeathRecord, EnqueueOptions, FencingToken, ItemId, Lease, Store, Ttl};
use tokio::time::Instant;

pub use liveness_bench::fixtures::{acquire_member, session_with_members};

/// `n` member leases `{prefix}0`, `{prefix}1`, … for holder `w` with `ttl`, in order,
/// each owning one item it claimed (its payload the member's name): the set-up of a
/// test about what happens to a dead owner's items.
///
/// # Panics
///
/// When the store refuses a step, or a claim answers other than the item just
/// enqueued, as the store reads it back.
pub async fn owners_with_items<S: Store + ?Sized>(
    store: &S,
    prefix: &str,
    n: usize,
    ttl: Ttl,
) -> Vec<(Lease, ItemId)> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("{prefix}{i}");
        let lease = acquire_member(store, &name, "w", ttl).await;
        let id = store
            .enqueue(name.as_bytes(), EnqueueOptions::default())
            .await
            .unwrap_or_else(|e| panic!("enqueue for {name}: {e}"));
        let claimed = store
            .claim(&lease, 1)
            .await
            .unwrap_or_else(|e| panic!("claim by {name}: {e}"));
        let stored = store
            .item(id)
            .await
            .unwrap_or_else(|e| panic!("item {id:?}: {e}"))
            .unwrap_or_else(|| panic!("item {id:?} is gone"));
        // The claim also says how long the item waited, which a read does not.
        let claimed: Vec<_> = claimed.into_iter().map(|i| i.with_waited(None)).collect();
        assert_eq!(claimed, vec![stored.item], "{name} claims its item");
        out.push((lease, id));
    }
    out
}

/// Renews `lease` with `ttl` in place of its own (a store renews with the ttl the
/// lease value carries): how a test makes a long-lived lease expire soon.
///
/// # Panics
///
/// When the store refuses the renewal.
pub async fn renew_with_ttl<S: Store + ?Sized>(store: &S, lease: &Lease, ttl: Ttl) -> Lease {
    let mut other = lease.clone();
    other.ttl = ttl;
    store
        .renew(&other)
        .await
        .unwrap_or_else(|e| panic!("renew {:?} with ttl {ttl:?}: {e}", lease.key))
}

/// Waits until every one of `leases` has expired by the store clock (the lease on its
/// key is no longer live), polling every 20 ms.
///
/// # Panics
///
/// After 30 s, when the store fails, or when a key has no lease at all.
pub async fn wait_expired<'a, S: Store + ?Sized>(
    store: &S,
    leases: impl IntoIterator<Item = &'a Lease>,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for lease in leases {
        let key = &lease.key;
        while store
            .inspect(key)
            .await
            .unwrap_or_else(|e| panic!("inspect {key:?}: {e}"))
            .unwrap_or_else(|| panic!("{key:?} has no lease"))
            .is_live()
        {
            assert!(Instant::now() < deadline, "never expired");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The death record of the dead session whose token is `session`, once its members
/// (`members`, their tokens) are declared dead and swept, checked against the sessions
/// contract: one record for the session (none per member), swept, counting the
/// members and the `requeued` items their sweeps moved.
///
/// # Panics
///
/// When the store fails or its death history breaks one of those rules.
pub async fn swept_session_record<S: Store + ?Sized>(
    store: &S,
    session: FencingToken,
    members: &[FencingToken],
    requeued: u64,
) -> DeathRecord {
    let deaths = store
        .deaths(None, 1000)
        .await
        .unwrap_or_else(|e| panic!("deaths: {e}"));
    assert!(
        deaths.iter().all(|d| !members.contains(&d.token)),
        "no record per member"
    );
    let mut of_session: Vec<_> = deaths.into_iter().filter(|d| d.token == session).collect();
    assert_eq!(of_session.len(), 1, "one record for the session");
    let record = of_session.remove(0);
    let swept = record.swept.expect("the session's record swept");
    assert_eq!(swept.requeued, requeued, "it counts its members' items");
    assert_eq!(swept.members, members.len() as u64, "it counts its members");
    record
}
