//! A member riding a session has no task of its own: its session's one task tends
//! its riders (`session::tend`). What that task asks of a riding member: its loss
//! handled once (counted, announced), the recovery after it (a task that lives only
//! until the member re-joined), and when the member must be looked at again.

use super::rejoin::Life;
use super::*;

impl Member {
    /// Unless this member's loss is handled already: `judge` its current generation,
    /// and when that answers a loss, handle it from now on: counted, announced
    /// ([`Event::Lost`]), and recovered from at once when `start` (else the caller
    /// calls [`Member::recover`] later). The lost generation and the reason, when
    /// this call took the loss on.
    pub(crate) fn take_loss(
        &self,
        judge: impl FnOnce(&Generation) -> Option<HolderLoss>,
        start: bool,
    ) -> Option<(Generation, HolderLoss)> {
        let inner = &self.inner;
        let mut background = lock(&inner.background);
        if background.recovering {
            return None;
        }
        let gen = inner.current();
        let reason = judge(&gen)?;
        background.recovering = true;
        announce_loss(inner, &gen, reason);
        if start {
            spawn_recovery(inner, &mut background, gen.clone(), reason);
        }
        Some((gen, reason))
    }

    /// Recovers from the loss of `gen` (taken on by [`Member::take_loss`]): a task
    /// that re-joins the member, unless it may not, and then ends.
    pub(crate) fn recover(&self, gen: Generation, reason: HolderLoss) {
        let inner = &self.inner;
        spawn_recovery(inner, &mut lock(&inner.background), gen, reason);
    }

    /// The session's task's look at this riding member: takes on a loss of its own
    /// (the store refused its lease, or its own deadline passed, on a store without
    /// native sessions) or a stall (its work made no progress for its
    /// [`MemberConfig::progress_timeout`]: its generation alone is marked lost,
    /// [`LostCause::Stalled`]), and starts its recovery. A loss of its session is
    /// the session's to take on. When it must be looked at again, on its clock's
    /// [`Clock::boot`].
    pub(crate) fn tend(&self) -> Due {
        let inner = &self.inner;
        let took = self.take_loss(
            |gen| {
                let riding = gen.riding()?;
                if riding.session_lost() {
                    return None;
                }
                if let Some(reason) = riding.lost() {
                    return Some(holder_loss(reason));
                }
                let leaving = inner.leaving.load(Ordering::SeqCst);
                let stalled = inner
                    .config
                    .progress_timeout
                    .is_some_and(|timeout| inner.idle() >= timeout);
                // A generation already lost by the clock (its session's deadline
                // passed, say while the whole process was frozen) did not stall: its
                // loss is the session's.
                if leaving || !stalled || gen.check().is_err() {
                    return None;
                }
                gen.footing.lose(LostCause::Stalled);
                Some(HolderLoss::Stalled)
            },
            true,
        );
        match took {
            Some(_) => Due::default(),
            None => self.due(),
        }
    }

    /// When this riding member must be looked at again ([`Member::tend`]); nothing
    /// while its loss is being handled or it is leaving.
    pub(crate) fn due(&self) -> Due {
        let inner = &self.inner;
        if lock(&inner.background).recovering || inner.leaving.load(Ordering::SeqCst) {
            return Due::default();
        }
        let gen = inner.current();
        let deadline = gen
            .riding()
            .and_then(|r| r.own_deadline().filter(|_| r.lost().is_none()));
        // A generation that may not act any more cannot stall.
        let watched = inner
            .config
            .progress_timeout
            .filter(|_| gen.check().is_ok());
        let stall = watched.map(|timeout| {
            let idle = inner.idle();
            let now = inner.config.clock.boot();
            (now + timeout.saturating_sub(idle), timeout)
        });
        Due { deadline, stall }
    }

    /// This member's state, weakly (as its session's registry keeps it).
    pub(crate) fn downgrade(&self) -> Weak<Inner> {
        Arc::downgrade(&self.inner)
    }
}

/// When a riding member must be looked at again, on its clock's [`Clock::boot`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Due {
    /// Its own local deadline (a store without native sessions): its loss is taken
    /// on then.
    pub(crate) deadline: Option<Duration>,
    /// When its work will have made no progress for its progress timeout (unless it
    /// makes some meanwhile), and that timeout.
    pub(crate) stall: Option<(Duration, Duration)>,
}

impl Due {
    /// The earlier of the two moments.
    pub(crate) fn earliest(&self) -> Option<Duration> {
        let stall = self.stall.map(|(at, _)| at);
        match (self.deadline, stall) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Counts and announces the loss of `gen` for `reason`.
fn announce_loss(inner: &Inner, gen: &Generation, reason: HolderLoss) {
    inner.metrics.lost(reason);
    inner.config.events.emit(Event::Lost {
        key: inner.key.clone(),
        token: gen.lease.token,
        reason,
    });
}

/// Starts the recovery task (not once the member is leaving or gone).
fn spawn_recovery(
    inner: &Arc<Inner>,
    background: &mut Background,
    gen: Generation,
    reason: HolderLoss,
) {
    if inner.stop.is_cancelled() {
        return;
    }
    let task = tokio::spawn(recovery(Arc::downgrade(inner), gen, reason));
    background.task = Some(task);
}

/// A riding member's recovery after the loss of `gen`: re-joins (see
/// [`Life::after_loss`]), again while the generation it re-joined under is lost by
/// the time it is installed (its session lost meanwhile), then hands the member back
/// to its session's task and ends.
async fn recovery(inner: Weak<Inner>, mut gen: Generation, mut reason: HolderLoss) {
    let Some(strong) = inner.upgrade() else {
        return;
    };
    let life = Life::of(&strong);
    drop(strong);
    loop {
        let old = gen.lease.clone();
        let next = life.after_loss(&inner, &gen, &old, reason).await;
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let mut background = lock(&strong.background);
        let Some((next, _)) = next else {
            // No re-join: the member stays lost (and left alone).
            background.task = None;
            return;
        };
        // Judged under the lock the session's task takes a loss under: a loss the
        // session found while this recovery ran is this recovery's to handle.
        match next.footing.lost() {
            Some(lost) => {
                reason = holder_loss(lost);
                announce_loss(&strong, &next, reason);
                gen = next;
            }
            None => {
                background.task = None;
                background.recovering = false;
                drop(background);
                if let Some(session) = &strong.session {
                    session.riders().look_at(&Member {
                        inner: strong.clone(),
                        counted: false,
                    });
                }
                return;
            }
        }
    }
}

/// The event's reason for a loss whose error reason is `reason`.
pub(crate) fn holder_loss(reason: LostCause) -> HolderLoss {
    match reason {
        LostCause::GaveUp => HolderLoss::Deadline,
        LostCause::Stalled => HolderLoss::Stalled,
        r => HolderLoss::Store(r),
    }
}
