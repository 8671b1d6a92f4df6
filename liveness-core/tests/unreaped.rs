//! A process whose fleet has no checker is told so: the expired leases of its space
//! stay unreaped, and every member and session with a lease there hears of it once.

use std::sync::Arc;
use std::time::Duration;

use liveness_core::{
    Checker, CheckerConfig, Event, EventBus, Member, MemberConfig, MemoryServer, Namespace,
    Session, SessionConfig, Space, Store, Ttl,
};
use tokio::sync::broadcast::Receiver;

fn store(ns: &str) -> Arc<dyn Store> {
    Arc::new(MemoryServer::new().store(&Namespace::new(ns).unwrap()))
}

fn ttl() -> Ttl {
    Ttl::from_secs(1).unwrap()
}

/// A member that died without a word: joined, then stopped as a crash stops it.
async fn a_dead_member(store: &Arc<dyn Store>, name: &str) {
    let member = Member::join(store.clone(), MemberConfig::new(name, ttl()).unwrap())
        .await
        .unwrap();
    member.orphan();
}

/// The `Unreaped` events `events` got, in order.
fn unreaped(events: &mut Receiver<Event>) -> Vec<(Space, usize)> {
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let Event::Unreaped { space, leases } = event {
            seen.push((space, leases));
        }
    }
    seen
}

#[tokio::test(start_paused = true)]
async fn members_hear_once_that_a_dead_member_stays_unreaped() {
    let store = store("unreaped_members");
    let bus = EventBus::default();
    let mut events = bus.subscribe();
    let config = MemberConfig::new("alive", ttl()).unwrap().events(bus);
    let _alive = Member::join(store.clone(), config).await.unwrap();
    a_dead_member(&store, "dead").await;

    // A look every 5 s at most: two looks in 12 s see the same lease left over.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(unreaped(&mut events), [(Space::members(), 1)]);
    // Once, not at every look.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(unreaped(&mut events), []);
}

#[tokio::test(start_paused = true)]
async fn a_session_hears_that_a_dead_session_stays_unreaped() {
    let store = store("unreaped_sessions");
    let bus = EventBus::default();
    let mut events = bus.subscribe();
    let config = SessionConfig::new("alive", ttl()).unwrap().events(bus);
    let _alive = Session::open(store.clone(), config).await.unwrap();
    let dead = Session::open(store.clone(), SessionConfig::new("dead", ttl()).unwrap())
        .await
        .unwrap();
    dead.orphan();

    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(unreaped(&mut events), [(Space::sessions(), 1)]);
}

#[tokio::test(start_paused = true)]
async fn a_checker_of_the_process_keeps_its_members_from_looking() {
    let store = store("unreaped_checked");
    // Built, never run: nothing reaps, but the process has a checker, so its members
    // leave the watching to it.
    let _checker = Checker::new(store.clone(), CheckerConfig::default());
    let bus = EventBus::default();
    let mut events = bus.subscribe();
    let config = MemberConfig::new("alive", ttl()).unwrap().events(bus);
    let _alive = Member::join(store.clone(), config).await.unwrap();
    a_dead_member(&store, "dead").await;

    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(unreaped(&mut events), []);
}

#[tokio::test(start_paused = true)]
async fn a_lease_reaped_between_two_looks_is_not_unreaped() {
    let server = MemoryServer::new();
    let ns = Namespace::new("unreaped_reaped").unwrap();
    let store: Arc<dyn Store> = Arc::new(server.store(&ns));
    let bus = EventBus::default();
    let mut events = bus.subscribe();
    let config = MemberConfig::new("alive", ttl()).unwrap().events(bus);
    let _alive = Member::join(store.clone(), config).await.unwrap();
    a_dead_member(&store, "dead").await;
    // The first look (4 to 5 s in) sees the expired lease; a checker on another handle
    // of the store, as in another process, reaps it before the second (8 to 10 s in).
    tokio::time::sleep(Duration::from_millis(5500)).await;
    let other: Arc<dyn Store> = Arc::new(server.store(&ns));
    let report = Checker::new(other, CheckerConfig::default())
        .round()
        .await
        .unwrap();
    assert_eq!(report.deaths.len(), 1, "{report:?}");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(unreaped(&mut events), []);
}
