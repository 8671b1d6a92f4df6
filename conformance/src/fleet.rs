//! A running system for fault tests: members working items, one checker, every event
//! on one bus, and the invariants a fault must not break. Backends drive a real
//! server through kills, restarts and pauses while a [`Fleet`] runs on it.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use liveness_core::sync::lock;
use liveness_core::{
    CancellationToken, Checker, CheckerConfig, CheckerHandle, EnqueueOptions, Event, EventBus,
    FencingToken, ItemCounts, ItemId, Member, MemberConfig, Store, Ttl,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Polls `cond` every 20 ms until it holds; panics naming `what` after `deadline`.
pub async fn wait_until<F, Fut>(what: &str, deadline: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let until = Instant::now() + deadline;
    while !cond().await {
        assert!(
            Instant::now() < until,
            "timed out after {deadline:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
            let options = EnqueueOptions {
                max_attempts: 100,
                ..EnqueueOptions::default()
            };
            let id = store
                .enqueue(&(i as u32).to_be_bytes(), options)
                .await
                .unwrap_or_else(|e| panic!("enqueue: {e}"));
            ids.push(id);
        }
        let checker = Checker::new(
            store.clone(),
            CheckerConfig {
                check_every: Duration::from_millis(200),
                events: bus.clone(),
                ..CheckerConfig::default()
            },
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
        wait_until("every item is completed", self.deadline, || async {
            self.counts().await == Some(ItemCounts::default())
        })
        .await;
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
                | Event::OrphansRequeued {
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
