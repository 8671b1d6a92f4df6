//! The property test: random sequences of operations by several holders, run on the
//! store under test and on the reference model ([`MemoryStore`](liveness_core::MemoryStore)) side by side, with
//! every result compared step by step.
//!
//! Tokens and item ids differ between stores (an etcd revision is no Redis counter),
//! so results are compared after mapping each store's tokens and ids to the order in
//! which they were handed out; the contract makes that order the same everywhere.
//! Leases use a long ttl so that no expiry happens inside a case: expiry is timing,
//! which the scenarios check with real waits; here the state machine of tokens, dead
//! sets, fencing and requeues is compared exhaustively.
//!
//! Sessions: holders open session leases (keys of `Space::sessions()`) and join
//! members riding them. On a store with native sessions (`capabilities().sessions`)
//! the model serves them natively too, with the store's `max_batch`: members live
//! exactly while their session's token is current and live, the release of a member
//! declares it dead alone, an acquire or join of a key whose record rides a dead
//! session supersedes it, and each `sweep` of a dead session's token declares at most
//! `max_batch` of its members dead. Besides the comparison, the store's own answers
//! are held to those rules: no sweep answer declares more than `max_batch` members
//! dead, each member's token is declared dead once, by the sweep of the session it
//! joined, and at the end of a case every member rides live exactly when its session lease is. On a
//! store without native sessions the model's `join_session` is an `acquire`, as the
//! store's default is.
//!
//! The case count comes from `PROPTEST_CASES`, else the default given to
//! [`suite!`](crate::suite).

use liveness_core::Page;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use liveness_core::layer::Intercepted;
use liveness_core::{
    async_trait, Capabilities, EnqueueOptions, Error, FencingToken, HolderId, Intercept, ItemId,
    ItemState, ItemStateKind, Key, Lease, LeaseInfo, MemoryServer, Name, Next, QueueName, Reply,
    Request, RequestId, Space, Store, Sweep, Ttl,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use crate::{fresh_namespace, Factory};

const HOLDERS: usize = 3;
const KEYS: usize = 3;
const SESSIONS: usize = 2;
/// The queues items go to (by index): the default, and two named ones on a store
/// with queues (a store without refuses them, as the model then does).
pub const QUEUES: [&str; 3] = ["default", "a", "b"];
/// The queue lists claims name (by index), in priority order.
pub const CLAIM_LISTS: [&[&str]; 4] = [
    &["default"],
    &["a"],
    &["a", "default"],
    &["b", "a", "default"],
];

/// The queue names of `names`.
fn queue_names(names: &[&str]) -> Vec<QueueName> {
    names
        .iter()
        .map(|q| QueueName::new(q).unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

/// One operation of a case.
#[derive(Clone, Debug)]
pub enum Op {
    /// Holder `h` acquires key `k`.
    Acquire(usize, usize),
    /// Holder `h` renews its last lease on key `k`.
    Renew(usize, usize),
    /// Holder `h` releases its last lease on key `k`.
    Release(usize, usize),
    /// Inspect key `k`.
    Inspect(usize),
    /// Reap key `k` with the `t`-th token handed out (never succeeds: nothing expires).
    Reap(usize, usize),
    /// Enqueue an item with this many attempts in the `q`-th of [`QUEUES`].
    Enqueue(u32, usize),
    /// Holder `h` claims up to `n` items under its lease on key `k` from the `q`-th
    /// of [`CLAIM_LISTS`], with a fresh request id (greater than every one used before
    /// in the case).
    Claim(usize, usize, usize, usize),
    /// Holder `h` claims up to `n` items under its lease on key `k` from the `q`-th
    /// of [`CLAIM_LISTS`] again with the `r`-th most recent request id of the case (0:
    /// the last one): a repeat, a late copy, or an older id after a newer one.
    Reclaim(usize, usize, usize, usize, usize),
    /// Holder `h` completes the `i`-th item under its lease on key `k`.
    Complete(usize, usize, usize),
    /// Holder `h` fails the `i`-th item, with or without retry.
    Fail(usize, usize, usize, bool),
    /// Sweep the `t`-th token handed out (requeue its items).
    Sweep(usize),
    /// List the dead set.
    DeadTokens,
    /// Count items and list dead letters.
    Counts,
    /// Count each queue's items.
    QueueCounts,
    /// Read the `i`-th item.
    Item(usize),
    /// List the leases of the members space from the first key after `k` (or from
    /// the start).
    Leases(Option<usize>),
    /// List the newest death records (at most 10: the store under test may keep
    /// fewer than the model).
    Deaths,
    /// List the items in a state (0 pending, 1 owned, 2 dead-lettered) after the
    /// `i`-th item (or from the start).
    Items(u8, Option<usize>),
    /// Retry the `i`-th item out of the dead-letter set (an id never handed out when
    /// there is no `i`-th).
    RetryDeadLetter(usize),
    /// Retry up to `n` dead letters.
    RetryDeadLetters(usize),
    /// Holder `h` opens session `s`: acquires the key `s{s}` of `Space::sessions()`.
    OpenSession(usize, usize),
    /// Holder `h` joins key `k` riding the last lease taken on session `s`
    /// (`join_session`); its lease then serves the holder's operations on `k`.
    JoinSession(usize, usize, usize),
    /// Renew the last lease taken on session `s`.
    RenewSession(usize),
    /// Release the last lease taken on session `s`: its members die with it.
    ReleaseSession(usize),
    /// Reap session `s` with the `t`-th token handed out (never succeeds: nothing
    /// expires).
    ReapSession(usize, usize),
    /// Inspect session `s`.
    InspectSession(usize),
    /// Sweep the last lease taken on session `s`: one step of the sweep of its
    /// members once it died.
    SweepSession(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let h = 0..HOLDERS;
    let k = 0..KEYS;
    prop_oneof![
        3 => (h.clone(), k.clone()).prop_map(|(h, k)| Op::Acquire(h, k)),
        2 => (h.clone(), k.clone()).prop_map(|(h, k)| Op::Renew(h, k)),
        2 => (h.clone(), k.clone()).prop_map(|(h, k)| Op::Release(h, k)),
        1 => k.clone().prop_map(Op::Inspect),
        1 => (k.clone(), 0..8usize).prop_map(|(k, t)| Op::Reap(k, t)),
        3 => (1..4u32, 0..QUEUES.len()).prop_map(|(max, q)| Op::Enqueue(max, q)),
        3 => (h.clone(), k.clone(), 1..4usize, 0..CLAIM_LISTS.len()).prop_map(|(h, k, n, q)| Op::Claim(h, k, n, q)),
        3 => (h.clone(), k.clone(), 1..4usize, 0..3usize, 0..CLAIM_LISTS.len()).prop_map(|(h, k, n, r, q)| Op::Reclaim(h, k, n, r, q)),
        2 => (h.clone(), k.clone(), 0..10usize).prop_map(|(h, k, i)| Op::Complete(h, k, i)),
        2 => (h.clone(), k.clone(), 0..10usize, any::<bool>()).prop_map(|(h, k, i, r)| Op::Fail(h, k, i, r)),
        2 => (0..8usize).prop_map(Op::Sweep),
        1 => Just(Op::DeadTokens),
        1 => Just(Op::Counts),
        1 => Just(Op::QueueCounts),
        1 => (0..10usize).prop_map(Op::Item),
        1 => proptest::option::of(k.clone()).prop_map(Op::Leases),
        1 => Just(Op::Deaths),
        1 => (0..3u8, proptest::option::of(0..10usize)).prop_map(|(s, i)| Op::Items(s, i)),
        1 => (0..10usize).prop_map(Op::RetryDeadLetter),
        1 => (1..4usize).prop_map(Op::RetryDeadLetters),
        2 => (h.clone(), 0..SESSIONS).prop_map(|(h, s)| Op::OpenSession(h, s)),
        5 => (h.clone(), k.clone(), 0..SESSIONS).prop_map(|(h, k, s)| Op::JoinSession(h, k, s)),
        1 => (0..SESSIONS).prop_map(Op::RenewSession),
        2 => (0..SESSIONS).prop_map(Op::ReleaseSession),
        1 => (0..SESSIONS, 0..8usize).prop_map(|(s, t)| Op::ReapSession(s, t)),
        1 => (0..SESSIONS).prop_map(Op::InspectSession),
        4 => (0..SESSIONS).prop_map(Op::SweepSession),
    ]
}

/// The model's `join_session` on a store without native sessions: the store
/// default's, an `acquire` with the session's ttl.
#[derive(Debug)]
struct JoinAcquires;

#[async_trait]
impl Intercept for JoinAcquires {
    async fn call(&self, req: Request, next: Next) -> liveness_core::Result<Reply> {
        match req {
            Request::JoinSessionMany { session, asks } => {
                let ttl = session.ttl;
                let asks = asks
                    .into_iter()
                    .map(|(key, holder)| liveness_core::Acquire::new(key, holder, ttl))
                    .collect();
                match next.run(Request::AcquireMany { asks }).await? {
                    Reply::AcquireMany(leases) => Ok(Reply::JoinSessionMany(leases)),
                    other => Ok(other),
                }
            }
            other => next.run(other).await,
        }
    }
}

/// The reference model for a store with `caps`: native sessions (swept
/// `max_batch` members a step) when the store has them, else the default.
fn model_of(server: &MemoryServer, caps: Capabilities) -> Arc<dyn Store> {
    let store: Arc<dyn Store> = Arc::new(server.store(&fresh_namespace()));
    let store = match caps.sessions {
        true => store,
        false => Arc::new(Intercepted::new(store, Arc::new(JoinAcquires))),
    };
    liveness_core::checked(store)
}

/// Runs the property test with `default_cases` cases (or `PROPTEST_CASES`). A factory
/// that returns `None` fails it, as [`crate::run`] does (see [`crate::skip`]).
pub fn run(factory: Factory, default_cases: u32) {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    run_cases(factory, cases);
}

/// Runs the property test with exactly `cases` cases, whatever `PROPTEST_CASES` says
/// (for a test that needs its cases to find a seeded bug); otherwise as [`run`].
pub fn run_cases(factory: Factory, cases: u32) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    let Some(probe) = rt.block_on(factory()) else {
        crate::skip::no_store("property_matches_model", "the factory returned None");
        return;
    };
    let caps = probe.capabilities();
    drop(probe);
    let model_server = MemoryServer::new().with_capabilities(
        Capabilities::default()
            .sessions(caps.sessions)
            .queues(caps.queues)
            .max_batch(caps.max_batch),
    );
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&proptest::collection::vec(op(), 1..40), |ops| {
        rt.block_on(async {
            let real = factory()
                .await
                .ok_or_else(|| TestCaseError::fail("factory stopped giving stores"))?;
            check(real, model_of(&model_server, caps), ops).await
        })
    });
    if let Err(e) = result {
        panic!("the store diverged from the reference model: {e}");
    }
}

/// A death record, normalised: cause, key, holder, token index, swept counts
/// (members, requeued, dead-lettered).
type DeathSeen = (String, String, String, usize, Option<(u64, u64, u64)>);

/// A lease as `inspect` and `leases` show it, normalised: key, holder, token index,
/// live, the session it rides.
type InfoSeen = (String, String, usize, bool, Option<String>);

/// What one side saw, normalised so both sides compare equal when they agree.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Token(usize),
    Held(String, usize),
    Lost(String),
    Fenced,
    Invalid,
    Bool(bool),
    Lease(Option<InfoSeen>),
    /// Claimed items: index, attempts, queue.
    Items(Vec<(usize, u32, String)>),
    /// Each queue's `[pending, owned, dead_lettered]`, in the order answered.
    Queues(Vec<(String, [u64; 3])>),
    State(Option<String>),
    Ids(Vec<usize>, Vec<usize>),
    Tokens(Vec<usize>),
    Counts(u64, u64, u64, Vec<usize>),
    Leases(Vec<InfoSeen>),
    /// A sweep: items requeued, items dead-lettered, members declared dead (sorted:
    /// which member a store sweeps first is its own choice).
    Swept(Vec<usize>, Vec<usize>, Vec<(String, String, usize)>),
    Deaths(Vec<DeathSeen>),
    Records(Vec<(usize, String, u32)>),
    Input(String),
    Unit,
    Skipped,
    Other(String),
}

/// One side of the comparison: a store and the tokens and ids it handed out, in order.
struct Side {
    store: Arc<dyn Store>,
    tokens: Vec<FencingToken>,
    ids: Vec<ItemId>,
    leases: HashMap<(usize, usize), Lease>,
    /// The claim request ids used so far, in order (the same values on both sides).
    requests: Vec<RequestId>,
    /// The last lease taken on each session.
    sessions: HashMap<usize, Lease>,
    /// The session token each member joined under, by the member's token.
    rides: HashMap<FencingToken, FencingToken>,
    /// The member tokens sweeps declared dead so far.
    declared: HashSet<FencingToken>,
    /// What the store's own answers broke of the session rules.
    broken: Vec<String>,
}

impl Side {
    fn new(store: Arc<dyn Store>) -> Self {
        Side {
            store,
            tokens: Vec::new(),
            ids: Vec::new(),
            leases: HashMap::new(),
            requests: Vec::new(),
            sessions: HashMap::new(),
            rides: HashMap::new(),
            declared: HashSet::new(),
            broken: Vec::new(),
        }
    }

    fn info(&self, i: &LeaseInfo) -> InfoSeen {
        (
            i.key.to_string(),
            i.holder.to_string(),
            self.tok(i.token),
            i.is_live(),
            i.session.as_ref().map(|s| s.to_string()),
        )
    }

    /// A sweep of `token` answered `r`: normalised, and held to the sweep's rules
    /// (at most `max_batch` members declared dead a step, each once, by the sweep of
    /// the session it joined; none on a store without native sessions).
    fn swept(&mut self, token: FencingToken, r: Sweep) -> Seen {
        let caps = self.store.capabilities();
        if r.members.len() > caps.max_batch.max(1) {
            self.broken.push(format!(
                "a sweep declared {} members dead at once, over max_batch {}",
                r.members.len(),
                caps.max_batch
            ));
        }
        for m in &r.members {
            if !caps.sessions {
                self.broken.push(format!(
                    "a store without native sessions declared {} dead in a sweep",
                    m.key
                ));
            }
            if self.rides.get(&m.token) != Some(&token) {
                self.broken.push(format!(
                    "the sweep of token {} declared {} (token {}) dead, which did not join under it",
                    self.tok(token),
                    m.key,
                    self.tok(m.token)
                ));
            }
            if !self.declared.insert(m.token) {
                self.broken.push(format!(
                    "{} (token {}) was declared dead twice",
                    m.key,
                    self.tok(m.token)
                ));
            }
        }
        let mut members: Vec<(String, String, usize)> = r
            .members
            .iter()
            .map(|m| (m.key.to_string(), m.holder.to_string(), self.tok(m.token)))
            .collect();
        members.sort();
        Seen::Swept(
            r.requeued.iter().map(|i| self.id(*i)).collect(),
            r.dead_lettered.iter().map(|i| self.id(*i)).collect(),
            members,
        )
    }

    async fn sweep(&mut self, token: FencingToken) -> Seen {
        match self.store.sweep(token).await {
            Ok(r) => self.swept(token, r),
            Err(e) => self.err(e),
        }
    }

    /// At the end of a case: every member whose record is still current rides live
    /// exactly while its session's lease, under the token it joined, is current and
    /// live.
    async fn check_riders(&mut self) {
        if !self.store.capabilities().sessions {
            return;
        }
        let members: Vec<Lease> = self
            .leases
            .values()
            .filter(|l| self.rides.contains_key(&l.token))
            .cloned()
            .collect();
        for member in members {
            let Ok(Some(info)) = self.store.inspect(&member.key).await else {
                continue;
            };
            if info.token != member.token {
                continue;
            }
            let session_token = self.rides[&member.token];
            let sessions = self.sessions.values();
            let Some(session) = sessions.into_iter().find(|l| l.token == session_token) else {
                continue;
            };
            let session_live = matches!(
                self.store.inspect(&session.key).await,
                Ok(Some(s)) if s.token == session_token && s.is_live()
            );
            if info.is_live() != session_live {
                self.broken.push(format!(
                    "{} (token {}) is live: {}, while its session {} (token {}) is live: {session_live}",
                    member.key,
                    self.tok(member.token),
                    info.is_live(),
                    session.key,
                    self.tok(session_token)
                ));
            }
        }
    }

    /// The `i`th token handed out; one no lease ever had when there is none.
    fn token(&self, i: usize) -> FencingToken {
        self.tokens
            .get(i)
            .copied()
            .unwrap_or(FencingToken(u64::MAX))
    }

    fn tok(&self, t: FencingToken) -> usize {
        self.tokens
            .iter()
            .position(|x| *x == t)
            .unwrap_or(usize::MAX)
    }

    fn id(&self, i: ItemId) -> usize {
        self.ids.iter().position(|x| *x == i).unwrap_or(usize::MAX)
    }

    fn err(&self, e: Error) -> Seen {
        match e {
            Error::Held { holder, token, .. } => Seen::Held(holder.to_string(), self.tok(token)),
            Error::Lost { reason, .. } => Seen::Lost(format!("{reason:?}")),
            Error::Fenced { .. } => Seen::Fenced,
            Error::InvalidInput { .. } => Seen::Invalid,
            other => Seen::Other(other.to_string()),
        }
    }

    fn state(&self, s: ItemState) -> String {
        match s {
            ItemState::Owned(t) => format!("owned {}", self.tok(t)),
            other => format!("{other:?}"),
        }
    }

    async fn claim(&self, h: usize, k: usize, n: usize, request: RequestId, q: usize) -> Seen {
        let queues = queue_names(CLAIM_LISTS[q]);
        match self.leases.get(&(h, k)) {
            None => Seen::Skipped,
            Some(l) => match self.store.claim_from(l, &queues, n, request).await {
                Ok(items) => Seen::Items(
                    items
                        .iter()
                        .map(|i| (self.id(i.id), i.attempts, i.queue.to_string()))
                        .collect(),
                ),
                Err(e) => self.err(e),
            },
        }
    }

    async fn apply(&mut self, op: &Op, long: Ttl) -> Seen {
        let key = |k: usize| Key::member(&format!("k{k}")).unwrap_or_else(|e| panic!("{e}"));
        let session_key = |s: usize| {
            let name = Name::new(format!("s{s}")).unwrap_or_else(|e| panic!("{e}"));
            Key::new(Space::sessions(), name)
        };
        let holder = |h: usize| HolderId::new(format!("h{h}")).unwrap_or_else(|e| panic!("{e}"));
        let s = self.store.clone();
        match op {
            Op::Acquire(h, k) => match s.acquire(&key(*k), &holder(*h), long).await {
                Ok(lease) => {
                    self.tokens.push(lease.token);
                    self.leases.insert((*h, *k), lease);
                    Seen::Token(self.tokens.len() - 1)
                }
                Err(e) => self.err(e),
            },
            Op::Renew(h, k) => match self.leases.get(&(*h, *k)) {
                None => Seen::Skipped,
                Some(l) => match s.renew(l).await {
                    Ok(r) => Seen::Token(self.tok(r.token)),
                    Err(e) => self.err(e),
                },
            },
            Op::Release(h, k) => match self.leases.get(&(*h, *k)) {
                None => Seen::Skipped,
                Some(l) => match s.release(l).await {
                    Ok(b) => Seen::Bool(b),
                    Err(e) => self.err(e),
                },
            },
            Op::Inspect(k) => match s.inspect(&key(*k)).await {
                Ok(i) => Seen::Lease(i.map(|i| self.info(&i))),
                Err(e) => self.err(e),
            },
            Op::InspectSession(n) => match s.inspect(&session_key(*n)).await {
                Ok(i) => Seen::Lease(i.map(|i| self.info(&i))),
                Err(e) => self.err(e),
            },
            Op::OpenSession(h, n) => match s.acquire(&session_key(*n), &holder(*h), long).await {
                Ok(lease) => {
                    self.tokens.push(lease.token);
                    self.sessions.insert(*n, lease);
                    Seen::Token(self.tokens.len() - 1)
                }
                Err(e) => self.err(e),
            },
            Op::JoinSession(h, k, n) => match self.sessions.get(n).cloned() {
                None => Seen::Skipped,
                Some(session) => match s.join_session(&session, &key(*k), &holder(*h)).await {
                    Ok(lease) => {
                        self.tokens.push(lease.token);
                        self.rides.insert(lease.token, session.token);
                        self.leases.insert((*h, *k), lease);
                        Seen::Token(self.tokens.len() - 1)
                    }
                    Err(e) => self.err(e),
                },
            },
            Op::RenewSession(n) => match self.sessions.get(n) {
                None => Seen::Skipped,
                Some(l) => match s.renew(l).await {
                    Ok(r) => Seen::Token(self.tok(r.token)),
                    Err(e) => self.err(e),
                },
            },
            Op::ReleaseSession(n) => match self.sessions.get(n) {
                None => Seen::Skipped,
                Some(l) => match s.release(l).await {
                    Ok(b) => Seen::Bool(b),
                    Err(e) => self.err(e),
                },
            },
            Op::ReapSession(n, t) => match s.reap(&session_key(*n), self.token(*t)).await {
                Ok(b) => Seen::Bool(b),
                Err(e) => self.err(e),
            },
            Op::SweepSession(n) => match self.sessions.get(n) {
                None => Seen::Skipped,
                Some(l) => self.sweep(l.token).await,
            },
            Op::Reap(k, t) => match s.reap(&key(*k), self.token(*t)).await {
                Ok(b) => Seen::Bool(b),
                Err(e) => self.err(e),
            },
            Op::Enqueue(max, q) => {
                let payload = format!("p{}", self.ids.len());
                let queue = queue_names(&[QUEUES[*q]])[0];
                match s
                    .enqueue(
                        payload.as_bytes(),
                        EnqueueOptions::default().max_attempts(*max).queue(queue),
                    )
                    .await
                {
                    Ok(id) => {
                        self.ids.push(id);
                        Seen::Unit
                    }
                    Err(e) => self.err(e),
                }
            }
            Op::Claim(h, k, n, q) => {
                // Both sides draw the same increasing ids: the case's own sequence.
                let request = RequestId((self.requests.len() as u128 + 1) << 64);
                self.requests.push(request);
                self.claim(*h, *k, *n, request, *q).await
            }
            Op::Reclaim(h, k, n, r, q) => match self
                .requests
                .len()
                .checked_sub(r + 1)
                .and_then(|i| self.requests.get(i))
            {
                None => Seen::Skipped,
                Some(request) => self.claim(*h, *k, *n, *request, *q).await,
            },
            Op::Complete(h, k, i) => match (self.leases.get(&(*h, *k)), self.ids.get(*i)) {
                (Some(l), Some(id)) => match s.complete(l, *id).await {
                    Ok(()) => Seen::Unit,
                    Err(e) => self.err(e),
                },
                _ => Seen::Skipped,
            },
            Op::Fail(h, k, i, retry) => match (self.leases.get(&(*h, *k)), self.ids.get(*i)) {
                (Some(l), Some(id)) => match s.fail(l, *id, *retry).await {
                    Ok(st) => Seen::State(Some(self.state(st))),
                    Err(e) => self.err(e),
                },
                _ => Seen::Skipped,
            },
            Op::Sweep(t) => self.sweep(self.token(*t)).await,
            Op::DeadTokens => match s.dead_tokens(1000).await {
                Ok(d) => Seen::Tokens(d.iter().map(|d| self.tok(d.token)).collect()),
                Err(e) => self.err(e),
            },
            Op::QueueCounts => match s.queue_counts().await {
                Ok(queues) => Seen::Queues(
                    queues
                        .iter()
                        .map(|q| {
                            let c = q.counts;
                            (q.queue.to_string(), [c.pending, c.owned, c.dead_lettered])
                        })
                        .collect(),
                ),
                Err(e) => self.err(e),
            },
            Op::Counts => match (s.item_counts().await, s.dead_letters(1000).await) {
                (Ok(c), Ok(dl)) => Seen::Counts(
                    c.pending,
                    c.owned,
                    c.dead_lettered,
                    dl.iter().map(|r| self.id(r.item.id)).collect(),
                ),
                (Err(e), _) | (_, Err(e)) => self.err(e),
            },
            Op::Leases(after) => {
                let after = after.map(key);
                match s
                    .leases(
                        &Space::members(),
                        Page {
                            after: after.as_ref(),
                            limit: 1000,
                        },
                    )
                    .await
                {
                    Ok(page) => Seen::Leases(page.iter().map(|i| self.info(i)).collect()),
                    Err(e) => self.err(e),
                }
            }
            Op::Deaths => match s.deaths(None, 10).await {
                Ok(page) => Seen::Deaths(
                    page.iter()
                        .map(|d| {
                            (
                                d.cause.to_string(),
                                d.key.to_string(),
                                d.holder.to_string(),
                                self.tok(d.token),
                                d.swept.map(|w| (w.members, w.requeued, w.dead_lettered)),
                            )
                        })
                        .collect(),
                ),
                Err(e) => self.err(e),
            },
            Op::Items(state, after) => {
                let kind = match state {
                    0 => ItemStateKind::Pending,
                    1 => ItemStateKind::Owned,
                    _ => ItemStateKind::DeadLettered,
                };
                let after = after.and_then(|i| self.ids.get(i).copied());
                match s.items(kind, Page { after, limit: 1000 }).await {
                    Ok(page) => Seen::Records(
                        page.iter()
                            .map(|r| (self.id(r.item.id), self.state(r.state), r.item.attempts))
                            .collect(),
                    ),
                    Err(e) => self.err(e),
                }
            }
            Op::RetryDeadLetter(i) => {
                let id = self.ids.get(*i).copied().unwrap_or(ItemId(u64::MAX - 1));
                match s.retry_dead_letter(id).await {
                    Ok(()) => Seen::Unit,
                    Err(Error::InvalidInput { problem, .. }) => Seen::Input(format!("{problem:?}")),
                    Err(e) => self.err(e),
                }
            }
            Op::RetryDeadLetters(n) => match s.retry_dead_letters(*n).await {
                Ok(moved) => Seen::Ids(moved.iter().map(|i| self.id(*i)).collect(), Vec::new()),
                Err(e) => self.err(e),
            },
            Op::Item(i) => match self.ids.get(*i) {
                None => Seen::Skipped,
                Some(id) => match s.item(*id).await {
                    Ok(r) => Seen::State(
                        r.map(|r| format!("{} a{}", self.state(r.state), r.item.attempts)),
                    ),
                    Err(e) => self.err(e),
                },
            },
        }
    }
}

async fn check(
    real: Arc<dyn Store>,
    model: Arc<dyn Store>,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let caps = real.capabilities();
    let long = Ttl::new(
        std::time::Duration::from_secs(600)
            .max(caps.min_ttl)
            .min(caps.max_ttl),
    )
    .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut real = Side::new(real);
    let mut model = Side::new(model);
    for (step, op) in ops.iter().enumerate() {
        let want = model.apply(op, long).await;
        let got = real.apply(op, long).await;
        if let Seen::Other(e) = &got {
            return Err(TestCaseError::fail(format!(
                "step {step} {op:?}: store error {e}"
            )));
        }
        prop_assert!(
            real.broken.is_empty(),
            "step {} {:?}: the store broke the session rules: {:?}",
            step,
            op,
            real.broken
        );
        prop_assert_eq!(&got, &want, "step {} {:?}", step, op);
    }
    real.check_riders().await;
    prop_assert!(
        real.broken.is_empty(),
        "the store broke the session rules: {:?}",
        real.broken
    );
    // Tokens and ids are strictly increasing in hand-out order on the store too.
    prop_assert!(
        real.tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not increasing"
    );
    prop_assert!(
        real.ids.windows(2).all(|w| w[0] < w[1]),
        "ids not increasing"
    );
    Ok(())
}
