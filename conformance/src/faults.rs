//! A fault-injecting store wrapper: per call, a seeded decision to let the call
//! through, fail it before it reaches the store, apply it and lose the reply, or
//! deliver it late, after the caller's timeout gave up on it. Every fault answers
//! [`Error::Unavailable`], exactly what a real transport fault answers.
//!
//! The decisions come from a random generator seeded by the caller: the same seed
//! gives the same sequence of decisions (which call of a handle fails, and how). Give
//! each simulated process its own [`Faulty`] (its own seed): its decisions then do not
//! depend on how the calls of other processes interleave with its own.
//!
//! An [`Observer`] sees every call the inner store applied, with where in a shared
//! order it was sent and answered: the simulation's oracle ([`crate::sim`]) judges
//! ownership from it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use liveness_core::layer::{BoxReply, Intercepted};
use liveness_core::{
    async_trait, Error, FencingToken, Intercept, ItemId, Key, Next, Outcome, Reply, Request,
    Result, Store, Sweep,
};
use tokio::runtime::Handle;
use tokio::time::Instant;

/// The store operations, to choose which ones faults may hit: the core's [`Op`].
pub use liveness_core::Op;

/// True for the operations that act twice when repeated unless the caller gives
/// them a request id (`claim_request`, a keyed `enqueue`): their faults are
/// survived only through the store's request-id handling (a lost claim reply is
/// recovered by repeating its id; a copy delivered late, after that repeat, answers
/// nothing by the token's high-water mark). [`FaultPlan::default`] hits them like
/// every other operation; [`FaultPlan::sparing_request_ids`] spares them.
pub fn takes_request_id(op: Op) -> bool {
    matches!(op, Op::Claim | Op::Enqueue)
}

/// What one call suffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// None: the call goes through.
    Pass,
    /// Fails before it reaches the store: nothing changes.
    FailBefore,
    /// The store applies it; the reply is lost.
    LoseReply,
    /// It reaches the store only after the caller's timeout ([`FaultPlan::timeout`])
    /// answered `Unavailable`; then the store applies it.
    Delay,
}

/// How often each fault hits a call, and the timing of delays.
#[derive(Clone, Debug)]
pub struct FaultPlan {
    /// Probability that a call fails before reaching the store.
    pub fail_before: f64,
    /// Probability that a call is applied and its reply lost.
    pub lose_reply: f64,
    /// Probability that a call is delivered after the caller gave up on it.
    pub delay: f64,
    /// The caller's timeout: a delayed call answers `Unavailable` after this long.
    pub timeout: Duration,
    /// How long after the timeout a delayed call reaches the store.
    pub late_by: Duration,
    /// Whether faults may hit `op`. Default: every operation.
    pub hits: fn(Op) -> bool,
}

impl Default for FaultPlan {
    fn default() -> Self {
        FaultPlan {
            fail_before: 0.03,
            lose_reply: 0.03,
            delay: 0.02,
            timeout: Duration::from_millis(300),
            late_by: Duration::from_millis(300),
            hits: |_| true,
        }
    }
}

impl FaultPlan {
    /// This plan with its faults sparing the operations that rely on request ids
    /// ([`takes_request_id`]): to tell a fault in their id handling from any other
    /// when a run fails.
    pub fn sparing_request_ids(self) -> Self {
        FaultPlan {
            hits: |op| !takes_request_id(op),
            ..self
        }
    }

    /// No faults at all.
    pub fn none() -> Self {
        FaultPlan {
            fail_before: 0.0,
            lose_reply: 0.0,
            delay: 0.0,
            ..FaultPlan::default()
        }
    }
}

/// A call the inner store applied, as an [`Observer`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// `claim` assigned these items to the token.
    Claimed {
        /// The claiming token.
        token: FencingToken,
        /// The items it got.
        ids: Vec<ItemId>,
    },
    /// `complete` removed the item (it was owned by the token).
    Completed {
        /// The completing token.
        token: FencingToken,
        /// The item.
        id: ItemId,
    },
    /// `fail` moved the item away from the token.
    Failed {
        /// The token.
        token: FencingToken,
        /// The item.
        id: ItemId,
    },
    /// `reap` answered true: this caller declared the death.
    Reaped {
        /// The dead lease's key.
        key: Key,
        /// Its token.
        token: FencingToken,
    },
    /// `sweep` moved these items away from the dead token (and, for a dead
    /// session's token, declared these members dead).
    Swept {
        /// The dead token.
        token: FencingToken,
        /// What moved.
        moved: Sweep,
    },
}

/// Sees the calls a [`Faulty`] store's inner store applied, in one order shared with
/// whatever else the observer records.
pub trait Observer: Send + Sync + std::fmt::Debug {
    /// A position in the observer's order, taken when a call is sent.
    fn sent(&self) -> u64;
    /// The inner store applied a call sent at position `sent`; called when its answer
    /// arrives (also when the reply is then lost, or arrives after the caller gave up).
    fn applied(&self, sent: u64, call: Applied);
}

/// How many faults a [`Faulty`] store injected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Injected {
    /// Calls failed before reaching the store.
    pub failed_before: u64,
    /// Calls applied whose reply was lost.
    pub lost_replies: u64,
    /// Calls delivered after the caller's timeout.
    pub delayed: u64,
    /// How many of the faults above hit a `claim` (so a run shows that lost and late
    /// claims were exercised).
    pub claims: u64,
}

/// A store layer that injects [`Fault`]s, decided per call from a seed, into every
/// call while it is armed ([`Faulty::arm`]); disarmed, it only forwards. Every call
/// is one request, the `*_many` batches included: a fault hits a whole batch, and the
/// inner store's own batch method runs it.
///
/// With [`Faulty::on_runtime`], every inner call runs on that runtime (the store's
/// "server side"): a caller frozen or gone does not stop a call already sent, and the
/// store's connections stay on the runtime that made them.
#[derive(Debug)]
pub struct Faulty {
    plan: FaultPlan,
    rng: Mutex<fastrand::Rng>,
    armed: AtomicBool,
    observer: Option<Arc<dyn Observer>>,
    runtime: Option<Handle>,
    refused: Mutex<Vec<(Op, Instant)>>,
    failed_before: AtomicU64,
    lost_replies: AtomicU64,
    delayed: AtomicU64,
    claims: AtomicU64,
}

/// A store behind a [`Faulty`] layer; it dereferences to the layer's knobs.
pub type FaultyStore = Intercepted<Faulty>;

impl Faulty {
    /// A disarmed layer with decisions seeded by `seed`.
    pub fn new(plan: FaultPlan, seed: u64) -> Self {
        Faulty {
            plan,
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            armed: AtomicBool::new(false),
            observer: None,
            runtime: None,
            refused: Mutex::new(Vec::new()),
            failed_before: AtomicU64::new(0),
            lost_replies: AtomicU64::new(0),
            delayed: AtomicU64::new(0),
            claims: AtomicU64::new(0),
        }
    }

    /// Reports every applied call to `observer`.
    pub fn observed(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Runs every inner call on `runtime`.
    pub fn on_runtime(mut self, runtime: Handle) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// `inner` behind this layer.
    pub fn wrap(self, inner: Arc<dyn Store>) -> Arc<FaultyStore> {
        Arc::new(Intercepted::new(inner, Arc::new(self)))
    }

    /// Turns fault injection on or off.
    pub fn arm(&self, on: bool) {
        self.armed.store(on, Ordering::SeqCst);
    }

    /// Fails every call of `op` before it reaches the store for the next `d`, armed
    /// or not (an outage of one path: renewals that cannot get through, say).
    pub fn refuse(&self, op: Op, d: Duration) {
        lock(&self.refused).push((op, Instant::now() + d));
    }

    /// The faults injected so far.
    pub fn injected(&self) -> Injected {
        Injected {
            failed_before: self.failed_before.load(Ordering::SeqCst),
            lost_replies: self.lost_replies.load(Ordering::SeqCst),
            delayed: self.delayed.load(Ordering::SeqCst),
            claims: self.claims.load(Ordering::SeqCst),
        }
    }

    /// The fault for the next call of `op`: one draw from the seeded generator per
    /// call, armed or not and hit or not, so the sequence does not shift with either.
    fn decide(&self, op: Op) -> Fault {
        let draw = lock(&self.rng).f64();
        let now = Instant::now();
        let mut refused = lock(&self.refused);
        refused.retain(|(_, until)| *until > now);
        if refused.iter().any(|(o, _)| *o == op) {
            return Fault::FailBefore;
        }
        drop(refused);
        if !self.armed.load(Ordering::SeqCst) || !(self.plan.hits)(op) {
            return Fault::Pass;
        }
        let p = &self.plan;
        if draw < p.fail_before {
            Fault::FailBefore
        } else if draw < p.fail_before + p.lose_reply {
            Fault::LoseReply
        } else if draw < p.fail_before + p.lose_reply + p.delay {
            Fault::Delay
        } else {
            Fault::Pass
        }
    }

    /// Runs `call` on the store's runtime (or here), to its end even when the caller
    /// stops waiting.
    async fn forward(&self, backend: &'static str, call: BoxReply) -> Result<Reply> {
        match &self.runtime {
            None => call.await,
            Some(rt) => match rt.spawn(call).await {
                Ok(r) => r,
                Err(e) => Err(Error::unavailable(backend, e)),
            },
        }
    }

    /// What to report of `req` once applied, with its send position, when observed.
    fn watch(&self, req: &Request) -> Option<Watch> {
        let observer = self.observer.as_ref()?;
        let facts = Facts::of(req)?;
        Some(Watch {
            observer: observer.clone(),
            sent: observer.sent(),
            facts,
        })
    }
}

/// What an observer is told of one applied call: the arguments its report needs.
#[derive(Debug)]
enum Facts {
    Claim(FencingToken),
    Finish(FencingToken, ItemId, Outcome),
    Reap(Vec<(Key, FencingToken)>),
    Sweep(Vec<FencingToken>),
}

impl Facts {
    fn of(req: &Request) -> Option<Facts> {
        Some(match req {
            Request::Claim { lease, .. } => Facts::Claim(lease.token),
            Request::Finish { lease, id, outcome } => Facts::Finish(lease.token, *id, *outcome),
            Request::ReapMany { expired: pairs } => Facts::Reap(pairs.clone()),
            Request::SweepMany { tokens } => Facts::Sweep(tokens.clone()),
            _ => return None,
        })
    }
}

/// An observed call on its way: who to tell, the send position, what to tell.
struct Watch {
    observer: Arc<dyn Observer>,
    sent: u64,
    facts: Facts,
}

impl Watch {
    /// Tells the observer what the store applied, judged from its reply.
    fn report(self, reply: &Reply) {
        let tell = |applied| self.observer.applied(self.sent, applied);
        match (self.facts, reply) {
            (Facts::Claim(token), Reply::Claim(items)) => {
                let ids = items.iter().map(|i| i.id).collect();
                tell(Applied::Claimed { token, ids });
            }
            (Facts::Finish(token, id, Outcome::Completed), Reply::Finish(_)) => {
                tell(Applied::Completed { token, id })
            }
            (Facts::Finish(token, id, _), Reply::Finish(_)) => tell(Applied::Failed { token, id }),
            (Facts::Reap(pairs), Reply::ReapMany(answers)) => {
                for ((key, token), answer) in pairs.into_iter().zip(answers) {
                    if matches!(answer, Ok(true)) {
                        tell(Applied::Reaped { key, token });
                    }
                }
            }
            (Facts::Sweep(tokens), Reply::SweepMany(answers)) => {
                for (token, answer) in tokens.into_iter().zip(answers) {
                    if let Ok(moved) = answer {
                        if !moved.is_empty() {
                            let moved: Sweep = moved.clone();
                            tell(Applied::Swept { token, moved });
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[async_trait]
impl Intercept for Faulty {
    async fn call(&self, req: Request, next: Next) -> Result<Reply> {
        let op = req.op();
        let backend = next.store().backend();
        let injected = |what: &'static str| Error::unavailable(backend, what);
        let fault = self.decide(op);
        if op == Op::Claim && fault != Fault::Pass {
            self.claims.fetch_add(1, Ordering::SeqCst);
        }
        if fault == Fault::FailBefore {
            self.failed_before.fetch_add(1, Ordering::SeqCst);
            return Err(injected("injected: failed before reaching the store"));
        }
        let watch = self.watch(&req);
        let sent = next.run(req);
        let call: BoxReply = Box::pin(async move {
            let reply = sent.await;
            if let (Some(watch), Ok(reply)) = (watch, &reply) {
                watch.report(reply);
            }
            reply
        });
        match fault {
            Fault::LoseReply => {
                self.lost_replies.fetch_add(1, Ordering::SeqCst);
                let _ = self.forward(backend, call).await;
                Err(injected(
                    "injected: the store applied it, the reply was lost",
                ))
            }
            Fault::Delay => {
                self.delayed.fetch_add(1, Ordering::SeqCst);
                let late = self.plan.timeout + self.plan.late_by;
                let landing = async move {
                    tokio::time::sleep(late).await;
                    let _ = call.await;
                };
                match &self.runtime {
                    Some(rt) => drop(rt.spawn(landing)),
                    None => drop(tokio::spawn(landing)),
                }
                tokio::time::sleep(self.plan.timeout).await;
                Err(injected("injected: timed out; the call lands later"))
            }
            _ => self.forward(backend, call).await,
        }
    }
}
