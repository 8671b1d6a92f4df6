//! Batch scenarios: `acquire_many`, `renew_many`, `reap_many`, `sweep_many` answer per
//! entry exactly what the single-entry method would (one round trip for many leases,
//! with each lease's own result), and do to the store exactly what it would, at every
//! position of a batch.

use std::time::Duration;

use liveness_core::{
    Acquire, EnqueueOptions, Error, FencingToken, InputProblem, Lease, LostCause, Ttl,
};

use super::common::holder;
use crate::{member_key, Ctx};

pub(super) fn opts(max_attempts: u32) -> EnqueueOptions {
    EnqueueOptions::default().max_attempts(max_attempts)
}

/// acquire_many answers per entry, in order, what `acquire` of that entry alone would:
/// a free key is taken with at most its ttl (and more than half of it) left; a key held live by another holder
/// answers `Held` naming it and changes nothing; an expired lease is reaped by the
/// same step (its token in the dead set); a second entry on a key an earlier entry
/// took answers `Held` naming that token; an entry with a ttl outside the
/// capabilities fails alone; the tokens taken grow in the order of the entries; an
/// empty list answers empty. A repeat of the whole call answers each taken entry
/// `Held` by its own holder and token (its ghost), and takes nothing new.
pub async fn acquire_many_answers_each_entry_alone(ctx: Ctx) {
    let s = &ctx.store;
    assert!(s.acquire_many(&[]).await.unwrap().is_empty());
    let other = ctx
        .grant(&member_key("am-held"), &holder("o"), ctx.long)
        .await;
    let old = ctx
        .grant(&member_key("am-exp"), &holder("o"), ctx.ttl)
        .await;
    ctx.wait_expired(&old.key).await;
    let caps = ctx.caps();
    let bad = Ttl::new(caps.max_ttl + Duration::from_millis(1)).ok();
    let a_key = member_key("am-a");
    let mut asked = vec![
        Acquire::new(a_key.clone(), holder("h1"), ctx.long),
        Acquire::new(other.key.clone(), holder("h2"), ctx.long),
        Acquire::new(old.key.clone(), holder("h3"), ctx.long),
        Acquire::new(a_key, holder("h4"), ctx.long),
        Acquire::new(member_key("am-b"), holder("h5"), ctx.long),
    ];
    if let Some(bad) = bad {
        asked.push(Acquire::new(member_key("am-bad"), holder("h6"), bad));
    }
    let answers = s.acquire_many(&asked).await.unwrap();
    assert_eq!(answers.len(), asked.len(), "one answer per entry");
    let taken = |i: usize| -> Lease {
        let lease = answers[i]
            .as_ref()
            .unwrap_or_else(|e| panic!("entry {i}: {e}"))
            .clone();
        assert_eq!(lease.key, asked[i].key);
        assert_eq!(lease.holder, asked[i].holder);
        assert_eq!(lease.ttl, asked[i].ttl);
        let ttl = asked[i].ttl.duration();
        assert!(
            lease.expires_in <= ttl && lease.expires_in > ttl / 2,
            "{lease:?}"
        );
        lease
    };
    let (a, c, b) = (taken(0), taken(2), taken(4));
    assert!(other.token < a.token && a.token < c.token && c.token < b.token);
    assert!(old.token < a.token);
    match &answers[1] {
        Err(Error::Held {
            holder: h, token, ..
        }) => {
            assert_eq!((h, *token), (&other.holder, other.token));
        }
        got => panic!("entry on a live key: expected Held, got {got:?}"),
    }
    match &answers[3] {
        Err(Error::Held {
            holder: h, token, ..
        }) => {
            assert_eq!(
                (h, *token),
                (&a.holder, a.token),
                "the earlier entry's lease"
            );
        }
        got => panic!("second entry on one key: expected Held, got {got:?}"),
    }
    if bad.is_some() {
        assert!(
            matches!(answers[5], Err(Error::InvalidInput { .. })),
            "bad ttl: {:?}",
            answers[5]
        );
        assert!(s.inspect(&asked[5].key).await.unwrap().is_none());
    }
    for lease in [&a, &b, &c] {
        let info = s.inspect(&lease.key).await.unwrap().expect("taken");
        assert_eq!((info.token, &info.holder), (lease.token, &lease.holder));
        assert!(info.is_live());
    }
    let info = s.inspect(&other.key).await.unwrap().unwrap();
    assert_eq!(info.token, other.token, "Held changed nothing");
    let dead = s.dead_tokens(1000).await.unwrap();
    assert!(
        dead.iter()
            .any(|d| d.token == old.token && d.key == old.key),
        "the expired lease taken over is in the dead set"
    );
    // A repeat (a lost reply, retried): every taken entry is its own ghost.
    let again = s.acquire_many(&asked[..5]).await.unwrap();
    for (i, lease) in [(0, &a), (2, &c), (4, &b)] {
        match &again[i] {
            Err(Error::Held {
                holder: h, token, ..
            }) => {
                assert_eq!((h, *token), (&lease.holder, lease.token), "entry {i}");
            }
            got => panic!("repeated entry {i}: expected Held, got {got:?}"),
        }
    }
}

/// Two `acquire_many` calls racing over the same keys in opposite orders: every key
/// is taken exactly once, by the holder `inspect` then names; each call's tokens grow
/// in the order of its entries; a losing entry answers `Held`. A call may fail as a
/// whole with a retryable fault (a store that aborts one of two deadlocked batches),
/// and then took nothing.
pub async fn racing_acquire_many_take_each_key_once(ctx: Ctx) {
    let s = &ctx.store;
    let n = ctx.caps().max_batch.clamp(1, 64);
    let keys: Vec<_> = (0..n).map(|i| member_key(&format!("race{i}"))).collect();
    let asks = |who: &str, reversed: bool| -> Vec<Acquire> {
        let mut v: Vec<Acquire> = keys
            .iter()
            .map(|k| Acquire::new(k.clone(), holder(who), ctx.long))
            .collect();
        if reversed {
            v.reverse();
        }
        v
    };
    let (asks_a, asks_b) = (asks("a", false), asks("b", true));
    let (ra, rb) = tokio::join!(s.acquire_many(&asks_a), s.acquire_many(&asks_b));
    assert!(
        ra.is_ok() || rb.is_ok(),
        "both racing calls failed: {ra:?} {rb:?}"
    );
    let mut won = std::collections::HashMap::new();
    for (asks, answers) in [(&asks_a, ra), (&asks_b, rb)] {
        let answers = match answers {
            Ok(answers) => answers,
            Err(e) if e.is_retryable() => continue,
            Err(e) => panic!("a racing acquire_many failed: {e}"),
        };
        let mut last = 0;
        for (ask, answer) in asks.iter().zip(answers) {
            match answer {
                Ok(lease) => {
                    assert!(lease.token.0 > last, "tokens grow in entry order");
                    last = lease.token.0;
                    assert!(
                        won.insert(ask.key.clone(), lease).is_none(),
                        "{} taken twice",
                        ask.key
                    );
                }
                Err(Error::Held { .. }) => {}
                Err(e) => panic!("{}: {e}", ask.key),
            }
        }
    }
    for key in &keys {
        let info = s.inspect(key).await.unwrap().expect("every key taken");
        let lease = won.get(key).expect("every key answered by its winner");
        assert_eq!((info.token, &info.holder), (lease.token, &lease.holder));
    }
}

/// acquire_many with more entries than `max_batch` is `InvalidInput` and takes none.
pub async fn acquire_many_over_max_batch_rejected(ctx: Ctx) {
    let s = &ctx.store;
    let max = ctx.caps().max_batch.max(1);
    if max > 5_000 {
        return; // building the list would be the whole scenario's time
    }
    let many: Vec<Acquire> = (0..=max)
        .map(|i| Acquire::new(member_key(&format!("many-{i}")), holder("h"), ctx.long))
        .collect();
    match s.acquire_many(&many).await {
        Err(Error::InvalidInput {
            problem: InputProblem::TooLong { .. },
            ..
        }) => {}
        other => panic!("expected InvalidInput, got {:?}", other.map(|v| v.len())),
    }
    assert!(s.inspect(&many[0].key).await.unwrap().is_none());
    assert!(s.inspect(&many[max].key).await.unwrap().is_none());
}

/// renew_many answers per lease, in order: live current leases are extended (same
/// token, at most their ttl left), also when leases of two spaces alternate; a
/// released, a superseded and an expired lease each answer `Lost` with its own reason,
/// without touching the others; an empty list answers empty.
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
    let leader = liveness_core::Key::leader(&format!("lead-{:08x}", fastrand::u32(..)))
        .unwrap_or_else(|e| panic!("{e}"));
    let lead = ctx.grant(&leader, &holder("h"), ctx.long).await;
    let asked = [
        live.clone(),
        released.clone(),
        old.clone(),
        expiring.clone(),
        live2.clone(),
        lead.clone(),
        live.clone(),
    ];
    let answers = s.renew_many(&asked).await.unwrap();
    assert_eq!(answers.len(), asked.len(), "one answer per lease");
    for (lease, answer) in [&live, &live2, &lead, &live].into_iter().zip([
        &answers[0],
        &answers[4],
        &answers[5],
        &answers[6],
    ]) {
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
    assert_eq!(reason(1), LostCause::Released);
    assert_eq!(reason(2), LostCause::Superseded);
    assert_eq!(reason(3), LostCause::Expired);
    // Nothing changed on a Lost: the newer holder keeps its lease, the expired one
    // stays expired (never renewed).
    let info = s.inspect(&old.key).await.unwrap().unwrap();
    assert_eq!(info.token, newer.token);
    assert!(!s.inspect(&expiring.key).await.unwrap().unwrap().is_live());
    assert!(s.release(&lead).await.unwrap());
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

/// sweep_many answers per token what `sweep` would: the items of
/// each dead token back to pending once (a token given twice moves nothing twice), a
/// live member's token moves nothing.
pub async fn sweep_many_answers_each_token_alone(ctx: Ctx) {
    let s = &ctx.store;
    assert!(s.sweep_many(&[]).await.unwrap().is_empty());
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
        .sweep_many(&[a.token, live.token, b.token, a.token])
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
