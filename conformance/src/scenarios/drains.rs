//! Drain scenarios: several dead sessions swept in one
//! [`ItemStore::requeue_orphans_many`] call, on a store whose
//! [`Capabilities::sessions`] says it serves sessions natively. On any other store
//! they pass at once.
//!
//! [`ItemStore::requeue_orphans_many`]: liveness_core::ItemStore::requeue_orphans_many
//! [`Capabilities::sessions`]: liveness_core::Capabilities::sessions

use std::collections::HashSet;
use std::sync::Arc;

use liveness_core::{FencingToken, HolderId, Key, Lease, Name, Space, Store};

use super::common::holder;
use crate::{member_key, Ctx};

/// A fresh key of the `sessions` space.
fn session_key(prefix: &str) -> Key {
    let name = format!("{prefix}-{:08x}", fastrand::u32(..));
    Key::new(
        Space::sessions(),
        Name::new(&name).unwrap_or_else(|e| panic!("{e}")),
    )
}

/// A session lease (ttl `ctx.long`) and `n` members riding it, joined `max_batch`
/// a call.
async fn session_of(ctx: &Ctx, prefix: &str, n: usize) -> (Lease, Vec<Lease>) {
    let s = &ctx.store;
    let session = ctx
        .grant(&session_key(prefix), &holder(prefix), ctx.long)
        .await;
    let asks: Vec<(Key, HolderId)> = (0..n)
        .map(|i| (member_key(&format!("{prefix}{i}")), holder("r")))
        .collect();
    let mut members = Vec::with_capacity(n);
    for chunk in asks.chunks(ctx.caps().max_batch.max(1)) {
        for (i, answer) in s
            .join_session_many(&session, chunk)
            .await
            .unwrap()
            .into_iter()
            .enumerate()
        {
            members.push(answer.unwrap_or_else(|e| panic!("join {}: {e}", chunk[i].0)));
        }
    }
    (session, members)
}

/// Sweeps the retired members' tokens out of the dead set (they own no items), so
/// that it holds only the sessions' tokens and `is_dead`, which reads its lowest
/// `max_batch` tokens, sees them.
async fn forget(s: &Arc<dyn Store>, members: &[FencingToken]) {
    for chunk in members.chunks(s.capabilities().max_batch.max(1)) {
        for answer in s.requeue_orphans_many(chunk).await.unwrap() {
            let answer = answer.unwrap();
            assert!(
                answer.is_empty(),
                "a retired member's sweep moved {answer:?}"
            );
        }
    }
}

/// Whether `token` is in the dead set.
async fn is_dead(s: &Arc<dyn Store>, token: FencingToken) -> bool {
    let limit = s.capabilities().max_batch;
    let dead = s.dead_tokens(limit).await.unwrap();
    dead.iter().any(|d| d.token == token)
}

/// One `requeue_orphans_many` of several dead sessions answers each token as its own
/// `requeue_orphans` would: each session above `max_batch` members retires exactly
/// `max_batch` of its own members and stays in the dead set, a small one retires all
/// of its members and leaves it, whatever the position of the token in the call (no
/// budget shared between tokens). The drain then ends with each member retired
/// exactly once.
pub async fn requeue_orphans_many_drains_each_session_alone(ctx: Ctx) {
    if !ctx.caps().sessions {
        return;
    }
    let s = &ctx.store;
    let batch = ctx.caps().max_batch.max(1);
    let (big_a, riders_a) = session_of(&ctx, "a", batch + 1).await;
    let (small, riders_s) = session_of(&ctx, "s", 2).await;
    let (big_b, riders_b) = session_of(&ctx, "b", batch + 1).await;
    for session in [&big_a, &small, &big_b] {
        assert!(s.release(session).await.unwrap(), "release {}", session.key);
    }
    let sessions = [
        ("the first big session", &big_a, &riders_a),
        ("the small session", &small, &riders_s),
        ("the second big session", &big_b, &riders_b),
    ];
    for (what, session, _) in sessions {
        assert!(
            is_dead(s, session.token).await,
            "{what} is not in the dead set"
        );
    }

    let tokens = [big_a.token, small.token, big_b.token];
    let answers = s.requeue_orphans_many(&tokens).await.unwrap();
    assert_eq!(answers.len(), tokens.len(), "one answer per token");
    let answers: Vec<_> = sessions
        .iter()
        .zip(answers)
        .map(|((what, ..), answer)| answer.unwrap_or_else(|e| panic!("{what}: {e}")))
        .collect();
    let retired: Vec<FencingToken> = answers
        .iter()
        .flat_map(|a| a.retired.iter().map(|m| m.token))
        .collect();
    forget(s, &retired).await;
    let mut seen = HashSet::new();
    for ((what, session, riders), answer) in sessions.iter().zip(answers) {
        let want = riders.len().min(batch);
        assert_eq!(
            answer.retired.len(),
            want,
            "{what} (token {}) of {} members retired {} in one requeue_orphans_many of \
             {tokens:?}; its requeue_orphans alone retires {want}",
            session.token.0,
            riders.len(),
            answer.retired.len()
        );
        let own: HashSet<FencingToken> = riders.iter().map(|m| m.token).collect();
        for m in &answer.retired {
            assert!(
                own.contains(&m.token),
                "{what} retired {m:?}, not its member"
            );
            assert!(seen.insert(m.token), "{m:?} retired twice");
        }
        assert_eq!(
            is_dead(s, session.token).await,
            riders.len() > batch,
            "{what}: in the dead set while (and only while) members remain"
        );
    }

    // The rest of the drain, token by token: each member exactly once in all.
    for (what, session, _) in sessions {
        for _ in 0..10_000 {
            if !is_dead(s, session.token).await {
                break;
            }
            let moved = s.requeue_orphans(session.token).await.unwrap();
            assert!(moved.retired.len() <= batch, "{what}: above max_batch");
            for m in &moved.retired {
                assert!(seen.insert(m.token), "{m:?} retired twice");
            }
            let retired: Vec<FencingToken> = moved.retired.iter().map(|m| m.token).collect();
            forget(s, &retired).await;
        }
        assert!(!is_dead(s, session.token).await, "{what}: never drained");
    }
    let all: HashSet<FencingToken> = sessions
        .iter()
        .flat_map(|(_, _, riders)| riders.iter().map(|m| m.token))
        .collect();
    assert_eq!(seen, all, "each member retired exactly once");
}
