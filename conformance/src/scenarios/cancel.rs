//! Cancel safety: a caller may drop any store call at any point (a timeout around it,
//! a `select!` that took another branch), and every later call still answers its own
//! request, never one the dropped call left behind.

use std::collections::HashMap;
use std::time::Duration;

use liveness_core::{
    DeathCause, EnqueueOptions, Error, FencingToken, ItemId, ItemState, ItemStateKind, Lease,
    LeaseStatus, Page, RequestId,
};
use tokio::time::timeout;

use super::common::{holder, unmeasured};
use crate::{member_key, members, Ctx};

/// How many calls the scenario drops (or lets finish) before it checks.
const CALLS: usize = 150;

/// The longest a dropped call runs, in microseconds: each call gets a random wait up
/// to this, from none at all (polled once, then dropped).
const MAX_WAIT_US: u64 = 4_000;

/// The seed: `LIVENESS_CANCEL_SEED` replays one, else a fresh one (every failure
/// names it).
fn seed() -> u64 {
    std::env::var("LIVENESS_CANCEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..))
}

/// Every kind of store call, dropped at random points: each is given a random wait
/// of 0 to a few milliseconds (seeded) and dropped when it has not answered by then,
/// whatever it was doing. Afterwards, with no call dropped, every call answers its
/// own request: `renew` the lease it was asked about (its key and token, a fresh
/// time left), `renew_many` each of its leases, `inspect` and `leases` the keys
/// asked about, a claim the lowest pending items and exactly those (its repeat the
/// same ones), `item` the item asked about, a keyed `enqueue` its first id, and each
/// release its own lease, recorded as `Released`. A store that reads the answer a
/// dropped call left on a connection or stream as the next call's fails here.
///
/// First, one `expired` is polled once and dropped, on a store that has not been
/// asked for expiries before, while a lease that expired earlier waits: it must be
/// listed all the same (a store that learns of expiries from a watch finds the ones
/// before it by a scan, which a dropped call must leave owed, not lost).
pub async fn dropped_calls_leave_every_later_answer_its_own(ctx: Ctx) {
    let seed = seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    let s = &ctx.store;
    let w = holder("w");
    // A lease that expires before anything watches the store: a store that learns
    // of expiries from a watch must find it by a scan, which the first `expired`
    // below runs, and a dropped `expired` must leave that scan to the next call.
    let early = ctx.grant(&member_key("early"), &w, ctx.ttl).await;
    expired_by_inspect(&ctx, &early).await;
    let _wakeups = s.wakeups();
    tokio::time::sleep(ctx.ttl.duration() / 4).await;
    let polled_once = futures::FutureExt::now_or_never(s.expired(early.key.space(), 10));
    drop(polled_once);
    let mut leases = Vec::new();
    for i in 0..3 {
        leases.push(ctx.grant(&member_key(&format!("c{i}")), &w, ctx.long).await);
    }
    let opts = EnqueueOptions::default().max_attempts(1_000);
    let mut payloads: HashMap<ItemId, Vec<u8>> = HashMap::new();
    for i in 0..12 {
        let payload = format!("p{i}").into_bytes();
        let id = s.enqueue(&payload, opts).await.unwrap();
        payloads.insert(id, payload);
    }
    let keyed = opts.key(RequestId::random());
    let keyed_id = s.enqueue(b"keyed", keyed).await.unwrap();
    payloads.insert(keyed_id, b"keyed".to_vec());
    let ids: Vec<ItemId> = payloads.keys().copied().collect();
    let scratch = member_key("scratch");
    let mut scratch_lease: Option<Lease> = None;
    let space = members();

    // Every call with a random wait, dropped when it has not answered by then.
    macro_rules! drop_after {
        ($wait:expr, $call:expr) => {
            timeout($wait, $call).await.ok()
        };
    }
    for _ in 0..CALLS {
        let wait = Duration::from_micros(rng.u64(0..=MAX_WAIT_US));
        let lease = &leases[rng.usize(..leases.len())];
        let id = ids[rng.usize(..ids.len())];
        match rng.u8(0..17) {
            0 | 1 => {
                drop_after!(wait, s.renew(lease));
            }
            2 => {
                drop_after!(wait, s.renew_many(&leases));
            }
            3 => {
                drop_after!(wait, s.inspect(&lease.key));
            }
            4 | 5 => {
                let n = rng.usize(1..=3);
                drop_after!(wait, s.claim_request(lease, n, RequestId::next()));
            }
            6 => {
                drop_after!(wait, s.complete(lease, id));
            }
            7 => {
                drop_after!(wait, s.fail(lease, id, true));
            }
            8 => {
                drop_after!(wait, s.enqueue(b"keyed", keyed));
            }
            9 => {
                drop_after!(wait, s.item(id));
            }
            10 => {
                drop_after!(wait, s.item_counts());
            }
            11 => {
                drop_after!(wait, s.leases(&space, Page::first(10)));
            }
            12 => {
                drop_after!(wait, s.expired(&space, 10));
            }
            13 => {
                drop_after!(wait, s.next_expiry(&space));
            }
            14 => {
                drop_after!(wait, s.dead_tokens(10));
                drop_after!(wait, s.deaths(None, 10));
            }
            15 => {
                drop_after!(wait, s.items(ItemStateKind::Pending, Page::first(10)));
                drop_after!(wait, s.store_time());
            }
            _ => match scratch_lease.take() {
                Some(l) => match drop_after!(wait, s.release(&l)) {
                    Some(Ok(_)) => {}
                    _ => scratch_lease = Some(l),
                },
                None => {
                    if let Some(Ok(l)) = drop_after!(wait, s.acquire(&scratch, &w, ctx.long)) {
                        scratch_lease = Some(l);
                    }
                }
            },
        }
    }

    // Now every call runs to its answer, which must be its own.
    ctx.wait_listed_expired(&early.key).await;
    assert!(
        s.reap(&early.key, early.token).await.unwrap(),
        "seed {seed}"
    );
    for round in 0..2 {
        for lease in &leases {
            let renewed = s.renew(lease).await.unwrap_or_else(|e| {
                panic!("seed {seed}: renew {} (round {round}): {e}", lease.key)
            });
            assert_eq!(
                renewed.key, lease.key,
                "seed {seed}: renew answered another key"
            );
            assert_eq!(
                renewed.token, lease.token,
                "seed {seed}: renew answered another token"
            );
            assert_eq!(renewed.ttl, lease.ttl, "seed {seed}");
            assert!(
                renewed.expires_in <= lease.ttl.duration()
                    && renewed.expires_in > lease.ttl.duration() / 2,
                "seed {seed}: renew of {} answered {:?} left of a {:?} ttl",
                lease.key,
                renewed.expires_in,
                lease.ttl
            );
        }
    }
    let many = s.renew_many(&leases).await.unwrap();
    assert_eq!(many.len(), leases.len(), "seed {seed}");
    for (lease, answer) in leases.iter().zip(many) {
        let renewed =
            answer.unwrap_or_else(|e| panic!("seed {seed}: renew_many of {}: {e}", lease.key));
        assert_eq!(
            (&renewed.key, renewed.token),
            (&lease.key, lease.token),
            "seed {seed}: renew_many answered another lease at this entry"
        );
    }
    for lease in &leases {
        let info = ctx.info(&lease.key).await;
        assert_eq!(
            info.key, lease.key,
            "seed {seed}: inspect answered another key"
        );
        assert_eq!(info.token, lease.token, "seed {seed}");
        assert!(
            matches!(info.status, LeaseStatus::Live { .. }),
            "seed {seed}: {info:?}"
        );
    }
    let listed = s.leases(&space, Page::first(10)).await.unwrap();
    for lease in &leases {
        assert!(
            listed
                .iter()
                .any(|m| m.key == lease.key && m.token == lease.token),
            "seed {seed}: leases does not list {}: {listed:?}",
            lease.key
        );
    }
    for id in &ids {
        let record = s.item(*id).await.unwrap();
        if let Some(record) = record {
            assert_eq!(
                record.item.id, *id,
                "seed {seed}: item answered another item"
            );
            assert_eq!(record.item.payload, payloads[id], "seed {seed}");
        }
    }
    assert_eq!(
        s.enqueue(b"keyed", keyed).await.unwrap(),
        keyed_id,
        "seed {seed}: a keyed enqueue answered another id"
    );
    // Each claim takes the lowest pending items, exactly those, and its repeat
    // answers the same ones.
    for i in 0..6 {
        let payload = format!("q{i}").into_bytes();
        let id = s.enqueue(&payload, opts).await.unwrap();
        payloads.insert(id, payload);
    }
    let mut claimed = Vec::new();
    for lease in &leases {
        let pending: Vec<ItemId> = s
            .items(ItemStateKind::Pending, Page::first(2))
            .await
            .unwrap()
            .iter()
            .map(|r| r.item.id)
            .collect();
        let request = RequestId::next();
        let got = s.claim_request(lease, 2, request).await.unwrap();
        let got_ids: Vec<ItemId> = got.iter().map(|i| i.id).collect();
        assert_eq!(
            got_ids, pending,
            "seed {seed}: a claim did not answer the lowest pending items"
        );
        for item in &got {
            assert_eq!(item.payload, payloads[&item.id], "seed {seed}");
            assert_eq!(
                s.item(item.id).await.unwrap().map(|r| r.state),
                Some(ItemState::Owned(lease.token)),
                "seed {seed}: item {} not owned by the claim's lease",
                item.id.0
            );
        }
        assert_eq!(
            unmeasured(&s.claim_request(lease, 2, request).await.unwrap()),
            unmeasured(&got),
            "seed {seed}: a claim's repeat answered other items"
        );
        claimed.push((lease.clone(), got_ids));
    }
    for (lease, got) in &claimed {
        for id in got {
            s.complete(lease, *id)
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: complete {}: {e}", id.0));
        }
    }
    // The scratch key: free, or held by this holder (a dropped acquire may have
    // taken it: a ghost, released with the token its `Held` names).
    if let Some(l) = scratch_lease.take() {
        // `false` is right too: a release dropped earlier may have been applied by
        // the store after its caller stopped waiting. Either way the lease is gone.
        s.release(&l).await.unwrap();
        let left = s.inspect(&scratch).await.unwrap();
        assert!(
            left.as_ref().is_none_or(|i| i.token != l.token),
            "seed {seed}: a released scratch lease is still there: {left:?}"
        );
    }
    match s.acquire(&scratch, &w, ctx.long).await {
        Ok(l) => assert!(s.release(&l).await.unwrap(), "seed {seed}"),
        Err(Error::Held { holder, token, .. }) if holder == w => {
            let ghost = Lease::granted(s.issuer(), scratch.clone(), w.clone(), token, ctx.long);
            assert!(s.release(&ghost).await.unwrap(), "seed {seed}");
        }
        Err(e) => panic!("seed {seed}: acquire of the scratch key: {e}"),
    }
    assert!(s.inspect(&scratch).await.unwrap().is_none(), "seed {seed}");
    // Each release ends its own lease, and the history says so.
    let mut tokens: Vec<FencingToken> = Vec::new();
    for lease in &leases {
        assert!(
            s.release(lease).await.unwrap(),
            "seed {seed}: release of {} answered false",
            lease.key
        );
        assert!(
            s.inspect(&lease.key).await.unwrap().is_none(),
            "seed {seed}"
        );
        tokens.push(lease.token);
    }
    let deaths = s.deaths(None, 100).await.unwrap();
    for token in &tokens {
        let death = deaths
            .iter()
            .find(|d| d.token == *token)
            .unwrap_or_else(|| panic!("seed {seed}: no death record of {token:?}: {deaths:?}"));
        assert_eq!(death.cause, DeathCause::Released, "seed {seed}: {death:?}");
    }
    tokens.push(early.token);
    // The items the dropped claims took go back with their tokens' sweep.
    for answer in s.sweep_many(&tokens).await.unwrap() {
        answer.unwrap();
    }
    assert_eq!(s.item_counts().await.unwrap().owned, 0, "seed {seed}");
}

/// Waits until `inspect` reports `lease` expired, without calling `expired` (which
/// may start watching), except on observer-local stores, whose `expired` is what
/// observes a lease.
async fn expired_by_inspect(ctx: &Ctx, lease: &Lease) {
    if ctx.caps().observer_local_expiry {
        ctx.wait_expired(&lease.key).await;
        return;
    }
    let until = tokio::time::Instant::now() + ctx.expiry_deadline();
    loop {
        let info = ctx.info(&lease.key).await;
        if info.status == LeaseStatus::Expired {
            return;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "lease {} did not expire within {:?}",
            lease.key,
            ctx.expiry_deadline()
        );
        tokio::time::sleep(ctx.ttl.duration() / 10).await;
    }
}
