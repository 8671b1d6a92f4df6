//! Item scenarios: enqueue, claim, complete, fail, sweep, dead letters,
//! namespaces, bad input (the `ItemStore` contract bullets).

use std::sync::Arc;

use liveness_core::{
    EnqueueOptions, Error, FencingToken, InputProblem, ItemCounts, ItemId, ItemState, Lease,
    LostCause, Name, RequestId, Store, Ttl,
};

use super::common::{assert_counts, assert_invalid, holder, unmeasured};
use crate::{member_key, members, Ctx};

fn opts(max_attempts: u32) -> EnqueueOptions {
    EnqueueOptions::default().max_attempts(max_attempts)
}

async fn state(store: &Arc<dyn Store>, id: ItemId) -> Option<ItemState> {
    store.item(id).await.unwrap().map(|r| r.state)
}

/// Cuts `lease`, granted with `ctx.long`, down to the short ttl: it expires soon
/// after. Granted short, the work done under it first (a claim) could outlast it on a
/// loaded machine.
async fn expire_soon(ctx: &Ctx, lease: &Lease) {
    crate::fixtures::renew_with_ttl(&*ctx.store, lease, ctx.ttl).await;
}

/// Lets a member lease (granted with `ctx.long`) expire, reaps it (as a checker
/// would) and requeues its items.
async fn kill(ctx: &Ctx, lease: &Lease) -> liveness_core::Sweep {
    expire_soon(ctx, lease).await;
    ctx.wait_listed_expired(&lease.key).await;
    assert!(ctx.store.reap(&lease.key, lease.token).await.unwrap());
    ctx.store.sweep(lease.token).await.unwrap()
}

/// enqueue gives increasing ids; claim takes pending items lowest id first and counts
/// an attempt; complete removes the item.
pub async fn enqueue_claim_complete(ctx: Ctx) {
    let s = &ctx.store;
    let a = s.enqueue(b"a", opts(3)).await.unwrap();
    let b = s.enqueue(b"b", opts(3)).await.unwrap();
    let c = s.enqueue(b"", opts(3)).await.unwrap();
    assert!(a < b && b < c, "ids increase in enqueue order");
    let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
    let got = s.claim(&lease, 2).await.unwrap();
    assert_eq!(got.iter().map(|i| i.id).collect::<Vec<_>>(), vec![a, b]);
    assert_eq!(got[0].payload, b"a");
    assert_eq!(got[0].attempts, 1);
    assert_eq!(got[0].max_attempts, 3);
    assert_eq!(state(s, a).await, Some(ItemState::Owned(lease.token)));
    assert_counts(s, [1, 2, 0], "item counts").await;
    s.complete(&lease, a).await.unwrap();
    assert_eq!(state(s, a).await, None, "completed items are removed");
    assert!(matches!(
        s.complete(&lease, a).await,
        Err(Error::Fenced { .. })
    ));
    let rest = s.claim(&lease, 10).await.unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].payload, b"");
    assert!(s.claim(&lease, 10).await.unwrap().is_empty());
}

/// Enqueues `n` one-byte items (3 attempts each); their ids in order.
async fn enqueue_n(s: &Arc<dyn Store>, n: u8) -> Vec<ItemId> {
    let mut all = Vec::new();
    for i in 0..n {
        all.push(s.enqueue(&[i], opts(3)).await.unwrap());
    }
    all
}

/// `total` items enqueued, then a claim of `n` by member `w` sent twice with one request
/// id (as after a lost reply): the first takes the oldest `n`, the repeat answers the
/// same items with the same attempt counts. Returns the items, the lease, the request
/// id and the repeat's answer.
async fn claim_twice(
    ctx: &Ctx,
    total: u8,
    n: usize,
) -> (Vec<ItemId>, Lease, RequestId, Vec<liveness_core::Item>) {
    let s = &ctx.store;
    let all = enqueue_n(s, total).await;
    let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
    let request = RequestId::next();
    let first = s.claim_request(&lease, n, request).await.unwrap();
    assert_eq!(ids(&first), all[..n].to_vec());
    let again = s.claim_request(&lease, n, request).await.unwrap();
    assert_eq!(
        unmeasured(&again),
        unmeasured(&first),
        "a repeat answers the same items, attempts unchanged"
    );
    (all, lease, request, again)
}

fn ids(items: &[liveness_core::Item]) -> Vec<ItemId> {
    items.iter().map(|i| i.id).collect()
}

/// A repeat of a claim (same lease, same request id) answers the items the first call
/// assigned, with the same attempt counts, and assigns nothing new; it still answers
/// the ones left after some were completed; the same id under another token is a new
/// request; a repeat on a lost lease is Lost. (A claim whose reply was lost can be
/// retried without stranding items under a live token.)
pub async fn claim_repeat_answers_the_same_items(ctx: Ctx) {
    let s = &ctx.store;
    let (all, lease, request, _) = claim_twice(&ctx, 5, 3).await;
    assert_counts(s, [2, 3, 0], "a repeat assigns nothing new").await;
    // A new request takes the rest; the old one still answers its own items.
    let second = s.claim_request(&lease, 3, RequestId::next()).await.unwrap();
    assert_eq!(ids(&second), all[3..].to_vec());
    s.complete(&lease, all[0]).await.unwrap();
    let rest = s.claim_request(&lease, 3, request).await.unwrap();
    assert_eq!(ids(&rest), all[1..3].to_vec());
    assert_eq!(rest[0].attempts, 1);
    // The id is scoped to the token: under another lease it is a new request.
    let extra = s.enqueue(b"extra", opts(3)).await.unwrap();
    let other = ctx.grant(&member_key("o"), &holder("o"), ctx.long).await;
    let theirs = s.claim_request(&other, 3, request).await.unwrap();
    assert_eq!(ids(&theirs), vec![extra]);
    // A repeat on a lost lease is Lost, and its items go to whoever requeues them.
    assert!(s.release(&lease).await.unwrap());
    assert_eq!(
        s.claim_request(&lease, 3, request)
            .await
            .unwrap_err()
            .lost_reason(),
        Some(LostCause::Released)
    );
    assert_eq!(state(s, all[1]).await, Some(ItemState::Owned(lease.token)));
}

/// A claim id is single-use per token: a copy of a claim delivered late, after its
/// repeat ran and the repeat's items were completed, answers no items and assigns
/// nothing (before the high-water mark it assigned new items under an id nobody
/// waited for, stranded under the live token); so does a copy of an admitted claim
/// that took nothing; a newer id is still admitted.
pub async fn late_claim_after_its_repeat_completed_assigns_nothing(ctx: Ctx) {
    let s = &ctx.store;
    // The first copy's reply was lost; its repeat answers the same items.
    let (all, lease, request, repeat) = claim_twice(&ctx, 4, 2).await;
    for item in &repeat {
        s.complete(&lease, item.id).await.unwrap();
    }
    // A late copy of the same request arrives now.
    let late = s.claim_request(&lease, 2, request).await.unwrap();
    assert!(late.is_empty(), "a late copy assigned {:?}", ids(&late));
    assert_counts(s, [2, 0, 0], "a late copy assigns nothing").await;
    assert_eq!(state(s, all[2]).await, Some(ItemState::Pending));
    // A newer id is admitted and takes what is pending.
    let next = s.claim_request(&lease, 2, RequestId::next()).await.unwrap();
    assert_eq!(ids(&next), all[2..].to_vec());
    // An admitted claim that found nothing pending is single-use too.
    let empty = RequestId::next();
    assert!(s.claim_request(&lease, 2, empty).await.unwrap().is_empty());
    let more = s.enqueue(b"more", opts(3)).await.unwrap();
    assert!(
        s.claim_request(&lease, 2, empty).await.unwrap().is_empty(),
        "a copy of an admitted empty claim assigns nothing"
    );
    assert_eq!(state(s, more).await, Some(ItemState::Pending));
}

/// A claim id older than one the token already used answers no items and assigns
/// nothing, whether the newer one took items or not; the newer one still answers its
/// own items on a repeat; under a new token (a new lease on the same key) the mark
/// starts afresh.
pub async fn older_claim_id_after_a_newer_one_assigns_nothing(ctx: Ctx) {
    let s = &ctx.store;
    let all = enqueue_n(s, 4).await;
    let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
    let older = RequestId::next();
    let newer = RequestId::next();
    assert!(older < newer);
    let taken = s.claim_request(&lease, 1, newer).await.unwrap();
    assert_eq!(ids(&taken), vec![all[0]]);
    let stale = s.claim_request(&lease, 2, older).await.unwrap();
    assert!(stale.is_empty(), "an older id assigned {:?}", ids(&stale));
    assert_counts(s, [3, 1, 0], "an older id assigns nothing").await;
    // The newer one still answers its own items on a repeat.
    let repeat = s.claim_request(&lease, 1, newer).await.unwrap();
    assert_eq!(unmeasured(&repeat), unmeasured(&taken));
    // Equal ids of the high-water mark: the mark's own id, its items completed.
    s.complete(&lease, all[0]).await.unwrap();
    assert!(s.claim_request(&lease, 1, newer).await.unwrap().is_empty());
    assert_eq!(state(s, all[1]).await, Some(ItemState::Pending));
    // A new token (the key released and acquired again) starts with no mark: the
    // old ids are new requests under it.
    assert!(s.release(&lease).await.unwrap());
    let again = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
    assert_ne!(again.token, lease.token);
    let fresh = s.claim_request(&again, 1, older).await.unwrap();
    assert_eq!(ids(&fresh), vec![all[1]]);
}

/// enqueue with a key adds the item once: a repeat (also a concurrent one, also
/// after the item was completed) answers the first id and adds nothing; another key,
/// or no key, adds a new item.
pub async fn enqueue_with_key_is_idempotent(ctx: Ctx) {
    let s = &ctx.store;
    let key = RequestId::random();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.enqueue(b"once", EnqueueOptions::keyed(key))
                .await
                .unwrap()
        }));
    }
    let mut got = Vec::new();
    for t in tasks {
        got.push(t.await.unwrap());
    }
    let id = got[0];
    assert!(got.iter().all(|g| *g == id), "one id for one key: {got:?}");
    assert_eq!(
        s.item_counts().await.unwrap().pending,
        1,
        "one item for one key"
    );
    assert_eq!(
        s.enqueue(b"other payload", EnqueueOptions::keyed(key))
            .await
            .unwrap(),
        id
    );
    let other = s
        .enqueue(b"once", EnqueueOptions::keyed(RequestId::random()))
        .await
        .unwrap();
    let plain = s.enqueue(b"once", opts(3)).await.unwrap();
    assert!(id < other && other < plain);
    let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
    let claimed = s.claim(&lease, 1).await.unwrap();
    assert_eq!(claimed[0].id, id);
    assert_eq!(claimed[0].payload, b"once");
    s.complete(&lease, id).await.unwrap();
    assert_eq!(
        s.enqueue(b"once", EnqueueOptions::keyed(key))
            .await
            .unwrap(),
        id,
        "keys are remembered after the item completed"
    );
    assert_eq!(s.item_counts().await.unwrap().pending, 2);
    assert_eq!(state(s, id).await, None);
}

/// enqueue_many adds one pending item per payload, ids increasing in payload order,
/// each with the batch's options; claims take them in that order. An empty batch, an
/// oversized one or a key (a key names one item) is refused and adds nothing.
pub async fn enqueue_many_adds_each_payload_in_order(ctx: Ctx) {
    let s = &ctx.store;
    let payloads: Vec<Vec<u8>> = (0..5).map(|i| format!("job {i}").into_bytes()).collect();
    let ids = s.enqueue_many(&payloads, opts(2)).await.unwrap();
    assert_eq!(ids.len(), payloads.len(), "{ids:?}");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "increasing: {ids:?}");
    for (id, payload) in ids.iter().zip(&payloads) {
        let record = s.item(*id).await.unwrap().expect("the item is there");
        assert_eq!(record.item.payload, *payload);
        assert_eq!(record.item.max_attempts, 2);
        assert_eq!(record.state, ItemState::Pending);
    }
    let later = s.enqueue(b"after", opts(3)).await.unwrap();
    assert!(ids[4] < later);

    let before = s.item_counts().await.unwrap();
    let refused = |r: liveness_core::Result<Vec<ItemId>>| {
        assert!(
            matches!(r, Err(Error::InvalidInput { .. })),
            "refused as input: {r:?}"
        )
    };
    refused(s.enqueue_many(&[], opts(2)).await);
    let keyed = EnqueueOptions::keyed(RequestId::random());
    refused(s.enqueue_many(&payloads, keyed).await);
    let too_many = vec![b"x".to_vec(); ctx.caps().max_batch + 1];
    refused(s.enqueue_many(&too_many, opts(2)).await);
    assert_eq!(s.item_counts().await.unwrap(), before, "nothing added");

    let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
    let claimed = s.claim(&lease, 3).await.unwrap();
    let claimed: Vec<ItemId> = claimed.iter().map(|i| i.id).collect();
    assert_eq!(claimed, ids[..3], "lowest id first");
}

/// claim on an expired lease fails with Lost(Expired) and assigns nothing.
pub async fn claim_refused_on_expired_lease(ctx: Ctx) {
    let s = &ctx.store;
    let id = s.enqueue(b"x", opts(3)).await.unwrap();
    let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.ttl).await;
    ctx.wait_expired(&lease.key).await;
    match s.claim(&lease, 5).await {
        Err(Error::Lost { reason, .. }) => assert_eq!(reason, LostCause::Expired),
        other => panic!("expected Lost(Expired), got {other:?}"),
    }
    assert_eq!(state(s, id).await, Some(ItemState::Pending));
}

/// claim under a superseded or released lease fails with Lost and assigns nothing.
pub async fn claim_refused_on_superseded_lease(ctx: Ctx) {
    let s = &ctx.store;
    let id = s.enqueue(b"x", opts(3)).await.unwrap();
    let key = member_key("w");
    let old = ctx.grant(&key, &holder("w"), ctx.ttl).await;
    ctx.wait_expired(&key).await;
    let new = ctx.grant(&key, &holder("w"), ctx.long).await;
    assert_eq!(
        s.claim(&old, 5).await.unwrap_err().lost_reason(),
        Some(LostCause::Superseded)
    );
    s.release(&new).await.unwrap();
    assert_eq!(
        s.claim(&new, 5).await.unwrap_err().lost_reason(),
        Some(LostCause::Released)
    );
    assert_eq!(state(s, id).await, Some(ItemState::Pending));
}

/// After a member dies and its items are requeued, its late complete and fail are
/// refused with Fenced, and the next owner completes.
pub async fn complete_fenced_after_requeue(ctx: Ctx) {
    let s = &ctx.store;
    let id = s.enqueue(b"job", opts(5)).await.unwrap();
    let dead = ctx.grant(&member_key("d"), &holder("d"), ctx.long).await;
    assert_eq!(s.claim(&dead, 1).await.unwrap().len(), 1);
    let moved = kill(&ctx, &dead).await;
    assert_eq!(moved.requeued, vec![id]);
    assert_eq!(state(s, id).await, Some(ItemState::Pending));
    match s.complete(&dead, id).await {
        Err(Error::Fenced { item, token }) => {
            assert_eq!(item, id);
            assert_eq!(token, dead.token);
        }
        other => panic!("stale complete must be Fenced, got {other:?}"),
    }
    assert!(matches!(
        s.fail(&dead, id, true).await,
        Err(Error::Fenced { .. })
    ));
    let live = ctx.grant(&member_key("l"), &holder("l"), ctx.long).await;
    let got = s.claim(&live, 1).await.unwrap();
    assert_eq!(got[0].id, id);
    assert_eq!(got[0].attempts, 2);
    assert!(matches!(
        s.complete(&dead, id).await,
        Err(Error::Fenced { .. })
    ));
    s.complete(&live, id).await.unwrap();
    assert_eq!(state(s, id).await, None);
}

/// fail with retry sends an item back to pending; without, to the dead-letter set;
/// fail on an item not owned is Fenced.
pub async fn fail_retry_and_dead_letter(ctx: Ctx) {
    let s = &ctx.store;
    let a = s.enqueue(b"a", opts(3)).await.unwrap();
    let b = s.enqueue(b"b", opts(3)).await.unwrap();
    let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
    s.claim(&lease, 2).await.unwrap();
    assert_eq!(s.fail(&lease, a, true).await.unwrap(), ItemState::Pending);
    assert_eq!(
        s.fail(&lease, b, false).await.unwrap(),
        ItemState::DeadLettered
    );
    assert!(matches!(
        s.fail(&lease, b, true).await,
        Err(Error::Fenced { .. })
    ));
    assert_eq!(state(s, a).await, Some(ItemState::Pending));
    let dl = s.dead_letters(10).await.unwrap();
    assert_eq!(dl.len(), 1);
    assert_eq!(dl[0].item.id, b);
    assert_eq!(dl[0].state, ItemState::DeadLettered);
    let again = s.claim(&lease, 5).await.unwrap();
    assert_eq!(
        again.iter().map(|i| i.id).collect::<Vec<_>>(),
        vec![a],
        "dead letters are never claimed"
    );
    assert_eq!(again[0].attempts, 2);
    // Out of attempts: a retry on the last attempt dead-letters.
    s.fail(&lease, a, true).await.unwrap();
    s.claim(&lease, 5).await.unwrap();
    assert_eq!(
        s.fail(&lease, a, true).await.unwrap(),
        ItemState::DeadLettered
    );
}

/// sweep is idempotent: a second (or concurrent) call moves nothing twice,
/// and the token leaves the dead set.
pub async fn requeue_is_idempotent(ctx: Ctx) {
    let s = &ctx.store;
    let ids = [
        s.enqueue(b"1", opts(3)).await.unwrap(),
        s.enqueue(b"2", opts(3)).await.unwrap(),
    ];
    let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
    s.claim(&lease, 2).await.unwrap();
    expire_soon(&ctx, &lease).await;
    ctx.wait_listed_expired(&lease.key).await;
    assert!(s.reap(&lease.key, lease.token).await.unwrap());
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (s, t) = (s.clone(), lease.token);
        tasks.push(tokio::spawn(async move { s.sweep(t).await.unwrap() }));
    }
    let mut moved = Vec::new();
    for t in tasks {
        moved.extend(t.await.unwrap().requeued);
    }
    moved.sort();
    assert_eq!(moved, ids.to_vec(), "each item requeued exactly once");
    assert!(s.sweep(lease.token).await.unwrap().is_empty());
    assert!(s
        .dead_tokens(1000)
        .await
        .unwrap()
        .iter()
        .all(|d| d.token != lease.token));
    assert_eq!(s.item_counts().await.unwrap().pending, 2);
}

/// sweep of a token that is not dead (a live member's, or an unknown one)
/// changes nothing.
pub async fn requeue_ignores_live_tokens(ctx: Ctx) {
    let s = &ctx.store;
    let id = s.enqueue(b"x", opts(3)).await.unwrap();
    let lease = ctx.grant(&member_key("w"), &holder("w"), ctx.long).await;
    s.claim(&lease, 1).await.unwrap();
    assert!(s.sweep(lease.token).await.unwrap().is_empty());
    assert!(s
        .sweep(FencingToken(u64::MAX / 2))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(state(s, id).await, Some(ItemState::Owned(lease.token)));
    s.complete(&lease, id).await.unwrap();
}

/// A poison item that kills every worker that takes it goes to the dead-letter set
/// after max_attempts requeues, never looping forever.
pub async fn poison_item_is_dead_lettered(ctx: Ctx) {
    let s = &ctx.store;
    let id = s.enqueue(b"poison", opts(2)).await.unwrap();
    for attempt in 1..=2u32 {
        let lease = ctx
            .grant(&member_key(&format!("p{attempt}")), &holder("p"), ctx.long)
            .await;
        let got = s.claim(&lease, 1).await.unwrap();
        assert_eq!(got.len(), 1, "attempt {attempt} claims the item");
        assert_eq!(got[0].attempts, attempt);
        let moved = kill(&ctx, &lease).await;
        if attempt < 2 {
            assert_eq!(moved.requeued, vec![id]);
        } else {
            assert_eq!(moved.dead_lettered, vec![id]);
            assert!(moved.requeued.is_empty());
        }
    }
    assert_eq!(state(s, id).await, Some(ItemState::DeadLettered));
    let lease = ctx.grant(&member_key("x"), &holder("x"), ctx.long).await;
    assert!(s.claim(&lease, 5).await.unwrap().is_empty());
    assert_eq!(s.item_counts().await.unwrap().dead_lettered, 1);
}

/// Two namespaces never see each other's leases, dead sets or items.
pub async fn namespaces_are_isolated(ctx: Ctx) {
    let a = &ctx.store;
    let b = ctx.other_namespace().await;
    let key = member_key("iso");
    let la = a.acquire(&key, &holder("a"), ctx.ttl).await.unwrap();
    assert!(b.inspect(&key).await.unwrap().is_none());
    let lb = b
        .acquire(&key, &holder("b"), ctx.long)
        .await
        .expect("same key, other namespace");
    a.enqueue(b"only-a", opts(3)).await.unwrap();
    assert_eq!(b.item_counts().await.unwrap(), ItemCounts::default());
    assert!(b.claim(&lb, 10).await.unwrap().is_empty());
    ctx.wait_listed_expired(&key).await;
    assert!(b.expired(&members(), 100).await.unwrap().is_empty());
    a.release(&la).await.unwrap();
    assert!(b.dead_tokens(100).await.unwrap().is_empty());
    assert!(b.inspect(&key).await.unwrap().unwrap().is_live());
}

/// A lease issued by another namespace (whose tokens start at 1 too, so its token
/// may well be current here) is refused by every operation that takes a lease —
/// `renew`, `release`, `claim`, `complete`, `fail` — with `InvalidInput("lease",
/// ForeignLease)`, and changes nothing: the local lease with that very token still
/// renews, keeps its items and is not in the dead set; pending items stay pending.
pub async fn foreign_lease_refused_unchanged(ctx: Ctx) {
    let a = &ctx.store;
    let b = ctx.other_namespace().await;
    let key = member_key("foreign");
    let la = a.acquire(&key, &holder("a"), ctx.long).await.unwrap();
    let lb = b.acquire(&key, &holder("b"), ctx.long).await.unwrap();
    let owned = b.enqueue(b"owned", opts(3)).await.unwrap();
    assert_eq!(b.claim(&lb, 1).await.unwrap().len(), 1);
    let pending = b.enqueue(b"pending", opts(3)).await.unwrap();
    let before = b.item_counts().await.unwrap();
    // A's lease as it is, and A's lease made to look like B's in every field a
    // store compares (key, holder, token): only where it was issued differs.
    let mut lookalike = la.clone();
    lookalike.key = lb.key.clone();
    lookalike.holder = lb.holder.clone();
    lookalike.token = lb.token;
    for foreign in [&la, &lookalike] {
        assert_foreign(b.renew(foreign).await, "renew");
        assert_foreign(b.claim(foreign, 10).await, "claim");
        assert_foreign(b.complete(foreign, owned).await, "complete");
        assert_foreign(b.fail(foreign, owned, true).await, "fail(retry)");
        assert_foreign(b.fail(foreign, owned, false).await, "fail");
        assert_foreign(b.release(foreign).await, "release");
    }
    // In a batch, the foreign lease is refused alone and the local one still renews.
    let mut answers = b
        .renew_many(&[lookalike.clone(), lb.clone()])
        .await
        .unwrap()
        .into_iter();
    assert_foreign(answers.next().expect("two answers"), "renew_many");
    answers
        .next()
        .expect("two answers")
        .expect("renew_many renews the local lease beside a foreign one");
    assert_eq!(
        b.item_counts().await.unwrap(),
        before,
        "a foreign lease moved items"
    );
    assert_eq!(state(&b, owned).await, Some(ItemState::Owned(lb.token)));
    assert_eq!(state(&b, pending).await, Some(ItemState::Pending));
    assert!(
        b.dead_tokens(100).await.unwrap().is_empty(),
        "a foreign release buried the local lease"
    );
    let info = b
        .inspect(&key)
        .await
        .unwrap()
        .expect("the local lease is still there");
    assert_eq!((info.token, info.is_live()), (lb.token, true));
    let lb = b.renew(&lb).await.expect("the local lease still renews");
    b.complete(&lb, owned)
        .await
        .expect("the local lease still owns its item");
    // A's own lease is untouched and still works where it was issued.
    a.renew(&la).await.expect("A's lease still renews on A");
    assert!(a.release(&la).await.unwrap());
}

fn assert_foreign<T: std::fmt::Debug>(r: liveness_core::Result<T>, op: &str) {
    match r {
        Err(Error::InvalidInput {
            what: "lease",
            problem: InputProblem::ForeignLease,
        }) => {}
        other => panic!(
            "{op} with a foreign lease: expected InvalidInput(lease, ForeignLease), got {other:?}"
        ),
    }
}

/// Bad input (ttl outside the store's bounds, zero limits, payload over the limit,
/// zero attempts, non-UTF-8 or oversized names) is rejected with InvalidInput and
/// changes nothing; the capabilities stay the same throughout.
pub async fn bad_input_rejected_unchanged(ctx: Ctx) {
    let s = &ctx.store;
    let caps = ctx.caps();
    let key = member_key("bad");
    let before = s.item_counts().await.unwrap();
    if caps.min_ttl > std::time::Duration::from_millis(1) {
        let short = Ttl::new(caps.min_ttl - std::time::Duration::from_millis(1)).unwrap();
        assert_invalid(s.acquire(&key, &holder("h"), short).await, "ttl");
    }
    if caps.max_ttl < Ttl::MAX {
        let long = Ttl::new(caps.max_ttl + std::time::Duration::from_millis(1)).unwrap();
        assert_invalid(s.acquire(&key, &holder("h"), long).await, "ttl");
    }
    assert!(
        s.inspect(&key).await.unwrap().is_none(),
        "rejected acquire left a lease"
    );
    assert_invalid(s.expired(&members(), 0).await, "limit");
    assert_invalid(s.dead_tokens(0).await, "limit");
    assert_invalid(s.dead_letters(0).await, "limit");
    let big = vec![7u8; caps.max_payload + 1];
    assert_invalid(s.enqueue(&big, opts(3)).await, "payload");
    assert_invalid(s.enqueue(b"x", opts(0)).await, "max_attempts");
    assert_eq!(
        s.item_counts().await.unwrap(),
        before,
        "rejected enqueue added an item"
    );
    let lease = ctx.grant(&key, &holder("h"), ctx.long).await;
    assert_invalid(s.claim(&lease, 0).await, "n");
    // Names are validated before they reach any store.
    assert!(matches!(
        Name::from_bytes(&[0x66, 0xff]),
        Err(Error::InvalidInput {
            problem: InputProblem::NotUtf8,
            ..
        })
    ));
    assert!(Name::new("").is_err());
    assert!(Name::new("x".repeat(liveness_core::MAX_NAME_LEN + 1)).is_err());
    assert!(Name::new("tab\there").is_err());
    assert!(Ttl::new(std::time::Duration::ZERO).is_err());
    // A payload exactly at the limit is accepted when the store can take it quickly.
    if caps.max_payload <= 4 * 1024 * 1024 {
        let max = vec![1u8; caps.max_payload];
        let id = s
            .enqueue(&max, opts(1))
            .await
            .expect("payload at the limit");
        assert_eq!(
            s.item(id).await.unwrap().unwrap().item.payload.len(),
            caps.max_payload
        );
    }
    assert_eq!(
        s.capabilities(),
        caps,
        "capabilities changed during the handle's lifetime"
    );
}

/// The store works the same through `Box<dyn Store>`, `&dyn Store` and `Arc<dyn Store>`.
pub async fn works_through_box_and_arc(ctx: Ctx) {
    let arc: Arc<dyn Store> = ctx.store.clone();
    let boxed: Box<dyn Store> = Box::new(crate::wrappers::Wrapped::new(arc.clone()));
    let by_ref: &dyn Store = boxed.as_ref();
    let key = member_key("dyn");
    let lease = by_ref.acquire(&key, &holder("h"), ctx.long).await.unwrap();
    assert_eq!(arc.inspect(&key).await.unwrap().unwrap().token, lease.token);
    let id = boxed
        .enqueue(b"p", EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(arc.claim(&lease, 1).await.unwrap()[0].id, id);
    assert!(by_ref.release(&lease).await.unwrap());
}
