//! Dropping a handle is a release: a member (of its own lease or riding a session), a
//! session or a leadership dropped without its graceful exit (an early `?` return, a
//! panicking task) tells its work to stop at once, waits the stop margin, hands its
//! items back and releases its lease, with no checker running and no help from the
//! caller. [`Member::orphan`] and its siblings are the way to stop without a release.

use std::time::Duration;

use liveness_core::{
    Election, ElectionConfig, EnqueueOptions, Error, ItemId, ItemState, Key, Member, Session,
    SessionConfig, Store, Ttl,
};
use tokio::time::Instant;

use crate::Ctx;

fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", fastrand::u32(..))
}

/// How long a dropped handle may take to hand its work back: its stop margin (ttl / 5
/// by default) plus one second.
fn release_deadline(ttl: Ttl) -> Duration {
    ttl.duration() / 5 + Duration::from_secs(1)
}

/// Waits until `item` is pending and nothing holds `key`, failing after `within`.
async fn wait_handed_back(
    s: &std::sync::Arc<dyn Store>,
    item: ItemId,
    key: &Key,
    within: Duration,
) {
    let until = Instant::now() + within;
    loop {
        let state = s.item(item).await.unwrap().map(|r| r.state);
        let lease = s.inspect(key).await.unwrap();
        if state == Some(ItemState::Pending) && lease.is_none() {
            return;
        }
        assert!(
            Instant::now() < until,
            "{within:?} after the drop, the item is {state:?} and {key} is {lease:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The claimed work of a dropped `member`: told to stop at once, handed back (pending,
/// name free) within the margin plus one second, and a late `complete` of it fenced.
async fn drop_and_watch(ctx: &Ctx, member: Member, ttl: Ttl) {
    let s = &ctx.store;
    let item = s.enqueue(b"job", EnqueueOptions::default()).await.unwrap();
    let claimed = member
        .claim(1)
        .await
        .unwrap()
        .pop()
        .expect("one item claimed");
    let key = member.key().clone();
    let worker = member.clone();
    drop(member);
    drop(worker);
    assert!(
        claimed.cancel.is_cancelled() && claimed.check().is_err(),
        "the work of a dropped member must be told to stop at once"
    );
    // Still owned during the stop margin: the work has that long to stop.
    assert_eq!(
        s.item(item).await.unwrap().unwrap().state,
        ItemState::Owned(claimed.lease.token)
    );
    wait_handed_back(s, item, &key, release_deadline(ttl)).await;
    assert!(matches!(
        s.complete(&claimed.lease, item).await,
        Err(Error::Fenced { .. })
    ));
}

/// A member riding a session, dropped without leaving, hands its claimed item back and
/// frees its name while its session lives on; the name can be joined again from the
/// same session.
pub async fn a_dropped_rider_hands_back_its_work(ctx: Ctx) {
    let ttl = ctx.machine_ttl();
    let config = SessionConfig::new(&unique("host"), ttl).unwrap();
    let session = Session::open(ctx.store.clone(), config).await.unwrap();
    let name = unique("rider");
    let member = session.join(&name).await.unwrap();
    drop_and_watch(&ctx, member, ttl).await;
    assert!(session.check().is_ok(), "the session lives on");
    let again = session.join(&name).await.expect("the name is free again");
    again.leave(Duration::ZERO).await.unwrap();
    session.close(Duration::ZERO).await.unwrap();
}

/// A member of its own lease, dropped without leaving, hands its claimed item back and
/// frees its name within its stop margin, not one ttl later through a checker.
pub async fn a_dropped_member_hands_back_its_work(ctx: Ctx) {
    let ttl = ctx.machine_ttl();
    let config = liveness_core::MemberConfig::new(&unique("own"), ttl).unwrap();
    let member = Member::join(ctx.store.clone(), config).await.unwrap();
    drop_and_watch(&ctx, member, ttl).await;
}

/// A session whose every handle and member is dropped releases its lease: its last
/// member's departure takes one stop margin, the session's one more.
pub async fn a_dropped_session_releases_its_lease(ctx: Ctx) {
    let ttl = ctx.machine_ttl();
    let config = SessionConfig::new(&unique("host"), ttl).unwrap();
    let session = Session::open(ctx.store.clone(), config).await.unwrap();
    let member = session.join(&unique("rider")).await.unwrap();
    let (key, cancel) = (session.key().clone(), session.cancelled());
    drop(session);
    assert!(!cancel.is_cancelled(), "a riding member keeps its session");
    // The member's own departure keeps the session for one margin, then the
    // session's takes one more.
    drop(member);
    let until = Instant::now() + release_deadline(ttl) * 2;
    while ctx.store.inspect(&key).await.unwrap().is_some() {
        assert!(Instant::now() < until, "the dropped session kept its lease");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        cancel.is_cancelled(),
        "released while its work was not told to stop"
    );
}

/// A dropped leadership hands the role over within its stop margin plus one second:
/// another candidate leads with a greater token, long before the lease's ttl.
pub async fn a_dropped_leadership_hands_the_role_over(ctx: Ctx) {
    // A ttl of 10 s: its lease expires 6.7 s after the drop at the earliest, so a
    // takeover within the margin (2 s) plus one second comes only from a release.
    let ttl = Ttl::new(ctx.caps().min_ttl.max(Duration::from_secs(10))).unwrap();
    let role = unique("role");
    let first = Election::new(
        ctx.store.clone(),
        ElectionConfig::new(&role, "a", ttl).unwrap(),
    );
    let leader = first.campaign().await.unwrap();
    let (token, cancel) = (leader.token(), leader.cancelled());
    drop(leader);
    assert!(
        cancel.is_cancelled(),
        "the leader's work must be told to stop at once"
    );
    let second = Election::new(
        ctx.store.clone(),
        ElectionConfig::new(&role, "b", ttl).unwrap(),
    );
    let until = Instant::now() + release_deadline(ttl);
    let next = loop {
        if let Some(next) = second.try_lead().await.unwrap() {
            break next;
        }
        assert!(
            Instant::now() < until,
            "the dropped leadership kept the role"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(next.token() > token);
    next.resign().await.unwrap();
}
