//! On a store without native sessions, the renewals of the riders that go with each
//! renewal of the session. What a rider's checks read is its
//! [`Footing`](crate::keeper::Footing); the registry of riders is
//! [`Riders`](crate::member::Riders).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::batch::Batcher;
use crate::clock::Clock;
use crate::error::Error;
use crate::member::{Member, Riders};
use crate::types::FencingToken;

/// The riders' renewals of a session on a store without native sessions: each time
/// the session's heartbeat sends a renewal, every rider of that session lease that is
/// not lost hands its own renewal to the batcher (the one the store handle's members
/// share), which sends them as `renew_many` calls of
/// [`Capabilities::max_batch`](crate::Capabilities::max_batch), a few in flight; so
/// the session's heartbeat keeps its members alive as a native store would, and each
/// rider's own deadline counts from its batch's send time.
///
/// The session's renewal is its own call: however many riders it has, its deadline
/// never waits for theirs. While one round of the riders' renewals is still under way
/// (a store that slow), the next round is skipped rather than piled on the store.
#[derive(Debug)]
pub(crate) struct RiderRenewals {
    /// Whom to renew.
    pub(crate) riders: Arc<Riders>,
    /// Where the renewals go.
    pub(crate) batcher: Batcher,
    /// The clock the riders' deadlines are measured on.
    pub(crate) clock: Arc<dyn Clock>,
    /// `ttl − safety_margin`: how long after a send time a renewed rider may act.
    pub(crate) budget: Duration,
    /// True while a round is under way.
    pub(crate) busy: Arc<AtomicBool>,
}

impl RiderRenewals {
    /// Sends the renewals of the riders of session lease `token` (the session's
    /// renewal is being sent), unless the last round is still under way, and applies
    /// each answer as it comes, from a task of its own: a renewed rider's deadline
    /// extended from its batch's send time, a refused one marked lost (the session's
    /// task takes it on and re-joins it).
    pub(crate) fn send(&self, token: FencingToken) {
        if self.busy.swap(true, Ordering::SeqCst) {
            return;
        }
        let riding = self.riders.members();
        let round: Vec<_> = riding
            .iter()
            .map(Member::generation)
            .filter(|g| {
                g.riding()
                    .is_some_and(|r| r.session_token() == token && r.lost().is_none())
            })
            .map(|g| {
                let answer = self.batcher.renewal(&g.lease, &self.clock);
                (g, answer)
            })
            .collect();
        let (riders, clock, budget) = (self.riders.clone(), self.clock.clone(), self.budget);
        let busy = self.busy.clone();
        tokio::spawn(async move {
            for (gen, answer) in round {
                let answered = answer.await;
                let Some(rider) = gen.riding() else {
                    continue;
                };
                match (answered.answer, answered.sent_on_clock) {
                    (Ok(_), Some(sent)) => rider.extend(sent + budget),
                    (Ok(_), None) => {}
                    (Err(Error::Lost { reason, .. }), _) => {
                        rider.lose(reason);
                        riders.due_by(&gen.lease.key, clock.boot());
                    }
                    (Err(e), _) => {
                        tracing::warn!(member = %gen.lease.key, error = %e, "renewing a riding member failed");
                    }
                }
            }
            busy.store(false, Ordering::SeqCst);
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::member::Carrier;
    use crate::{
        Capabilities, MemberConfig, MemoryServer, Namespace, Session, SessionConfig, Store, Ttl,
    };

    /// Members that come and go, each watched with a long progress timeout, leave
    /// nothing behind in their session's registry or its plan of looks.
    #[tokio::test(start_paused = true)]
    async fn gone_riders_leave_no_planned_look_behind() {
        let caps = Capabilities::default().sessions(true);
        let ns = Namespace::new("riders").unwrap();
        let store: Arc<dyn Store> =
            Arc::new(MemoryServer::new().with_capabilities(caps).store(&ns));
        let ttl = Ttl::from_secs(3).unwrap();
        let session = Session::open(store, SessionConfig::new("p", ttl).unwrap())
            .await
            .unwrap();
        for i in 0..10 {
            let config = MemberConfig::new(&format!("m{i}"), ttl)
                .unwrap()
                .progress_timeout(Duration::from_secs(3600));
            let member = session.join_with(config).await.unwrap();
            assert_eq!(session.shared.riders().sizes(), (1, 1));
            if i % 2 == 0 {
                drop(member);
            } else {
                member.leave(Duration::from_secs(1)).await.unwrap();
            }
            assert_eq!(session.shared.riders().sizes(), (0, 0), "after m{i}");
        }
    }
}
