//! One-line set-ups for the backends' own tests (what the suite cannot see: TLS,
//! faults, schemas), so each test shows only what it checks.

use liveness_core::{HolderId, Key, Lease, LeaseStore, Ttl};

/// Acquires the lease of member `name` for `holder` with `ttl`.
///
/// # Panics
///
/// When a name is not a valid member key or holder, or the store refuses: it is a
/// test's set-up, whose failure fails the test.
pub async fn acquire_member<S: LeaseStore + ?Sized>(
    store: &S,
    name: &str,
    holder: &str,
    ttl: Ttl,
) -> Lease {
    let key = Key::member(name).unwrap_or_else(|e| panic!("member key {name:?}: {e}"));
    let holder = HolderId::new(holder).unwrap_or_else(|e| panic!("holder {holder:?}: {e}"));
    store
        .acquire(&key, &holder, ttl)
        .await
        .unwrap_or_else(|e| panic!("acquire {name:?}: {e}"))
}
