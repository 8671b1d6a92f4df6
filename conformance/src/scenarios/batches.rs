//! Batch scenarios: `renew_many`, `reap_many`, `requeue_orphans_many` answer per
//! entry exactly what the single-entry method would (issue 13: one round trip for many
//! leases, with each lease's own result).

use liveness_core::{EnqueueOptions, Error, FencingToken, InputProblem, Lease, LostReason};

use crate::scenarios::leases::holder;
use crate::{member_key, Ctx};

fn opts(max_attempts: u32) -> EnqueueOptions {
    EnqueueOptions {
        max_attempts,
        ..EnqueueOptions::default()
    }
}

/// renew_many answers per lease, in order: live current leases are extended (same
/// token, at most their ttl left); a released, a superseded and an expired lease each
/// answer `Lost` with its own reason, without touching the others; an empty list
/// answers empty.
pub async fn renew_many_answers_each_lease_alone(ctx: Ctx) {
    let s = &ctx.store;
    assert!(s.renew_many(&[]).await.unwrap().is_empty());
    let live = ctx.grant(&member_key("live"), &holder("h"), ctx.long).await;
    let released = ctx.grant(&member_key("rel"), &holder("h"), ctx.long).await;
    assert!(s.release(&released).await.unwrap());
    let old = ctx.grant(&member_key("sup"), &holder("h"), ctx.ttl).await;
    let expiring = ctx.grant(&member_key("exp"), &holder("h"), ctx.ttl).await;
    ctx.wait_expired(&old.key).await;
    ctx.wait_expired(&expiring.key).await;
    let newer = ctx.grant(&old.key, &holder("h2"), ctx.long).await;
    let live2 = ctx
        .grant(&member_key("live2"), &holder("h"), ctx.long)
        .await;
    let asked = [
        live.clone(),
        released.clone(),
        old.clone(),
        expiring.clone(),
        live2.clone(),
    ];
    let answers = s.renew_many(&asked).await.unwrap();
    assert_eq!(answers.len(), asked.len(), "one answer per lease");
    for (lease, answer) in [&live, &live2].into_iter().zip([&answers[0], &answers[4]]) {
        let renewed = answer
            .as_ref()
            .unwrap_or_else(|e| panic!("{}: {e}", lease.key));
        assert_eq!(renewed.token, lease.token);
        assert_eq!(renewed.key, lease.key);
        assert!(renewed.expires_in <= lease.ttl.duration());
        assert!(s.inspect(&lease.key).await.unwrap().unwrap().is_live());
    }
    let reason = |i: usize| match &answers[i] {
        Err(Error::Lost { reason, token, .. }) => {
            assert_eq!(*token, asked[i].token);
            *reason
        }
        other => panic!("lease {i}: expected Lost, got {other:?}"),
    };
    assert_eq!(reason(1), LostReason::Released);
    assert_eq!(reason(2), LostReason::Superseded);
    assert_eq!(reason(3), LostReason::Expired);
    // Nothing changed on a Lost: the newer holder keeps its lease, the expired one
    // stays expired (never renewed).
    let info = s.inspect(&old.key).await.unwrap().unwrap();
    assert_eq!(info.token, newer.token);
    assert!(!s.inspect(&expiring.key).await.unwrap().unwrap().is_live());
}

/// renew_many with more leases than `max_batch` is `InvalidInput` and renews none.
pub async fn renew_many_over_max_batch_rejected(ctx: Ctx) {
    let s = &ctx.store;
    let max = ctx.caps().max_batch.max(1);
    if max > 5_000 {
        return; // building the list would be the whole scenario's time
    }
    let lease = ctx.grant(&member_key("one"), &holder("h"), ctx.ttl).await;
    let many: Vec<Lease> = std::iter::repeat_n(lease.clone(), max + 1).collect();
    match s.renew_many(&many).await {
        Err(Error::InvalidInput {
            problem: InputProblem::TooLong { .. },
            ..
        }) => {}
        other => panic!("expected InvalidInput, got {:?}", other.map(|v| v.len())),
    }
}

/// reap_many answers per entry what `reap` would: true for an expired current lease
/// (its token then in the dead set), false for a live one, a wrong token and a second
/// reap of the same lease in the same call.
pub async fn reap_many_answers_each_entry_alone(ctx: Ctx) {
    let s = &ctx.store;
    assert!(s.reap_many(&[]).await.unwrap().is_empty());
    let live = ctx.grant(&member_key("live"), &holder("h"), ctx.long).await;
    let dead = ctx.grant(&member_key("dead"), &holder("h"), ctx.ttl).await;
    ctx.wait_expired(&dead.key).await;
    ctx.wait_listed_expired(&dead.key).await;
    let wrong = FencingToken(dead.token.0 + 1_000_000);
    let answers = s
        .reap_many(&[
            (live.key.clone(), live.token),
            (dead.key.clone(), wrong),
            (dead.key.clone(), dead.token),
            (dead.key.clone(), dead.token),
        ])
        .await
        .unwrap();
    let answers: Vec<bool> = answers.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(answers, vec![false, false, true, false]);
    assert!(s.inspect(&live.key).await.unwrap().unwrap().is_live());
    assert!(s.inspect(&dead.key).await.unwrap().is_none());
    let tokens = s.dead_tokens(1000).await.unwrap();
    assert!(tokens
        .iter()
        .any(|d| d.token == dead.token && d.key == dead.key));
    assert!(!tokens.iter().any(|d| d.token == live.token));
}

/// requeue_orphans_many answers per token what `requeue_orphans` would: the items of
/// each dead token back to pending once (a token given twice moves nothing twice), a
/// live member's token moves nothing.
pub async fn requeue_orphans_many_answers_each_token_alone(ctx: Ctx) {
    let s = &ctx.store;
    assert!(s.requeue_orphans_many(&[]).await.unwrap().is_empty());
    let a_item = s.enqueue(b"a", opts(3)).await.unwrap();
    let a = ctx.grant(&member_key("a"), &holder("a"), ctx.long).await;
    assert_eq!(s.claim(&a, 1).await.unwrap().len(), 1);
    let b_item = s.enqueue(b"b", opts(3)).await.unwrap();
    let b = ctx.grant(&member_key("b"), &holder("b"), ctx.long).await;
    assert_eq!(s.claim(&b, 1).await.unwrap().len(), 1);
    let live_item = s.enqueue(b"c", opts(3)).await.unwrap();
    let live = ctx.grant(&member_key("c"), &holder("c"), ctx.long).await;
    assert_eq!(s.claim(&live, 1).await.unwrap().len(), 1);
    assert!(s.release(&a).await.unwrap());
    assert!(s.release(&b).await.unwrap());
    let answers = s
        .requeue_orphans_many(&[a.token, live.token, b.token, a.token])
        .await
        .unwrap();
    let answers: Vec<_> = answers.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(answers.len(), 4);
    assert_eq!(answers[0].requeued, vec![a_item]);
    assert!(answers[1].is_empty(), "a live token's items moved");
    assert_eq!(answers[2].requeued, vec![b_item]);
    assert!(answers[3].is_empty(), "a token's items moved twice");
    let owned = s.item(live_item).await.unwrap().unwrap();
    assert_eq!(owned.state, liveness_core::ItemState::Owned(live.token));
    let dead = s.dead_tokens(1000).await.unwrap();
    assert!(!dead
        .iter()
        .any(|d| d.token == a.token || d.token == b.token));
}
