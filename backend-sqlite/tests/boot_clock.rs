//! The store clock is the host's boot clock (`CLOCK_BOOTTIME`), never the wall clock,
//! and the boot id recorded in the file tells a lease written before a reboot: such a
//! lease is expired, whatever its expiry says.
//!
//! A reboot is simulated by writing another boot id into the file, as the last boot
//! left it, and reopening it: every process that held a lease died in that reboot.
#![cfg(any(target_os = "linux", target_os = "android"))]

use std::path::Path;
use std::time::Duration;

use liveness_core::{
    EnqueueOptions, Error, HolderId, ItemState, ItemStore, Key, LeaseStatus, LeaseStore, LostCause,
    OperatorStore, Space, Store, Ttl,
};
use liveness_sqlite::SqliteStore;

mod common;

const NS: &str = "boot_test";

/// The host's boot clock now, in milliseconds: what every process of the host reads.
fn boot_ms() -> i64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).unwrap();
    i64::try_from(Duration::from(t).as_millis()).unwrap()
}

fn this_boot() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .to_owned()
}

/// The stored expiry of the lease on `key` (milliseconds of the boot clock).
async fn stored_expiry(store: &SqliteStore, key: &Key) -> i64 {
    sqlx::query_scalar(
        "SELECT expires_boot_ms FROM liveness_leases WHERE ns = ?1 AND space = ?2 AND name = ?3",
    )
    .bind(store.namespace().as_ref())
    .bind(key.space().as_ref())
    .bind(key.name().as_ref())
    .fetch_one(store.pool())
    .await
    .unwrap()
}

async fn recorded_boot(store: &SqliteStore) -> String {
    sqlx::query_scalar("SELECT boot_id FROM liveness_boot")
        .fetch_one(store.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn expiry_is_counted_on_the_boot_clock_and_the_boot_id_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::open(&dir.path().join("b.db"), NS).await;
    let key = Key::member("a").unwrap();
    let ttl = Ttl::from_secs(3600).unwrap();
    let before = boot_ms();
    store
        .acquire(&key, &HolderId::new("h").unwrap(), ttl)
        .await
        .unwrap();
    let after = boot_ms();
    let expiry = stored_expiry(&store, &key).await;
    // Not wall-clock milliseconds (`unixepoch('subsec')`, about 1.8e12) + ttl.
    assert!(
        (before + 3_600_000..=after + 3_600_000).contains(&expiry),
        "expiry {expiry} is not boot time [{before}, {after}] + ttl"
    );
    assert_eq!(recorded_boot(&store).await, this_boot());

    // Renewal counts from the boot clock too, and store_time is that clock.
    let lease = store.inspect(&key).await.unwrap().unwrap();
    assert!(matches!(lease.status, LeaseStatus::Live { .. }));
    let t = store.store_time().await.unwrap().since_epoch();
    let (lo, hi) = (before, boot_ms());
    let t = i64::try_from(t.as_millis()).unwrap();
    assert!((lo..=hi).contains(&t), "store time {t} not in [{lo}, {hi}]");
}

/// Writes `boot` as the boot id the file was last opened under, and moves every
/// lease's expiry `ahead` past the current boot clock: a boot that ran for days
/// leaves expiries far beyond the new boot's clock, which restarted near zero.
async fn as_if_written_under(path: &Path, boot: &str, ahead: Duration) {
    let store = common::open(path, NS).await;
    sqlx::query("UPDATE liveness_boot SET boot_id = ?1")
        .bind(boot)
        .execute(store.pool())
        .await
        .unwrap();
    sqlx::query("UPDATE liveness_leases SET expires_boot_ms = ?1")
        .bind(boot_ms() + i64::try_from(ahead.as_millis()).unwrap())
        .execute(store.pool())
        .await
        .unwrap();
    store.close().await;
}

#[tokio::test]
async fn a_lease_written_under_another_boot_is_expired_everywhere() {
    let (_dir, path) = common::scratch("reboot.db");
    let store = common::open(&path, NS).await;
    let holder = HolderId::new("h").unwrap();
    let ttl = Ttl::from_secs(3600).unwrap();
    let worker = Key::member("worker").unwrap();
    let other = Key::member("other").unwrap();
    let lease = store.acquire(&worker, &holder, ttl).await.unwrap();
    let held = store.acquire(&other, &holder, ttl).await.unwrap();
    let id = store
        .enqueue(b"job", EnqueueOptions::default().max_attempts(5))
        .await
        .unwrap();
    assert_eq!(store.claim(&lease, 1).await.unwrap().len(), 1);
    store.close().await;

    // The host rebooted after 40 days up; every holder died with it.
    as_if_written_under(
        &path,
        "00000000-0000-0000-0000-000000000000",
        Duration::from_secs(40 * 86_400),
    )
    .await;
    let store = common::open(&path, NS).await;
    assert_eq!(recorded_boot(&store).await, this_boot());

    for key in [&worker, &other] {
        let info = store.inspect(key).await.unwrap().unwrap();
        assert_eq!(info.status, LeaseStatus::Expired, "{key}");
    }
    assert_eq!(
        store.next_expiry(&Space::members()).await.unwrap(),
        Some(Duration::ZERO)
    );
    let mut expired: Vec<_> = store
        .expired(&Space::members(), 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.key, e.token))
        .collect();
    expired.sort();
    let mut want = vec![(worker.clone(), lease.token), (other.clone(), held.token)];
    want.sort();
    assert_eq!(expired, want);

    // Its holder cannot renew it nor claim with it.
    for e in [
        store.renew(&lease).await.unwrap_err(),
        store.claim(&lease, 1).await.unwrap_err(),
    ] {
        assert!(
            matches!(
                e,
                Error::Lost {
                    reason: LostCause::Expired,
                    ..
                }
            ),
            "{e:?}"
        );
    }

    // The checker reaps it and requeues its item; acquiring the other key declares
    // the old lease dead on the way (superseded).
    assert!(store.reap(&worker, lease.token).await.unwrap());
    let dead = store.dead_tokens(10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(store.sweep(lease.token).await.unwrap().requeued, vec![id]);
    assert_eq!(
        store.item(id).await.unwrap().unwrap().state,
        ItemState::Pending
    );
    let taken = store
        .acquire(&other, &HolderId::new("new").unwrap(), ttl)
        .await
        .unwrap();
    assert!(taken.token > held.token);
    assert!(store
        .dead_tokens(10)
        .await
        .unwrap()
        .iter()
        .any(|d| d.token == held.token));

    // Leases written under this boot live their ttl as before.
    assert!(matches!(
        store.inspect(&other).await.unwrap().unwrap().status,
        LeaseStatus::Live { .. }
    ));
    store.renew(&taken).await.unwrap();
}

/// Processes starting together after a reboot: the first to open the file expires
/// the old boot's leases, and no later open touches a lease written under this boot,
/// even one written a moment after the first open.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn opening_at_once_after_a_reboot_expires_only_the_old_boots_leases() {
    for round in 0..5 {
        let (_dir, path) = common::scratch(&format!("r{round}.db"));
        let store = common::open(&path, NS).await;
        let ttl = Ttl::from_secs(3600).unwrap();
        let old = Key::member("old").unwrap();
        store
            .acquire(&old, &HolderId::new("h").unwrap(), ttl)
            .await
            .unwrap();
        store.close().await;
        as_if_written_under(&path, "before-the-reboot", Duration::from_secs(86_400)).await;

        let opens: Vec<_> = (0..8)
            .map(|i| {
                let path = path.clone();
                tokio::spawn(async move {
                    let store = common::open(&path, NS).await;
                    let key = Key::member(&format!("new{i}")).unwrap();
                    store
                        .acquire(&key, &HolderId::new("h").unwrap(), ttl)
                        .await
                        .unwrap();
                    (store, key)
                })
            })
            .collect();
        let mut opened = Vec::new();
        for open in opens {
            opened.push(open.await.unwrap());
        }
        let (store, _) = &opened[0];
        assert_eq!(
            store.inspect(&old).await.unwrap().unwrap().status,
            LeaseStatus::Expired
        );
        for (_, key) in &opened {
            assert!(
                matches!(
                    store.inspect(key).await.unwrap().unwrap().status,
                    LeaseStatus::Live { .. }
                ),
                "round {round}: {key} was expired by a later open"
            );
        }
        for (s, _) in opened {
            s.close().await;
        }
    }
}
