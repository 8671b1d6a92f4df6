//! Session sweep scenarios: several dead sessions swept in one
//! [`ItemStore::sweep_many`] call, on a store whose
//! [`Capabilities::sessions`] says it serves sessions natively. On any other store
//! they pass at once.
//!
//! [`ItemStore::sweep_many`]: liveness_core::ItemStore::sweep_many
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

/// Sweeps the tokens of the members declared dead out of the dead set (they own no items), so
/// that it holds only the sessions' tokens and `is_dead`, which reads its lowest
/// `max_batch` tokens, sees them.
async fn forget(s: &Arc<dyn Store>, members: &[FencingToken]) {
    for chunk in members.chunks(s.capabilities().max_batch.max(1)) {
        for answer in s.sweep_many(chunk).await.unwrap() {
            let answer = answer.unwrap();
            assert!(
                answer.is_empty(),
                "the sweep of a member declared dead moved {answer:?}"
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

/// One `sweep_many` of several dead sessions answers each token as its own
/// `sweep` would: each session above `max_batch` members declares exactly
/// `max_batch` of its own members dead and stays in the dead set, a small one declares
/// all of its members dead and leaves it, whatever the position of the token in the
/// call (no budget shared between tokens). The sweep then ends with each member
/// declared dead exactly once.
pub async fn sweep_many_sweeps_each_session_alone(ctx: Ctx) {
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
    let answers = s.sweep_many(&tokens).await.unwrap();
    assert_eq!(answers.len(), tokens.len(), "one answer per token");
    let answers: Vec<_> = sessions
        .iter()
        .zip(answers)
        .map(|((what, ..), answer)| answer.unwrap_or_else(|e| panic!("{what}: {e}")))
        .collect();
    let declared: Vec<FencingToken> = answers
        .iter()
        .flat_map(|a| a.members.iter().map(|m| m.token))
        .collect();
    forget(s, &declared).await;
    let mut seen = HashSet::new();
    for ((what, session, riders), answer) in sessions.iter().zip(answers) {
        let want = riders.len().min(batch);
        assert_eq!(
            answer.members.len(),
            want,
            "{what} (token {}) of {} members declared {} dead in one sweep_many of \
             {tokens:?}; its sweep alone declares {want}",
            session.token.0,
            riders.len(),
            answer.members.len()
        );
        let own: HashSet<FencingToken> = riders.iter().map(|m| m.token).collect();
        for m in &answer.members {
            assert!(
                own.contains(&m.token),
                "{what} declared {m:?} dead, not its member"
            );
            assert!(seen.insert(m.token), "{m:?} declared dead twice");
        }
        assert_eq!(
            is_dead(s, session.token).await,
            riders.len() > batch,
            "{what}: in the dead set while (and only while) members remain"
        );
    }

    // The rest of the sweep, token by token: each member exactly once in all.
    for (what, session, _) in sessions {
        for _ in 0..10_000 {
            if !is_dead(s, session.token).await {
                break;
            }
            let moved = s.sweep(session.token).await.unwrap();
            assert!(moved.members.len() <= batch, "{what}: above max_batch");
            for m in &moved.members {
                assert!(seen.insert(m.token), "{m:?} declared dead twice");
            }
            let declared: Vec<FencingToken> = moved.members.iter().map(|m| m.token).collect();
            forget(s, &declared).await;
        }
        assert!(!is_dead(s, session.token).await, "{what}: never swept");
    }
    let all: HashSet<FencingToken> = sessions
        .iter()
        .flat_map(|(_, _, riders)| riders.iter().map(|m| m.token))
        .collect();
    assert_eq!(seen, all, "each member declared dead exactly once");
}
