//! A memory store behind a probe that sees every renewal and join, for the session
//! tests: counts, cuts renewals off, loses replies, and stands in for a store without
//! native sessions.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use liveness_core::layer::{Intercept, Next, Reply, Request, StoreBuilder};
use liveness_core::{
    async_trait, Capabilities, Clock, Error, Key, LostCause, ManualClock, Member, MemoryServer,
    Result, Session, SessionConfig, Space, Store, TokioClock,
};

use super::{ns, ttl, SuspendableHost};

pub const TTL_MS: u64 = 3000;

/// The default safety margin of a 3 s ttl.
pub fn margin() -> Duration {
    liveness_core::HeartbeatConfig::new(ttl(TTL_MS)).safety_margin
}

/// Sees every renewal: counts members' and sessions' leases renewed, records each
/// `renew_many`'s keys, cuts the sessions' renewals off on demand (they answer
/// `Unavailable`), and, for a store without native sessions, takes an ordinary lease
/// for each `join_session` (the trait's default).
#[derive(Debug, Default)]
pub struct Probe {
    pub member_renewals: AtomicU64,
    pub session_renewals: AtomicU64,
    pub batches: Mutex<Vec<Vec<Key>>>,
    pub cut: AtomicBool,
    /// Members whose renewals are cut off: a `renew_many` that names one of them but
    /// not a session answers `Unavailable`.
    pub cut_members: Mutex<Vec<Key>>,
    /// How many more `acquire` / `join_session` replies to lose after applying them.
    pub lose_replies: AtomicU64,
    pub plain: bool,
    /// How many `join_session` and `join_session_many` calls reached the store, and
    /// how many members they joined.
    pub join_calls: AtomicU64,
    pub joined: AtomicU64,
    /// When not zero: the `join_session_many` calls after this many never answer.
    pub stall_joins_after: AtomicU64,
    /// How many more `join_session` / `join_session_many` replies (not `acquire`) to
    /// lose after applying them.
    pub lose_join_replies: AtomicU64,
    /// When not zero: each `join_session` and `join_session_many` is applied, and its
    /// reply comes this many milliseconds later.
    pub slow_join_replies_ms: AtomicU64,
    /// When not zero: each `renew` and `renew_many` takes this many milliseconds
    /// before it reaches the store.
    pub slow_renewals_ms: AtomicU64,
    /// How many more renewals (`renew`, or a `renew_many`'s first lease) to refuse
    /// with `Lost(Failover)`, as a store promoted from an asynchronous replica does.
    pub failovers: AtomicU64,
    /// How many more `release` calls to refuse with `Unavailable` before they reach
    /// the store (a connection that broke for a moment).
    pub failed_releases: AtomicU64,
}

impl Probe {
    fn count(&self, key: &Key) {
        if *key.space() == Space::sessions() {
            self.session_renewals.fetch_add(1, Ordering::SeqCst);
        } else {
            self.member_renewals.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl Intercept for Probe {
    async fn call(&self, req: Request, next: Next) -> Result<Reply> {
        let cut = || Err(Error::unavailable("probe", "session renewals cut off"));
        let is_session = |k: &Key| *k.space() == Space::sessions();
        let joins = match &req {
            Request::JoinSessionMany { asks, .. } => asks.len() as u64,
            _ => 0,
        };
        if joins > 0 {
            let calls = self.join_calls.fetch_add(1, Ordering::SeqCst) + 1;
            self.joined.fetch_add(joins, Ordering::SeqCst);
            let stall = self.stall_joins_after.load(Ordering::SeqCst);
            if stall > 0 && calls > stall && matches!(req, Request::JoinSessionMany { .. }) {
                std::future::pending::<()>().await;
            }
        }
        if matches!(req, Request::Release { .. })
            && self
                .failed_releases
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            return Err(Error::unavailable(
                "probe",
                "the release did not get through",
            ));
        }
        let first = match &req {
            Request::RenewMany { leases } => leases.first(),
            _ => None,
        };
        if first.is_some() {
            let slow = self.slow_renewals_ms.load(Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(slow)).await;
        }
        if let Some(lease) = first {
            let failover = self
                .failovers
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if failover {
                let lost = Error::Lost {
                    key: lease.key.clone(),
                    token: lease.token,
                    reason: LostCause::Failover,
                };
                let Request::RenewMany { leases } = req else {
                    unreachable!("only a renewal has a first lease")
                };
                let mut answers: Vec<Result<liveness_core::Lease>> = vec![Err(lost)];
                let rest = next.run(Request::RenewMany {
                    leases: leases[1..].to_vec(),
                });
                if leases.len() > 1 {
                    match rest.await? {
                        Reply::RenewMany(more) => answers.extend(more),
                        other => panic!("renew_many answered {other:?}"),
                    }
                }
                return Ok(Reply::RenewMany(answers));
            }
        }
        match &req {
            Request::RenewMany { leases } => {
                if self.cut.load(Ordering::SeqCst) && leases.iter().any(|l| is_session(&l.key)) {
                    return cut();
                }
                let cut_members = self.cut_members.lock().unwrap().clone();
                if !leases.iter().any(|l| is_session(&l.key))
                    && leases.iter().any(|l| cut_members.contains(&l.key))
                {
                    return cut();
                }
                leases.iter().for_each(|l| self.count(&l.key));
                // A session renewing its own lease alone is not a members' batch.
                if !(leases.len() == 1 && is_session(&leases[0].key)) {
                    let keys = leases.iter().map(|l| l.key.clone()).collect();
                    self.batches.lock().unwrap().push(keys);
                }
            }
            Request::JoinSessionMany { session, asks } if self.plain => {
                let asks = asks
                    .iter()
                    .map(|(key, holder)| {
                        liveness_core::Acquire::new(key.clone(), holder.clone(), session.ttl)
                    })
                    .collect();
                return match next.run(Request::AcquireMany { asks }).await? {
                    Reply::AcquireMany(leases) => Ok(Reply::JoinSessionMany(leases)),
                    other => panic!("acquire_many answered {other:?}"),
                };
            }
            Request::AcquireMany { .. } | Request::JoinSessionMany { .. } => {
                let take = |n: &AtomicU64| {
                    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok()
                };
                let join = matches!(req, Request::JoinSessionMany { .. });
                let lose = take(&self.lose_replies) || (join && take(&self.lose_join_replies));
                let slow = match join {
                    false => 0,
                    true => self.slow_join_replies_ms.load(Ordering::SeqCst),
                };
                let reply = next.run(req).await;
                tokio::time::sleep(Duration::from_millis(slow)).await;
                if lose {
                    return Err(Error::unavailable("probe", "the reply was lost"));
                }
                return reply;
            }
            _ => {}
        }
        next.run(req).await
    }
}

/// A memory store behind a [`Probe`]; without native sessions when `plain` (and then
/// at most `max_batch` leases per call).
pub fn probed(plain: bool, max_batch: usize) -> (Arc<dyn Store>, Arc<Probe>) {
    let caps = Capabilities::default()
        .sessions(!plain)
        .max_batch(max_batch);
    let inner = Arc::new(MemoryServer::new().with_capabilities(caps).store(&ns()));
    let probe = Arc::new(Probe {
        plain,
        ..Probe::default()
    });
    let store = StoreBuilder::new(inner).layer(probe.clone()).build();
    (store, probe)
}

/// Opens the session `p` (ttl 3 s) on `clock`.
pub async fn open(store: &Arc<dyn Store>, clock: Arc<dyn Clock>) -> Session {
    let config = SessionConfig::new("p", ttl(TTL_MS)).unwrap().clock(clock);
    Session::open(store.clone(), config).await.unwrap()
}

/// The session `p` ([`open`]) on a store `probed(false, max_batch)`, on a host the
/// test suspends by advancing the clock returned last (see [`SuspendableHost`]).
pub async fn suspendable(max_batch: usize) -> (Arc<dyn Store>, Arc<Probe>, Session, ManualClock) {
    let (store, probe) = probed(false, max_batch);
    let (clock, suspend) = SuspendableHost::shared();
    let session = open(&store, clock).await;
    (store, probe, session, suspend)
}

/// Tokio's clock, which paused time moves.
pub fn tokio_clock() -> Arc<dyn Clock> {
    Arc::new(TokioClock::new())
}

/// Joins `n` members `m0`, `m1`, ... into `session`, one by one.
pub async fn join_all(session: &Session, n: usize) -> Vec<Member> {
    let mut members = Vec::new();
    for i in 0..n {
        members.push(session.join(&format!("m{i}")).await.unwrap());
    }
    members
}

/// The tasks alive on the current runtime.
pub fn tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// What goes wrong with a rider join before its caller drops it.
#[derive(Clone, Copy, Debug)]
pub enum Mishap {
    /// The store applies the call and its reply comes 500 ms later: dropped at 100 ms,
    /// while the call is in flight.
    SlowReply,
    /// The store applies the call and its reply is lost: dropped at 10 ms, before the
    /// retry (after a backoff of at least renew_every / 8) could adopt what it left.
    LostReply,
}

/// Joins `names` into a fresh session (one name: `join`, more: `join_many`) while
/// `mishap` strikes, drops the call, and asserts that once the background had a second
/// nothing of it is left: every name is free in the store, and joins again.
pub async fn a_dropped_join_leaves_nothing(mishap: Mishap, names: &[&str]) {
    let (store, probe) = probed(false, 10);
    let session = open(&store, tokio_clock()).await;
    let (knob, set, after) = match mishap {
        Mishap::SlowReply => (&probe.slow_join_replies_ms, 500, 100),
        Mishap::LostReply => (&probe.lose_replies, 1, 10),
    };
    knob.store(set, Ordering::SeqCst);
    let call = join(&session, names);
    let dropped = tokio::time::timeout(Duration::from_millis(after), call).await;
    assert!(dropped.is_err(), "the join answered before it was dropped");
    assert_eq!(
        probe.join_calls.load(Ordering::SeqCst),
        1,
        "one call was sent"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    for name in names {
        let key = Key::member(name).unwrap();
        assert_eq!(store.inspect(&key).await.unwrap(), None, "{key} stayed");
    }
    assert_eq!(session.members(), 0);
    knob.store(0, Ordering::SeqCst);
    assert!(join(&session, names).await, "the names were not free again");
}

/// Joins `names` into `session`: true when every one joined.
async fn join(session: &Session, names: &[&str]) -> bool {
    match names {
        [one] => session.join(one).await.is_ok(),
        many => session.join_many(many).await.iter().all(Result::is_ok),
    }
}
