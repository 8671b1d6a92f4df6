//! Memory a member costs its process, alone and riding a session: counted by a
//! global allocator that tracks live bytes. One test in this binary, so no other
//! test allocates meanwhile.

use std::alloc::System;
use std::sync::Arc;
use std::time::Duration;

use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

use liveness_core::{
    Capabilities, EventBus, HolderId, Key, Member, MemberConfig, MemoryServer, Name, Namespace,
    Session, SessionConfig, Space, Store, Ttl,
};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Live heap bytes of the process.
fn live() -> isize {
    let s = GLOBAL.stats();
    s.bytes_allocated as isize + s.bytes_reallocated - s.bytes_deallocated as isize
}

#[test]
fn a_member_costs_a_few_kib_and_an_unobserved_bus_allocates_no_buffer() {
    // A bus nobody subscribed to: one small allocation, no event buffer. The least
    // of a few counts: the test harness's own thread may allocate during one.
    let bus_bytes = (0..5)
        .map(|_| {
            let before = live();
            let bus = EventBus::default();
            let bytes = live() - before;
            drop(bus);
            bytes
        })
        .min()
        .unwrap();
    assert!(
        bus_bytes <= 128,
        "an unobserved bus holds {bus_bytes} bytes"
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let store: Arc<dyn Store> =
            Arc::new(MemoryServer::new().store(&Namespace::new("bytes").unwrap()));
        let ttl = Ttl::from_secs(10).unwrap();
        // Warm the store's maps and the runtime with one member first.
        let warm = Member::join(store.clone(), MemberConfig::new("warm", ttl).unwrap())
            .await
            .unwrap();
        let n = 1000;
        let before = live();
        let mut members = Vec::with_capacity(n);
        for i in 0..n {
            let config = MemberConfig::new(&format!("m{i}"), ttl).unwrap();
            members.push(Member::join(store.clone(), config).await.unwrap());
        }
        // Let every heartbeat renew a few times: steady state, not just the join.
        tokio::time::sleep(Duration::from_secs(30)).await;
        let per_member = (live() - before) / n as isize;
        println!("bytes per member (process side, memory store included): {per_member}");
        // A 1,024-slot event bus per member once cost 124 KiB per member.
        assert!(
            per_member < 8 * 1024,
            "{per_member} bytes per member (the 1,024-slot bus each is back?)"
        );
        drop(members);
        drop(warm);
        drop(store);
        // Let the dropped members' tasks end and free what they hold before the next
        // count starts, or their frees would be counted against the riders.
        tokio::time::sleep(Duration::from_secs(60)).await;
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }

        // Members riding one session: no heartbeat of their own.
        let caps = Capabilities::default().sessions(true);
        let store: Arc<dyn Store> = Arc::new(
            MemoryServer::new()
                .with_capabilities(caps)
                .store(&Namespace::new("riding").unwrap()),
        );
        // The store's own record of a riding member, joined through the store
        // directly: in production it lives in a remote server, not in the process.
        let direct: Arc<dyn Store> = Arc::new(
            MemoryServer::new()
                .with_capabilities(caps)
                .store(&Namespace::new("direct").unwrap()),
        );
        let holder = HolderId::new("p").unwrap();
        let lease = direct
            .acquire(
                &Key::new(Space::sessions(), Name::new("p").unwrap()),
                &holder,
                ttl,
            )
            .await
            .unwrap();
        let warm_key = Key::member("warm").unwrap();
        direct
            .join_session(&lease, &warm_key, &holder)
            .await
            .unwrap();
        let keys: Vec<Key> = (0..n)
            .map(|i| Key::member(&format!("m{i}")).unwrap())
            .collect();
        let before = live();
        for key in &keys {
            direct.join_session(&lease, key, &holder).await.unwrap();
        }
        let store_side = (live() - before) / n as isize;
        drop(keys);
        drop(direct);

        let session = Session::open(store.clone(), SessionConfig::new("p", ttl).unwrap())
            .await
            .unwrap();
        let warm = session.join("warm").await.unwrap();
        let before = live();
        let mut members = Vec::with_capacity(n);
        for i in 0..n {
            members.push(session.join(&format!("m{i}")).await.unwrap());
        }
        tokio::time::sleep(Duration::from_secs(30)).await;
        let per_member = (live() - before) / n as isize;
        let client_side = per_member - store_side;
        println!("bytes per riding member (process side, memory store included): {per_member}");
        println!("  the memory store's record: {store_side}; client side: {client_side}");
        // A riding member has no task of its own (its session's one task tends its
        // riders): what it costs the client is its handle's shared state and its
        // entry in the session's registry. The store's record is counted apart: in
        // production it lives in a remote server.
        assert!(
            client_side < 2 * 1024,
            "{client_side} bytes per riding member, client side"
        );
        assert!(
            per_member < 5 * 1024 / 2,
            "{per_member} bytes per riding member, the memory store's record included"
        );
        drop(members);
        drop(warm);
    });
}
