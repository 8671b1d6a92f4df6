//! The registry of the members riding one session, and the session task's tending
//! of them: when each rider must be looked at next (its own loss, a stall), and the
//! look itself ([`Member::tend`]).

use std::any::Any;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{Inner, Member};
use crate::clock::Clock;
use crate::heartbeat::HeartbeatConfig;
use crate::keeper::Ridden;
use crate::metrics::HolderMetrics;
use crate::store::Store;
use crate::sync::lock;
use crate::types::Key;

/// What a riding member needs of the session it rides (the session's shared state
/// implements it): the engine's view of the session ([`Ridden`]: its current lease,
/// its next ones, its join gatherer) and the parts its riders share with it.
pub(crate) trait Carrier: Ridden + Any + Send + Sync + std::fmt::Debug {
    /// The store, behind the input checks and tracing.
    fn store(&self) -> &Arc<dyn Store>;
    /// The session's heartbeat timing, which its riders share.
    fn heartbeat(&self) -> HeartbeatConfig;
    /// The clock of the session's deadline, which its riders' checks read.
    fn clock(&self) -> &Arc<dyn Clock>;
    /// The session's metric handles (its riders count their joins and losses there).
    fn metrics(&self) -> &HolderMetrics;
    /// True when the store serves sessions natively.
    fn native(&self) -> bool;
    /// The members riding the session.
    fn riders(&self) -> &Riders;
}

/// The members riding one session, by key (weakly: a member dropped by its owner is
/// forgotten), and when the session's task must look at each of them next.
#[derive(Debug, Default)]
pub(crate) struct Riders {
    map: Mutex<HashMap<Key, Weak<Inner>>>,
    /// When each rider must be looked at next ([`Member::tend`]).
    plan: Mutex<Plan>,
    /// Wakes the session's task when the earliest planned look moved earlier.
    wake: Notify,
}

/// The looks the session's task has planned, on the riders' clock's
/// [`Clock::boot`]: at most one per rider, read earliest first, so that a look costs
/// the riders due then and nothing for the others.
#[derive(Debug, Default)]
struct Plan {
    by_moment: BTreeSet<(Duration, Key)>,
    of: HashMap<Key, Duration>,
}

impl Plan {
    /// Plans a look at `key` at `at`, unless one is planned no later already. True
    /// when it is now the earliest look of all.
    fn look(&mut self, key: &Key, at: Duration) -> bool {
        if let Some(&planned) = self.of.get(key) {
            if planned <= at {
                return false;
            }
            self.by_moment.remove(&(planned, key.clone()));
        }
        self.of.insert(key.clone(), at);
        self.by_moment.insert((at, key.clone()));
        self.next() == Some(at)
    }

    /// The earliest planned look.
    fn next(&self) -> Option<Duration> {
        self.by_moment.first().map(|(at, _)| *at)
    }

    /// Drops the look planned at `key`, if any.
    fn forget(&mut self, key: &Key) {
        if let Some(planned) = self.of.remove(key) {
            self.by_moment.remove(&(planned, key.clone()));
        }
    }

    /// The riders due by `now`, taken out of the plan.
    fn due(&mut self, now: Duration) -> Vec<Key> {
        let mut due = Vec::new();
        while self.next().is_some_and(|at| at <= now) {
            if let Some((_, key)) = self.by_moment.pop_first() {
                self.of.remove(&key);
                due.push(key);
            }
        }
        due
    }
}

impl Riders {
    /// Records the member `member`, and when it must be looked at.
    pub(crate) fn insert(&self, member: &Member) {
        lock(&self.map).insert(member.key().clone(), member.downgrade());
        self.look_at(member);
    }

    /// Forgets `member` (when it is still the one on `key`), and its planned look.
    pub(crate) fn forget(&self, key: &Key, member: &Member) {
        let mut map = lock(&self.map);
        if map.get(key).is_some_and(|w| member.is(w)) {
            map.remove(key);
            lock(&self.plan).forget(key);
        }
    }

    /// Forgets the member `inner` on `key` once its owner dropped it, and its
    /// planned look: a process whose members come and go keeps nothing of the gone
    /// ones, however long their progress timeouts.
    pub(crate) fn dropped(&self, key: &Key, inner: *const Inner) {
        let mut map = lock(&self.map);
        if map
            .get(key)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), inner))
        {
            map.remove(key);
            lock(&self.plan).forget(key);
        }
    }

    /// How many riders are known, and how many looks are planned.
    #[cfg(test)]
    pub(crate) fn sizes(&self) -> (usize, usize) {
        (lock(&self.map).len(), lock(&self.plan).of.len())
    }

    /// The members alive, forgetting the dropped ones.
    pub(crate) fn members(&self) -> Vec<Member> {
        let weak: Vec<Weak<Inner>> = {
            let mut map = lock(&self.map);
            map.retain(|_, w| w.strong_count() > 0);
            map.values().cloned().collect()
        };
        weak.iter().filter_map(Member::upgrade).collect()
    }

    /// The member on `key`, if it is alive.
    fn member(&self, key: &Key) -> Option<Member> {
        lock(&self.map).get(key).and_then(Member::upgrade)
    }

    /// Makes sure the session's task looks at `member` when it is due (a member
    /// that joined, or re-joined).
    pub(crate) fn look_at(&self, member: &Member) {
        if let Some(at) = member.due().earliest() {
            self.due_by(member.key(), at);
        }
    }

    /// Makes sure the session's task looks at the rider on `key` at `at` (on the
    /// riders' clock) at the latest, waking it when that is its earliest look.
    pub(crate) fn due_by(&self, key: &Key, at: Duration) {
        if lock(&self.plan).look(key, at) {
            self.wake.notify_one();
        }
    }

    /// The riders' tending, in the session's task: looks at each rider when it is
    /// due ([`Member::tend`]: a loss of its own taken on, a stall) and plans its next
    /// look, then sleeps until the next rider is due or a change wakes it, until
    /// `stop` fires. A look costs the riders due then, so each is looked at on time:
    /// at its own deadline, and when its work will have made no progress for its
    /// progress timeout (a rider that made progress meanwhile is planned again from
    /// its last progress).
    /// Never returns: it stops looking once `stop` fired, and the session's heartbeat
    /// ends the task (ended here, the heartbeat would be dropped mid-way, which
    /// counts its lease as lost).
    pub(crate) async fn tend(&self, clock: &dyn Clock, stop: &CancellationToken) {
        loop {
            let now = clock.boot();
            let (due, next) = {
                let mut plan = lock(&self.plan);
                (plan.due(now), plan.next())
            };
            if due.is_empty() {
                let nap = next.map(|at| at.saturating_sub(now));
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => return std::future::pending().await,
                    _ = self.wake.notified() => {}
                    _ = tokio::time::sleep(nap.unwrap_or_default()), if nap.is_some() => {}
                }
                continue;
            }
            for key in due {
                let Some(member) = self.member(&key) else {
                    continue;
                };
                if let Some(at) = member.tend().earliest() {
                    lock(&self.plan).look(&key, at);
                }
            }
        }
    }
}
