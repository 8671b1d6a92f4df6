//! State-machine scenarios on the store under test: checker, member, election.

use std::sync::Arc;
use std::time::Duration;

use liveness_core::{
    Batcher, Checker, CheckerConfig, Election, ElectionConfig, EnqueueOptions, Event, ItemState,
    LeaseStatus, Member, MemberConfig, Store, Ttl,
};
use tokio::time::{timeout, Instant};

use super::common::holder;
use crate::wrappers::Wrapped;
use crate::{member_key, Ctx};

fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", fastrand::u32(..))
}

/// Two checkers running rounds at the same time declare each death exactly once,
/// and every item of the dead members goes back to pending.
pub async fn checker_declares_each_death_once(ctx: Ctx) {
    let s = &ctx.store;
    let mut leases = Vec::new();
    for i in 0..3 {
        let lease = ctx
            .grant(&member_key(&format!("c{i}")), &holder("w"), ctx.ttl)
            .await;
        s.enqueue(format!("item{i}").as_bytes(), EnqueueOptions::default())
            .await
            .unwrap();
        assert_eq!(s.claim(&lease, 1).await.unwrap().len(), 1);
        leases.push(lease);
    }
    for lease in &leases {
        ctx.wait_listed_expired(&lease.key).await;
    }
    let a = Checker::new(s.clone(), CheckerConfig::default());
    let b = Checker::new(s.clone(), CheckerConfig::default());
    let (ra, rb) = tokio::join!(a.round(), b.round());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    let mut dead: Vec<_> = ra
        .deaths
        .iter()
        .chain(&rb.deaths)
        .map(|d| d.lease.token)
        .collect();
    dead.sort();
    let mut want: Vec<_> = leases.iter().map(|l| l.token).collect();
    want.sort();
    assert_eq!(
        dead, want,
        "each death declared exactly once across both checkers"
    );
    // Another round finds nothing new.
    let again = a.round().await.unwrap();
    assert!(again.deaths.is_empty());
    assert_eq!(s.item_counts().await.unwrap().pending, 3);
    assert_eq!(s.item_counts().await.unwrap().owned, 0);
}

/// A checker that reaped a lease and stopped before requeueing loses nothing: the
/// next round's sweep of the dead set requeues the items.
pub async fn checker_crash_between_reap_and_requeue_loses_nothing(ctx: Ctx) {
    let s = &ctx.store;
    let lease = ctx.grant(&member_key("crash"), &holder("w"), ctx.ttl).await;
    let a = s.enqueue(b"a", EnqueueOptions::default()).await.unwrap();
    let b = s.enqueue(b"b", EnqueueOptions::default()).await.unwrap();
    s.claim(&lease, 2).await.unwrap();
    ctx.wait_listed_expired(&lease.key).await;
    // The "crashed" checker: reaped, never requeued.
    assert!(s.reap(&lease.key, lease.token).await.unwrap());
    assert_eq!(
        s.item(a).await.unwrap().unwrap().state,
        ItemState::Owned(lease.token)
    );
    let checker = Checker::new(s.clone(), CheckerConfig::default());
    let mut events = checker.events().subscribe();
    let report = checker.round().await.unwrap();
    assert!(report.deaths.is_empty(), "the death was already declared");
    let swept = report
        .swept
        .iter()
        .find(|(t, _)| *t == lease.token)
        .expect("the sweep handles the dead token");
    assert_eq!(swept.1.requeued, vec![a, b]);
    for id in [a, b] {
        assert_eq!(s.item(id).await.unwrap().unwrap().state, ItemState::Pending);
    }
    assert!(matches!(
        events.try_recv(),
        Ok(Event::Swept { requeued: 2, .. })
    ));
}

/// When a member can no longer renew, its cancellation signal fires BEFORE the store
/// expires its lease (the local safety deadline), so its work stops before anybody
/// else can be handed that work.
pub async fn member_cancel_fires_before_store_expiry(ctx: Ctx) {
    let ttl = ctx.machine_ttl();
    let config = MemberConfig::new(&unique("m"), ttl).unwrap().rejoin(false);
    let (wrapped, member) = join_wrapped(&ctx, config).await;
    let key = member.key().clone();
    let cancel = member.cancelled();
    wrapped.stall_renewals(true);
    timeout(ttl.duration() * 2, cancel.cancelled())
        .await
        .expect("cancellation fires within one ttl of the last renewal");
    let info = ctx.info(&key).await;
    assert!(
        info.is_live(),
        "the store expired the lease before the member's cancellation fired"
    );
    assert_eq!(info.token, member.token());
    drop(member);
    wrapped.stall_renewals(false);
}

/// A member that lost its lease re-joins by itself with a new, greater token, and
/// says so in events (Lost, then Joined).
pub async fn member_rejoins_with_new_token(ctx: Ctx) {
    let ttl = ctx.machine_ttl();
    let deadline = ttl.duration() * 4 + Duration::from_secs(2);
    let (wrapped, member) = join_wrapped(&ctx, MemberConfig::new(&unique("r"), ttl).unwrap()).await;
    let mut events = member.events().subscribe();
    let first = member.generation();
    let mut gens = member.generations();
    wrapped.stall_renewals(true);
    timeout(ttl.duration() * 2, first.cancel.cancelled())
        .await
        .expect("first generation cancelled");
    wrapped.stall_renewals(false);
    timeout(
        deadline,
        gens.wait_for(|g| g.lease.token != first.lease.token),
    )
    .await
    .expect("re-joined in time")
    .unwrap();
    let second = member.generation();
    assert!(second.lease.token > first.lease.token);
    assert!(!second.cancel.is_cancelled());
    assert!(first.cancel.is_cancelled());
    let mut saw_lost = false;
    let mut saw_joined = false;
    while let Ok(e) = events.try_recv() {
        match e {
            Event::Lost { token, .. } if token == first.lease.token => saw_lost = true,
            Event::Joined { token, .. } if token == second.lease.token => saw_joined = true,
            _ => {}
        }
    }
    assert!(saw_lost && saw_joined, "Lost and Joined events");
    member.leave(Duration::ZERO).await.unwrap();
}

/// leave waits for owned items, hands back the rest, and releases the lease.
pub async fn member_leave_hands_back_items(ctx: Ctx) {
    let s = &ctx.store;
    let member = Member::join(
        s.clone(),
        MemberConfig::new(&unique("leave"), ctx.long).unwrap(),
    )
    .await
    .unwrap();
    let a = s.enqueue(b"a", EnqueueOptions::default()).await.unwrap();
    let b = s.enqueue(b"b", EnqueueOptions::default()).await.unwrap();
    let claimed = member.claim(2).await.unwrap();
    assert_eq!(claimed.len(), 2);
    member.complete(&claimed[0]).await.unwrap();
    assert_eq!(member.owned(), 1);
    // The worker lets go of its other item (as a worker does when it stops), so `leave`
    // hands it back at once instead of waiting out the stop margin for it.
    drop(claimed);
    let key = member.key().clone();
    let mut events = member.events().subscribe();
    member.leave(Duration::from_millis(50)).await.unwrap();
    assert_eq!(s.item(a).await.unwrap(), None);
    assert_eq!(s.item(b).await.unwrap().unwrap().state, ItemState::Pending);
    assert!(s.inspect(&key).await.unwrap().is_none(), "lease released");
    assert!(matches!(events.try_recv(), Ok(Event::Left { .. })));
}

/// A claim whose reply is lost after the store applied it strands nothing under the
/// live member: one worker, 10 items, claims of 4, the first
/// claim's reply lost. The member's next claim recovers the items the lost one took,
/// and all 10 complete; nothing stays owned.
pub async fn member_recovers_lost_claim_reply(ctx: Ctx) {
    let s = &ctx.store;
    let config = MemberConfig::new(&unique("lostreply"), ctx.long).unwrap();
    let (wrapped, member) = join_wrapped(&ctx, config).await;
    let mut ids = Vec::new();
    for i in 0..10 {
        let payload = format!("job{i}");
        ids.push(
            s.enqueue(payload.as_bytes(), EnqueueOptions::default())
                .await
                .unwrap(),
        );
    }
    wrapped.lose_claim_replies(1);
    let mut completed = Vec::new();
    let mut lost_replies = 0;
    // Bounded: every round but the lost one completes at least one item, and the
    // loop ends at the first empty answer (nothing left pending).
    for _ in 0..20 {
        match member.claim(4).await {
            Ok(claimed) if claimed.is_empty() => break,
            Ok(claimed) => {
                for c in claimed {
                    member.complete(&c).await.unwrap();
                    completed.push(c.item.id);
                }
            }
            Err(e) if e.is_retryable() => lost_replies += 1,
            Err(e) => panic!("claim failed: {e}"),
        }
    }
    assert_eq!(lost_replies, 1, "the first claim's reply was lost");
    completed.sort();
    let counts = s.item_counts().await.unwrap();
    assert_eq!(
        counts.owned, 0,
        "items stranded under the live member after a lost claim reply: {counts:?}"
    );
    assert_eq!(completed, ids, "every item completed exactly once");
    member.leave(Duration::ZERO).await.unwrap();
}

/// A complete whose reply is lost after the store applied it: the worker retries,
/// the store answers the repeat with Fenced (the item is gone), and the member tells
/// its own completion from a loss: the retry answers Ok, and the item stays completed.
pub async fn member_complete_retried_after_lost_reply(ctx: Ctx) {
    let s = &ctx.store;
    let config = MemberConfig::new(&unique("lostdone"), ctx.long).unwrap();
    let (wrapped, member) = join_wrapped(&ctx, config).await;
    let id = s.enqueue(b"job", EnqueueOptions::default()).await.unwrap();
    let claimed = member.claim(1).await.unwrap();
    assert_eq!(claimed.len(), 1);
    wrapped.lose_complete_replies(1);
    let first = member.complete(&claimed[0]).await;
    assert!(
        matches!(&first, Err(e) if e.is_retryable()),
        "the reply was lost: {first:?}"
    );
    assert_eq!(s.item(id).await.unwrap(), None, "the store applied it");
    member
        .complete(&claimed[0])
        .await
        .expect("a retried complete that the store applied before answers Ok");
    assert_eq!(member.owned(), 0);
    drop(claimed);
    member.leave(Duration::ZERO).await.unwrap();
}

/// Three candidates campaign at once: exactly one leads; after it resigns, another
/// leads with a greater token.
///
/// A second leader while the first one's own deadline has not passed is two leaders
/// at once, and fails at once. A round in which the first leader's deadline passed
/// (its renewals came late on a loaded machine, so another may rightly take over)
/// says nothing about that: it is void and runs again, at most three rounds.
pub async fn election_one_leader_among_three(ctx: Ctx) {
    let ttl = ctx.machine_ttl();
    let deadline = ttl.duration() * 4 + Duration::from_secs(2);
    let mut void = 0;
    let (role, first, mut tasks) = loop {
        let role = unique("role");
        let mut tasks = Vec::new();
        for i in 0..3 {
            let config = ElectionConfig::new(&role, &format!("cand{i}"), ttl).unwrap();
            let election = Election::new(ctx.store.clone(), config);
            tasks.push(tokio::spawn(async move { election.campaign().await }));
        }
        let until = Instant::now() + deadline;
        let first = loop {
            if let Some(i) = tasks.iter().position(|t| t.is_finished()) {
                break tasks.remove(i).await.unwrap().unwrap();
            }
            assert!(Instant::now() < until, "nobody won the election");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        // Over two ttls (several renewals) nobody else becomes leader.
        tokio::time::sleep(ttl.duration() * 2).await;
        let second = tasks.iter().any(|t| t.is_finished());
        // Read after `second`: a second leader means the first one's lease expired
        // in the store, and its own deadline passed before that.
        if !first.is_lost() {
            assert!(!second, "two leaders at once");
            break (role, first, tasks);
        }
        void += 1;
        eprintln!(
            "election_one_leader_among_three: round {void} void, the first leader's \
             deadline passed within two ttls (late renewals); a second leader: {second}"
        );
        assert!(
            void < 3,
            "the first leader kept its lease for two ttls in none of three rounds"
        );
        for t in tasks {
            t.abort();
        }
        drop(first);
    };
    let leader = Election::new(
        ctx.store.clone(),
        ElectionConfig::new(&role, "observer", ttl).unwrap(),
    )
    .leader()
    .await
    .unwrap()
    .expect("a live leader");
    assert_eq!(leader.token, first.token());
    let old = first.token();
    first.resign().await.unwrap();
    let until = Instant::now() + deadline;
    let second = loop {
        if let Some(i) = tasks.iter().position(|t| t.is_finished()) {
            break tasks.remove(i).await.unwrap().unwrap();
        }
        assert!(
            Instant::now() < until,
            "nobody took over after the resignation"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(second.token() > old);
    for t in tasks {
        t.abort();
    }
    second.resign().await.unwrap();
}

/// A leader that stops renewing (partitioned) sees its cancellation fire; another
/// candidate leads after the lease expires, with a greater token, and never while the
/// old leader's signal had not yet fired.
pub async fn election_failover_after_leader_stops(ctx: Ctx) {
    let ttl = ctx.machine_ttl();
    let deadline = ttl.duration() * 4 + Duration::from_secs(2);
    let role = unique("fail");
    let wrapped = Arc::new(Wrapped::new(ctx.store.clone()));
    let partitioned: Arc<dyn Store> = wrapped.clone();
    let leader = Election::new(
        partitioned,
        ElectionConfig::new(&role, "leader", ttl).unwrap(),
    )
    .campaign()
    .await
    .unwrap();
    let standby = Election::new(
        ctx.store.clone(),
        ElectionConfig::new(&role, "standby", ttl).unwrap(),
    );
    let cancel = leader.cancelled();
    let fired_at = tokio::spawn(async move {
        cancel.cancelled().await;
        Instant::now()
    });
    wrapped.stall_renewals(true);
    let next = timeout(deadline, standby.campaign())
        .await
        .expect("failover within the deadline")
        .unwrap();
    let took_over = Instant::now();
    let fired = timeout(Duration::from_secs(1), fired_at)
        .await
        .expect("old leader's cancellation fired")
        .unwrap();
    assert!(
        fired <= took_over,
        "new leader acquired before the old one stopped"
    );
    assert!(next.token() > leader.token());
    assert!(leader.is_lost());
    wrapped.stall_renewals(false);
    drop(leader);
    next.resign().await.unwrap();
}

/// A member joined through a [`Wrapped`] view of the store under test, and the view
/// (to stall its renewals or lose its replies).
async fn join_wrapped(
    ctx: &Ctx,
    config: MemberConfig,
) -> (Arc<liveness_core::layer::Intercepted<Wrapped>>, Member) {
    let wrapped = Arc::new(Wrapped::new(ctx.store.clone()));
    let store: Arc<dyn Store> = wrapped.clone();
    let member = Member::join(store, config).await.unwrap();
    (wrapped, member)
}

/// Members whose joins and heartbeats go through one shared [`Batcher`] (so through
/// `acquire_many` and `renew_many`): three join at once, each lease in the store is
/// the one its join answered; the scenario then waits past the expiry those first
/// leases had, plus half a ttl, and each lease is still live in the store under the
/// token it joined with, and no member was told to stop. A `renew_many` that answers
/// `Ok` without extending the leases fails here.
pub async fn members_renewed_through_a_batcher_stay_live(ctx: Ctx) {
    // Three machine ttls: a batch's window and a loaded machine (several processes on
    // one SQLite file, two cores) once delayed a renewal past a single one. The wait
    // below still passes the expiry the first leases had.
    let ttl = Ttl::new(ctx.machine_ttl().duration() * 3)
        .unwrap_or_else(|e| panic!("three machine ttls: {e}"));
    let batcher = Batcher::new(ctx.store.clone(), liveness_core::batch::DEFAULT_WINDOW);
    let joins = (0..3).map(|i| {
        let name = format!("bm{i}-{:08x}", fastrand::u32(..));
        let config = MemberConfig::new(&name, ttl)
            .unwrap_or_else(|e| panic!("member config: {e}"))
            .batcher(batcher.clone());
        Member::join(ctx.store.clone(), config)
    });
    let members: Vec<Member> = futures::future::join_all(joins)
        .await
        .into_iter()
        .map(|m| m.unwrap_or_else(|e| panic!("join through the batcher: {e}")))
        .collect();
    let mut old_expiry = Instant::now();
    let mut joined = Vec::with_capacity(members.len());
    for m in &members {
        let first = m.generation();
        let info = ctx.info(m.key()).await;
        assert_eq!(
            (info.token, &info.holder),
            (first.lease.token, &first.lease.holder),
            "{}: the lease in the store is not the one the join (acquire_many) answered",
            m.key()
        );
        let LeaseStatus::Live { remaining } = info.status else {
            panic!("{}: joined, but the lease is expired in the store", m.key());
        };
        old_expiry = old_expiry.max(Instant::now() + remaining);
        joined.push(first);
    }
    tokio::time::sleep_until(old_expiry + ttl.duration() / 2).await;
    for (m, first) in members.iter().zip(&joined) {
        let info = ctx.info(m.key()).await;
        assert!(
            info.is_live(),
            "{}: expired at the expiry it had when it joined, though its heartbeat renewed it through the batcher (a renew_many that answers Ok without extending does this): {info:?}",
            m.key()
        );
        assert_eq!(
            info.token,
            first.lease.token,
            "{}: the lease it joined with is gone and the key was taken again: its renewals through the batcher did not keep it live (a renew_many that answers Ok without extending does this)",
            m.key()
        );
        assert!(
            !first.cancel.is_cancelled() && m.token() == first.lease.token,
            "{}: the member lost the lease it joined with: its renewals through the batcher did not keep it live (a renew_many that answers Ok without extending does this)",
            m.key()
        );
    }
    for m in members {
        m.leave(Duration::ZERO)
            .await
            .unwrap_or_else(|e| panic!("leave: {e}"));
    }
}
