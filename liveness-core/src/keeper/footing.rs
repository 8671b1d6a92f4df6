//! What a generation's checks read: the standing of a lease of its own, or, for a
//! member riding a session, the session's standing plus the member's own flags.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::error::{LostCause, Result};
use crate::heartbeat::{wait_boot_until, Standing};
use crate::lease::Lease;
use crate::member::config::MemberConfig;
use crate::standing::LocalDeadline;
use crate::types::FencingToken;

/// One lease of a session and the standing its riders' checks read.
#[derive(Clone, Debug)]
pub(crate) struct SessionGen {
    /// The session's lease.
    pub(crate) lease: Lease,
    /// Its local deadline (extended by the session's heartbeat) and cancellation.
    pub(crate) standing: Arc<Standing>,
}

/// What one generation of a member riding a session may still do: the session's
/// standing, plus the member's own flags (released, stalled, refused by the store)
/// and, on a store without native sessions, its own deadline (extended by the
/// session's renewals of it). Its cancellation is a child of the session's: when the
/// session is lost, every rider's work is told to stop in the same instant.
#[derive(Debug)]
pub(crate) struct Riding {
    own: LocalDeadline,
    session: Arc<Standing>,
    cancel: CancellationToken,
    /// How long after `own`'s deadline the store itself may expire the member's
    /// lease (a store without native sessions).
    margin: Duration,
    native: bool,
}

impl Riding {
    /// The footing of the member lease `lease`, riding `session`; `deadline` is the
    /// member's own local deadline on a store without native sessions (`None`: it
    /// has none, it lives exactly as long as the session).
    pub(crate) fn new(
        clock: Arc<dyn Clock>,
        lease: &Lease,
        session: &SessionGen,
        deadline: Option<Duration>,
        margin: Duration,
    ) -> Riding {
        let own_deadline = deadline.unwrap_or(Duration::MAX);
        Riding {
            own: LocalDeadline::new(clock, lease.key.clone(), lease.token, own_deadline),
            session: session.standing.clone(),
            cancel: session.standing.cancel().child_token(),
            margin,
            native: deadline.is_none(),
        }
    }

    /// The token of the session lease this generation rides.
    pub(crate) fn session_token(&self) -> FencingToken {
        self.session.token()
    }

    /// The reason this generation is lost, if it is: the session's loss (recorded as
    /// the member's own), or the member's own. Fires the cancellation then.
    pub(crate) fn lost(&self) -> Option<LostCause> {
        if let Some(reason) = self.session.lost() {
            self.own.lose(reason);
        }
        let reason = self.own.lost();
        if reason.is_some() {
            self.cancel.cancel();
        }
        reason
    }

    /// The member's token while the session's lease and the member's own may be acted
    /// on, by the clock right now; otherwise [`Error::Lost`](crate::Error::Lost)
    /// naming the member.
    pub(crate) fn check(&self) -> Result<FencingToken> {
        if self.lost().is_none() && self.cancel.is_cancelled() {
            // The session's work was told to stop (it is gone), or the signal was
            // fired from outside.
            self.own.stop_work(LostCause::GaveUp);
        }
        let answer = self.own.check();
        if answer.is_err() {
            self.cancel.cancel();
        }
        answer
    }

    /// Tells this member's work alone to stop.
    pub(crate) fn stop_work(&self, reason: LostCause) {
        self.own.stop_work(reason);
        self.cancel.cancel();
    }

    /// Marks this member's generation alone lost.
    pub(crate) fn lose(&self, reason: LostCause) -> LostCause {
        let reason = self.own.lose(reason);
        self.cancel.cancel();
        reason
    }

    /// The cancellation signal of the work done under this generation.
    pub(crate) fn cancel(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Moves the member's own deadline to `deadline` after the session renewed the
    /// member's lease by a request sent in time (a store without native sessions).
    pub(crate) fn extend(&self, deadline: Duration) {
        if self.own.extend(deadline).is_err() {
            self.cancel.cancel();
        }
    }

    /// True when the session lease this generation rides is lost.
    pub(crate) fn session_lost(&self) -> bool {
        self.session.lost().is_some()
    }

    /// The member's own local deadline, on a store without native sessions (on a
    /// native one it lives exactly as long as its session).
    pub(crate) fn own_deadline(&self) -> Option<Duration> {
        (!self.native).then(|| self.own.deadline())
    }

    /// After a loss, waits until the store itself may have expired the member's own
    /// lease (a store without native sessions; at once on a native one, whose member
    /// lives exactly as long as its session: the session takes its next lease only
    /// once the old one may have expired). False when `stop` fired first.
    pub(crate) async fn wait_store_expiry(&self, tick: Duration, stop: &CancellationToken) -> bool {
        if self.native {
            return true;
        }
        let expiry = || self.own.deadline().saturating_add(self.margin);
        wait_boot_until(&**self.own.clock(), expiry, tick, stop).await
    }
}

/// What a generation's checks read: the member's own lease's standing, or, for a
/// member riding a session, the session's standing plus the member's own flags.
#[derive(Debug)]
pub(crate) enum Footing {
    /// A lease of its own, kept alive by the member's heartbeat.
    Own(Standing),
    /// A member riding a session ([`Session::join`](crate::Session::join)).
    Riding(Riding),
}

impl Footing {
    /// The footing of `lease`, taken by a request sent at `sent_on_clock`: riding
    /// `session` when given (on a store with native sessions when `native`).
    pub(crate) fn of(
        config: &MemberConfig,
        lease: &Lease,
        sent_on_clock: Duration,
        session: Option<(&SessionGen, bool)>,
    ) -> Footing {
        let hb = &config.heartbeat;
        match session {
            None => Footing::Own(Standing::new(
                config.clock.clone(),
                lease,
                hb,
                sent_on_clock,
            )),
            Some((session, native)) => Footing::Riding(Riding::new(
                config.clock.clone(),
                lease,
                session,
                (!native).then(|| sent_on_clock + hb.budget()),
                hb.ttl.duration().saturating_sub(hb.budget()),
            )),
        }
    }

    pub(crate) fn check(&self) -> Result<FencingToken> {
        match self {
            Footing::Own(s) => s.check(),
            Footing::Riding(r) => r.check(),
        }
    }

    pub(crate) fn lost(&self) -> Option<LostCause> {
        match self {
            Footing::Own(s) => s.lost(),
            Footing::Riding(r) => r.lost(),
        }
    }

    pub(crate) fn stop_work(&self, reason: LostCause) {
        match self {
            Footing::Own(s) => s.stop_work(reason),
            Footing::Riding(r) => r.stop_work(reason),
        }
    }

    pub(crate) fn lose(&self, reason: LostCause) -> LostCause {
        match self {
            Footing::Own(s) => s.lose(reason),
            Footing::Riding(r) => r.lose(reason),
        }
    }

    pub(crate) fn cancel(&self) -> &CancellationToken {
        match self {
            Footing::Own(s) => s.cancel(),
            Footing::Riding(r) => r.cancel(),
        }
    }

    /// The rider's part, when the generation rides a session.
    pub(crate) fn riding(&self) -> Option<&Riding> {
        match self {
            Footing::Own(_) => None,
            Footing::Riding(r) => Some(r),
        }
    }
}
