//! [`Session::join_many`](super::Session::join_many): a process's first join of many
//! members, each exactly [`Session::join_with`](super::Session::join_with), run side by
//! side so that the session's join gatherer ([`Joins`](crate::batch::Joins), on a store
//! with native sessions) sends them as [`LeaseStore::join_session_many`] calls of
//! [`Capabilities::max_batch`] members each instead of a round trip per member.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::task::JoinSet;

use super::Shared;
use crate::error::{Error, Result};
use crate::member::{Carrier, Member, MemberConfig};
#[cfg(doc)]
use crate::store::{Capabilities, LeaseStore};

/// How many batches' worth of joins are under way at once: enough for the gatherer
/// to fill each call, few enough that a million names do not make a million tasks at
/// once.
const BATCHES_AT_ONCE: usize = 16;

/// Joins the members of `configs` (an entry that is already an error answers it) into
/// `session`: one answer per entry, in their order, each what [`Member::ride`] of it
/// alone answers. A name given twice is joined once first; its repeats go after every
/// first one has its answer (and are `Held` while that member lives).
///
/// Dropped before it answers, it drops the joins under way (each leaves nothing
/// behind, as a dropped `join_with` does) and the members joined so far, which leave.
pub(super) async fn join_many(
    session: &Arc<Shared>,
    configs: Vec<Result<MemberConfig>>,
) -> Vec<Result<Member>> {
    let mut answers: Vec<Option<Result<Member>>> = Vec::with_capacity(configs.len());
    let mut names = HashSet::new();
    let (mut firsts, mut repeats) = (Vec::new(), Vec::new());
    for (at, config) in configs.into_iter().enumerate() {
        answers.push(None);
        match config {
            Ok(c) if names.insert(c.name.clone()) => firsts.push((at, c)),
            Ok(c) => repeats.push((at, c)),
            Err(e) => answers[at] = Some(Err(e)),
        }
    }
    let width = session.store().capabilities().max_batch.max(1) * BATCHES_AT_ONCE;
    for pass in [firsts, repeats] {
        let mut pass = pass.into_iter();
        let mut running = JoinSet::new();
        loop {
            while running.len() < width {
                let Some((at, config)) = pass.next() else {
                    break;
                };
                let session = session.clone();
                running.spawn(async move { (at, Member::ride(session, config).await) });
            }
            let Some(done) = running.join_next().await else {
                break;
            };
            match done {
                Ok((at, answer)) => answers[at] = Some(answer),
                // A join task panicked: its entry stays unanswered (below).
                Err(e) => tracing::warn!(error = %e, "a join of join_many ended without an answer"),
            }
        }
    }
    answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(Error::backend("session", "a join was not answered"))))
        .collect()
}
