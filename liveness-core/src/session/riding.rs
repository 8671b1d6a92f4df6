//! On a store without native sessions, the layer that renews the riders together
//! with the session. What a rider's checks read is its
//! [`Footing`](crate::keeper::Footing); the registry of riders is
//! [`Riders`](crate::member::Riders).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::clock::Clock;
use crate::error::{BatchResult, Error, Result};
use crate::layer::{Intercept, Next, Reply, Request};
use crate::lease::Lease;
use crate::member::{Generation, Member, Riders};
use crate::types::Key;

/// The layer in front of a store without native sessions that turns the session's
/// renewal into `renew_many` calls of its lease and its riders' leases
/// ([`Capabilities::max_batch`](crate::Capabilities::max_batch) each, the session's
/// first), so that the session's heartbeat keeps its members alive as a native store
/// would: each rider's own deadline counts from its batch's send time.
///
/// The session's renewal is answered by the first call alone: however many riders the
/// session has, its own deadline never waits for theirs. The other batches go from a
/// task of their own, [`RIDER_CALLS_IN_FLIGHT`] at a time; while one round of them is
/// still under way (a store that slow), the next round's riders wait for the round
/// after it rather than pile more calls on the store.
#[derive(Debug)]
pub(crate) struct RenewRiders {
    /// The session's key: only its renewals are widened.
    pub(crate) key: Key,
    /// Whom to renew with it.
    pub(crate) riders: Arc<Riders>,
    /// The clock the riders' deadlines are measured on.
    pub(crate) clock: Arc<dyn Clock>,
    /// `ttl − safety_margin`: how long after a send time a renewed rider may act.
    pub(crate) budget: Duration,
    /// True while a round of the riders' other batches is under way.
    pub(crate) busy: Arc<AtomicBool>,
}

/// How many of a session's rider batches beyond the first are in flight at once, on
/// a store without native sessions.
pub(crate) const RIDER_CALLS_IN_FLIGHT: usize = 4;

/// One `renew_many` of a session's riders: the leases sent, the generations they
/// belong to (`None` for the session's own lease), and what applies the answers.
struct RiderBatch {
    leases: Vec<Lease>,
    riding: Vec<Option<Generation>>,
}

impl RenewRiders {
    /// Sends `batch` through `next` and applies each rider's answer: a renewed
    /// rider's deadline extended from the send time, a refused one marked lost (the
    /// session's task takes it on). The answers, or the call's error.
    async fn send(&self, next: Next, batch: &RiderBatch) -> BatchResult<Lease> {
        let sent_on_clock = self.clock.boot();
        let answers = match next.run(Request::RenewMany(batch.leases.clone())).await? {
            Reply::RenewMany(answers) => answers,
            _ => {
                return Err(Error::backend(
                    "session",
                    "renew_many answered another reply",
                ))
            }
        };
        for ((got, lease), gen) in answers.iter().zip(&batch.leases).zip(&batch.riding) {
            let Some(rider) = gen.as_ref().and_then(Generation::riding) else {
                continue;
            };
            match got {
                Ok(_) => rider.extend(sent_on_clock + self.budget),
                Err(Error::Lost { reason, .. }) => {
                    rider.lose(*reason);
                    // The session's task takes the loss on, and re-joins it.
                    self.riders.due_by(&lease.key, self.clock.boot());
                }
                Err(e) => {
                    tracing::warn!(member = %lease.key, error = %e, "renewing a riding member failed")
                }
            }
        }
        Ok(answers)
    }

    /// The session's lease and the current generation of every rider of it that is
    /// not lost (one told to stop is kept alive until it is released), in batches of
    /// `max`, the session's lease first.
    fn batches(&self, session: Lease, max: usize) -> Vec<RiderBatch> {
        let token = session.token;
        let members = self.riders.members();
        let riding = members.iter().map(Member::generation).filter(|g| {
            g.riding()
                .is_some_and(|r| r.session_token() == token && r.lost().is_none())
        });
        let all: Vec<(Lease, Option<Generation>)> = std::iter::once((session, None))
            .chain(riding.map(|g| (g.lease.clone(), Some(g))))
            .collect();
        all.chunks(max)
            .map(|chunk| RiderBatch {
                leases: chunk.iter().map(|(l, _)| l.clone()).collect(),
                riding: chunk.iter().map(|(_, g)| g.clone()).collect(),
            })
            .collect()
    }
}

#[async_trait]
impl Intercept for RenewRiders {
    async fn call(&self, req: Request, next: Next) -> Result<Reply> {
        let session = match req {
            Request::Renew(lease) if lease.key == self.key => lease,
            req => return next.run(req).await,
        };
        let max = next.store().capabilities().max_batch.max(1);
        let mut batches = self.batches(session, max).into_iter();
        let Some(first) = batches.next() else {
            return Err(Error::backend("session", "no batch to renew"));
        };
        let answer = self
            .send(next.clone(), &first)
            .await?
            .into_iter()
            .next()
            .unwrap_or_else(|| Err(Error::backend("session", "renew_many answered too few")))
            .map(Reply::Renew);
        let rest: Vec<RiderBatch> = batches.collect();
        if !rest.is_empty() && !self.busy.swap(true, Ordering::SeqCst) {
            let round = Arc::new(self.clone_parts());
            tokio::spawn(async move {
                round.send_all(next, rest).await;
                round.busy.store(false, Ordering::SeqCst);
            });
        }
        answer
    }
}

impl RenewRiders {
    /// Sends `batches`, at most [`RIDER_CALLS_IN_FLIGHT`] at once.
    async fn send_all(self: &Arc<Self>, next: Next, batches: Vec<RiderBatch>) {
        let this = self;
        let mut in_flight = tokio::task::JoinSet::new();
        for batch in batches {
            while in_flight.len() >= RIDER_CALLS_IN_FLIGHT {
                in_flight.join_next().await;
            }
            let (this, next) = (this.clone(), next.clone());
            in_flight.spawn(async move {
                if let Err(e) = this.send(next, &batch).await {
                    tracing::warn!(session = %this.key, error = %e, "renewing a batch of riding members failed");
                }
            });
        }
        while in_flight.join_next().await.is_some() {}
    }

    /// The same layer, to be moved into a task.
    fn clone_parts(&self) -> RenewRiders {
        RenewRiders {
            key: self.key.clone(),
            riders: self.riders.clone(),
            clock: self.clock.clone(),
            budget: self.budget,
            busy: self.busy.clone(),
        }
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
        let caps = Capabilities {
            sessions: true,
            ..Capabilities::default()
        };
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
