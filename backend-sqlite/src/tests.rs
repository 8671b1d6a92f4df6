//! The store clock driven by hand (`clock::ManualBootClock`): expiry follows the boot
//! clock and nothing else, a suspend (the boot clock jumps) expires leases, and a
//! reboot (another boot id, a clock restarted near zero) expires every lease written
//! before it, however far in the future its expiry lies. Idempotency keys are kept
//! their retention by the same clock, counted again from a new boot's clock. A claim
//! from one queue reads that queue's range of its index, and a queue name no build
//! writes is a corrupt record. Items' times are the boot clock's, forgotten at a
//! reboot. Dead letters are kept their retention by the same clock, counted again
//! from a new boot's clock, and their removal reads a range of its index.

use std::sync::Arc;
use std::time::Duration;

use liveness_core::{
    EnqueueOptions, Error, HolderId, ItemId, ItemStore, ItemTimes, Key, LeaseStatus, LeaseStore,
    LostCause, Namespace, OperatorStore, RequestId, Space, Store, StoreTime, Ttl,
};

use crate::clock::ManualBootClock;
use crate::{SqliteConfig, SqliteStore};

const DAY: Duration = Duration::from_secs(86_400);

async fn open(path: &std::path::Path, clock: &ManualBootClock) -> SqliteStore {
    let config = SqliteConfig::new(path, Namespace::new("boot_unit").unwrap());
    SqliteStore::connect_with(config, Arc::new(clock.clone()))
        .await
        .unwrap()
}

fn expired_reason(e: &Error) -> bool {
    matches!(
        e,
        Error::Lost {
            reason: LostCause::Expired,
            ..
        }
    )
}

#[tokio::test]
async fn expiry_and_store_time_follow_the_boot_clock_only() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualBootClock::new("boot-1", Duration::from_secs(1000));
    let store = open(&dir.path().join("u.db"), &clock).await;
    assert_eq!(
        store.store_time().await.unwrap().since_epoch(),
        Duration::from_secs(1000)
    );
    let key = Key::member("a").unwrap();
    let lease = store
        .acquire(
            &key,
            &HolderId::new("h").unwrap(),
            Ttl::from_secs(10).unwrap(),
        )
        .await
        .unwrap();

    clock.advance(Duration::from_millis(9_999));
    assert_eq!(
        store.inspect(&key).await.unwrap().unwrap().status,
        LeaseStatus::Live {
            remaining: Duration::from_millis(1)
        }
    );
    assert_eq!(
        store.next_expiry(&Space::members()).await.unwrap(),
        Some(Duration::from_millis(1))
    );
    let lease = store.renew(&lease).await.unwrap();

    // A suspend of an hour: the boot clock counts it, so the lease expired.
    clock.advance(Duration::from_secs(3600));
    assert_eq!(
        store.inspect(&key).await.unwrap().unwrap().status,
        LeaseStatus::Expired
    );
    assert_eq!(store.expired(&Space::members(), 10).await.unwrap().len(), 1);
    assert!(expired_reason(&store.renew(&lease).await.unwrap_err()));
    assert!(store.reap(&key, lease.token).await.unwrap());
    assert_eq!(
        store.store_time().await.unwrap().since_epoch(),
        Duration::from_millis(1_000_000 + 9_999 + 3_600_000)
    );
}

#[tokio::test]
async fn a_reboot_expires_every_lease_written_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reboot.db");
    // The last boot ran for 40 days; its leases expire a day after that.
    let before = ManualBootClock::new("boot-1", 40 * DAY);
    let store = open(&path, &before).await;
    let key = Key::member("a").unwrap();
    let holder = HolderId::new("h").unwrap();
    let ttl = Ttl::from_secs(86_400).unwrap();
    let old = store.acquire(&key, &holder, ttl).await.unwrap();
    store.close().await;

    // After the reboot the boot clock restarted: 5 s since boot.
    let after = ManualBootClock::new("boot-2", Duration::from_secs(5));
    let store = open(&path, &after).await;
    assert_eq!(
        store.inspect(&key).await.unwrap().unwrap().status,
        LeaseStatus::Expired
    );
    assert_eq!(
        store.next_expiry(&Space::members()).await.unwrap(),
        Some(Duration::ZERO)
    );
    let expired = store.expired(&Space::members(), 10).await.unwrap();
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].token, old.token);
    assert!(expired_reason(&store.renew(&old).await.unwrap_err()));
    assert!(expired_reason(&store.claim(&old, 1).await.unwrap_err()));

    // Another holder takes the key over with a greater token; its lease lives its
    // ttl on the new boot's clock.
    let new = store
        .acquire(&key, &HolderId::new("h2").unwrap(), ttl)
        .await
        .unwrap();
    assert!(new.token > old.token);
    assert_eq!(store.dead_tokens(10).await.unwrap()[0].token, old.token);
    after.advance(DAY - Duration::from_millis(1));
    assert!(matches!(
        store.inspect(&key).await.unwrap().unwrap().status,
        LeaseStatus::Live { .. }
    ));
    store.renew(&new).await.unwrap();

    // Reopening under the same boot expires nothing.
    store.close().await;
    let store = open(&path, &after).await;
    assert!(matches!(
        store.inspect(&key).await.unwrap().unwrap().status,
        LeaseStatus::Live { .. }
    ));
}

/// A held-back item's wait is counted by the boot clock; a reboot restarts that
/// clock, so the item waits its whole delay again on the new boot's clock: never
/// claimed earlier than asked, nor held back by the old boot's uptime.
#[tokio::test]
async fn a_reboot_counts_a_held_back_item_s_wait_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("due.db");
    let before = ManualBootClock::new("boot-1", 40 * DAY);
    let store = open(&path, &before).await;
    let hour = Duration::from_secs(3600);
    let options = liveness_core::EnqueueOptions::default().delay(hour);
    let id = store.enqueue(b"later", options).await.unwrap();
    before.advance(hour / 2);
    // One ms more than asked: the store clock's reading is truncated to its ms.
    let ms = Duration::from_millis(1);
    assert_eq!(store.next_due().await.unwrap(), Some(hour / 2 + ms));
    store.close().await;

    let after = ManualBootClock::new("boot-2", Duration::from_secs(5));
    let store = open(&path, &after).await;
    assert_eq!(
        store.next_due().await.unwrap(),
        Some(hour + ms),
        "the whole wait again"
    );
    let key = Key::member("a").unwrap();
    let ttl = Ttl::from_secs(86_400).unwrap();
    let lease = store
        .acquire(&key, &HolderId::new("h").unwrap(), ttl)
        .await
        .unwrap();
    assert!(
        store.claim(&lease, 1).await.unwrap().is_empty(),
        "not due yet"
    );
    after.advance(hour);
    assert!(
        store.claim(&lease, 1).await.unwrap().is_empty(),
        "a ms early"
    );
    after.advance(ms);
    assert_eq!(store.next_due().await.unwrap(), Some(Duration::ZERO));
    assert_eq!(store.claim(&lease, 1).await.unwrap()[0].id, id);
    assert_eq!(store.next_due().await.unwrap(), None);
}

/// A riding member's time left is its session's, to the millisecond of the boot
/// clock: `join_session`, `renew` and `inspect` of the member answer it, renewing the
/// session alone extends it, and the member expires the instant its session does
/// (never listed expired itself; `next_expiry` sees only the session).
#[tokio::test]
async fn a_member_s_time_left_is_its_session_s() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualBootClock::new("boot-1", Duration::from_secs(1000));
    let store = open(&dir.path().join("ride.db"), &clock).await;
    let holder = HolderId::new("p").unwrap();
    let ttl = Ttl::from_secs(10).unwrap();
    let session_key = Key::new(Space::sessions(), liveness_core::Name::new("p").unwrap());
    let session = store.acquire(&session_key, &holder, ttl).await.unwrap();
    clock.advance(Duration::from_secs(4));
    let key = Key::member("m").unwrap();
    let member = store.join_session(&session, &key, &holder).await.unwrap();
    assert_eq!(member.expires_in, Duration::from_secs(6));
    assert_eq!(member.ttl, ttl);
    assert_eq!(
        store.next_expiry(&Space::members()).await.unwrap(),
        None,
        "a member has no expiry of its own"
    );

    clock.advance(Duration::from_secs(5));
    assert_eq!(
        store.renew(&member).await.unwrap().expires_in,
        Duration::from_secs(1)
    );
    store.renew(&session).await.unwrap();
    let info = store.inspect(&key).await.unwrap().unwrap();
    assert_eq!(
        info.status,
        LeaseStatus::Live {
            remaining: Duration::from_secs(10)
        }
    );
    assert_eq!(info.session, Some(session_key.clone()));

    clock.advance(Duration::from_millis(9_999));
    assert!(store.inspect(&key).await.unwrap().unwrap().is_live());
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        store.inspect(&key).await.unwrap().unwrap().status,
        LeaseStatus::Expired
    );
    assert!(expired_reason(&store.renew(&member).await.unwrap_err()));
    assert!(store
        .expired(&Space::members(), 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store.expired(&Space::sessions(), 10).await.unwrap().len(),
        1
    );
}

/// A store on `path` keeping keys `retention`, on `clock`.
async fn open_keeping(
    path: &std::path::Path,
    clock: &ManualBootClock,
    retention: Duration,
) -> SqliteStore {
    open_configured(path, clock, |c| c.with_key_retention(retention)).await
}

/// A store on `path`, on `clock`, with the namespace's configuration set by `set`.
async fn open_configured(
    path: &std::path::Path,
    clock: &ManualBootClock,
    set: impl FnOnce(SqliteConfig) -> liveness_core::Result<SqliteConfig>,
) -> SqliteStore {
    let config = set(SqliteConfig::new(
        path,
        Namespace::new("boot_unit").unwrap(),
    ))
    .unwrap();
    SqliteStore::connect_with(config, Arc::new(clock.clone()))
        .await
        .unwrap()
}

/// The rows of `liveness_enqueue_keys` the store's namespace holds.
async fn key_rows(store: &SqliteStore) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM liveness_enqueue_keys WHERE ns = ?1")
        .bind(store.namespace().as_ref())
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// A keyed enqueue with the key `key`.
async fn keyed(store: &SqliteStore, key: RequestId) -> ItemId {
    store
        .enqueue(b"job", EnqueueOptions::keyed(key))
        .await
        .unwrap()
}

/// A key is kept its retention by the store clock, to the millisecond, then
/// forgotten: a repeat up to then answers the first id, one after it adds a new item.
#[tokio::test]
async fn a_key_is_kept_its_retention_then_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualBootClock::new("boot-1", Duration::from_secs(1000));
    let minute = Duration::from_secs(60);
    let store = open_keeping(&dir.path().join("keys.db"), &clock, minute).await;
    assert_eq!(store.capabilities().key_retention, Some(minute));
    let (a, b) = (RequestId::random(), RequestId::random());
    let first = keyed(&store, a).await;
    clock.advance(Duration::from_secs(30));
    keyed(&store, b).await;
    clock.advance(Duration::from_secs(30));
    assert_eq!(keyed(&store, a).await, first, "a whole retention: kept");
    clock.advance(Duration::from_millis(1));
    let later = keyed(&store, a).await;
    assert_ne!(later, first, "after the retention: a new item");
    assert_eq!(keyed(&store, a).await, later, "the new record is kept");
    assert_eq!(key_rows(&store).await, 2, "a's new record and b");
}

/// Expired keys are deleted by later keyed enqueues, at most 100 each, oldest first:
/// the table holds the keys of one retention and a shrinking backlog, and an unkeyed
/// enqueue touches none.
#[tokio::test]
async fn expired_keys_are_deleted_a_batch_per_keyed_enqueue() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualBootClock::new("boot-1", Duration::from_secs(1000));
    let minute = Duration::from_secs(60);
    let store = open_keeping(&dir.path().join("batch.db"), &clock, minute).await;
    for _ in 0..250 {
        keyed(&store, RequestId::random()).await;
    }
    clock.advance(minute + Duration::from_millis(1));
    store
        .enqueue(b"unkeyed", EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(
        key_rows(&store).await,
        250,
        "an unkeyed enqueue deletes none"
    );
    keyed(&store, RequestId::random()).await;
    assert_eq!(key_rows(&store).await, 151, "100 deleted, one recorded");
    keyed(&store, RequestId::random()).await;
    keyed(&store, RequestId::random()).await;
    assert_eq!(key_rows(&store).await, 3, "only the keys of this retention");
}

/// The boot clock restarts at each boot, so a reboot counts every key's whole
/// retention again from the new boot's clock at the first open: never forgotten
/// earlier than asked, whatever the new clock reads beside the old one (here it reads
/// more: the key's old time would already be a retention behind it).
#[tokio::test]
async fn a_reboot_keeps_every_key_its_whole_retention_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reboot_keys.db");
    let minute = Duration::from_secs(60);
    let before = ManualBootClock::new("boot-1", Duration::from_secs(5));
    let store = open_keeping(&path, &before, minute).await;
    let key = RequestId::random();
    let first = keyed(&store, key).await;
    before.advance(Duration::from_secs(50));
    store.close().await;

    let after = ManualBootClock::new("boot-2", Duration::from_secs(600));
    let store = open_keeping(&path, &after, minute).await;
    assert_eq!(
        keyed(&store, key).await,
        first,
        "counted again from the open"
    );
    after.advance(minute);
    assert_eq!(keyed(&store, key).await, first, "a whole retention");
    after.advance(Duration::from_millis(1));
    assert_ne!(keyed(&store, key).await, first, "then forgotten");

    // Reopening under the same boot counts nothing again.
    let other = RequestId::random();
    let kept = keyed(&store, other).await;
    store.close().await;
    after.advance(Duration::from_secs(59));
    let store = open_keeping(&path, &after, minute).await;
    after.advance(Duration::from_millis(1_001));
    assert_ne!(keyed(&store, other).await, kept, "one retention, not two");
}

/// A claim says how long each item waited, to the millisecond of the boot clock, from
/// its last move to pending: its enqueue (or its due time when held back), a retry's
/// hand-back (or the end of its backoff), the sweep of its dead owner's items, a dead
/// letter's retry; never from an earlier move. A repeat of a claim answers no wait,
/// and a reboot counts a claimable item's wait again from the new boot.
#[tokio::test]
async fn a_claim_s_wait_counts_from_the_item_s_last_move_to_pending() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("waits.db");
    let clock = ManualBootClock::new("boot-1", Duration::from_secs(1000));
    let store = open(&path, &clock).await;
    let secs = Duration::from_secs;
    let ms = Duration::from_millis(1);
    let ttl = Ttl::from_secs(60).unwrap();
    let worker = |name: &str| (Key::member(name).unwrap(), HolderId::new(name).unwrap());
    let (key, holder) = worker("w");
    let waited = |items: &[liveness_core::Item]| -> Vec<(ItemId, Option<Duration>)> {
        items.iter().map(|i| (i.id, i.waited)).collect()
    };

    // Enqueued now, and held back 10 s: the second waits from its due time (one ms
    // late, the clock's truncation).
    let options = EnqueueOptions::default().max_attempts(10);
    let now = store.enqueue(b"now", options).await.unwrap();
    let options = options.delay(secs(10));
    let held = store.enqueue(b"held", options).await.unwrap();
    clock.advance(secs(25));
    let lease = store.acquire(&key, &holder, ttl).await.unwrap();
    let req = RequestId::next();
    let got = store.claim_request(&lease, 2, req).await.unwrap();
    assert_eq!(
        waited(&got),
        [(now, Some(secs(25))), (held, Some(secs(15) - ms))]
    );
    let again = store.claim_request(&lease, 2, req).await.unwrap();
    assert_eq!(waited(&again), [(now, None), (held, None)], "a repeat");

    // Handed back with a 5 s backoff: from its end, not from the enqueue.
    clock.advance(secs(7));
    let backoff = liveness_core::Outcome::Retry { after: secs(5) };
    store.finish(&lease, now, backoff).await.unwrap();
    clock.advance(secs(8));
    let got = store.claim(&lease, 1).await.unwrap();
    assert_eq!(waited(&got), [(now, Some(secs(3) - ms))]);

    // Its owner died 40 s ago; swept now: from the sweep, not from the death.
    let (dead_key, dead_holder) = worker("dead");
    let dead = store.acquire(&dead_key, &dead_holder, ttl).await.unwrap();
    store
        .finish(&lease, now, liveness_core::Outcome::RETRY)
        .await
        .unwrap();
    assert_eq!(store.claim(&dead, 1).await.unwrap()[0].id, now);
    assert!(store.release(&dead).await.unwrap());
    clock.advance(secs(40));
    let lease = store.renew(&lease).await.unwrap();
    assert_eq!(store.sweep(dead.token).await.unwrap().requeued, [now]);
    clock.advance(secs(2));
    let got = store.claim(&lease, 1).await.unwrap();
    assert_eq!(waited(&got), [(now, Some(secs(2)))]);

    // Dead-lettered 50 s ago, retried now: from the retry.
    let outcome = liveness_core::Outcome::DeadLetter;
    store.finish(&lease, held, outcome).await.unwrap();
    store.finish(&lease, now, outcome).await.unwrap();
    clock.advance(secs(50));
    let lease = store.renew(&lease).await.unwrap();
    store.retry_dead_letter(held).await.unwrap();
    clock.advance(secs(4));
    assert_eq!(store.retry_dead_letters(10).await.unwrap(), [now]);
    clock.advance(secs(1));
    let got = store.claim(&lease, 2).await.unwrap();
    assert_eq!(waited(&got), [(now, Some(secs(1))), (held, Some(secs(5)))]);

    // Pending across a reboot, 40 days into the last boot: counted from the first
    // open under the new one (short, never negative).
    store
        .finish(&lease, now, liveness_core::Outcome::RETRY)
        .await
        .unwrap();
    clock.advance(40 * DAY);
    store.close().await;
    let after = ManualBootClock::new("boot-2", secs(5));
    let store = open(&path, &after).await;
    after.advance(secs(3));
    let lease = store.acquire(&key, &holder, ttl).await.unwrap();
    let got = store.claim(&lease, 1).await.unwrap();
    assert_eq!(waited(&got), [(now, Some(secs(3)))]);
}

/// The plan of `statement` (SQLite's `EXPLAIN QUERY PLAN`), its details one a line,
/// with the namespace as ?1 and `bind` applying the rest.
async fn plan_of(
    store: &SqliteStore,
    statement: &str,
    bind: impl FnOnce(crate::core::Query<'_>) -> crate::core::Query<'_>,
) -> String {
    use sqlx::Row;
    let explain = format!("EXPLAIN QUERY PLAN {statement}");
    let q = sqlx::query(sqlx::AssertSqlSafe(explain)).bind(store.ns.as_ref());
    bind(q)
        .fetch_all(store.pool())
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<String, _>(3))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A claim from one queue is one statement on a range of `liveness_items_ready_queue`
/// (the namespace and the queue its equality terms), before and after `ANALYZE`, with
/// thousands of pending items of another queue and held-back ones beside it; it takes
/// the queue's items lowest id first, and a claim naming several queues takes them in
/// the order given.
#[tokio::test]
async fn a_claim_from_one_queue_reads_its_range_of_the_queue_index() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualBootClock::new("boot-1", Duration::from_secs(1000));
    let store = open(&dir.path().join("queues.db"), &clock).await;
    let queue = |name: &str| liveness_core::QueueName::new(name).unwrap();
    let batch: Vec<Vec<u8>> = (0..1000).map(|i| format!("b{i}").into_bytes()).collect();
    let bulk = EnqueueOptions::default().queue(queue("bulk"));
    for _ in 0..3 {
        store.enqueue_many(&batch, bulk).await.unwrap();
    }
    let later = EnqueueOptions::default().delay(Duration::from_secs(3600));
    store.enqueue_many(&batch, later).await.unwrap();
    let mail = EnqueueOptions::default().queue(queue("mail"));
    let mails = store.enqueue_many(&batch[..3], mail).await.unwrap();

    for analyzed in [false, true] {
        if analyzed {
            sqlx::query("ANALYZE").execute(store.pool()).await.unwrap();
        }
        let plan = plan_of(&store, crate::items::CLAIM, |q| {
            q.bind(1i64).bind(5i64).bind("req").bind(0i64).bind("mail")
        })
        .await;
        assert!(
            plan.contains("liveness_items_ready_queue (ns=? AND queue=?)")
                && !plan.contains("TEMP B-TREE"),
            "a claim from one queue reads a range of the queue index in id order:\n{plan}"
        );
    }

    let lease = store
        .acquire(
            &Key::member("w").unwrap(),
            &HolderId::new("w").unwrap(),
            Ttl::from_secs(60).unwrap(),
        )
        .await
        .unwrap();
    let got = store
        .claim_from(&lease, &[queue("mail")], 2, RequestId::next())
        .await
        .unwrap();
    let ids: Vec<ItemId> = got.iter().map(|i| i.id).collect();
    assert_eq!(ids, mails[..2]);
    let got = store
        .claim_from(
            &lease,
            &[queue("mail"), queue("bulk")],
            3,
            RequestId::next(),
        )
        .await
        .unwrap();
    let got: Vec<(ItemId, &str)> = got.iter().map(|i| (i.id, i.queue.as_str())).collect();
    assert_eq!(
        got,
        [(mails[2], "mail"), (ItemId(1), "bulk"), (ItemId(2), "bulk")]
    );
}

/// A queue name no build writes, found in a row, is a corrupt record (`Backend`), not
/// a panic: `item`, `items` and `queue_counts` say so.
#[tokio::test]
async fn a_bad_queue_name_in_a_row_is_a_corrupt_record() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualBootClock::new("boot-1", Duration::from_secs(1000));
    let store = open(&dir.path().join("bad.db"), &clock).await;
    let id = store
        .enqueue(b"x", EnqueueOptions::default())
        .await
        .unwrap();
    sqlx::query("UPDATE liveness_items SET queue = 'no spaces' WHERE id = ?1")
        .bind(i64::try_from(id.0).unwrap())
        .execute(store.pool())
        .await
        .unwrap();
    let backend = |e: Error| matches!(e, Error::Backend { .. });
    assert!(backend(store.item(id).await.unwrap_err()));
    let page = liveness_core::Page::first(10);
    let listed = store
        .items(liveness_core::ItemStateKind::Pending, page)
        .await;
    assert!(backend(listed.unwrap_err()));
    assert!(backend(store.queue_counts().await.unwrap_err()));
}

/// The times `item` answers for item `id`, checked against the listing of its state.
async fn times_of(store: &SqliteStore, id: ItemId) -> ItemTimes {
    let record = store.item(id).await.unwrap().expect("kept");
    let page = liveness_core::Page::first(100);
    let listed = store.items(record.state.kind(), page).await.unwrap();
    let listed = listed.iter().find(|r| r.item.id == id).expect("listed");
    assert_eq!(listed.times, record.times, "item and items agree");
    record.times
}

/// An item's times are the boot clock's readings, to the millisecond, of the
/// operations that moved it: its enqueue (a held-back one's too, and a batch's at one
/// instant), each claim, each failure's hand-back and the sweep of its dead owner's
/// items; a dead letter's retry leaves them. A reboot forgets them all: they were
/// counted on a clock that no longer runs, and would not compare with the new one.
#[tokio::test]
async fn an_item_s_times_follow_the_boot_clock_and_a_reboot_forgets_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("times.db");
    let clock = ManualBootClock::new("boot-1", Duration::from_secs(1000));
    let store = open(&path, &clock).await;
    let secs = Duration::from_secs;
    let at = |s: u64| StoreTime::from_epoch(secs(s));
    let ttl = Ttl::from_secs(600).unwrap();

    let id = store
        .enqueue(b"a", EnqueueOptions::default().max_attempts(2))
        .await
        .unwrap();
    let held = EnqueueOptions::default().delay(secs(3600));
    let batch = store
        .enqueue_many(&[b"b".to_vec(), b"c".to_vec()], held)
        .await
        .unwrap();
    for item in [id, batch[0], batch[1]] {
        assert_eq!(times_of(&store, item).await, ItemTimes::enqueued(at(1000)));
    }

    // Claimed, then failed: the claim's time, then the failure's.
    clock.advance(secs(10));
    let lease = store
        .acquire(
            &Key::member("w").unwrap(),
            &HolderId::new("w").unwrap(),
            ttl,
        )
        .await
        .unwrap();
    assert_eq!(store.claim(&lease, 1).await.unwrap()[0].id, id);
    let enqueued = ItemTimes::enqueued(at(1000));
    assert_eq!(
        times_of(&store, id).await,
        enqueued.with(Some(at(1010)), None)
    );
    clock.advance(secs(5));
    let lease = store.renew(&lease).await.unwrap();
    store
        .finish(&lease, id, liveness_core::Outcome::RETRY)
        .await
        .unwrap();
    assert_eq!(
        times_of(&store, id).await,
        enqueued.with(Some(at(1010)), Some(at(1015)))
    );

    // Claimed by a worker that dies, out of attempts: its sweep dead-letters it.
    clock.advance(secs(5));
    let dying = store
        .acquire(
            &Key::member("d").unwrap(),
            &HolderId::new("d").unwrap(),
            ttl,
        )
        .await
        .unwrap();
    assert_eq!(store.claim(&dying, 1).await.unwrap()[0].id, id);
    assert!(store.release(&dying).await.unwrap());
    clock.advance(secs(3));
    assert_eq!(store.sweep(dying.token).await.unwrap().dead_lettered, [id]);
    let dead = enqueued.with(Some(at(1020)), Some(at(1023)));
    assert_eq!(times_of(&store, id).await, dead);

    // A dead letter's retry leaves them.
    clock.advance(secs(7));
    store.retry_dead_letter(id).await.unwrap();
    assert_eq!(times_of(&store, id).await, dead);

    // After a reboot, none; what happens under the new boot is stamped by its clock.
    store.close().await;
    let after = ManualBootClock::new("boot-2", secs(5));
    let store = open(&path, &after).await;
    for item in [id, batch[0], batch[1]] {
        assert_eq!(times_of(&store, item).await, ItemTimes::default());
    }
    let lease = store
        .acquire(
            &Key::member("w").unwrap(),
            &HolderId::new("w").unwrap(),
            ttl,
        )
        .await
        .unwrap();
    after.advance(secs(1));
    assert_eq!(store.claim(&lease, 1).await.unwrap()[0].id, id);
    assert_eq!(
        times_of(&store, id).await,
        ItemTimes::default().with(Some(at(6)), None)
    );
    let new = store
        .enqueue(b"d", EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(times_of(&store, new).await, ItemTimes::enqueued(at(6)));
}

/// A store on `path` keeping dead letters `retention`, on `clock`.
async fn open_keeping_dead(
    path: &std::path::Path,
    clock: &ManualBootClock,
    retention: Duration,
) -> SqliteStore {
    open_configured(path, clock, |c| c.with_dead_letter_retention(retention)).await
}

/// The ids of the namespace's dead letters, lowest first.
async fn dead_letters(store: &SqliteStore) -> Vec<ItemId> {
    let page = liveness_core::Page::first(1000);
    let dead = liveness_core::ItemStateKind::DeadLettered;
    let listed = store.items(dead, page).await.unwrap();
    listed.iter().map(|r| r.item.id).collect()
}

/// Enqueues an item of one attempt, claims it under `lease` and fails it for good
/// (`finish`); its id.
async fn dead_letter_one(store: &SqliteStore, lease: &liveness_core::Lease) -> ItemId {
    let once = EnqueueOptions::default().max_attempts(1);
    let id = store.enqueue(b"fails", once).await.unwrap();
    assert_eq!(store.claim(lease, 1).await.unwrap()[0].id, id);
    let state = store
        .finish(lease, id, liveness_core::Outcome::DeadLetter)
        .await
        .unwrap();
    assert_eq!(state, Some(liveness_core::ItemState::DeadLettered));
    id
}

/// Enqueues an item of one attempt, claims it under a lease of its own on `name`,
/// releases that lease and sweeps its token: dead-lettered by the sweep; its id.
async fn dead_letter_by_sweep(store: &SqliteStore, name: &str) -> ItemId {
    let once = EnqueueOptions::default().max_attempts(1);
    let id = store.enqueue(b"orphan", once).await.unwrap();
    let ttl = Ttl::from_secs(600).unwrap();
    let key = Key::member(name).unwrap();
    let lease = store
        .acquire(&key, &HolderId::new(name).unwrap(), ttl)
        .await
        .unwrap();
    assert_eq!(store.claim(&lease, 1).await.unwrap()[0].id, id);
    assert!(store.release(&lease).await.unwrap());
    assert_eq!(store.sweep(lease.token).await.unwrap().dead_lettered, [id]);
    id
}

/// A dead letter is kept its retention by the store clock, to the millisecond, through
/// later dead-letterings; one millisecond after it, the next dead-lettering (a
/// failure's, a retry's out of attempts, a sweep's) removes it. A failure that
/// retries removes nothing, a retried dead letter is not a dead letter, and one
/// dead-lettered again counts from its new dead-lettering.
#[tokio::test]
async fn a_dead_letter_is_kept_its_retention_to_the_millisecond() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualBootClock::new("boot-1", Duration::from_secs(1000));
    let minute = Duration::from_secs(60);
    let ms = Duration::from_millis(1);
    let store = open_keeping_dead(&dir.path().join("dead.db"), &clock, minute).await;
    assert_eq!(store.capabilities().dead_letter_retention, Some(minute));
    let ttl = Ttl::from_secs(86_400).unwrap();
    let lease = store
        .acquire(
            &Key::member("w").unwrap(),
            &HolderId::new("w").unwrap(),
            ttl,
        )
        .await
        .unwrap();
    let first = dead_letter_one(&store, &lease).await;
    let retried = dead_letter_one(&store, &lease).await;
    clock.advance(minute);
    let second = dead_letter_by_sweep(&store, "s1").await;
    let whole = [first, retried, second];
    assert_eq!(dead_letters(&store).await, whole, "a whole retention");
    store.retry_dead_letter(retried).await.unwrap();

    clock.advance(ms);
    // A failure that retries dead-letters nothing, so removes nothing.
    let twice = EnqueueOptions::default().max_attempts(2);
    let again = store.enqueue(b"twice", twice).await.unwrap();
    let lease = store.renew(&lease).await.unwrap();
    let claimed = store.claim(&lease, 2).await.unwrap();
    let claimed: Vec<ItemId> = claimed.iter().map(|i| i.id).collect();
    assert_eq!(claimed, [retried, again]);
    let retry = liveness_core::Outcome::RETRY;
    let state = store.finish(&lease, again, retry).await.unwrap();
    assert_eq!(state, Some(liveness_core::ItemState::Pending));
    assert_eq!(dead_letters(&store).await, [first, second]);
    // A retry out of attempts dead-letters: the expired one goes.
    let state = store.finish(&lease, retried, retry).await.unwrap();
    assert_eq!(state, Some(liveness_core::ItemState::DeadLettered));
    assert_eq!(
        dead_letters(&store).await,
        [retried, second],
        "then removed"
    );
    assert!(store.item(first).await.unwrap().is_none());
    assert_eq!(store.claim(&lease, 1).await.unwrap()[0].id, again);
    store.complete(&lease, again).await.unwrap();

    clock.advance(minute - ms);
    let third = dead_letter_one(&store, &lease).await;
    assert_eq!(dead_letters(&store).await, [retried, second, third]);
    clock.advance(ms);
    let fourth = dead_letter_by_sweep(&store, "s2").await;
    let kept = [retried, third, fourth];
    assert_eq!(dead_letters(&store).await, kept, "counted from the new one");
    let counts = store.item_counts().await.unwrap();
    assert_eq!(
        (counts.pending, counts.owned, counts.dead_lettered),
        (0, 0, 3)
    );
}

/// The boot clock restarts at each boot, so a reboot counts every dead letter's whole
/// retention again from the new boot's clock at the first open: never removed earlier
/// than asked (here the new clock reads more: its old time would already be a
/// retention behind it), nor kept for the old boot's uptime (below: it reads less).
/// Its `finished` time is forgotten, as every item time is: the retention is not
/// counted from it.
#[tokio::test]
async fn a_reboot_keeps_every_dead_letter_its_whole_retention_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reboot_dead.db");
    let minute = Duration::from_secs(60);
    let ms = Duration::from_millis(1);
    let ttl = Ttl::from_secs(86_400).unwrap();
    let worker = Key::member("w").unwrap();
    let holder = HolderId::new("w").unwrap();

    // Dead-lettered 5 s into the old boot; the new boot's clock reads 10 minutes.
    let before = ManualBootClock::new("boot-1", Duration::from_secs(5));
    let store = open_keeping_dead(&path, &before, minute).await;
    let lease = store.acquire(&worker, &holder, ttl).await.unwrap();
    let old = dead_letter_one(&store, &lease).await;
    store.close().await;
    let after = ManualBootClock::new("boot-2", Duration::from_secs(600));
    let store = open_keeping_dead(&path, &after, minute).await;
    let times = store.item(old).await.unwrap().unwrap().times;
    assert_eq!(times, ItemTimes::default(), "its times are forgotten");
    let lease = store.acquire(&worker, &holder, ttl).await.unwrap();
    let next = dead_letter_one(&store, &lease).await;
    assert_eq!(dead_letters(&store).await, [old, next], "counted again");
    after.advance(minute);
    let last = dead_letter_one(&store, &lease).await;
    assert_eq!(dead_letters(&store).await, [old, next, last]);
    after.advance(ms);
    let newest = dead_letter_by_sweep(&store, "s").await;
    assert_eq!(dead_letters(&store).await, [last, newest], "then removed");
    store.close().await;

    // Dead-lettered 40 days into a boot; the next one's clock reads 5 s: kept a
    // retention from the open, not 40 days more.
    let long = ManualBootClock::new("boot-3", 40 * DAY);
    let store = open_keeping_dead(&path, &long, minute).await;
    let lease = store.acquire(&worker, &holder, ttl).await.unwrap();
    let old = dead_letter_one(&store, &lease).await;
    store.close().await;
    let short = ManualBootClock::new("boot-4", Duration::from_secs(5));
    let store = open_keeping_dead(&path, &short, minute).await;
    short.advance(minute + ms);
    let lease = store.acquire(&worker, &holder, ttl).await.unwrap();
    let next = dead_letter_one(&store, &lease).await;
    assert_eq!(dead_letters(&store).await, [next], "{old:?} removed");

    // Reopening under the same boot counts nothing again.
    store.close().await;
    short.advance(Duration::from_secs(59));
    let store = open_keeping_dead(&path, &short, minute).await;
    short.advance(Duration::from_millis(1_001));
    let lease = store.renew(&lease).await.unwrap();
    let later = dead_letter_one(&store, &lease).await;
    assert_eq!(
        dead_letters(&store).await,
        [later],
        "one retention, not two"
    );
}

/// The removal of expired dead letters reads a range of `liveness_items_dead_at` (the
/// partial index of dead letters by `dead_at`, migration 13) in its order, before and
/// after `ANALYZE`, with thousands of pending items and of dead letters still kept
/// beside the expired ones: its work is the rows it removes, not the namespace's.
#[tokio::test]
async fn the_removal_of_expired_dead_letters_reads_the_dead_at_index() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualBootClock::new("boot-1", Duration::from_secs(1000));
    let store = open(&dir.path().join("plan.db"), &clock).await;
    let batch: Vec<Vec<u8>> = (0..1000).map(|i| format!("b{i}").into_bytes()).collect();
    for _ in 0..4 {
        store
            .enqueue_many(&batch, EnqueueOptions::default())
            .await
            .unwrap();
    }
    // Half the items dead letters, their times spread over a range.
    sqlx::query("UPDATE liveness_items SET state = 2, dead_at = id * 10 WHERE id % 2 = 0")
        .execute(store.pool())
        .await
        .unwrap();
    for analyzed in [false, true] {
        if analyzed {
            sqlx::query("ANALYZE").execute(store.pool()).await.unwrap();
        }
        let plan = plan_of(&store, crate::items::FORGET_DEAD_LETTERS, |q| {
            q.bind(1000i64).bind(100i64)
        })
        .await;
        assert!(
            plan.contains("liveness_items_dead_at (ns=? AND dead_at<?)")
                && !plan.contains("TEMP B-TREE"),
            "the removal reads a range of the dead-letter index in its order:\n{plan}"
        );
    }
}
