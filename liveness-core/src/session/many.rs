//! [`Session::join_many`](super::Session::join_many): a process's first join of many
//! members, sent as [`LeaseStore::join_session_many`] calls of
//! [`Capabilities::max_batch`] members each instead of a round trip per member, each
//! member built exactly as [`Session::join_with`](super::Session::join_with) builds it.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Shared;
use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::keeper::{attempt, born_dead, ghost_lease, join_detached, Leftovers, SessionGen, Take};
use crate::lease::Lease;
use crate::member::{Carrier, Member, MemberConfig};
#[cfg(doc)]
use crate::store::{Capabilities, LeaseStore};
use crate::types::{HolderId, Key};

/// One entry of a `join_many` on its way: its place among the answers, its member's
/// configuration (as a rider has it) and key, and what its earlier attempts left.
struct Entry {
    at: usize,
    config: MemberConfig,
    key: Key,
    /// An attempt failed with a transient fault: the store may have applied it and
    /// lost the reply, leaving a lease of ours (a "ghost").
    maybe_ghost: bool,
    /// A lease of ours to adopt (renew) instead of joining anew.
    ghost: Option<Lease>,
    /// One ttl after its first attempt was sent: no attempt starts after it.
    give_up: Option<Instant>,
}

/// Joins the members of `configs` (an entry that is already an error answers it) into
/// `session`: one answer per entry, in their order. Each entry gets what
/// [`Member::ride`] of it alone would answer (the same retries for one ttl from its
/// first attempt, the same adoption of its own ghost, the same member), but the joins go as
/// `join_session_many` calls of `max_batch` entries; an entry whose own ghost must be
/// adopted, or whose batch was refused as a whole, goes alone.
pub(super) async fn join_many(
    session: &Arc<Shared>,
    configs: Vec<Result<MemberConfig>>,
) -> Vec<Result<Member>> {
    let mut answers = Answers(Vec::with_capacity(configs.len()));
    let mut pending = Vec::new();
    for (at, config) in configs.into_iter().enumerate() {
        answers.0.push(None);
        match config.and_then(|c| Member::riding(&**session, c)) {
            Ok((config, key)) => pending.push(Entry {
                at,
                config,
                key,
                maybe_ghost: false,
                ghost: None,
                give_up: None,
            }),
            Err(e) => answers.0[at] = Some(Err(e)),
        }
    }
    // Entries whose lost reply may have left a lease behind: released unless handed
    // over, however the call ends.
    let mut leftovers = Leftovers::new(session.store(), true);
    let hb = session.heartbeat();
    let mut backoff = Backoff::new(hb.renew_every / 8, hb.renew_every);
    let max = session.store().capabilities().max_batch.max(1);
    while !pending.is_empty() {
        let mut round = Round {
            session,
            answers: &mut answers,
            leftovers: &mut leftovers,
            ttl: hb.ttl.duration(),
            retry: Vec::new(),
            wait: false,
        };
        let (ghosts, fresh): (Vec<Entry>, Vec<Entry>) =
            pending.into_iter().partition(|e| e.ghost.is_some());
        for entry in ghosts {
            round.alone(entry).await;
        }
        let mut fresh = fresh.into_iter();
        loop {
            let chunk: Vec<Entry> = fresh.by_ref().take(max).collect();
            if chunk.is_empty() {
                break;
            }
            round.batch(chunk).await;
        }
        let wait = round.wait;
        pending = round.retry;
        if wait && !pending.is_empty() {
            pause(session, backoff.next()).await;
        }
    }
    answers.handed_over()
}

/// One pass over the entries still to join: who joined, who is refused for good, who
/// tries again.
struct Round<'a> {
    session: &'a Arc<Shared>,
    answers: &'a mut Answers,
    /// Where an attempt may have left a lease of an entry that is not handed over.
    leftovers: &'a mut Leftovers,
    /// How long an entry keeps trying after its first attempt, as one join does.
    ttl: Duration,
    retry: Vec<Entry>,
    /// Some entry failed with a fault or a lost session: the next pass waits first.
    wait: bool,
}

impl Round<'_> {
    /// Joins `chunk` (at most `max_batch` entries) with one `join_session_many` into
    /// the session's current lease.
    async fn batch(&mut self, chunk: Vec<Entry>) {
        let gen = self.session.current();
        if gen.standing.check().is_err() || chunk.len() == 1 {
            // A lost session is answered without a round trip, and a lone entry goes
            // as a `join_session`.
            for entry in chunk {
                self.alone(entry).await;
            }
            return;
        }
        let store = self.session.store();
        let pairs: Vec<(Key, HolderId)> = chunk
            .iter()
            .map(|e| (e.key.clone(), e.config.holder.clone()))
            .collect();
        let sent = Instant::now();
        let sent_on_clock = self.session.clock().boot();
        let faults = |backend: &'static str, why: String| -> Vec<Result<Lease>> {
            (0..chunk.len())
                .map(|_| Err(Error::unavailable(backend, why.clone())))
                .collect()
        };
        let call = {
            let (store, session) = (store.clone(), gen.lease.clone());
            async move { store.join_session_many(&session, &pairs).await }
        };
        let joined = |answers: Vec<Result<Lease>>| answers.into_iter().flatten().collect();
        let answered = match join_detached(store, call, joined).await {
            Ok(answers) if answers.len() == chunk.len() => answers,
            // Any subset may have been applied: each entry's next attempt adopts
            // what it finds of its own.
            Ok(answers) => faults(
                "session",
                format!(
                    "join_session_many answered {} entries of {}",
                    answers.len(),
                    chunk.len()
                ),
            ),
            Err(Error::Unavailable { backend, source }) => faults(backend, source.to_string()),
            Err(e) => {
                // Refused as a whole, which one join alone would not be: each alone.
                tracing::warn!(session = %gen.lease.key, error = %e, "a batch of joins was refused, joining one at a time");
                for entry in chunk {
                    self.alone(entry).await;
                }
                return;
            }
        };
        for (entry, answer) in chunk.into_iter().zip(answered) {
            // As `attempt` does: what it answered, or may have left, until handed over.
            if answer.as_ref().map_or_else(Error::is_retryable, |_| true) {
                self.leftovers.maybe_left(&entry.key, &entry.config.holder);
            }
            let answer = answer.map(|lease| (lease, Some(gen.clone())));
            self.settle(entry, answer, sent, sent_on_clock);
        }
    }

    /// One attempt of `entry` alone, as [`Member::ride`] makes it (adopting its ghost
    /// when it has one).
    async fn alone(&mut self, mut entry: Entry) {
        let sent = Instant::now();
        let sent_on_clock = entry.config.clock.boot();
        let store = self.session.store();
        let take = Take::Ride(&**self.session);
        let (ghost, leftovers) = (&mut entry.ghost, &mut *self.leftovers);
        let answer = attempt(store, &entry.config, &entry.key, ghost, take, leftovers).await;
        self.settle(entry, answer, sent, sent_on_clock);
    }

    /// Takes an attempt's `answer` for `entry` (its request sent at `sent`, and at
    /// `sent_on_clock` on the member's clock), as the first join of one member does:
    /// a member, a refusal, or another attempt.
    fn settle(
        &mut self,
        mut entry: Entry,
        answer: Result<(Lease, Option<SessionGen>)>,
        sent: Instant,
        sent_on_clock: Duration,
    ) {
        let give_up = *entry.give_up.get_or_insert(sent + self.ttl);
        let in_time = Instant::now() < give_up;
        match answer {
            Ok((lease, _)) if born_dead(&entry.config, sent_on_clock) && in_time => {
                // Answered after the deadline it starts: adopted, not thrown away.
                entry.ghost = Some(lease);
                self.retry.push(entry);
            }
            Ok((lease, gen)) => {
                self.leftovers.handed_over(&entry.key);
                let joined = (lease, sent, sent_on_clock, gen);
                let member = Member::ridden(self.session.clone(), entry.config, entry.key, joined);
                self.answers.0[entry.at] = Some(Ok(member));
            }
            Err(Error::Held { holder, token, .. })
                if entry.maybe_ghost && holder == entry.config.holder && in_time =>
            {
                // Our own ghost: an earlier attempt of this entry that the store
                // applied (the holder id carries this entry's nonce). Adopted.
                let store = self.session.store();
                let ghost = ghost_lease(store, &entry.config, &entry.key, holder, token);
                entry.ghost = Some(ghost);
                self.retry.push(entry);
            }
            Err(e) if e.is_retryable() && in_time => {
                entry.maybe_ghost = true;
                self.wait = true;
                self.retry.push(entry);
            }
            // The session is lost and being re-opened: join its next lease.
            Err(Error::Lost { .. }) if in_time => {
                self.wait = true;
                self.retry.push(entry);
            }
            Err(e) => self.answers.0[entry.at] = Some(Err(e)),
        }
    }
}

/// Waits `pause`, less once the session has a new lease to ride.
async fn pause(session: &Shared, pause: Duration) {
    let mut next = session.generations();
    tokio::select! {
        _ = tokio::time::sleep(pause) => {}
        changed = next.changed() => {
            if changed.is_err() {
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// The answers of a `join_many` so far, one slot per entry. Dropped before they were
/// handed over (the caller dropped the call's future), the members joined so far
/// leave in the background: none stays joined without a handle.
struct Answers(Vec<Option<Result<Member>>>);

impl Answers {
    /// Every answer, in the order of the entries.
    fn handed_over(mut self) -> Vec<Result<Member>> {
        std::mem::take(&mut self.0)
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(Error::backend("session", "a join was not answered"))))
            .collect()
    }
}

impl Drop for Answers {
    fn drop(&mut self) {
        let joined: Vec<Member> = self
            .0
            .drain(..)
            .filter_map(|a| a.and_then(Result::ok))
            .collect();
        if joined.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            for member in joined {
                let key = member.key().clone();
                if let Err(e) = member.leave(Duration::ZERO).await {
                    tracing::warn!(%key, error = %e, "a member of a dropped join_many could not leave");
                }
            }
        });
    }
}
