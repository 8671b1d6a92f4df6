//! Session scenarios: members riding a session ([`LeaseStore::join_session_many`]), on a
//! store whose [`Capabilities::sessions`] says it serves them natively. On any other
//! store they pass at once: `join_session` is then an ordinary `acquire`, which the
//! lease scenarios cover.
//!
//! [`LeaseStore::join_session_many`]: liveness_core::LeaseStore::join_session_many
//! [`Capabilities::sessions`]: liveness_core::Capabilities::sessions

use std::sync::Arc;
use std::time::Duration;

use liveness_core::{
    Checker, CheckerConfig, DeathCause, EnqueueOptions, Error, FencingToken, Key, Lease,
    LeaseStatus, Name, Space, Store,
};

use super::common::assert_counts;
use super::common::holder;
use crate::fixtures::swept_session_record;
use crate::{member_key, Ctx};

/// A fresh key of the `sessions` space.
fn session_key(prefix: &str) -> Key {
    let name = format!("{prefix}-{:08x}", fastrand::u32(..));
    Key::new(
        Space::sessions(),
        Name::new(&name).unwrap_or_else(|e| panic!("{e}")),
    )
}

/// A session lease of `ttl` and `n` members riding it (`r0`, `r1`, …); `None` on a
/// store without native sessions (the scenario then passes at once).
async fn riding(ctx: &Ctx, n: usize, ttl: liveness_core::Ttl) -> Option<(Lease, Vec<Lease>)> {
    if !ctx.store.capabilities().sessions {
        return None;
    }
    Some(session_with(ctx, n, ttl).await)
}

/// `n` pending items, and a session (ttl `ctx.ttl`) with `n` members riding it that
/// claimed one each; `None` on a store without native sessions.
async fn riding_with_items(ctx: &Ctx, n: usize) -> Option<(Lease, Vec<Lease>)> {
    if !ctx.store.capabilities().sessions {
        return None;
    }
    for i in 0..n {
        let payload = format!("job {i}");
        let options = EnqueueOptions::default();
        ctx.store
            .enqueue(payload.as_bytes(), options)
            .await
            .unwrap();
    }
    let (session, members) = session_with(ctx, n, ctx.ttl).await;
    for m in &members {
        assert_eq!(ctx.store.claim(m, 1).await.unwrap().len(), 1);
    }
    Some((session, members))
}

/// A session lease of `ttl` and `n` members riding it (`r0`, `r1`, …).
async fn session_with(ctx: &Ctx, n: usize, ttl: liveness_core::Ttl) -> (Lease, Vec<Lease>) {
    let s = &ctx.store;
    let session = ctx.grant(&session_key("p"), &holder("p"), ttl).await;
    let mut members = Vec::with_capacity(n);
    for i in 0..n {
        let key = member_key(&format!("r{i}"));
        let member = s.join_session(&session, &key, &holder("r")).await.unwrap();
        members.push(member);
    }
    (session, members)
}

/// Whether `token` is in the dead set.
async fn is_dead(s: &Arc<dyn Store>, token: FencingToken) -> bool {
    let limit = s.capabilities().max_batch;
    let dead = s.dead_tokens(limit).await.unwrap();
    dead.iter().any(|d| d.token == token)
}

/// Sweeps the dead session `token` until it leaves the dead set: the members each
/// call declared dead, in order. Fails when a call declares more than `max_batch`
/// dead, or when the sweep does not end.
async fn sweep_session(s: &Arc<dyn Store>, token: FencingToken) -> Vec<FencingToken> {
    let batch = s.capabilities().max_batch;
    let mut declared = Vec::new();
    for _ in 0..10_000 {
        let moved = s.sweep(token).await.unwrap();
        assert!(moved.members.len() <= batch, "a batch above max_batch");
        declared.extend(moved.members.iter().map(|m| m.token));
        if !is_dead(s, token).await {
            return declared;
        }
    }
    panic!("the sweep of a dead session never ended");
}

fn sorted(mut v: Vec<FencingToken>) -> Vec<FencingToken> {
    v.sort();
    v
}

/// A member joins only a current, live session of the `sessions` space, under a new
/// token, and is live by its session; its key is then held. A released or expired
/// session is `Lost`; a session of another space is `InvalidInput`.
pub async fn a_member_joins_only_a_live_session(ctx: Ctx) {
    let Some((session, members)) = riding(&ctx, 1, ctx.long).await else {
        return;
    };
    let s = &ctx.store;
    let m = &members[0];
    assert!(m.token > session.token, "a new token");
    assert_eq!(m.ttl, session.ttl);
    let info = s
        .inspect(&m.key)
        .await
        .unwrap()
        .expect("the member's record");
    assert!(matches!(info.status, LeaseStatus::Live { .. }), "{info:?}");
    assert_eq!(
        info.session.as_ref(),
        Some(&session.key),
        "inspect names the session"
    );
    let listed = s
        .leases(&Space::members(), liveness_core::Page::first(1000))
        .await
        .unwrap();
    let mine = listed.iter().find(|l| l.key == m.key).expect("listed");
    assert_eq!(mine.session.as_ref(), Some(&session.key), "leases names it");
    let own = s.inspect(&session.key).await.unwrap().expect("the session");
    assert_eq!(own.session, None, "a lease of its own rides nothing");
    match s.join_session(&session, &m.key, &holder("other")).await {
        Err(Error::Held { token, .. }) => assert_eq!(token, m.token),
        other => panic!("a joined key joined again answered {other:?}"),
    }
    match s.acquire(&m.key, &holder("other"), ctx.long).await {
        Err(Error::Held { token, .. }) => assert_eq!(token, m.token),
        other => panic!("a riding member's key acquired answered {other:?}"),
    }
    assert!(s.release(&session).await.unwrap());
    match s
        .join_session(&session, &member_key("late"), &holder("l"))
        .await
    {
        Err(Error::Lost { .. }) => {}
        other => panic!("joining a released session answered {other:?}"),
    }
    let short = ctx
        .grant(&session_key("short"), &holder("p"), ctx.ttl)
        .await;
    ctx.wait_listed_expired(&short.key).await;
    match s
        .join_session(&short, &member_key("late"), &holder("l"))
        .await
    {
        Err(Error::Lost { .. }) => {}
        other => panic!("joining an expired session answered {other:?}"),
    }
    let not_a_session = ctx.grant(&member_key("x"), &holder("x"), ctx.long).await;
    match s
        .join_session(&not_a_session, &member_key("y"), &holder("y"))
        .await
    {
        Err(Error::InvalidInput { .. }) => {}
        other => panic!("joining a lease of the members space answered {other:?}"),
    }
}

/// Renewing the session alone keeps its members live past their ttl; once it
/// expires, every call judges them expired: `inspect`, `renew` and `claim` (`Lost`),
/// and `expired` lists the session, never a member.
pub async fn a_riding_member_lives_and_dies_with_its_session(ctx: Ctx) {
    let Some((session, members)) = riding(&ctx, 1, ctx.ttl).await else {
        return;
    };
    let s = &ctx.store;
    let m = &members[0];
    s.enqueue(b"job", EnqueueOptions::default()).await.unwrap();
    let ttl = ctx.ttl.duration();
    let until = tokio::time::Instant::now() + ttl * 2 + ttl / 2;
    while tokio::time::Instant::now() < until {
        s.renew(&session).await.unwrap();
        tokio::time::sleep(ttl / 5).await;
    }
    s.renew(m)
        .await
        .expect("a riding member renews as its session stands");
    assert_eq!(s.claim(m, 1).await.unwrap().len(), 1);

    ctx.wait_listed_expired(&session.key).await;
    let info = s
        .inspect(&m.key)
        .await
        .unwrap()
        .expect("the member's record");
    assert_eq!(info.status, LeaseStatus::Expired);
    assert!(matches!(s.renew(m).await, Err(Error::Lost { .. })));
    assert!(matches!(s.claim(m, 1).await, Err(Error::Lost { .. })));
    let listed = s.expired(&Space::members(), 1000).await.unwrap();
    assert!(listed.iter().all(|l| l.key != m.key), "a member is listed");
}

/// A dead session's members die through the sweep of its token, each exactly once,
/// in batches of at most `max_batch`; their items go back with their own tokens; the
/// death history has one record for the session (none per member), whose swept
/// counts add up what the members' sweeps moved.
pub async fn a_dead_session_s_members_die_once_each(ctx: Ctx) {
    let n = 5;
    let Some((session, members)) = riding_with_items(&ctx, n).await else {
        return;
    };
    let s = &ctx.store;
    ctx.wait_listed_expired(&session.key).await;
    assert!(s.reap(&session.key, session.token).await.unwrap());
    let declared = sweep_session(s, session.token).await;
    let want: Vec<FencingToken> = members.iter().map(|m| m.token).collect();
    assert_eq!(sorted(declared), sorted(want.clone()), "each member once");
    for m in &members {
        assert!(s.inspect(&m.key).await.unwrap().is_none(), "declared dead");
        let moved = s.sweep(m.token).await.unwrap();
        assert_eq!(moved.requeued.len(), 1, "its item goes back with its token");
    }
    assert_counts(s, [n as u64, 0, 0], "every member's item pending again").await;
    let record = swept_session_record(s.as_ref(), session.token, &want, n as u64).await;
    assert_eq!(record.cause, DeathCause::Reaped);
}

/// Two sweepers racing over one dead session declare each member dead exactly once
/// between them; and a sweeper that stops after one batch loses nothing: the next one
/// finishes the sweep.
pub async fn racing_sweepers_declare_each_member_dead_once(ctx: Ctx) {
    let Some((session, members)) = riding(&ctx, 6, ctx.ttl).await else {
        return;
    };
    let s = &ctx.store;
    ctx.wait_listed_expired(&session.key).await;
    assert!(s.reap(&session.key, session.token).await.unwrap());
    // One call, then the "crash": the session's token stays in the dead set.
    let first = s.sweep(session.token).await.unwrap();
    let mut all: Vec<FencingToken> = first.members.iter().map(|m| m.token).collect();
    let (a, b) = (s.clone(), s.clone());
    let token = session.token;
    let (ra, rb) = tokio::join!(
        tokio::spawn(async move { sweep_session(&a, token).await }),
        tokio::spawn(async move { sweep_session(&b, token).await })
    );
    all.extend(ra.unwrap());
    all.extend(rb.unwrap());
    let want: Vec<FencingToken> = members.iter().map(|m| m.token).collect();
    assert_eq!(sorted(all), sorted(want), "each member exactly once");
}

/// `release` of a riding member declares it dead alone, with a death record of its
/// own; the session and its other members stay live. A key whose session died is
/// taken by the next `acquire`, its member declared dead as superseded.
pub async fn a_member_dies_alone(ctx: Ctx) {
    let Some((session, members)) = riding(&ctx, 2, ctx.long).await else {
        return;
    };
    let s = &ctx.store;
    assert!(s.release(&members[0]).await.unwrap());
    let deaths = s.deaths(None, 10).await.unwrap();
    let gone = deaths.iter().find(|d| d.token == members[0].token);
    assert_eq!(gone.map(|d| d.cause), Some(DeathCause::Released));
    s.renew(&session).await.unwrap();
    s.renew(&members[1]).await.unwrap();

    let (short, riders) = session_with(&ctx, 1, ctx.ttl).await;
    ctx.wait_listed_expired(&short.key).await;
    let taken = s
        .acquire(&riders[0].key, &holder("next"), ctx.long)
        .await
        .expect("a key whose session died is free");
    assert!(taken.token > riders[0].token);
    assert!(is_dead(s, riders[0].token).await);
    let deaths = s.deaths(None, 10).await.unwrap();
    let old = deaths.iter().find(|d| d.token == riders[0].token);
    assert_eq!(old.map(|d| d.cause), Some(DeathCause::Superseded));
}

/// Two checkers, each checking the sessions space, declare a dead session and each
/// of its members dead exactly once between them, and every member's item goes back.
pub async fn checkers_declare_a_dead_session_s_members_once(ctx: Ctx) {
    let Some((session, members)) = riding_with_items(&ctx, 3).await else {
        return;
    };
    let s = &ctx.store;
    ctx.wait_listed_expired(&session.key).await;
    let config = CheckerConfig::default().space(Space::sessions());
    let (a, b) = (
        Checker::new(s.clone(), config.clone()),
        Checker::new(s.clone(), config),
    );
    let mut dead = Vec::new();
    for _ in 0..20 {
        let (ra, rb) = tokio::join!(a.round(), b.round());
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        dead.extend(ra.deaths.iter().chain(&rb.deaths).map(|d| d.lease.token));
        if s.item_counts().await.unwrap().pending == 3 && !ra.more && !rb.more {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut want: Vec<FencingToken> = members.iter().map(|m| m.token).collect();
    want.push(session.token);
    assert_eq!(
        sorted(dead),
        sorted(want),
        "each declared dead exactly once"
    );
    assert_eq!(s.item_counts().await.unwrap().pending, 3, "every item back");
}

/// A batch of joins ([`LeaseStore::join_session_many`]) answers each entry as its
/// own `join_session` would, in order: with a live key at any position, that entry
/// answers `Held` and leaves the key as it was while every other entry joins (live,
/// riding the session, under new tokens increasing in the order of the entries); an
/// expired lease on an entry's key is declared dead (into the dead set) and taken; a
/// released session answers `Lost` for every entry and takes nothing; a batch above
/// `max_batch` is `InvalidInput` and takes nothing.
///
/// [`LeaseStore::join_session_many`]: liveness_core::LeaseStore::join_session_many
pub async fn a_batch_of_joins_answers_each_entry_as_its_join(ctx: Ctx) {
    let Some((session, _)) = riding(&ctx, 0, ctx.long).await else {
        return;
    };
    let s = &ctx.store;
    const N: usize = 3;
    for held_at in 0..N {
        let keys: Vec<Key> = (0..N).map(|i| member_key(&format!("b{i}"))).collect();
        let other = ctx.grant(&keys[held_at], &holder("other"), ctx.long).await;
        let asks: Vec<(Key, liveness_core::HolderId)> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), holder(&format!("j{i}"))))
            .collect();
        let answers = s.join_session_many(&session, &asks).await.unwrap();
        assert_eq!(answers.len(), N, "one answer per entry");
        let mut last = session.token;
        for (i, (answer, (key, who))) in answers.into_iter().zip(&asks).enumerate() {
            let info = s.inspect(key).await.unwrap().expect("a record");
            if i == held_at {
                match answer {
                    Err(Error::Held { token, .. }) => assert_eq!(token, other.token),
                    other => panic!("entry {i}, a held key, answered {other:?}"),
                }
                assert_eq!(info.token, other.token, "a held key stays as it was");
                assert_eq!(info.session, None, "a held key rides nothing");
                continue;
            }
            let lease = answer.unwrap_or_else(|e| panic!("entry {i} (held at {held_at}): {e}"));
            assert_eq!(&lease.key, key);
            assert_eq!(&lease.holder, who);
            assert!(
                lease.token > last,
                "tokens increase in the order of entries"
            );
            last = lease.token;
            assert_eq!(lease.ttl, session.ttl);
            assert_eq!(info.token, lease.token, "entry {i} took its key");
            assert_eq!(&info.holder, who);
            assert!(matches!(info.status, LeaseStatus::Live { .. }), "{info:?}");
            assert_eq!(info.session.as_ref(), Some(&session.key), "entry {i} rides");
            s.renew(&lease)
                .await
                .expect("a joined member renews as its session stands");
        }
    }

    // An expired lease at a batch's middle entry is declared dead (dead set) and taken.
    let keys: Vec<Key> = (0..N).map(|i| member_key(&format!("e{i}"))).collect();
    let stale = ctx.grant(&keys[1], &holder("stale"), ctx.ttl).await;
    ctx.wait_listed_expired(&stale.key).await;
    let asks: Vec<(Key, liveness_core::HolderId)> =
        keys.iter().map(|k| (k.clone(), holder("e"))).collect();
    let answers = s.join_session_many(&session, &asks).await.unwrap();
    for (i, answer) in answers.into_iter().enumerate() {
        let lease = answer.unwrap_or_else(|e| panic!("entry {i} over an expired lease: {e}"));
        let info = s.inspect(&lease.key).await.unwrap().expect("a record");
        assert_eq!(info.token, lease.token);
        assert_eq!(info.session.as_ref(), Some(&session.key));
    }
    assert!(
        is_dead(s, stale.token).await,
        "the expired lease was declared dead"
    );

    let max = s.capabilities().max_batch.max(1);
    let too_many: Vec<(Key, liveness_core::HolderId)> = (0..=max)
        .map(|i| (member_key(&format!("t{i}")), holder("t")))
        .collect();
    match s.join_session_many(&session, &too_many).await {
        Err(Error::InvalidInput { .. }) => {}
        other => panic!("a batch above max_batch answered {other:?}"),
    }
    assert!(s.inspect(&too_many[0].0).await.unwrap().is_none());

    assert!(s.release(&session).await.unwrap());
    let late: Vec<(Key, liveness_core::HolderId)> = (0..N)
        .map(|i| (member_key(&format!("l{i}")), holder("l")))
        .collect();
    let answers = s.join_session_many(&session, &late).await.unwrap();
    assert_eq!(answers.len(), N, "one answer per entry");
    for (i, answer) in answers.iter().enumerate() {
        assert!(
            matches!(answer, Err(Error::Lost { .. })),
            "entry {i} of a released session answered {answer:?}"
        );
        let taken = s.inspect(&late[i].0).await.unwrap();
        assert!(taken.is_none(), "a released session's batch took {taken:?}");
    }
}
