//! One-line set-ups shared by the bench kit's tests, the conformance suite's fixtures
//! (`liveness_conformance::fixtures` re-exports them) and the workspace's test kit: a
//! member's lease, a session with members riding it.

use liveness_core::{HolderId, Key, Lease, Name, Space, Store, Ttl};

/// Acquires the lease of member `name` for `holder` with `ttl`.
///
/// # Panics
///
/// When a name is not a valid member key or holder, or the store refuses: it is a
/// test's set-up, whose failure fails the test.
pub async fn acquire_member<S: Store + ?Sized>(
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

/// The session lease on `name` for `holder` with `ttl`, and `n` members `m0`, `m1`, …
/// of the same holder riding it, joined one by one; the members in order.
///
/// # Panics
///
/// When a name is not a valid session name or holder, or the store refuses.
pub async fn session_with_members<S: Store + ?Sized>(
    store: &S,
    name: &str,
    holder: &str,
    ttl: Ttl,
    n: usize,
) -> (Lease, Vec<Lease>) {
    let key = Name::new(name)
        .map(|name| Key::new(Space::sessions(), name))
        .unwrap_or_else(|e| panic!("session name {name:?}: {e}"));
    let holder = HolderId::new(holder).unwrap_or_else(|e| panic!("holder {holder:?}: {e}"));
    let session = store
        .acquire(&key, &holder, ttl)
        .await
        .unwrap_or_else(|e| panic!("session {name:?}: {e}"));
    let mut members = Vec::with_capacity(n);
    for i in 0..n {
        let key = Key::member(&format!("m{i}")).unwrap_or_else(|e| panic!("{e}"));
        let member = store.join_session(&session, &key, &holder).await;
        members.push(member.unwrap_or_else(|e| panic!("join m{i}: {e}")));
    }
    (session, members)
}
