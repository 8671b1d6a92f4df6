//! The state machines against a store that misbehaves on demand (the `faulty` layer):
//! lost replies, failing releases, unreadable records, a store that lost state.

use std::sync::Arc;
use std::time::Duration;

use liveness_core::{
    Checker, CheckerConfig, Election, ElectionConfig, Event, EventBus, HolderLoss, ItemState,
    Member, MemberConfig, Store,
};
use tokio::time::{timeout, Instant};

mod common;
use common::{enqueue_job, join, memory, ttl, when_fired};

/// A store that lost state (it forgot the lease, and its token counter went
/// back) is not a graceful release: the member's loss says so, loudly and distinctly.
#[tokio::test(start_paused = true)]
async fn a_store_that_lost_state_is_a_distinct_loss_not_a_release() {
    use std::sync::atomic::Ordering;
    let (_, store, knobs) = faulty_memory();
    let member = join(&store, "w", 900).await;
    let mut events = member.events().subscribe();
    let first = member.generation();
    knobs.renew_finds_state_lost.store(true, Ordering::SeqCst);
    timeout(Duration::from_secs(2), first.cancel.cancelled())
        .await
        .expect("the next renewal ends the generation");
    let event = timeout(Duration::from_secs(2), events.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            event,
            Event::Lost {
                reason: HolderLoss::StoreLostState,
                ..
            }
        ),
        "{event:?}"
    );
}

/// A fresh memory store, and the same store behind [`faulty::Faulty`] with its knobs.
fn faulty_memory() -> (Arc<dyn Store>, Arc<dyn Store>, Arc<faulty::Knobs>) {
    let memory = memory();
    let (store, knobs) = faulty::wrap(memory.clone());
    (memory, store, knobs)
}

/// A store wrapper that injects faults on demand: renewals that stall, a renewal
/// that answers `Lost`, releases that fail, a reap or requeue that fails for one
/// token, acquire replies lost after the store applied the call.
mod faulty {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use liveness_core::durability::StoreLostState;
    use liveness_core::layer::Intercepted;
    use liveness_core::{
        async_trait, Error, FencingToken, Intercept, LostCause, Next, Op, Reply, Request, Result,
        Store,
    };

    #[derive(Debug, Default)]
    pub struct Knobs {
        /// Renewals hang (the store is unreachable, slowly).
        pub stall_renew: AtomicBool,
        /// Renewals answer `Lost(Released)` without reaching the store.
        pub lose_renew: AtomicBool,
        /// Renewals answer that the store lost state (`StoreLostState`).
        pub renew_finds_state_lost: AtomicBool,
        /// Releases fail with `Unavailable` without reaching the store.
        pub fail_release: AtomicBool,
        /// How many acquires to apply and then answer `Unavailable` (a lost reply).
        pub lose_acquire_replies: AtomicUsize,
        /// `reap` and `sweep` of this token fail with a permanent error.
        pub broken_token: Mutex<Option<FencingToken>>,
        /// Counts acquires that reached this wrapper.
        pub acquires: AtomicUsize,
    }

    impl Knobs {
        /// The next acquire is applied by the store, but its reply is lost.
        pub fn lose_next_acquire_reply(&self) {
            self.lose_acquire_replies.store(1, Ordering::SeqCst);
        }
    }

    #[derive(Debug)]
    pub struct Faulty {
        pub knobs: Arc<Knobs>,
    }

    pub fn wrap(inner: Arc<dyn Store>) -> (Arc<dyn Store>, Arc<Knobs>) {
        let knobs = Arc::new(Knobs::default());
        let hook = Arc::new(Faulty {
            knobs: knobs.clone(),
        });
        (Arc::new(Intercepted::new(inner, hook)), knobs)
    }

    fn down() -> Error {
        Error::unavailable("faulty", "injected fault")
    }

    impl Faulty {
        fn broken(&self, token: FencingToken) -> Result<()> {
            if *self.knobs.broken_token.lock().unwrap() == Some(token) {
                return Err(Error::backend("faulty", "corrupt record"));
            }
            Ok(())
        }
    }

    #[async_trait]
    impl Intercept for Faulty {
        /// Per lease and per token, as the trait's default `*_many` loops do.
        fn split_batches(&self) -> bool {
            true
        }

        async fn call(&self, req: Request, next: Next) -> Result<Reply> {
            let knobs = &self.knobs;
            match req.op() {
                Op::AcquireMany => {
                    knobs.acquires.fetch_add(1, Ordering::SeqCst);
                    let answer = next.run(req).await?;
                    let lose = knobs
                        .lose_acquire_replies
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                    if lose {
                        return Err(down());
                    }
                    return Ok(answer);
                }
                Op::RenewMany => {
                    if knobs.stall_renew.load(Ordering::SeqCst) {
                        std::future::pending::<()>().await;
                    }
                    if let (true, Some(key), Some(token)) = (
                        knobs.lose_renew.load(Ordering::SeqCst),
                        req.key(),
                        req.token(),
                    ) {
                        return Err(Error::Lost {
                            key: key.clone(),
                            token,
                            reason: LostCause::Released,
                        });
                    }
                    if let (true, Some(key), Some(token)) = (
                        knobs.renew_finds_state_lost.load(Ordering::SeqCst),
                        req.key(),
                        req.token(),
                    ) {
                        let key = key.clone();
                        return Err(Error::backend("faulty", StoreLostState::new(key, token)));
                    }
                }
                Op::Release if knobs.fail_release.load(Ordering::SeqCst) => {
                    // A failed call still takes a round trip.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    return Err(down());
                }
                Op::ReapMany | Op::SweepMany => {
                    if let Some(token) = req.token() {
                        self.broken(token)?;
                    }
                }
                _ => {}
            }
            next.run(req).await
        }
    }
}

/// The moment, on tokio's (paused) clock, when the store expires the lease on `key`.
async fn store_expiry_of(store: &Arc<dyn Store>, key: &liveness_core::Key) -> Instant {
    let info = store.inspect(key).await.unwrap().expect("a lease");
    match info.status {
        liveness_core::LeaseStatus::Live { remaining } => Instant::now() + remaining,
        other => panic!("already expired: {other:?}"),
    }
}

/// Polls `id` every millisecond until it is pending again; returns when.
async fn requeued_at(store: &Arc<dyn Store>, id: liveness_core::ItemId) -> Instant {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let state = store.item(id).await.unwrap().unwrap().state;
        if state == ItemState::Pending {
            return Instant::now();
        }
        assert!(Instant::now() < until, "never requeued");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_member_that_gave_up_releases_no_earlier_than_the_store_would_expire_it() {
    let (memory, store, knobs) = faulty_memory();
    let checker = Checker::new(
        memory.clone(),
        CheckerConfig::default().check_every(Duration::from_millis(50)),
    )
    .spawn();
    let id = enqueue_job(&memory).await;
    let member = join(&store, "w", 1000).await;
    let claimed = member.claim(1).await.unwrap().pop().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The store becomes unreachable, slowly: renewals hang, nothing answers `Lost`.
    knobs
        .stall_renew
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let expiry = store_expiry_of(&memory, member.key()).await;
    let told = when_fired(claimed.cancel.clone());
    let requeued = requeued_at(&memory, id).await;
    let told = told.await.unwrap();
    assert!(
        told < expiry,
        "the worker is told to stop before the store expiry"
    );
    assert!(
        requeued >= expiry,
        "the item was requeued {:?} before the store would have expired the lease",
        expiry - requeued
    );
    checker.stop().await;
}

#[tokio::test(start_paused = true)]
async fn one_unreadable_record_does_not_stop_the_detection_of_other_deaths() {
    let (memory, store, knobs) = faulty_memory();
    let bus = EventBus::default();
    let mut events = bus.subscribe();
    let checker = Checker::new(store.clone(), CheckerConfig::default().events(bus));
    let broken = join(&memory, "a", 1000).await;
    let dying = join(&memory, "b", 1000).await;
    let live = join(&memory, "c", 5000).await;
    let id = enqueue_job(&memory).await;
    assert_eq!(dying.claim(1).await.unwrap().len(), 1);
    let (bad, good) = (broken.token(), dying.token());
    // A's lease record is corrupt: every reap of its token fails, every round.
    *knobs.broken_token.lock().unwrap() = Some(bad);
    broken.orphan();
    dying.orphan();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for _ in 0..3 {
        let report = checker
            .round()
            .await
            .expect("the round goes on past one bad entry");
        assert!(report.next_expiry.is_some(), "next_expiry still read");
        assert!(report.skipped.iter().any(|s| s.token == Some(bad)
            && s.step == liveness_core::CheckStep::Reap
            && !s.retryable));
        assert!(!report.more, "a stuck entry does not make the checker spin");
        if let Some(death) = report.deaths.first() {
            assert_eq!(death.lease.token, good);
            assert_eq!(death.sweep.requeued, vec![id]);
        }
    }
    let mut died = Vec::new();
    let mut skipped = 0;
    while let Ok(e) = events.try_recv() {
        match e {
            Event::Died { token, .. } => died.push(token),
            Event::CheckSkipped { token, .. } if token == Some(bad) => skipped += 1,
            _ => {}
        }
    }
    assert_eq!(died, vec![good], "the other death is declared, once");
    assert_eq!(skipped, 3, "each skip is an event");
    assert_eq!(
        memory.item(id).await.unwrap().unwrap().state,
        ItemState::Pending
    );
    drop(live);
}

#[tokio::test(start_paused = true)]
async fn a_requeue_that_always_fails_for_one_dead_token_does_not_stop_the_sweep() {
    let (memory, store, knobs) = faulty_memory();
    let checker = Checker::new(store.clone(), CheckerConfig::default());
    let a = join(&memory, "a", 1000).await;
    let b = join(&memory, "b", 1000).await;
    for _ in 0..2 {
        enqueue_job(&memory).await;
    }
    let held_a = a.claim(1).await.unwrap();
    let held_b = b.claim(1).await.unwrap();
    let (bad, good) = (a.token(), b.token());
    *knobs.broken_token.lock().unwrap() = Some(bad);
    // Both crash during a graceful exit: their released tokens are in the dead set
    // with items.
    memory.release(&a.lease()).await.unwrap();
    memory.release(&b.lease()).await.unwrap();
    drop((a, b));
    let report = checker
        .round()
        .await
        .expect("the sweep goes on past one bad token");
    assert_eq!(report.swept.len(), 1);
    assert_eq!(report.swept[0].0, good);
    assert_eq!(report.swept[0].1.requeued, vec![held_b[0].item.id]);
    assert!(report
        .skipped
        .iter()
        .any(|s| s.token == Some(bad) && s.step == liveness_core::CheckStep::Sweep));
    drop(held_a);
}

#[tokio::test(start_paused = true)]
async fn join_recognises_its_own_ghost_lease_after_a_lost_reply() {
    let (memory, store, knobs) = faulty_memory();
    // The first acquire is applied by the store, but its reply is lost.
    knobs.lose_next_acquire_reply();
    let member = Member::join(store.clone(), MemberConfig::new("w", ttl(1000)).unwrap())
        .await
        .expect("a join whose first reply was lost is not Held by its own ghost");
    let info = memory.inspect(member.key()).await.unwrap().unwrap();
    assert_eq!(info.token, member.token(), "the ghost was replaced");
    // Somebody else's live lease is still Held.
    let other = Member::join(store.clone(), MemberConfig::new("w", ttl(1000)).unwrap()).await;
    assert!(matches!(other, Err(liveness_core::Error::Held { .. })));
}

#[tokio::test(start_paused = true)]
async fn campaign_recognises_its_own_ghost_lease_instead_of_waiting_out_a_ttl() {
    let (_, store, knobs) = faulty_memory();
    knobs.lose_next_acquire_reply();
    let election = Election::new(
        store.clone(),
        ElectionConfig::new("dispatch", "a", ttl(1000)).unwrap(),
    );
    let start = Instant::now();
    let leader = election.campaign().await.unwrap();
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "the campaign waited {:?} for its own ghost to expire, with no leader meanwhile",
        start.elapsed()
    );
    assert!(!leader.is_lost());
    assert_eq!(
        election.leader().await.unwrap().unwrap().token,
        leader.token()
    );
}

#[tokio::test(start_paused = true)]
async fn a_rejoin_whose_leftover_release_fails_backs_off() {
    use std::sync::atomic::Ordering;
    let (_, store, knobs) = faulty_memory();
    let member = join(&store, "w", 1000).await;
    let first = member.generation();
    // The store answers the next renewal `Lost`, while the old lease is in fact still
    // there, and releases fail: the re-join finds its own leftover lease (Held) and
    // cannot release it until the store expires it, about one ttl later.
    knobs.fail_release.store(true, Ordering::SeqCst);
    knobs.lose_renew.store(true, Ordering::SeqCst);
    timeout(Duration::from_secs(5), first.cancel.cancelled())
        .await
        .unwrap();
    let before = knobs.acquires.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(900)).await;
    let attempts = knobs.acquires.load(Ordering::SeqCst) - before;
    assert!(
        attempts <= 20,
        "{attempts} acquire attempts in 900 ms: the re-join does not back off"
    );
    knobs.fail_release.store(false, Ordering::SeqCst);
    knobs.lose_renew.store(false, Ordering::SeqCst);
    let mut gens = member.generations();
    timeout(
        Duration::from_secs(5),
        gens.wait_for(|g| g.lease.token != first.lease.token),
    )
    .await
    .expect("re-joined once the store answers again")
    .unwrap();
}
