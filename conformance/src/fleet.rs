//! A running system for fault tests: members working items, one checker, every event
//! on one bus, and the invariants a fault must not break. Backends drive a real
//! server through kills, restarts and pauses while a [`Fleet`] runs on it.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use liveness_core::sync::lock;
use liveness_core::{
    CancellationToken, Checker, CheckerConfig, CheckerHandle, EnqueueOptions, Error, Event,
    EventBus, FencingToken, HolderId, ItemCounts, ItemId, Key, Lease, LeaseStatus, Member,
    MemberConfig, Store, Ttl,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Polls `cond` every 20 ms until it holds; panics naming `what` after `deadline`.
pub async fn wait_until<F, Fut>(what: &str, deadline: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for(what, deadline, || {
        let holds = cond();
        async move { holds.await.then_some(()) }
    })
    .await
}

/// Polls `op` every 20 ms until it answers `Some`, and returns what it holds; panics
/// naming `what` after `deadline`.
pub async fn wait_for<T, F, Fut>(what: &str, deadline: Duration, mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let until = Instant::now() + deadline;
    loop {
        if let Some(found) = op().await {
            return found;
        }
        assert!(
            Instant::now() < until,
            "timed out after {deadline:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `op` again every 20 ms while it answers `Unavailable` (a server down or a
/// failover in progress), for up to `deadline`; then, or on any other answer, returns
/// what it answered last.
pub async fn retry_unavailable<T, F, Fut>(deadline: Duration, mut op: F) -> liveness_core::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = liveness_core::Result<T>>,
{
    let until = Instant::now() + deadline;
    loop {
        match op().await {
            Err(Error::Unavailable { .. }) if Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            other => return other,
        }
    }
}

/// Renews `lease` (retrying while the store is [`Unavailable`](Error::Unavailable),
/// up to `deadline`) and panics unless the store refuses it as `Lost`: for a lease
/// the store has reported expired, no renewal after expiry.
pub async fn assert_renewal_refused(store: &dyn Store, lease: &Lease, deadline: Duration) {
    match retry_unavailable(deadline, || store.renew(lease)).await {
        Err(Error::Lost { .. }) => {}
        other => panic!("an expired lease was renewed: {other:?}"),
    }
}

/// The probe of a fault test: a member lease `probe-...` held by `probe` with `ttl`
/// that nobody renews, acquired (before the fault) on `store`. Returns its key, the
/// lease, and its nominal expiry (now + `ttl`), from which a test measures how late
/// the store reports it expired.
pub async fn acquire_probe(store: &dyn Store, ttl: Ttl) -> (Key, Lease, Instant) {
    let key = crate::member_key("probe");
    let holder = HolderId::new("probe").unwrap_or_else(|e| panic!("holder id: {e}"));
    let lease = store
        .acquire(&key, &holder, ttl)
        .await
        .unwrap_or_else(|e| panic!("acquire the probe lease: {e}"));
    (key, lease, Instant::now() + ttl.duration())
}

/// Acquires a fresh lease `after-...` on `store` after a failover (retrying while it
/// is `Unavailable`, up to `deadline`) and asserts that its token exceeds every token
/// handed out before the fault: the members' tokens `before` and the `probe`'s.
/// Returns the fresh lease and the largest token before.
pub async fn assert_fresh_token_above(
    store: &dyn Store,
    before: &[FencingToken],
    probe: &Lease,
    ttl: Ttl,
    deadline: Duration,
) -> (Lease, FencingToken) {
    let key = crate::member_key("after");
    let holder = HolderId::new("after").unwrap_or_else(|e| panic!("holder id: {e}"));
    // A retry after an `Unavailable` that the store applied answers `Held` naming this
    // holder and the token the first attempt took (the contract's ghost): that is the
    // fresh lease.
    let fresh = match retry_unavailable(deadline, || store.acquire(&key, &holder, ttl)).await {
        Err(Error::Held {
            holder: h, token, ..
        }) if h == holder => Lease::granted(store.issuer(), key.clone(), h, token, ttl),
        other => other.unwrap_or_else(|e| panic!("acquire a lease after the failover: {e}")),
    };
    let max_before = before
        .iter()
        .copied()
        .chain([probe.token])
        .max()
        .unwrap_or(probe.token);
    assert!(
        fresh.token > max_before,
        "token {} after the failover, not above {max_before}",
        fresh.token
    );
    (fresh, max_before)
}

/// Waits (up to `deadline`) until `store` reports the lease at `key` expired, or no
/// longer has it (a checker reaped it); panics after `deadline`.
pub async fn wait_expired_or_gone(store: &dyn Store, key: &Key, deadline: Duration) {
    wait_until("the probe lease expires", deadline, || async {
        match store.inspect(key).await {
            Ok(Some(info)) => info.status == LeaseStatus::Expired,
            Ok(None) => true,
            Err(_) => false,
        }
    })
    .await;
}

/// What [`Fleet::tokens_since`] found.
#[derive(Debug)]
pub struct TokensSince {
    /// Every `Joined` key and token, in bus order.
    pub all: Vec<(String, FencingToken)>,
    /// The largest token joined before the fault (`None` if none was).
    pub max_before: Option<FencingToken>,
    /// The tokens joined after the fault, in bus order.
    pub after: Vec<FencingToken>,
    /// How many joins reused a token handed out before (0 when every token is new).
    pub twice: usize,
}

/// Members working items under a checker, with every event recorded.
pub struct Fleet {
    store: Arc<dyn Store>,
    members: Vec<Member>,
    events: Arc<Mutex<Vec<Event>>>,
    stop: CancellationToken,
    workers: Vec<JoinHandle<()>>,
    checker: Option<CheckerHandle>,
    ids: Vec<ItemId>,
    deadline: Duration,
}

impl Fleet {
    /// Enqueues `items` items (100 attempts each, so faults never dead-letter them)
    /// on `store`, starts a checker on it (checking at least every 200 ms), and one
    /// member `w<i>` with `ttl` per store in `member_stores` (separate handles, as
    /// separate processes would have, or the same one repeated). Waits in
    /// [`Fleet::wait_all_completed`] give up after `deadline`.
    pub async fn start(
        store: Arc<dyn Store>,
        member_stores: Vec<Arc<dyn Store>>,
        ttl: Ttl,
        items: usize,
        deadline: Duration,
    ) -> Fleet {
        let bus = EventBus::new(1 << 16);
        let events = Arc::new(Mutex::new(Vec::new()));
        let mut rx = bus.subscribe();
        let sink = events.clone();
        tokio::spawn(async move {
            while let Ok(e) = rx.recv().await {
                lock(&sink).push(e);
            }
        });
        let mut ids = Vec::new();
        for i in 0..items {
            let options = EnqueueOptions::default().max_attempts(100);
            let id = store
                .enqueue(&(i as u32).to_be_bytes(), options)
                .await
                .unwrap_or_else(|e| panic!("enqueue: {e}"));
            ids.push(id);
        }
        let checker = Checker::new(
            store.clone(),
            CheckerConfig::default()
                .check_every(Duration::from_millis(200))
                .events(bus.clone()),
        )
        .spawn();
        let stop = CancellationToken::new();
        let mut members = Vec::new();
        let mut workers = Vec::new();
        for (i, member_store) in member_stores.into_iter().enumerate() {
            let config = MemberConfig::new(&format!("w{i}"), ttl)
                .unwrap_or_else(|e| panic!("member config: {e}"))
                .events(bus.clone());
            let member = Member::join(member_store, config)
                .await
                .unwrap_or_else(|e| panic!("join: {e}"));
            workers.push(tokio::spawn(work(member.clone(), stop.clone())));
            members.push(member);
        }
        Fleet {
            store,
            members,
            events,
            stop,
            workers,
            checker: Some(checker),
            ids,
            deadline,
        }
    }

    /// [`Fleet::start`] with a handle of its own (from `connect`) for the checker and
    /// for each of `members` members, as separate processes would have.
    pub async fn start_connected<F, Fut>(
        mut connect: F,
        members: usize,
        ttl: Ttl,
        items: usize,
        deadline: Duration,
    ) -> Fleet
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Arc<dyn Store>>,
    {
        let checker = connect().await;
        let mut member_stores = Vec::new();
        for _ in 0..members {
            member_stores.push(connect().await);
        }
        Fleet::start(checker, member_stores, ttl, items, deadline).await
    }

    /// The checker's store handle.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The members, in the order of `member_stores`.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Each member's current token, in member order.
    pub fn tokens(&self) -> Vec<FencingToken> {
        self.members.iter().map(Member::token).collect()
    }

    /// The store's item counts, or `None` while it is unreachable.
    pub async fn counts(&self) -> Option<ItemCounts> {
        self.store.item_counts().await.ok()
    }

    /// Waits until `pending` items are fewer than `below`: work is under way.
    pub async fn wait_working(&self, below: u64) {
        wait_until("work is under way", self.deadline, || async {
            matches!(self.counts().await, Some(c) if c.pending < below)
        })
        .await;
    }

    /// Waits until every item is completed: nothing pending, owned or dead-lettered,
    /// and every enqueued id gone (items leave the store only through `complete`).
    pub async fn wait_all_completed(&self) {
        let until = Instant::now() + self.deadline;
        loop {
            let counts = self.counts().await;
            if counts == Some(ItemCounts::default()) {
                break;
            }
            // What a stuck run looks like, for whoever reads the failure.
            assert!(
                Instant::now() < until,
                "timed out after {:?} waiting until every item is completed: item counts \
                 {counts:?} (None: the store did not answer), members' tokens {:?}, tokens \
                 that saw Lost {:?}, the last events {:?}",
                self.deadline,
                self.tokens(),
                self.lost_tokens(),
                self.last_events(12),
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let until = Instant::now() + self.deadline;
        for id in &self.ids {
            // A store handle may still route some requests to a member that is down.
            let item = loop {
                match self.store.item(*id).await {
                    Err(liveness_core::Error::Unavailable { .. }) if Instant::now() < until => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    other => break other.unwrap_or_else(|e| panic!("item: {e}")),
                }
            };
            assert_eq!(item, None, "item {id} is not done");
        }
    }

    /// After an outage longer than the ttl: every member whose token was in `before`
    /// saw `Lost` and re-joined under a newer token, and every new token is newer than
    /// every old one (the store's token source survived the outage).
    ///
    /// Re-joining takes its own time (backoff, a revived old lease to release), and the
    /// other members may finish every item first, so this waits up to the fleet's
    /// deadline for each member to hold a token newer than its old one, then checks.
    pub async fn assert_all_rejoined(&self, before: &[FencingToken]) {
        wait_until("every member re-joined", self.deadline, || async {
            self.tokens().iter().zip(before).all(|(a, b)| a > b)
        })
        .await;
        let after = self.tokens();
        let lost = self.lost_tokens();
        for (b, a) in before.iter().zip(&after) {
            assert!(lost.contains(b), "the member with token {b} never saw Lost");
            assert!(
                a > b,
                "a member kept token {b} across an outage longer than its ttl"
            );
        }
        assert!(
            after.iter().min() > before.iter().max(),
            "a token after the outage is not newer than every token before it"
        );
    }

    /// Every event so far, in order.
    pub fn events(&self) -> Vec<Event> {
        lock(&self.events).clone()
    }

    /// The last `n` events, oldest first.
    fn last_events(&self, n: usize) -> Vec<Event> {
        let events = lock(&self.events);
        events[events.len().saturating_sub(n)..].to_vec()
    }

    /// The tokens whose members reported `Lost`.
    pub fn lost_tokens(&self) -> Vec<FencingToken> {
        self.events()
            .iter()
            .filter_map(|e| match e {
                Event::Lost { token, .. } => Some(*token),
                _ => None,
            })
            .collect()
    }

    /// Waits one `ttl` (by then any member the fault made lose its lease has seen
    /// `Lost`) and counts the tokens of `before` (the members' tokens before the
    /// fault) that no member reported `Lost`: the members that kept their lease.
    pub async fn kept_after(&self, before: &[FencingToken], ttl: Ttl) -> usize {
        tokio::time::sleep(ttl.duration()).await;
        let lost = self.lost_tokens();
        before.iter().filter(|t| !lost.contains(t)).count()
    }

    /// [`Fleet::wait_all_completed`], then asserts that no item was dead-lettered
    /// (asking while the store is `Unavailable`, up to the fleet's deadline).
    pub async fn assert_all_completed_none_dead(&self) {
        self.wait_all_completed().await;
        let dead_letters = retry_unavailable(self.deadline, || self.store.dead_letters(10))
            .await
            .unwrap_or_else(|e| panic!("dead letters: {e}"));
        assert!(dead_letters.is_empty(), "dead-lettered: {dead_letters:?}");
    }

    /// The tokens members joined with so far, against `before` (what
    /// [`Fleet::joined`] said before a fault): for the checks and figures of a run.
    pub fn tokens_since(&self, before: &[(String, FencingToken)]) -> TokensSince {
        let all = self.joined();
        let max_before = before.iter().map(|(_, t)| *t).max();
        let after: Vec<FencingToken> = all[before.len().min(all.len())..]
            .iter()
            .map(|(_, t)| *t)
            .collect();
        let mut distinct: Vec<FencingToken> = all.iter().map(|(_, t)| *t).collect();
        distinct.sort();
        distinct.dedup();
        TokensSince {
            twice: all.len() - distinct.len(),
            all,
            max_before,
            after,
        }
    }

    /// The key and token of every `Joined` event so far, in bus order.
    pub fn joined(&self) -> Vec<(String, FencingToken)> {
        self.events()
            .iter()
            .filter_map(|e| match e {
                Event::Joined { key, token, .. } => Some((key.to_string(), *token)),
                _ => None,
            })
            .collect()
    }

    /// The tokens a checker declared dead (or whose items a sweep requeued) that a
    /// member held and had not yet seen as `Lost`: work handed on while its holder
    /// still acted. [`Fleet::assert_lost_before_requeue`] asserts there are none;
    /// this counts them, for runs that measure rather than assert.
    pub fn early_reaps(&self) -> Vec<FencingToken> {
        let events = self.events();
        let mut early = Vec::new();
        for (i, e) in events.iter().enumerate() {
            let token = match e {
                Event::Died { token, .. } | Event::Swept { token, .. } => *token,
                _ => continue,
            };
            let held = events
                .iter()
                .any(|e| matches!(e, Event::Joined { token: t, .. } if *t == token));
            let lost_before = events[..i]
                .iter()
                .any(|e| matches!(e, Event::Lost { token: t, .. } if *t == token));
            if held && !lost_before {
                early.push(token);
            }
        }
        early
    }

    /// Every token a member held (it saw `Joined`) whose death a checker declared, or
    /// whose items a sweep requeued, was seen as `Lost` by that member BEFORE, on the
    /// same bus: no work was handed on while its holder still acted.
    ///
    /// A token no member saw join is a ghost: an `acquire` sent during the fault that
    /// the server applied after the client had given up waiting. Nobody acts under it,
    /// so it must own no items: its death moves nothing.
    pub fn assert_lost_before_requeue(&self) {
        let events = self.events();
        for (i, e) in events.iter().enumerate() {
            let (token, moved) = match e {
                Event::Died {
                    token,
                    requeued,
                    dead_lettered,
                    ..
                }
                | Event::Swept {
                    token,
                    requeued,
                    dead_lettered,
                } => (*token, requeued + dead_lettered),
                _ => continue,
            };
            let held = events
                .iter()
                .any(|e| matches!(e, Event::Joined { token: t, .. } if *t == token));
            if !held {
                assert_eq!(moved, 0, "ghost token {token} owned items: {e:?}");
                continue;
            }
            let lost_before = events[..i]
                .iter()
                .any(|e| matches!(e, Event::Lost { token: t, .. } if *t == token));
            assert!(
                lost_before,
                "token {token} was declared dead ({e:?}) before its member saw Lost; events: {events:#?}"
            );
        }
    }

    /// Stops the workers and the checker, and lets the members leave.
    pub async fn shut_down(mut self) {
        self.stop.cancel();
        for w in self.workers.drain(..) {
            let _ = w.await;
        }
        if let Some(c) = self.checker.take() {
            c.stop().await;
        }
        for m in self.members.drain(..) {
            let _ = m.leave(Duration::from_millis(100)).await;
        }
    }
}

/// A worker: claims one item at a time, "works" 20 ms, completes it unless its lease
/// was lost meanwhile. Store faults just make it try again a little later.
async fn work(member: Member, stop: CancellationToken) {
    while !stop.is_cancelled() {
        let claimed = match member.claim(1).await {
            Ok(c) if !c.is_empty() => c,
            _ => {
                tokio::time::sleep(Duration::from_millis(30)).await;
                continue;
            }
        };
        for c in claimed {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if c.cancel.is_cancelled() {
                continue; // stop at once; a checker requeues it
            }
            // Unavailable: retried while the claim holds, as a real worker retries its
            // commit (a member that keeps its lease through a failover would otherwise
            // own the item forever). Fenced or Lost: the item is requeued (or was
            // completed by a request whose answer got lost); nothing to do here.
            while let Err(liveness_core::Error::Unavailable { .. }) = member.complete(&c).await {
                if c.cancel.is_cancelled() || stop.is_cancelled() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        }
    }
}
