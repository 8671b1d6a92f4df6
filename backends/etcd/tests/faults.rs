//! Fault scenarios against a real etcd member that each test starts for itself:
//! killed and restarted, or frozen (SIGSTOP) past the ttl and resumed.
//!
//! What is asserted, and why (see also the README's "Faults" section):
//!
//! - **Restart** (kill -9, ~1.5 ttl down, start again on the same data folder): etcd
//!   fsyncs every acknowledged write to its write-ahead log, so records, items, the
//!   dead set and the revision (the token source) survive. On restart the member
//!   becomes leader again and its lessor *extends every lease by its full ttl* (etcd
//!   does this on every leader change): a lease whose holder stopped renewing expires
//!   one ttl after the restart, not during the outage. Members, meanwhile, saw their
//!   local deadline pass (their renewals failed), fired their cancellation and
//!   re-join. Asserted: every member re-joins with a newer token, every item ends
//!   completed (none lost, none dead-lettered), new tokens are newer than all old
//!   ones, and no token is declared dead before its member saw `Lost`.
//! - **Pause** (SIGSTOP for ~2.5 ttl, SIGCONT): a frozen etcd answers nothing, and its
//!   lessor's countdown is frozen with it; on resume the lessor finds the leases past
//!   their expiry (its clock is monotonic wall time, which ran on) and revokes them,
//!   and a renewal of an expired lease is refused (etcd waits for the revoke). What is
//!   guaranteed, and asserted: every member whose lease expired saw `Lost` BEFORE any
//!   checker declared that token dead; every member re-joins with a newer token;
//!   every item ends completed. An `acquire` sent during the freeze may execute after
//!   the client gave up waiting: that ghost lease is held by nobody, owns no items,
//!   and expires (the test checks it moved nothing).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use backend_etcd::{EtcdConfig, EtcdStore};
use liveness_conformance::fresh_namespace;
use liveness_core::{
    CancellationToken, Checker, CheckerConfig, EnqueueOptions, Event, EventBus, FencingToken,
    ItemCounts, ItemId, Member, MemberConfig, Store, Ttl,
};
use liveness_testkit::etcd::EtcdServer;
use tokio::time::Instant;

const DEADLINE: Duration = Duration::from_secs(90);

async fn connect(server: &EtcdServer) -> EtcdStore {
    let config = EtcdConfig::from_url(server.url())
        .unwrap()
        .with_namespace(fresh_namespace())
        .with_timeout(Duration::from_millis(500))
        .unwrap();
    EtcdStore::connect(config).await.unwrap()
}

/// Waits, polling, until `cond` holds; panics with `what` at [`DEADLINE`].
async fn wait_until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + DEADLINE;
    while !cond().await {
        assert!(Instant::now() < until, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A running system: members working items, one checker, every event on one bus.
struct World {
    store: Arc<dyn Store>,
    members: Vec<Member>,
    events: Arc<Mutex<Vec<Event>>>,
    stop: CancellationToken,
    workers: Vec<tokio::task::JoinHandle<()>>,
    checker: Option<liveness_core::CheckerHandle>,
    ids: Vec<ItemId>,
}

impl World {
    /// `members` workers on their own store handle (as separate processes would
    /// be), the checker on another.
    async fn start(server: &EtcdServer, ttl: Ttl, members: usize, items: usize) -> World {
        let checker_store = connect(server).await;
        let ns = checker_store.namespace().clone();
        let store: Arc<dyn Store> = Arc::new(checker_store);
        let bus = EventBus::new(1 << 16);
        let events = Arc::new(Mutex::new(Vec::new()));
        let mut rx = bus.subscribe();
        let sink = events.clone();
        tokio::spawn(async move {
            while let Ok(e) = rx.recv().await {
                sink.lock().unwrap().push(e);
            }
        });
        let mut ids = Vec::new();
        for i in 0..items {
            let options = EnqueueOptions { max_attempts: 100 };
            ids.push(
                store
                    .enqueue(&(i as u32).to_be_bytes(), options)
                    .await
                    .unwrap(),
            );
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
        let mut all = Vec::new();
        let mut workers = Vec::new();
        for i in 0..members {
            let config = EtcdConfig::from_url(server.url())
                .unwrap()
                .with_namespace(ns.clone())
                .with_timeout(Duration::from_millis(500))
                .unwrap();
            let member_store: Arc<dyn Store> = Arc::new(EtcdStore::connect(config).await.unwrap());
            let config = MemberConfig::new(&format!("w{i}"), ttl)
                .unwrap()
                .events(bus.clone());
            let member = Member::join(member_store, config).await.unwrap();
            workers.push(tokio::spawn(work(member.clone(), stop.clone())));
            all.push(member);
        }
        World {
            store,
            members: all,
            events,
            stop,
            workers,
            checker: Some(checker),
            ids,
        }
    }

    fn tokens(&self) -> Vec<FencingToken> {
        self.members.iter().map(Member::token).collect()
    }

    async fn counts(&self) -> Option<ItemCounts> {
        self.store.item_counts().await.ok()
    }

    /// Waits until every item is completed: nothing pending, owned or dead-lettered,
    /// and every enqueued id gone (items leave the store only by `complete`).
    async fn wait_all_completed(&self) {
        wait_until("every item is completed", || async {
            self.counts().await == Some(ItemCounts::default())
        })
        .await;
        for id in &self.ids {
            assert_eq!(
                self.store.item(*id).await.unwrap(),
                None,
                "item {id} is not done"
            );
        }
    }

    fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    /// Every token a member held whose death a checker declared (or whose items a
    /// sweep requeued) was seen as `Lost` by its member BEFORE, on the same bus. A
    /// token no member saw join is a ghost (see the module docs): it moved nothing.
    fn assert_lost_before_requeue(&self) {
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

    fn lost_tokens(&self) -> Vec<FencingToken> {
        self.events()
            .iter()
            .filter_map(|e| match e {
                Event::Lost { token, .. } => Some(*token),
                _ => None,
            })
            .collect()
    }

    async fn shut_down(mut self) {
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
            // Fenced, Lost or Unavailable: the item is requeued (or was completed by
            // a request whose answer got lost); either way nothing to do here.
            let _ = member.complete(&c).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restart_mid_run_members_rejoin_and_no_item_is_lost() {
    let Some(mut server) = liveness_testkit::etcd::start() else {
        return;
    };
    let ttl = Ttl::from_secs(2).unwrap();
    let world = World::start(&server, ttl, 3, 120).await;
    wait_until("work is under way", || async {
        matches!(world.counts().await, Some(c) if c.pending < 100)
    })
    .await;
    let before = world.tokens();

    tokio::task::block_in_place(|| server.kill()).unwrap();
    // The outage: longer than the ttl, so every member's local deadline passes.
    tokio::time::sleep(ttl.duration() * 3 / 2).await;
    tokio::task::block_in_place(|| server.restart()).unwrap();

    world.wait_all_completed().await;
    let after = world.tokens();
    let lost = world.lost_tokens();
    for (b, a) in before.iter().zip(&after) {
        assert!(lost.contains(b), "the member with token {b} never saw Lost");
        assert!(
            a > b,
            "a member kept token {b} across an outage longer than its ttl"
        );
    }
    // The revision survived the restart: new tokens are newer than every old one.
    assert!(after.iter().min() > before.iter().max());
    let dead_letters = world.store.dead_letters(10).await.unwrap();
    assert!(
        dead_letters.is_empty(),
        "items dead-lettered: {dead_letters:?}"
    );
    world.assert_lost_before_requeue();
    world.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pause_past_ttl_every_expired_member_sees_lost_first() {
    let Some(server) = liveness_testkit::etcd::start() else {
        return;
    };
    let ttl = Ttl::from_secs(2).unwrap();
    let world = World::start(&server, ttl, 3, 120).await;
    wait_until("work is under way", || async {
        matches!(world.counts().await, Some(c) if c.pending < 100)
    })
    .await;
    let before = world.tokens();

    server.pause().unwrap();
    // Frozen past the ttl: every member's local deadline passes during the freeze.
    let frozen = Instant::now();
    wait_until("every member saw Lost during the freeze", || async {
        let lost = world.lost_tokens();
        before.iter().all(|t| lost.contains(t)) || frozen.elapsed() > ttl.duration() * 5 / 2
    })
    .await;
    let lost_while_frozen = world.lost_tokens();
    tokio::time::sleep((ttl.duration() * 5 / 2).saturating_sub(frozen.elapsed())).await;
    server.resume().unwrap();

    for t in &before {
        assert!(
            lost_while_frozen.contains(t),
            "member with token {t} did not stop while the store was frozen"
        );
    }
    world.wait_all_completed().await;
    wait_until("every member re-joined", || async {
        world.tokens().iter().zip(&before).all(|(a, b)| a > b)
    })
    .await;
    world.assert_lost_before_requeue();
    world.shut_down().await;
}
