//! Lease scenarios: acquire, renew, release, inspect, expired, reap, next_expiry,
//! store_time (the `LeaseStore` contract bullets).

use std::time::Duration;

use liveness_core::{Error, Lease, LeaseStatus, LostCause, Ttl};

use super::common::holder;
use crate::{member_key, members, Ctx};

/// acquire on a free key succeeds with a token and about one ttl left, and inspect
/// shows it live with the same holder and token.
pub async fn acquire_free_key(ctx: Ctx) {
    let key = member_key("a");
    let lease = ctx.grant(&key, &holder("h1"), ctx.long).await;
    assert_eq!(lease.key, key);
    assert_eq!(lease.holder, holder("h1"));
    assert_eq!(lease.ttl, ctx.long);
    assert!(lease.expires_in <= ctx.long.duration());
    assert!(
        lease.expires_in > ctx.long.duration() / 2,
        "{:?}",
        lease.expires_in
    );
    let info = ctx.info(&key).await;
    assert_eq!(info.token, lease.token);
    assert_eq!(info.holder, holder("h1"));
    assert!(info.is_live());
}

/// acquire on a live lease fails with Held naming the holder and token, and changes
/// nothing.
pub async fn acquire_held_key_fails_unchanged(ctx: Ctx) {
    let key = member_key("held");
    let first = ctx.grant(&key, &holder("h1"), ctx.long).await;
    match ctx.store.acquire(&key, &holder("h2"), ctx.long).await {
        Err(Error::Held {
            key: k,
            holder: h,
            token,
        }) => {
            assert_eq!(k, key);
            assert_eq!(h, holder("h1"));
            assert_eq!(token, first.token);
        }
        other => panic!("expected Held, got {other:?}"),
    }
    let info = ctx.store.inspect(&key).await.unwrap().unwrap();
    assert_eq!(info.token, first.token);
    assert_eq!(info.holder, holder("h1"));
    ctx.store
        .renew(&first)
        .await
        .expect("first holder still renews");
}

/// Tokens strictly increase over every acquisition in the namespace: across keys,
/// after release, after expiry, after reap.
pub async fn tokens_strictly_increase(ctx: Ctx) {
    let s = &ctx.store;
    let (k1, k2) = (member_key("t1"), member_key("t2"));
    let a = ctx.grant(&k1, &holder("h"), ctx.long).await;
    let b = ctx.grant(&k2, &holder("h"), ctx.long).await;
    assert!(b.token > a.token);
    assert!(s.release(&a).await.unwrap());
    let c = ctx.grant(&k1, &holder("h"), ctx.ttl).await;
    assert!(
        c.token > b.token,
        "re-acquire after release reused or lowered a token"
    );
    ctx.wait_expired(&k1).await;
    let d = ctx.grant(&k1, &holder("h"), ctx.ttl).await;
    assert!(d.token > c.token, "acquire after expiry");
    ctx.wait_expired(&k1).await;
    assert!(s.reap(&k1, d.token).await.unwrap());
    let e = ctx.grant(&k1, &holder("h"), ctx.long).await;
    assert!(e.token > d.token, "acquire after reap");
}

/// renew before expiry succeeds and restores about one ttl of time left.
pub async fn renew_extends_live_lease(ctx: Ctx) {
    let key = member_key("renew");
    let lease = ctx.grant(&key, &holder("h"), ctx.ttl).await;
    // Renew three times across more than one ttl in total: each keeps it live.
    for _ in 0..3 {
        tokio::time::sleep(ctx.ttl.duration() / 3).await;
        let renewed = ctx
            .store
            .renew(&lease)
            .await
            .expect("renew of a live lease");
        assert_eq!(renewed.token, lease.token, "renew never changes the token");
        assert!(renewed.expires_in > ctx.ttl.duration() / 2);
    }
    let info = ctx.store.inspect(&key).await.unwrap().unwrap();
    assert!(info.is_live());
    assert_eq!(info.token, lease.token);
}

/// An expired lease is NEVER renewed, even when nobody else took the key: Lost with
/// Expired, and the record stays as it was (expired, same token).
pub async fn expired_lease_never_renewed(ctx: Ctx) {
    let key = member_key("exp");
    let lease = ctx.grant(&key, &holder("h"), ctx.ttl).await;
    ctx.wait_expired(&key).await;
    match ctx.store.renew(&lease).await {
        Err(Error::Lost { reason, token, .. }) => {
            assert_eq!(reason, LostCause::Expired);
            assert_eq!(token, lease.token);
        }
        other => panic!("expected Lost(Expired), got {other:?}"),
    }
    let info = ctx.info(&key).await;
    assert_eq!(info.status, LeaseStatus::Expired);
    assert_eq!(info.token, lease.token);
    // Still not renewable a second time.
    assert_eq!(
        ctx.store.renew(&lease).await.unwrap_err().lost_reason(),
        Some(LostCause::Expired)
    );
}

/// renew of a superseded lease answers Lost(Superseded); of a released one,
/// Lost(Released); neither changes the current holder.
pub async fn renew_superseded_or_released_is_lost(ctx: Ctx) {
    let key = member_key("sup");
    let old = ctx.grant(&key, &holder("old"), ctx.ttl).await;
    ctx.wait_expired(&key).await;
    let new = ctx.grant(&key, &holder("new"), ctx.long).await;
    assert_eq!(
        ctx.store.renew(&old).await.unwrap_err().lost_reason(),
        Some(LostCause::Superseded)
    );
    let info = ctx.store.inspect(&key).await.unwrap().unwrap();
    assert_eq!(info.token, new.token);
    assert!(ctx.store.release(&new).await.unwrap());
    assert_eq!(
        ctx.store.renew(&new).await.unwrap_err().lost_reason(),
        Some(LostCause::Released)
    );
    assert!(ctx.store.inspect(&key).await.unwrap().is_none());
}

/// renew extends the lease by the ttl carried in the lease value passed in
/// (`lease.ttl`), not the one it was acquired with: that ttl becomes the lease's own
/// (inspect reports it; the lease expires by it). A ttl outside the capabilities is
/// InvalidInput and changes nothing; on an expired lease, Lost(Expired) comes first.
pub async fn renew_uses_the_lease_values_ttl(ctx: Ctx) {
    let key = member_key("rttl");
    let lease = ctx.grant(&key, &holder("h"), ctx.long).await;
    let mut shorter = lease.clone();
    shorter.ttl = ctx.ttl;
    let renewed = ctx
        .store
        .renew(&shorter)
        .await
        .expect("renew with another ttl");
    assert_eq!(renewed.token, lease.token);
    assert_eq!(renewed.ttl, ctx.ttl);
    assert!(
        renewed.expires_in <= ctx.ttl.duration(),
        "renew answered {:?} left, over the new ttl {:?}",
        renewed.expires_in,
        ctx.ttl
    );
    let info = ctx.info(&key).await;
    assert_eq!(info.ttl, ctx.ttl, "inspect does not report the renewed ttl");
    match info.status {
        LeaseStatus::Live { remaining } => assert!(
            remaining <= ctx.ttl.duration(),
            "{remaining:?} left, over the new ttl {:?}",
            ctx.ttl
        ),
        LeaseStatus::Expired => panic!("renewed lease already expired"),
        other => panic!("renewed lease in an unknown status {other:?}"),
    }
    // It expires by the new ttl (the old one would outlast the wait's deadline).
    ctx.wait_expired(&key).await;

    let caps = ctx.caps();
    let out_of_bounds = [
        caps.min_ttl
            .checked_sub(Duration::from_millis(1))
            .filter(|d| !d.is_zero()),
        Some(caps.max_ttl + Duration::from_millis(1)),
    ];
    let key = member_key("rttl-bad");
    let lease = ctx.grant(&key, &holder("h"), ctx.long).await;
    for bad in out_of_bounds.into_iter().flatten() {
        let Ok(bad) = Ttl::new(bad) else { continue };
        let with_bad_ttl = |l: &Lease| {
            let mut l = l.clone();
            l.ttl = bad;
            l
        };
        let r = ctx.store.renew(&with_bad_ttl(&lease)).await;
        super::common::assert_invalid(r, "ttl");
        // Invalid input wins over every other answer: the expired lease's renewal
        // with a bad ttl is refused for the ttl, not answered `Lost`.
        let expired = ctx.store.renew(&with_bad_ttl(&shorter)).await;
        super::common::assert_invalid(expired, "ttl");
        let info = ctx.info(&key).await;
        assert_eq!(info.ttl, ctx.long, "a rejected renew changed the ttl");
        assert!(info.is_live(), "a rejected renew ended the lease");
    }
}

/// release removes the lease iff its token is current, is idempotent, and never
/// removes a newer holder's lease.
pub async fn release_is_idempotent_and_fenced(ctx: Ctx) {
    let key = member_key("rel");
    let a = ctx.grant(&key, &holder("a"), ctx.long).await;
    assert!(ctx.store.release(&a).await.unwrap());
    assert!(
        !ctx.store.release(&a).await.unwrap(),
        "second release is a no-op"
    );
    let b = ctx.grant(&key, &holder("b"), ctx.long).await;
    assert!(
        !ctx.store.release(&a).await.unwrap(),
        "stale release must not remove b"
    );
    let info = ctx.store.inspect(&key).await.unwrap().unwrap();
    assert_eq!(info.token, b.token);
}

/// release puts (key, token) in the dead set, so items the token still owns are
/// requeued by a sweep.
pub async fn release_puts_token_in_dead_set(ctx: Ctx) {
    let key = member_key("dead");
    let a = ctx.grant(&key, &holder("a"), ctx.long).await;
    assert!(ctx
        .store
        .dead_tokens(1000)
        .await
        .unwrap()
        .iter()
        .all(|d| d.token != a.token));
    ctx.store.release(&a).await.unwrap();
    let dead = ctx.store.dead_tokens(1000).await.unwrap();
    let entry = dead
        .iter()
        .find(|d| d.token == a.token)
        .expect("released token in dead set");
    assert_eq!(entry.key, key);
}

/// inspect: None for a key never acquired; live with time left ≤ ttl; expired after
/// the store clock passes expiry; None after reap.
pub async fn inspect_reports_live_and_expired(ctx: Ctx) {
    let key = member_key("insp");
    assert!(ctx.store.inspect(&key).await.unwrap().is_none());
    let lease = ctx.grant(&key, &holder("h"), ctx.ttl).await;
    match ctx.store.inspect(&key).await.unwrap().unwrap().status {
        LeaseStatus::Live { remaining } => assert!(remaining <= ctx.ttl.duration()),
        LeaseStatus::Expired => panic!("fresh lease reported expired"),
        other => panic!("fresh lease in an unknown status {other:?}"),
    }
    ctx.wait_expired(&key).await;
    ctx.wait_listed_expired(&key).await;
    assert!(ctx.store.reap(&key, lease.token).await.unwrap());
    assert!(ctx.store.inspect(&key).await.unwrap().is_none());
}

/// expired lists exactly the leases past expiry in the space, not live ones and not
/// those of other spaces.
pub async fn expired_lists_only_expired(ctx: Ctx) {
    let short = member_key("short");
    let live = member_key("live");
    let leader = liveness_core::Key::leader(&format!("l{:08x}", fastrand::u32(..))).unwrap();
    ctx.grant(&short, &holder("s"), ctx.ttl).await;
    ctx.grant(&live, &holder("l"), ctx.long).await;
    ctx.grant(&leader, &holder("x"), ctx.ttl).await;
    ctx.wait_listed_expired(&short).await;
    let list = ctx.store.expired(&members(), 1000).await.unwrap();
    assert!(list.iter().any(|l| l.key == short));
    assert!(
        list.iter().all(|l| l.key != live),
        "a live lease was listed expired"
    );
    assert!(
        list.iter().all(|l| l.key != leader),
        "another space leaked in"
    );
    let e = list.iter().find(|l| l.key == short).unwrap();
    assert_eq!(e.holder, holder("s"));
}

/// expired returns at most `limit` leases, earliest expiry first.
pub async fn expired_respects_limit_and_order(ctx: Ctx) {
    let mut keys = Vec::new();
    for i in 0..4 {
        let key = member_key(&format!("o{i}"));
        ctx.grant(&key, &holder("h"), ctx.ttl).await;
        keys.push(key);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for key in &keys {
        ctx.wait_listed_expired(key).await;
    }
    let two = ctx.store.expired(&members(), 2).await.unwrap();
    assert_eq!(two.len(), 2, "limit 2 must give exactly 2 of 4 expired");
    let all = ctx.store.expired(&members(), 1000).await.unwrap();
    assert_eq!(all.len(), 4);
    if !ctx.caps().observer_local_expiry {
        let order: Vec<_> = all.iter().map(|l| l.key.clone()).collect();
        assert_eq!(order, keys, "earliest expiry first");
        assert_eq!(two[0].key, keys[0]);
    }
}

/// reap removes only an expired lease with the current token, once.
pub async fn reap_only_expired_current_lease(ctx: Ctx) {
    let key = member_key("reap");
    let lease = ctx.grant(&key, &holder("h"), ctx.ttl).await;
    assert!(
        !ctx.store.reap(&key, lease.token).await.unwrap(),
        "reaped a live lease"
    );
    assert!(ctx.store.inspect(&key).await.unwrap().is_some());
    ctx.wait_expired(&key).await;
    ctx.wait_listed_expired(&key).await;
    let wrong = liveness_core::FencingToken(lease.token.0 + 1_000_000);
    assert!(
        !ctx.store.reap(&key, wrong).await.unwrap(),
        "reaped with a wrong token"
    );
    assert!(ctx.store.reap(&key, lease.token).await.unwrap());
    assert!(
        !ctx.store.reap(&key, lease.token).await.unwrap(),
        "reaped twice"
    );
    // The dead set is the work items' (a store of elections alone keeps none).
    if ctx.caps().items {
        let dead = ctx.store.dead_tokens(1000).await.unwrap();
        assert!(dead.iter().any(|d| d.token == lease.token && d.key == key));
    }
}

/// Exactly one of 16 concurrent reapers of the same expired lease gets true.
pub async fn reap_has_exactly_one_winner(ctx: Ctx) {
    let key = member_key("race");
    let lease = ctx.grant(&key, &holder("h"), ctx.ttl).await;
    ctx.wait_expired(&key).await;
    ctx.wait_listed_expired(&key).await;
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (s, k, t) = (ctx.store.clone(), key.clone(), lease.token);
        tasks.push(tokio::spawn(async move {
            // Retry transient faults: a retry after an applied reap must answer false.
            loop {
                match s.reap(&k, t).await {
                    Err(e) if e.is_retryable() => continue,
                    other => return other,
                }
            }
        }));
    }
    let mut winners = 0;
    for t in tasks {
        if t.await.unwrap().unwrap() {
            winners += 1;
        }
    }
    assert_eq!(winners, 1, "exactly one reaper must win");
}

/// acquire over an expired, unreaped lease succeeds with a new token and puts the old
/// token in the dead set in the same step.
pub async fn acquire_reaps_expired_lease(ctx: Ctx) {
    let key = member_key("over");
    let old = ctx.grant(&key, &holder("old"), ctx.ttl).await;
    ctx.wait_expired(&key).await;
    let new = ctx.grant(&key, &holder("new"), ctx.long).await;
    assert!(new.token > old.token);
    // The dead set is the work items' (a store of elections alone keeps none).
    if ctx.caps().items {
        let dead = ctx.store.dead_tokens(1000).await.unwrap();
        assert!(
            dead.iter().any(|d| d.token == old.token),
            "old token not in dead set"
        );
    }
    assert!(!ctx.store.reap(&key, old.token).await.unwrap());
}

/// next_expiry: None iff the space has no lease record; zero while any lease is
/// expired and unreaped (also when it is the only one, and beside live ones);
/// otherwise no more than the time until the earliest live lease expires (stores
/// that push expiry events may answer another live lease's time).
pub async fn next_expiry_is_a_duration(ctx: Ctx) {
    let space = liveness_core::Space::new(format!("s{:08x}", fastrand::u32(..))).unwrap();
    let key =
        |n: &str| liveness_core::Key::new(space.clone(), liveness_core::Name::new(n).unwrap());
    let next = || async { ctx.store.next_expiry(&space).await.unwrap() };
    assert_eq!(next().await, None, "an empty space");
    let short = ctx.grant(&key("n"), &holder("h"), ctx.ttl).await;
    let left = next().await.expect("a live lease");
    assert!(left <= ctx.ttl.duration(), "{left:?} > ttl");
    ctx.wait_listed_expired(&key("n")).await;
    assert_eq!(next().await, Some(Duration::ZERO), "only an expired lease");
    let long = ctx.grant(&key("m"), &holder("h"), ctx.long).await;
    assert_eq!(
        next().await,
        Some(Duration::ZERO),
        "an expired lease beside a live one"
    );
    assert!(ctx.store.reap(&key("n"), short.token).await.unwrap());
    let left = next().await.expect("a live lease");
    assert!(left <= ctx.long.duration(), "{left:?} > ttl");
    let soon = ctx.grant(&key("o"), &holder("h"), ctx.ttl).await;
    if !ctx.caps().pushes_expiry_events {
        let left = next().await.expect("live leases");
        assert!(
            left <= ctx.ttl.duration(),
            "{left:?}: not the earliest live lease's time (ttl {:?})",
            ctx.ttl
        );
    }
    assert!(ctx.store.release(&soon).await.unwrap());
    assert!(ctx.store.release(&long).await.unwrap());
    assert_eq!(next().await, None, "every lease released");
}

/// store_time never decreases on one handle, and moves forward with real time.
pub async fn store_time_never_decreases(ctx: Ctx) {
    let mut last = ctx.store.store_time().await.unwrap();
    let first = last;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let now = ctx.store.store_time().await.unwrap();
        assert!(now >= last, "store time went backwards");
        last = now;
    }
    assert!(last.saturating_since(first) > Duration::ZERO);
}
