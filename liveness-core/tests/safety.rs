//! Safety under misconfiguration and bad timing, on the memory model under tokio's
//! paused time: two instances configured with one id never act under one lease,
//! durations out of range are refused (never a panic, never a silent stop), and no
//! work is handed out or finished past the local deadline.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use liveness_core::layer::Intercepted;
use liveness_core::{
    async_trait, Checker, CheckerConfig, Election, ElectionConfig, EnqueueOptions, Error,
    HeartbeatConfig, HolderId, Intercept, ItemState, Member, MemberConfig, MemoryServer, Namespace,
    Next, Op, Reply, Request, Result, Store, Ttl, MAX_NAME_LEN,
};
use tokio::time::{timeout, Instant};

mod common;
use common::SuspendableHost;

fn ttl(ms: u64) -> Ttl {
    Ttl::from_millis(ms).unwrap()
}

/// An election of `role` on `store`, its candidates configured with the id `id`, with
/// a ttl of one second.
fn election(store: &Arc<dyn Store>, role: &str, id: &str) -> Election {
    Election::new(
        store.clone(),
        ElectionConfig::new(role, id, ttl(1000)).unwrap(),
    )
}

/// Joins `store` as member `w` with a ttl of one second.
async fn join_w(store: &Arc<dyn Store>) -> Member {
    Member::join(store.clone(), MemberConfig::new("w", ttl(1000)).unwrap())
        .await
        .unwrap()
}

/// A fresh memory store, and the same store behind [`Knobs`] that inject faults.
fn faulty() -> (Arc<dyn Store>, Arc<dyn Store>, Arc<Knobs>) {
    let memory: Arc<dyn Store> =
        Arc::new(MemoryServer::new().store(&Namespace::new("test").unwrap()));
    let knobs = Arc::new(Knobs::default());
    let store: Arc<dyn Store> = Arc::new(Intercepted::new(memory.clone(), knobs.clone()));
    (memory, store, knobs)
}

/// Faults on demand, in front of a store.
#[derive(Debug, Default)]
struct Knobs {
    /// How many acquires to fail with `Unavailable` before they reach the store.
    fail_acquires: AtomicUsize,
    /// Renewals hang (the store is unreachable, slowly).
    stall_renew: AtomicBool,
    /// Renewals panic (a bug in a layer or a client library).
    panic_renew: AtomicBool,
    /// Listing expired leases panics.
    panic_expired: AtomicBool,
    /// Claims are applied, and their reply comes this much later.
    claim_delay: Mutex<Option<Duration>>,
    /// Counts the completes and fails that reached this layer.
    finishes: AtomicUsize,
}

#[async_trait]
impl Intercept for Knobs {
    async fn call(&self, req: Request, next: Next) -> Result<Reply> {
        match req.op() {
            Op::AcquireMany => {
                let fail = self
                    .fail_acquires
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
                if fail {
                    return Err(Error::unavailable("faulty", "injected fault"));
                }
            }
            Op::RenewMany => {
                if self.panic_renew.load(Ordering::SeqCst) {
                    panic!("injected panic in a renewal");
                }
                if self.stall_renew.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
            }
            Op::Expired if self.panic_expired.load(Ordering::SeqCst) => {
                panic!("injected panic in a checker round");
            }
            Op::Claim => {
                let delay = *self.claim_delay.lock().unwrap();
                let reply = next.run(req).await;
                if let Some(delay) = delay {
                    tokio::time::sleep(delay).await;
                }
                return reply;
            }
            Op::Finish => {
                self.finishes.fetch_add(1, Ordering::SeqCst);
            }
            _ => {}
        }
        next.run(req).await
    }
}

// ---------------------------------------------------------------------------------
// Never two holders under one identity.

#[tokio::test(start_paused = true)]
async fn two_candidates_configured_with_one_id_never_both_lead() {
    let (_, store, knobs) = faulty();
    let a = election(&store, "dispatcher", "node-a");
    let b = election(&store, "dispatcher", "node-a");
    let first = a.campaign().await.unwrap();
    knobs.fail_acquires.store(1, Ordering::SeqCst);
    let second = timeout(Duration::from_millis(600), b.campaign()).await;
    if let Ok(Ok(other)) = &second {
        assert!(
            first.check().is_err(),
            "two leaders at once: {:?} (token {}) and {:?} (token {}) both pass check()",
            first.lease().holder,
            first.token(),
            other.lease().holder,
            other.token()
        );
    }
    assert!(first.check().is_ok(), "the first leader keeps the role");
    assert_eq!(a.leader().await.unwrap().unwrap().token, first.token());
}

#[tokio::test(start_paused = true)]
async fn two_campaigns_of_one_cloned_election_never_both_lead() {
    let (_, store, knobs) = faulty();
    let election = election(&store, "dispatcher", "node-a");
    let first = election.campaign().await.unwrap();
    knobs.fail_acquires.store(1, Ordering::SeqCst);
    let second = timeout(Duration::from_millis(600), election.clone().campaign()).await;
    if let Ok(Ok(other)) = &second {
        assert!(
            first.check().is_err(),
            "two leaders at once: tokens {} and {} both pass check()",
            first.token(),
            other.token()
        );
    }
    assert!(first.check().is_ok(), "the first leader keeps the role");
    assert_eq!(
        election.leader().await.unwrap().unwrap().token,
        first.token()
    );
}

#[tokio::test(start_paused = true)]
async fn a_candidate_with_the_readme_s_fixed_id_still_takes_over_its_own_ghost() {
    // The reply of the first acquire is lost after the store applied it: that lease
    // is this campaign's own, and it is released at once (no ttl waited out).
    #[derive(Debug, Default)]
    struct LoseReply(AtomicBool);
    #[async_trait]
    impl Intercept for LoseReply {
        async fn call(&self, req: Request, next: Next) -> Result<Reply> {
            let op = req.op();
            let reply = next.run(req).await?;
            if op == Op::AcquireMany && self.0.swap(false, Ordering::SeqCst) {
                return Err(Error::unavailable("faulty", "reply lost"));
            }
            Ok(reply)
        }
    }
    let memory: Arc<dyn Store> =
        Arc::new(MemoryServer::new().store(&Namespace::new("test").unwrap()));
    let hook = Arc::new(LoseReply(AtomicBool::new(true)));
    let store: Arc<dyn Store> = Arc::new(Intercepted::new(memory.clone(), hook));
    let election = election(&store, "dispatcher", "node-a");
    let start = Instant::now();
    let leader = election.campaign().await.unwrap();
    assert!(start.elapsed() < Duration::from_millis(500));
    let info = memory.inspect(election.key()).await.unwrap().unwrap();
    assert_eq!(info.token, leader.token());
    assert!(
        info.holder.as_str().starts_with("node-a#"),
        "the configured id stays visible: {}",
        info.holder
    );
}

#[tokio::test(start_paused = true)]
async fn two_members_configured_with_one_holder_id_never_share_a_lease() {
    let (_, store, knobs) = faulty();
    let holder = HolderId::new("host-1").unwrap();
    let config = || {
        MemberConfig::new("w", ttl(1000))
            .unwrap()
            .holder(holder.clone())
    };
    let a = Member::join(store.clone(), config()).await.unwrap();
    knobs.fail_acquires.store(1, Ordering::SeqCst);
    let b = Member::join(store.clone(), config()).await;
    match &b {
        Err(Error::Held { token, .. }) => assert_eq!(*token, a.token()),
        Ok(b) => panic!(
            "the second instance adopted the first one's live lease: both act under token {} (b: {})",
            a.token(),
            b.token()
        ),
        Err(e) => panic!("unexpected: {e}"),
    }
    assert!(a.check().is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_long_configured_holder_id_still_fits() {
    let (memory, store, _) = faulty();
    let long = "h".repeat(MAX_NAME_LEN);
    let config = ElectionConfig::new("r", &long, ttl(1000)).unwrap();
    let leader = Election::new(store.clone(), config)
        .campaign()
        .await
        .unwrap();
    let holder = &leader.lease().holder;
    assert!(holder.as_str().len() <= MAX_NAME_LEN);
    assert!(holder.as_str().contains('#'));
    let member = Member::join(
        store.clone(),
        MemberConfig::new("w", ttl(1000))
            .unwrap()
            .holder(HolderId::new(long.clone()).unwrap()),
    )
    .await
    .unwrap();
    let info = memory.inspect(member.key()).await.unwrap().unwrap();
    assert!(info.holder.as_str().len() <= MAX_NAME_LEN);
}

// ---------------------------------------------------------------------------------
// Durations: refused, never a panic, never a silent stop.

#[tokio::test(start_paused = true)]
async fn leave_with_duration_max_waits_for_the_workers_and_releases() {
    let (memory, store, _) = faulty();
    memory
        .enqueue(b"job", EnqueueOptions::default())
        .await
        .unwrap();
    let member = join_w(&store).await;
    let key = member.key().clone();
    let claimed = member.claim(1).await.unwrap().pop().unwrap();
    let worker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(claimed);
    });
    let leaving = tokio::spawn(member.leave(Duration::MAX));
    timeout(Duration::from_secs(10), leaving)
        .await
        .expect("leave ends once the workers let go")
        .expect("leave(Duration::MAX) does not panic")
        .unwrap();
    worker.await.unwrap();
    assert!(memory.inspect(&key).await.unwrap().is_none(), "released");
}

/// Whether `r` is the `InvalidInput` naming `what`.
fn rejects<T>(r: &Result<T>, what: &str) -> bool {
    matches!(r, Err(Error::InvalidInput { what: w, .. }) if *w == what)
}

#[tokio::test(start_paused = true)]
async fn durations_out_of_range_are_refused_naming_the_field() {
    let checker = |check_every| CheckerConfig::default().check_every(check_every);
    assert!(rejects(&checker(Duration::MAX).validate(), "check_every"));
    assert!(rejects(
        &checker(Duration::from_secs(365 * 24 * 3600)).validate(),
        "check_every"
    ));
    assert!(checker(Duration::from_secs(3600)).validate().is_ok());
    let hb = HeartbeatConfig::new(ttl(1000));
    for (config, what) in [
        (hb.renew_every(Duration::MAX), "renew_every"),
        (hb.safety_margin(Duration::MAX), "safety_margin"),
    ] {
        assert!(rejects(&config.validate(), what), "{what}");
    }
    // An elected checker's heartbeat is checked with the checker's configuration.
    let mut elected = ElectionConfig::new("checker", "c", ttl(1000)).unwrap();
    elected.heartbeat.renew_every = Duration::MAX;
    let config = CheckerConfig::default().elected(elected);
    assert!(rejects(&config.validate(), "renew_every"));
}

#[tokio::test(start_paused = true)]
async fn a_checker_whose_task_panics_says_it_stopped() {
    let (_, store, knobs) = faulty();
    knobs.panic_expired.store(true, Ordering::SeqCst);
    let checker = Checker::new(store.clone(), CheckerConfig::default());
    let mut status = checker.status();
    let _handle = checker.spawn();
    let seen = timeout(
        Duration::from_secs(5),
        status.wait_for(|s| s.stopped.is_some()),
    )
    .await
    .expect("the status says the checker stopped")
    .unwrap()
    .clone();
    assert!(seen.running.is_none(), "no round runs any more: {seen:?}");
    let why = seen.stopped.unwrap();
    assert!(why.contains("panicked"), "{why}");
}

#[tokio::test(start_paused = true)]
async fn a_checker_stopped_on_request_says_so() {
    let (_, store, _) = faulty();
    let checker = Checker::new(store.clone(), CheckerConfig::default());
    let status = checker.status();
    let handle = checker.spawn();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(status.borrow().stopped.is_none());
    handle.stop().await;
    let why = status.borrow().stopped.clone().expect("stopped");
    assert!(why.contains("request"), "{why}");
}

#[tokio::test(start_paused = true)]
async fn a_member_whose_heartbeat_task_panics_fires_its_cancellation_at_once() {
    let (_, store, knobs) = faulty();
    // Its own round trips: through the shared batcher, the panic would end the
    // batch's task, not the heartbeat's.
    let config = MemberConfig::new("w", ttl(1000)).unwrap().unbatched();
    let member = Member::join(store.clone(), config).await.unwrap();
    let cancel = member.cancelled();
    knobs.panic_renew.store(true, Ordering::SeqCst);
    // The first renewal comes within ttl/3 (333 ms) and panics; the local deadline is
    // 800 ms away. The work must hear of it then, not only when it next checks.
    timeout(Duration::from_millis(500), cancel.cancelled())
        .await
        .expect("a heartbeat task that died fires the cancellation");
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_heartbeat_task_panics_fires_its_cancellation_at_once() {
    let (_, store, knobs) = faulty();
    let leader = election(&store, "r", "a").campaign().await.unwrap();
    knobs.panic_renew.store(true, Ordering::SeqCst);
    timeout(Duration::from_millis(500), leader.cancelled().cancelled())
        .await
        .expect("a hold task that died fires the cancellation");
    assert!(leader.check().is_err());
}

// ---------------------------------------------------------------------------------
// No work handed out, or finished, past the deadline.

#[tokio::test(start_paused = true)]
async fn a_claim_answered_after_the_deadline_hands_out_nothing() {
    let (memory, store, knobs) = faulty();
    let id = memory
        .enqueue(b"job", EnqueueOptions::default())
        .await
        .unwrap();
    let member = join_w(&store).await;
    let token = member.token();
    // The store is applied the claim, then the process (or the network) stalls: the
    // reply comes after the local deadline, renewals do not get through meanwhile.
    knobs.stall_renew.store(true, Ordering::SeqCst);
    *knobs.claim_delay.lock().unwrap() = Some(Duration::from_millis(1500));
    let r = member.claim(1).await;
    match &r {
        Ok(items) => assert!(
            items.is_empty(),
            "a claim answered after the deadline handed out {} item(s) under token {token}",
            items.len()
        ),
        Err(e) => assert!(matches!(e, Error::Lost { .. }), "{e}"),
    }
    assert!(matches!(r, Err(Error::Lost { .. })), "answered Lost: {r:?}");
    // The item stays owned by the old token: a checker requeues it with that token.
    let rec = memory.item(id).await.unwrap().unwrap();
    assert!(
        matches!(rec.state, ItemState::Owned(t) if t == token),
        "{:?}",
        rec.state
    );
}

#[tokio::test(start_paused = true)]
async fn complete_and_fail_past_the_deadline_are_fenced_without_a_round_trip() {
    let (memory, store, knobs) = faulty();
    for _ in 0..2 {
        memory
            .enqueue(b"job", EnqueueOptions::default())
            .await
            .unwrap();
    }
    let (clock, suspended) = SuspendableHost::shared();
    let member = Member::join(
        store.clone(),
        MemberConfig::new("w", ttl(1000)).unwrap().clock(clock),
    )
    .await
    .unwrap();
    let mut claimed = member.claim(2).await.unwrap();
    assert_eq!(claimed.len(), 2);
    // The process is frozen past its deadline (the boot clock jumps); the store's
    // clock does not move, so its lease is still live there. The work ends the
    // instant the process resumes, before any task ran.
    suspended.advance(Duration::from_millis(1000));
    let (a, b) = (claimed.pop().unwrap(), claimed.pop().unwrap());
    let done = member.complete(&a).await;
    assert!(
        matches!(done, Err(Error::Fenced { .. })),
        "a completion past the deadline: {done:?}"
    );
    let failed = member.fail(&b, true).await;
    assert!(
        matches!(failed, Err(Error::Fenced { .. })),
        "a fail past the deadline: {failed:?}"
    );
    assert_eq!(
        knobs.finishes.load(Ordering::SeqCst),
        0,
        "answered from the local deadline, without a round trip"
    );
    for c in [&a, &b] {
        let rec = memory.item(c.item.id).await.unwrap().unwrap();
        assert!(matches!(rec.state, ItemState::Owned(_)), "{:?}", rec.state);
    }
}
