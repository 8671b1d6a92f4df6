//! Tests that need the crate's insides: the keep-alive slots, a release attempt on a
//! given read, another handle's half-finished ttl change written by hand, and the
//! request counters that show what a call costs etcd. They run against the test
//! binary's shared etcd member (or a dedicated one where the revision must not move).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Txn, TxnOp};
use liveness_conformance::fixtures::acquire_member;
use liveness_conformance::fleet::wait_until;
use liveness_conformance::fresh_namespace;
use liveness_core::{
    Error, HolderId, ItemStore, Key, Lease, LeaseStatus, LeaseStore, LostCause, Namespace,
    OperatorStore, Store, Ttl,
};

use crate::core::{Calls, Current};
use crate::lease::Released;
use crate::{EtcdConfig, EtcdStore};

const DEADLINE: Duration = Duration::from_secs(30);

/// The config of the etcd member at `url`, on `namespace`.
fn config(url: &str, namespace: Namespace) -> EtcdConfig {
    EtcdConfig::from_url(url).unwrap().with_namespace(namespace)
}

pub(crate) async fn store() -> Option<EtcdStore> {
    let server = liveness_testkit::etcd::shared()?;
    Some(
        EtcdStore::connect(config(server.url(), fresh_namespace()))
            .await
            .unwrap(),
    )
}

/// `times` the shortest ttl `store` takes.
pub(crate) fn ttl_times(store: &EtcdStore, times: u32) -> Ttl {
    Ttl::new(store.capabilities().min_ttl * times).unwrap()
}

/// What `op` answers, and how many KV requests `store` made while it ran.
async fn kv_requests<T>(store: &EtcdStore, op: impl std::future::Future<Output = T>) -> (T, u64) {
    let before = Calls::read(&store.inner.calls.kv);
    let answer = op.await;
    (answer, Calls::read(&store.inner.calls.kv) - before)
}

/// The full scans of the namespace's leases `store`'s watch has made.
fn scans(store: &EtcdStore) -> u64 {
    store
        .inner
        .expiry
        .scans
        .load(std::sync::atomic::Ordering::Relaxed)
}

pub(crate) fn holder() -> HolderId {
    HolderId::new("h").unwrap()
}

/// Leases on the members `{prefix}0` to `{prefix}{n - 1}`, acquired one after the other.
async fn acquire_members(store: &EtcdStore, prefix: &str, n: usize, ttl: Ttl) -> Vec<Lease> {
    let mut leases = Vec::with_capacity(n);
    for i in 0..n {
        let key = Key::member(&format!("{prefix}{i}")).unwrap();
        leases.push(store.acquire(&key, &holder(), ttl).await.unwrap());
    }
    leases
}

/// `lease`'s record as etcd has it now (it must still be `lease`'s).
async fn current(store: &EtcdStore, lease: &Lease) -> Current {
    store
        .snapshot(&lease.key)
        .await
        .unwrap()
        .check(lease)
        .unwrap()
}

/// The role `role`, led by the test's holder on `store`.
async fn lead(store: &EtcdStore, ttl: Ttl) -> Lease {
    let role = Key::leader("role").unwrap();
    store.acquire(&role, &holder(), ttl).await.unwrap()
}

/// etcd ends `lease`'s etcd lease (as its countdown would): expired, not yet reaped.
async fn expire(store: &EtcdStore, lease: &Lease) {
    let current = current(store, lease).await;
    assert!(store.revoke(current.rec.lease_id).await.unwrap());
}

/// What another handle's `renew` with a new ttl does — the lease-bound key and the
/// record move to a fresh etcd lease of `ttl` — except that the revoke of the old
/// etcd lease never happens (that process stopped, or the revoke failed). Returns
/// the old etcd lease's id.
async fn move_without_revoke(store: &EtcdStore, lease: &Lease, ttl: Ttl) -> i64 {
    let current = current(store, lease).await;
    let id = store.grant(ttl).await.unwrap();
    let txn = store.move_txn(lease, &current, id, ttl);
    let resp = store.txn(txn).await.unwrap();
    assert!(resp.succeeded());
    current.rec.lease_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_refuses_a_lease_forged_for_another_key() {
    let Some(store) = store().await else { return };
    let ttl = ttl_times(&store, 1);
    let a = Key::member("a").unwrap();
    let b = Key::member("b").unwrap();
    let la = store.acquire(&a, &holder(), ttl).await.unwrap();
    let lb = store.acquire(&b, &holder(), ttl).await.unwrap();
    // The real lease is renewed once on this handle: its keep-alive slot exists.
    store.renew(&la).await.unwrap();
    // A's token on B's key: it must not extend A's etcd lease and answer for B.
    let mut forged = la.clone();
    forged.key = b.clone();
    match store.renew(&forged).await {
        Err(Error::Lost {
            reason: LostCause::Superseded,
            ..
        }) => {}
        other => panic!("a forged lease was renewed: {other:?}"),
    }
    assert!(!store.release(&forged).await.unwrap());
    // Both real leases are untouched.
    store.renew(&la).await.unwrap();
    store.renew(&lb).await.unwrap();
    assert!(store.release(&la).await.unwrap());
    assert!(store.release(&lb).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_does_not_keep_an_etcd_lease_the_key_moved_away_from() {
    let Some(store) = store().await else { return };
    let min = store.capabilities().min_ttl;
    let ttl = Ttl::new(min).unwrap();
    let key = Key::member("m").unwrap();
    let lease = store.acquire(&key, &holder(), ttl).await.unwrap();
    store.renew(&lease).await.unwrap();
    // Another handle changed the ttl; the old etcd lease lives on, bound to nothing.
    let old = move_without_revoke(&store, &lease, Ttl::new(min * 3).unwrap()).await;
    assert!(store.time_to_live(old).await.unwrap() >= 0);
    // This handle's renewal (ttl `ttl`) must renew the etcd lease the key is bound
    // to — moving it back to `ttl` — not the stray one its slot still names.
    let renewed = store.renew(&lease).await.unwrap();
    assert_eq!(renewed.token, lease.token);
    let info = store.inspect(&key).await.unwrap().unwrap();
    assert_eq!(info.ttl, ttl, "the renewal kept the stray etcd lease alive");
    assert!(matches!(info.status, LeaseStatus::Live { .. }));
    // And the stray one is revoked (in the background).
    wait_until("the stray etcd lease is revoked", DEADLINE, || async {
        store.time_to_live(old).await.unwrap() < 0
    })
    .await;
    assert!(store.release(&lease).await.unwrap());
    assert!(store.inspect(&key).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_does_not_answer_true_while_the_lease_lives_on() {
    let Some(store) = store().await else { return };
    let min = store.capabilities().min_ttl;
    let key = Key::member("m").unwrap();
    let lease = store
        .acquire(&key, &holder(), Ttl::new(min).unwrap())
        .await
        .unwrap();
    // The release reads the record, then another handle moves the lease to a new
    // etcd lease (its revoke of the old one fails), then the release revokes the
    // etcd lease it read — the old one — and tries to delete the record.
    let snap = store.snapshot(&key).await.unwrap();
    move_without_revoke(&store, &lease, Ttl::new(min * 3).unwrap()).await;
    let attempt = store.release_from(&lease, snap).await.unwrap();
    let info = store.inspect(&key).await.unwrap();
    assert!(
        matches!(&info, Some(i) if matches!(i.status, LeaseStatus::Live { .. })),
        "{info:?}"
    );
    assert_eq!(
        attempt,
        Released::Retry,
        "release said it ended a lease that is live"
    );
    // The whole release ends it.
    assert!(store.release(&lease).await.unwrap());
    assert!(store.inspect(&key).await.unwrap().is_none());
}

/// A checker round that runs while a release is between its two steps declares no
/// death: the member left, and the history, the events and the metrics say so
/// (`Released`), never `Reaped`. A release that first ended the etcd lease and then
/// deleted the record showed the checker "record present, lease-bound key gone" in
/// between: an expired lease, reaped as a death.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checker_between_the_steps_of_a_release_declares_no_death() {
    use liveness_core::{Checker, CheckerConfig, DeathCause};
    let Some(store) = store().await else { return };
    let key = Key::member("leaving").unwrap();
    let lease = store
        .acquire(&key, &holder(), ttl_times(&store, 10))
        .await
        .unwrap();
    let (reached, resume) = store.inner.between_release_steps.arm();
    let releasing = {
        let (store, lease) = (store.clone(), lease.clone());
        tokio::spawn(async move { store.release(&lease).await })
    };
    reached.await.unwrap();
    let checker = Checker::new(Arc::new(store.clone()), CheckerConfig::default());
    let round = checker.round().await.unwrap();
    resume.send(()).unwrap();
    assert!(
        releasing.await.unwrap().unwrap(),
        "the release answers true"
    );
    assert!(
        round.deaths.is_empty(),
        "a checker declared a released lease dead: {:?}",
        round.deaths
    );
    let deaths = store.deaths(None, 10).await.unwrap();
    assert_eq!(deaths.len(), 1, "{deaths:?}");
    assert_eq!(deaths[0].token, lease.token);
    assert_eq!(deaths[0].cause, DeathCause::Released, "{deaths:?}");
    assert!(store.inspect(&key).await.unwrap().is_none());
}

/// An `expired` call dropped while it runs the full scan its handle owes (the handle
/// watched for `wakeups` before it checked, so its watch started without a scan)
/// leaves the scan owed: the next call lists a lease that expired before the watch
/// began, which no DELETE the watch sees will ever name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_expired_call_leaves_its_scan_owed() {
    let Some(server) = liveness_testkit::etcd::shared() else {
        return;
    };
    let config = config(server.url(), fresh_namespace());
    let store = EtcdStore::connect(config.clone()).await.unwrap();
    let ttl = ttl_times(&store, 1);
    let key = Key::member("gone").unwrap();
    let lease = store.acquire(&key, &holder(), ttl).await.unwrap();
    expire(&store, &lease).await;
    let checker = EtcdStore::connect(config).await.unwrap();
    let _wakeups = checker.wakeups();
    wait_until("the watch starts without a scan", DEADLINE, || async {
        checker.inner.expiry.scan_owed()
    })
    .await;
    // Polled once, then dropped: the scan is sent, its answer never read.
    let dropped = futures::FutureExt::now_or_never(checker.expired(key.space(), 10));
    assert!(dropped.is_none(), "the call was not dropped mid-way");
    let listed = checker.expired(key.space(), 10).await.unwrap();
    assert!(
        listed.iter().any(|l| l.token == lease.token),
        "a lease that expired before the watch began is never listed: {listed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_slots_of_abandoned_leases_are_dropped() {
    let Some(store) = store().await else { return };
    let ttl = ttl_times(&store, 1);
    // Three members renew once and are dropped without releasing.
    for name in ["a", "b", "c"] {
        let lease = store
            .acquire(&Key::member(name).unwrap(), &holder(), ttl)
            .await
            .unwrap();
        store.renew(&lease).await.unwrap();
    }
    // One member keeps renewing.
    let mut kept = store
        .acquire(&Key::member("kept").unwrap(), &holder(), ttl)
        .await
        .unwrap();
    kept = store.renew(&kept).await.unwrap();
    assert_eq!(store.inner.slots.len(), 4);
    wait_until(
        "the abandoned leases' keep-alive slots are dropped",
        DEADLINE,
        || {
            let store = store.clone();
            let lease = kept.clone();
            async move {
                tokio::time::sleep(ttl.duration() / 4).await;
                store.renew(&lease).await.unwrap();
                store.inner.slots.len() == 1
            }
        },
    )
    .await;
    kept = store.renew(&kept).await.unwrap();
    assert!(store.release(&kept).await.unwrap());
}

/// A checker round (`expired`, then `next_expiry`) costs reads, never raft writes:
/// its watch sync asks the watch stream for progress instead of writing a sync key
/// (which would be two writes per round per checker, delivered to every watcher).
/// A dedicated member, so that no other test's writes move its revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checker_round_writes_nothing() {
    let Some(server) = liveness_testkit::etcd::start() else {
        return;
    };
    let store = EtcdStore::connect(config(server.url(), fresh_namespace()))
        .await
        .unwrap();
    let ttl = ttl_times(&store, 1);
    let key = Key::member("w").unwrap();
    store.acquire(&key, &holder(), ttl).await.unwrap();
    let space = key.space().clone();
    // The first round starts the watch (its own start may read, never write).
    store.expired(&space, 10).await.unwrap();
    store.next_expiry(&space).await.unwrap();
    let before = revision_now(&store).await;
    for _ in 0..5 {
        store.expired(&space, 10).await.unwrap();
        store.next_expiry(&space).await.unwrap();
    }
    let after = revision_now(&store).await;
    assert_eq!(
        after,
        before,
        "5 checker rounds wrote {} revisions",
        after - before
    );
}

/// A full batch claim fits etcd's limit on the operations of one transaction although
/// it also writes the token's claim high-water mark (its last body is read right
/// after), answers every item with its payload, and the mark is forgotten by the
/// token's sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_batch_claim_writes_the_mark_and_the_sweep_forgets_it() {
    use liveness_core::{EnqueueOptions, RequestId};
    let Some(store) = store().await else { return };
    let max = store.capabilities().max_batch;
    assert_eq!(max, crate::MAX_BATCH);
    for i in 0..max + 1 {
        store
            .enqueue(format!("p{i}").as_bytes(), EnqueueOptions::default())
            .await
            .unwrap();
    }
    let key = Key::member("full").unwrap();
    let ttl = ttl_times(&store, 1);
    let lease = store.acquire(&key, &holder(), ttl).await.unwrap();
    let request = RequestId::next();
    let items = store.claim_request(&lease, max, request).await.unwrap();
    assert_eq!(items.len(), max);
    for (i, item) in items.iter().enumerate() {
        assert_eq!(item.payload, format!("p{i}").into_bytes());
    }
    // The repeat answers the same batch, bodies included.
    assert_eq!(
        store.claim_request(&lease, max, request).await.unwrap(),
        items
    );
    let mark = store.keys().claim_mark(lease.token);
    let read = |store: EtcdStore, mark: String| async move {
        let resp = store
            .txn(Txn::new().and_then(vec![TxnOp::get(mark.as_str(), None)]))
            .await
            .unwrap();
        crate::core::first_range(&resp).len()
    };
    assert_eq!(read(store.clone(), mark.clone()).await, 1);
    assert!(store.release(&lease).await.unwrap());
    let moved = store.sweep(lease.token).await.unwrap();
    assert_eq!(moved.requeued.len(), max);
    assert_eq!(
        read(store.clone(), mark).await,
        0,
        "the mark outlived its token"
    );
}

/// `queue_counts` reads at one revision: each queue's pending index counted, the
/// held-back, owned and dead-lettered items scanned in pages (a page of one or two
/// keys here) by the queue their values name; whatever the page, the same answer,
/// adding up to `item_counts`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_counts_read_one_revision_whatever_the_page() {
    use liveness_core::{EnqueueOptions, ItemCounts, Outcome, QueueName, RequestId};
    let Some(store) = store().await else { return };
    let q = |name: &str| QueueName::new(name).unwrap();
    let on = |name: &str| EnqueueOptions::default().queue(q(name));
    let payloads = |n: usize| vec![b"x".to_vec(); n];
    store
        .enqueue_many(&payloads(3), EnqueueOptions::default())
        .await
        .unwrap();
    let mail = store.enqueue_many(&payloads(2), on("mail")).await.unwrap();
    let reports = store
        .enqueue_many(&payloads(3), on("reports"))
        .await
        .unwrap();
    // Held back, beside their timers: pending in their queues.
    let later = Duration::from_secs(30);
    let held = store.enqueue(b"later", on("a").delay(later)).await.unwrap();
    store
        .enqueue(b"later", on("mail").delay(later))
        .await
        .unwrap();
    let lease = store
        .acquire(&Key::member("w").unwrap(), &holder(), ttl_times(&store, 5))
        .await
        .unwrap();
    let got = store
        .claim_from(
            &lease,
            &[q("reports"), QueueName::DEFAULT],
            4,
            RequestId::next(),
        )
        .await
        .unwrap();
    assert_eq!(got.len(), 4);
    store
        .finish(&lease, reports[0], Outcome::DeadLetter)
        .await
        .unwrap();
    let want = vec![
        (q("a"), ItemCounts::new(1, 0, 0)),
        (QueueName::DEFAULT, ItemCounts::new(2, 1, 0)),
        (q("mail"), ItemCounts::new(3, 0, 0)),
        (q("reports"), ItemCounts::new(0, 2, 1)),
    ];
    let pairs = |counts: Vec<liveness_core::QueueCounts>| {
        counts
            .into_iter()
            .map(|c| (c.queue, c.counts))
            .collect::<Vec<_>>()
    };
    assert_eq!(pairs(store.queue_counts().await.unwrap()), want);
    for page in [1, 2] {
        let counts = store.queue_counts_at(page).await.unwrap().unwrap();
        assert_eq!(pairs(counts), want, "pages of {page}");
    }
    let total = store.item_counts().await.unwrap();
    assert_eq!(total, ItemCounts::new(6, 3, 1));

    // A cancel takes a pending item out of its own queue's index (or from beside its
    // timer), and a dead letter's retry puts it back in its own queue.
    for id in [mail[0], held] {
        let state = store.cancel(id).await.unwrap();
        assert_eq!(state, Some(liveness_core::ItemState::Pending));
    }
    let entry = store.keys().pending(q("mail"), mail[0].0);
    assert!(store.get_one(&entry).await.unwrap().is_none());
    store.retry_dead_letter(reports[0]).await.unwrap();
    let want = vec![
        (QueueName::DEFAULT, ItemCounts::new(2, 1, 0)),
        (q("mail"), ItemCounts::new(2, 0, 0)),
        (q("reports"), ItemCounts::new(1, 2, 0)),
    ];
    assert_eq!(pairs(store.queue_counts().await.unwrap()), want);
    let got = store
        .claim_from(&lease, &[q("reports")], 4, RequestId::next())
        .await
        .unwrap();
    assert_eq!(
        got.iter().map(|i| (i.id, i.queue)).collect::<Vec<_>>(),
        [(reports[0], q("reports"))]
    );
}

/// A second handle on `store`'s namespace (another process, as far as etcd knows).
async fn other(store: &EtcdStore) -> EtcdStore {
    let server = liveness_testkit::etcd::shared().unwrap();
    EtcdStore::connect(config(server.url(), store.namespace().clone()))
        .await
        .unwrap()
}

/// The namespace's current etcd revision, by one read.
async fn revision_now(store: &EtcdStore) -> i64 {
    let resp = store.inner.kv.clone().get("x", None).await.unwrap();
    resp.header().unwrap().revision()
}

/// Waits until `store`'s expiry watch has delivered every event up to now (progress
/// notifications: other tests write to the shared member too).
async fn synced(store: &EtcdStore) {
    let now = revision_now(store).await;
    let give_up = tokio::time::Instant::now() + DEADLINE;
    loop {
        store.inner.expiry.request_progress();
        if store
            .inner
            .expiry
            .caught_up(now, Duration::from_millis(500))
            .await
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "the watch never caught up"
        );
    }
}

/// An `acquire` that loses (the key is held live by someone else) costs one read:
/// it reads first and grants an etcd lease only for a key it may take (a grant and
/// a revoke would be two raft writes for an answer a read gives).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_losing_acquire_grants_no_etcd_lease() {
    let Some(store) = store().await else { return };
    let ttl = ttl_times(&store, 5);
    let held = lead(&store, ttl).await;
    let candidate = other(&store).await;
    let grants = Calls::read(&candidate.inner.calls.grants);
    for _ in 0..3 {
        match candidate
            .acquire(&held.key, &HolderId::new("c").unwrap(), ttl)
            .await
        {
            Err(Error::Held { token, .. }) => assert_eq!(token, held.token),
            other => panic!("a held key was acquired: {other:?}"),
        }
    }
    assert_eq!(
        Calls::read(&candidate.inner.calls.grants) - grants,
        0,
        "3 losing acquires granted etcd leases"
    );
    // A free key still costs one grant.
    let free = Key::leader("free").unwrap();
    let lease = candidate.acquire(&free, &holder(), ttl).await.unwrap();
    assert_eq!(Calls::read(&candidate.inner.calls.grants) - grants, 1);
    assert!(candidate.release(&lease).await.unwrap());
    assert!(store.release(&held).await.unwrap());
}

/// A one-entry call reaches the store as its batch of one, and costs no more than
/// the single step it replaced: an acquire (of a free key, or over an expired lease:
/// the death counter is read with the key) is one read, one grant and one
/// transaction; a reap is one read and one transaction; the sweep of a released
/// token with a few items is two reads (the token's keys, its death record) and one
/// transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_entry_call_costs_its_batch_of_one() {
    use liveness_core::{EnqueueOptions, RequestId};
    let Some(store) = store().await else { return };
    let ttl = ttl_times(&store, 5);
    let key = Key::member("one").unwrap();
    let grants = Calls::read(&store.inner.calls.grants);
    let (lease, requests) = kv_requests(&store, store.acquire(&key, &holder(), ttl)).await;
    let lease = lease.unwrap();
    assert_eq!(
        requests, 2,
        "an acquire of a free key made {requests} KV requests"
    );
    expire(&store, &lease).await;
    let (again, requests) = kv_requests(&store, store.acquire(&key, &holder(), ttl)).await;
    let again = again.unwrap();
    assert!(again.token > lease.token);
    assert_eq!(
        requests, 2,
        "an acquire over an expired lease made {requests} KV requests"
    );
    assert_eq!(Calls::read(&store.inner.calls.grants) - grants, 2);
    expire(&store, &again).await;
    let (reaped, requests) = kv_requests(&store, store.reap(&key, again.token)).await;
    assert!(reaped.unwrap());
    assert_eq!(requests, 2, "a reap made {requests} KV requests");

    for i in 0..2 {
        store
            .enqueue(format!("j{i}").as_bytes(), EnqueueOptions::default())
            .await
            .unwrap();
    }
    let worker = store
        .acquire(&Key::member("worker").unwrap(), &holder(), ttl)
        .await
        .unwrap();
    let claimed = store
        .claim_request(&worker, 2, RequestId::next())
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    assert!(store.release(&worker).await.unwrap());
    let (moved, requests) = kv_requests(&store, store.sweep(worker.token)).await;
    assert_eq!(moved.unwrap().requeued.len(), 2);
    assert_eq!(requests, 3, "a sweep made {requests} KV requests");
    let dead = store.dead_tokens(32).await.unwrap();
    assert!(dead.iter().all(|d| d.token != worker.token));
}

/// `Election::campaign` subscribes to `wakeups` and acquires. A handle that does not
/// check (no `expired` / `next_expiry`) watches without a scan and wakes only for
/// the keys it was refused: a candidate process must not scan every lease of the
/// namespace, nor wake on every member's death.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_scans_nothing_and_wakes_only_for_its_role() {
    let Some(store) = store().await else { return };
    let ttl = ttl_times(&store, 5);
    let leader = lead(&store, ttl).await;
    let mut members = acquire_members(&store, "m", 5, ttl).await;
    let candidate = other(&store).await;
    let mut wake = candidate.wakeups().unwrap();
    wake.borrow_and_update();
    let me = HolderId::new("c").unwrap();
    assert!(matches!(
        candidate.acquire(&leader.key, &me, ttl).await,
        Err(Error::Held { .. })
    ));
    // The watch runs (it saw the revision of the refused acquire's read at least).
    synced(&candidate).await;
    // Members die (released here): the candidate's watch sees it, and does not wake.
    for m in members.drain(..) {
        assert!(store.release(&m).await.unwrap());
    }
    synced(&candidate).await;
    assert!(
        !wake.has_changed().unwrap(),
        "the candidate woke for members' deaths"
    );
    // The leader goes: the candidate wakes, and takes the role.
    assert!(store.release(&leader).await.unwrap());
    tokio::time::timeout(DEADLINE, wake.changed())
        .await
        .expect("the candidate did not wake when its role was released")
        .unwrap();
    let lease = candidate.acquire(&leader.key, &me, ttl).await.unwrap();
    assert_eq!(
        scans(&candidate),
        0,
        "a candidate scanned the namespace's leases"
    );
    assert!(candidate.release(&lease).await.unwrap());
}

/// `renew_many` of leases this handle renews already is one read of
/// their lease-bound keys beside their keep-alives (sent all at once), not one read
/// per lease after the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_many_reads_once_for_the_batch() {
    let Some(store) = store().await else { return };
    let leases = acquire_members(&store, "r", 10, ttl_times(&store, 5)).await;
    for lease in &leases {
        store.renew(lease).await.unwrap();
    }
    // One of them released meanwhile: it answers Lost alone.
    assert!(store.release(&leases[3]).await.unwrap());
    let (answers, reads) = kv_requests(&store, store.renew_many(&leases)).await;
    let answers = answers.unwrap();
    for (i, answer) in answers.iter().enumerate() {
        match (i, answer) {
            (3, Err(Error::Lost { .. })) => {}
            (3, other) => panic!("a released lease answered {other:?}"),
            (_, Ok(l)) => assert_eq!(l.token, leases[i].token),
            (_, Err(e)) => panic!("lease {i} was not renewed: {e}"),
        }
    }
    // The batch's read, and the released lease's own read of why.
    assert_eq!(reads, 2, "renew_many of 10 leases made {reads} KV requests");
    for lease in leases.iter().filter(|l| l.token != leases[3].token) {
        assert!(store.release(lease).await.unwrap());
    }
}

/// `reap_many` is one read and one transaction for a batch, not a
/// read, a counter read and a transaction per lease; each entry answers what `reap`
/// alone would (a repeat and a live lease: false).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reap_many_is_one_read_and_one_transaction() {
    use liveness_core::FencingToken;
    let Some(store) = store().await else { return };
    let ttl = ttl_times(&store, 5);
    let mut batch: Vec<(Key, FencingToken)> = Vec::new();
    for lease in acquire_members(&store, "d", 10, ttl).await {
        expire(&store, &lease).await;
        batch.push((lease.key, lease.token));
    }
    let live = acquire_member(&store, "alive", "h", ttl).await;
    batch.push((live.key.clone(), live.token));
    batch.push(batch[0].clone());
    let (answers, requests) = kv_requests(&store, store.reap_many(&batch)).await;
    let answers: Vec<bool> = answers.unwrap().into_iter().map(Result::unwrap).collect();
    let mut expected = vec![true; 10];
    expected.extend([false, false]);
    assert_eq!(answers, expected);
    // The batch's read and transaction, and the repeat's reap alone (`reap_one`: one
    // read).
    assert_eq!(
        requests, 3,
        "reap_many of 12 entries made {requests} KV requests"
    );
    for (key, token) in &batch[..10] {
        assert!(store.inspect(key).await.unwrap().is_none());
        store.sweep(*token).await.unwrap();
    }
    let deaths = store.deaths(None, 32).await.unwrap();
    let mut reaped: Vec<u64> = deaths
        .iter()
        .filter(|d| d.cause == liveness_core::DeathCause::Reaped)
        .map(|d| d.token.0)
        .collect();
    reaped.sort_unstable();
    let mut tokens: Vec<u64> = batch[..10].iter().map(|(_, t)| t.0).collect();
    tokens.sort_unstable();
    assert_eq!(reaped, tokens, "one death record per reaped lease");
    assert!(store.release(&live).await.unwrap());
}

/// `sweep_many` sweeps a round's dead tokens in two reads
/// and one transaction (each token's items moved and its death record completed
/// in one step), not two to four round trips per token; each token answers what
/// `sweep` alone would (a repeat and a live token: nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_many_is_two_reads_and_one_transaction() {
    use liveness_core::{EnqueueOptions, FencingToken, RequestId};
    let Some(store) = store().await else { return };
    let ttl = ttl_times(&store, 5);
    for i in 0..12 {
        store
            .enqueue(format!("i{i}").as_bytes(), EnqueueOptions::default())
            .await
            .unwrap();
    }
    let mut tokens: Vec<FencingToken> = Vec::new();
    for i in 0..6 {
        let key = Key::member(&format!("q{i}")).unwrap();
        let lease = store.acquire(&key, &holder(), ttl).await.unwrap();
        let items = store
            .claim_request(&lease, 2, RequestId::next())
            .await
            .unwrap();
        assert_eq!(items.len(), 2);
        assert!(store.release(&lease).await.unwrap());
        tokens.push(lease.token);
    }
    let live = acquire_member(&store, "alive", "h", ttl).await;
    tokens.push(live.token);
    tokens.push(tokens[0]);
    let (answers, requests) = kv_requests(&store, store.sweep_many(&tokens)).await;
    let answers = answers.unwrap();
    let moved: Vec<usize> = answers
        .into_iter()
        .map(|a| {
            let a = a.unwrap();
            assert!(a.dead_lettered.is_empty());
            a.requeued.len()
        })
        .collect();
    assert_eq!(moved, vec![2, 2, 2, 2, 2, 2, 0, 0]);
    // Two reads and one transaction, and the repeat's sweep alone (`sweep`: one read
    // that finds the token gone).
    assert_eq!(
        requests, 4,
        "sweep_many of 8 tokens made {requests} KV requests"
    );
    assert_eq!(store.item_counts().await.unwrap().pending, 12);
    assert!(store.dead_tokens(32).await.unwrap().is_empty());
    for death in store.deaths(None, 32).await.unwrap() {
        if tokens[..6].contains(&death.token) {
            let swept = death.swept.expect("the sweep's tally was not recorded");
            assert_eq!((swept.requeued, swept.dead_lettered), (2, 0));
        }
    }
    assert!(store.release(&live).await.unwrap());
}

/// `next_expiry` reads the live lease it found last by its key while that lives: no
/// range after the first round. etcd 3.4 serves a range with a limit by walking the
/// whole range's index, so a range per round would cost O(live leases in the space).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_expiry_reads_its_probe_by_key() {
    let Some(store) = store().await else { return };
    let leases = acquire_members(&store, "n", 3, ttl_times(&store, 5)).await;
    let space = leases[0].key.space().clone();
    assert!(store.next_expiry(&space).await.unwrap().is_some());
    let ranges = Calls::read(&store.inner.calls.ranges);
    for _ in 0..3 {
        assert!(store.next_expiry(&space).await.unwrap().is_some());
    }
    assert_eq!(
        Calls::read(&store.inner.calls.ranges) - ranges,
        0,
        "next_expiry ranged over the space again"
    );
    // The probe lease ends: the next call finds another one; the last: None.
    for lease in &leases {
        assert!(store.next_expiry(&space).await.unwrap().is_some());
        assert!(store.release(lease).await.unwrap());
    }
    assert_eq!(store.next_expiry(&space).await.unwrap(), None);
}

/// A handle whose watch started without a scan (it only waited, as an election
/// candidate does) and that starts checking later still lists every lease that
/// expired before: its first `expired` runs the scan it skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_handle_that_starts_checking_misses_no_expiry() {
    let Some(store) = store().await else { return };
    let ttl = ttl_times(&store, 5);
    let waiter = other(&store).await;
    let _wake = waiter.wakeups().unwrap();
    synced(&waiter).await;
    let key = Key::member("gone").unwrap();
    let lease = store.acquire(&key, &holder(), ttl).await.unwrap();
    expire(&store, &lease).await;
    // The waiting handle's watch saw that DELETE and kept no candidate for it.
    synced(&waiter).await;
    assert_eq!(scans(&waiter), 0);
    let listed = waiter.expired(key.space(), 10).await.unwrap();
    assert_eq!(
        listed.iter().map(|e| e.token).collect::<Vec<_>>(),
        vec![lease.token],
        "the expiry before the handle checked was missed"
    );
    assert_eq!(
        waiter.next_expiry(key.space()).await.unwrap(),
        Some(Duration::ZERO)
    );
    assert!(waiter.reap(&key, lease.token).await.unwrap());
}

/// `acquire_many` sends its grants and transactions pipelined on the
/// one connection (every entry's request in flight before the first answers), not
/// one acquire after the other, and still answers each entry as `acquire` would:
/// free keys taken with tokens growing in entry order, expired leases taken over
/// (each in the dead set with its own death record, the death counter chained
/// through the batch), a live key `Held`, a second entry on a key the batch took
/// `Held` by that lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_many_pipelines_the_batch() {
    use liveness_core::{Acquire, DeathCause, FencingToken};
    use std::sync::atomic::Ordering;
    let Some(store) = store().await else { return };
    let ttl = ttl_times(&store, 5);
    let held = store
        .acquire(&Key::member("held").unwrap(), &holder(), ttl)
        .await
        .unwrap();
    let expired = acquire_members(&store, "x", 3, ttl).await;
    for lease in &expired {
        expire(&store, lease).await;
    }
    let fresh = 20;
    let mut asks: Vec<Acquire> = (0..fresh)
        .map(|i| Acquire::new(Key::member(&format!("k{i}")).unwrap(), holder(), ttl))
        .collect();
    for (i, lease) in expired.iter().enumerate() {
        asks.insert(3 + 5 * i, Acquire::new(lease.key.clone(), holder(), ttl));
    }
    asks.push(Acquire::new(held.key.clone(), holder(), ttl));
    asks.push(Acquire::new(asks[0].key.clone(), holder(), ttl));
    let takers = fresh + expired.len();
    store.inner.calls.most_in_flight.store(0, Ordering::Relaxed);
    let (answers, requests) = kv_requests(&store, store.acquire_many(&asks)).await;
    let answers = answers.unwrap();
    let most = store.inner.calls.most_in_flight.load(Ordering::Relaxed);
    eprintln!(
        "acquire_many of {} entries: {requests} KV requests, at most {most} in flight",
        asks.len()
    );
    assert!(
        most >= takers as u64,
        "acquire_many of {} entries had at most {most} requests in flight: one after the other",
        asks.len()
    );
    let mut last = FencingToken(0);
    for (i, answer) in answers[..takers].iter().enumerate() {
        let lease = answer.as_ref().unwrap_or_else(|e| panic!("entry {i}: {e}"));
        assert!(lease.token > last, "tokens grow in entry order");
        assert_eq!(lease.key, asks[i].key);
        last = lease.token;
        let info = store.inspect(&lease.key).await.unwrap().unwrap();
        assert_eq!(info.token, lease.token);
        assert!(info.is_live());
    }
    match &answers[takers] {
        Err(Error::Held { token, .. }) => assert_eq!(*token, held.token),
        other => panic!("a live key answered {other:?}"),
    }
    match &answers[takers + 1] {
        Err(Error::Held { token, .. }) => {
            assert_eq!(*token, answers[0].as_ref().unwrap().token);
        }
        other => panic!("a second entry on a key the batch took answered {other:?}"),
    }
    let dead = store.dead_tokens(32).await.unwrap();
    let deaths = store.deaths(None, 32).await.unwrap();
    for lease in &expired {
        assert!(dead.iter().any(|d| d.token == lease.token));
        let death = deaths
            .iter()
            .find(|d| d.token == lease.token)
            .expect("a death record per lease taken over");
        assert_eq!(death.cause, DeathCause::Superseded);
    }
    let mut seqs: Vec<u64> = deaths.iter().map(|d| d.seq).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), deaths.len(), "death seqs are distinct");
}

/// The keys under `item/q/` (held-back items and their timers) and the etcd leases
/// they are bound to.
async fn held_keys(store: &EtcdStore) -> (Vec<crate::keys::Held>, Vec<i64>) {
    let k = store.keys();
    let kvs = store
        .range(k.helds(), crate::core::under(1000).with_keys_only())
        .await
        .unwrap();
    let mut leases: Vec<i64> = kvs
        .iter()
        .map(|kv| kv.lease())
        .filter(|l| *l != 0)
        .collect();
    leases.dedup();
    let held = kvs
        .iter()
        .map(|kv| k.parse_held(kv.key()).unwrap())
        .collect();
    (held, leases)
}

/// A delay shorter than etcd's minimum lease ttl still holds the item back for that
/// minimum (never early; coarser), one `enqueue_many` shares one timer lease, two
/// handles claiming at once each get a due item exactly once, and no timer key or
/// timer lease outlives its items: claimed, completed, retried at once, swept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_back_items_wait_for_etcd_and_leave_no_timer_behind() {
    use crate::keys::Held;
    use liveness_core::{EnqueueOptions, ItemId, Outcome};
    let Some(store) = store().await else { return };
    let second = other(&store).await;
    let min = store.capabilities().min_ttl;
    let delay = Duration::from_millis(300);
    assert!(delay < min, "etcd's minimum ttl is {min:?}");
    let later = EnqueueOptions::default().delay(delay);

    let start = tokio::time::Instant::now();
    let one = store.enqueue(b"one", later).await.unwrap();
    let many = store
        .enqueue_many(&[b"a".to_vec(), b"b".to_vec(), b"c".to_vec()], later)
        .await
        .unwrap();
    let (held, leases) = held_keys(&store).await;
    let timers = held
        .iter()
        .filter(|h| matches!(h, Held::Timer { .. }))
        .count();
    assert_eq!((held.len(), timers), (6, 2), "{held:?}");
    assert_eq!(leases.len(), 2, "one timer lease per call: {leases:?}");
    assert_eq!(store.item_counts().await.unwrap().pending, 4);
    let left = store.next_due().await.unwrap().expect("held back");
    assert!(left <= min, "due in {left:?}");

    // Two handles claim until every item is theirs; none is claimed before etcd's
    // minimum ttl has passed, none twice.
    let (a, b) = (
        acquire_member(&store, "first", "h", ttl_times(&store, 30)).await,
        acquire_member(&second, "second", "h", ttl_times(&store, 30)).await,
    );
    let mut claimed: Vec<ItemId> = Vec::new();
    let mut first_due = None;
    while claimed.len() < 4 {
        assert!(start.elapsed() < DEADLINE, "claimed only {claimed:?}");
        let (x, y) = tokio::join!(store.claim(&a, 10), second.claim(&b, 10));
        let got: Vec<ItemId> = x.unwrap().iter().chain(&y.unwrap()).map(|i| i.id).collect();
        if !got.is_empty() {
            let at = start.elapsed();
            first_due.get_or_insert(at);
            assert!(at >= min, "claimed {got:?} after {at:?}, held back {min:?}");
        }
        claimed.extend(got);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    claimed.sort();
    let mut all = vec![one];
    all.extend(&many);
    assert_eq!(claimed, all, "each item exactly once");
    println!(
        "a {delay:?} delay was claimable after {:?} (etcd's minimum ttl {min:?})",
        first_due.unwrap()
    );
    assert_eq!(held_keys(&store).await, (Vec::new(), Vec::new()));
    for lease in leases {
        assert_eq!(store.time_to_live(lease).await.unwrap(), -1, "timer lease");
    }
    assert_eq!(store.next_due().await.unwrap(), None);

    // A retry with a wait holds the item back by a timer of its own, until due.
    let owner = |token| if token == a.token { &a } else { &b };
    let mut owned = Vec::new();
    for id in &all {
        match store.item(*id).await.unwrap().unwrap().state {
            liveness_core::ItemState::Owned(t) => owned.push((*id, owner(t))),
            other => panic!("item {id:?} is {other:?}"),
        }
    }
    let (retried, keeper) = owned[0];
    let state = store
        .finish(keeper, retried, Outcome::Retry { after: delay })
        .await
        .unwrap();
    assert_eq!(state, Some(liveness_core::ItemState::Pending));
    let (held, leases) = held_keys(&store).await;
    assert_eq!(held.len(), 2, "{held:?}");
    assert_eq!(leases.len(), 1);
    // Completed, retried at once, swept: no timer of their own.
    let mut rest = owned[1..].iter();
    if let Some((id, lease)) = rest.next() {
        store.complete(lease, *id).await.unwrap();
    }
    if let Some((id, lease)) = rest.next() {
        store.finish(lease, *id, Outcome::RETRY).await.unwrap();
    }
    let gone = if keeper.token == a.token { &b } else { &a };
    assert!(store.release(gone).await.unwrap());
    store.sweep(gone.token).await.unwrap();
    assert_eq!(held_keys(&store).await.1, leases, "only the retry's timer");
    let again = tokio::time::Instant::now();
    loop {
        assert!(
            again.elapsed() < DEADLINE,
            "the retried item never came back"
        );
        let got = store.claim(keeper, 10).await.unwrap();
        if got.iter().any(|i| i.id == retried) {
            assert!(
                again.elapsed() >= min,
                "retried early: {:?}",
                again.elapsed()
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(held_keys(&store).await, (Vec::new(), Vec::new()));
    assert_eq!(store.next_due().await.unwrap(), None);
    for lease in leases {
        assert_eq!(store.time_to_live(lease).await.unwrap(), -1, "timer lease");
    }
}

/// The error texts as etcd has them: `(item id, text)` of each key under `item/e/`.
async fn error_keys(store: &EtcdStore) -> Vec<(u64, String)> {
    let k = store.keys();
    let kvs = store
        .range(k.errors(), crate::core::under(1000))
        .await
        .unwrap();
    kvs.iter()
        .map(|kv| {
            let id = crate::keys::Keys::trailing_id(kv.key()).unwrap();
            (id, String::from_utf8(kv.value().to_vec()).unwrap())
        })
        .collect()
}

/// A failure's error text is a key of its own, `item/e/<id>`: put by the transaction
/// that hands the item back (no request more than `finish`), left by a failure
/// without text, a claim, the sweep after its owner's death and a dead letter's
/// retry, and deleted with its item (completed, cancelled): none outlives its item.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_text_goes_with_its_hand_back_and_with_its_item() {
    use liveness_core::{EnqueueOptions, ItemId, ItemState, Outcome};
    let Some(store) = store().await else { return };
    let text = |id: ItemId, t: &str| (id.0, t.to_owned());
    let five = EnqueueOptions::default().max_attempts(5);
    let (a, b) = (
        store.enqueue(b"a", five).await.unwrap(),
        store.enqueue(b"b", five).await.unwrap(),
    );
    let lease = acquire_member(&store, "w", "h", ttl_times(&store, 30)).await;
    assert_eq!(store.claim(&lease, 10).await.unwrap().len(), 2);

    let (r, calls) = kv_requests(
        &store,
        store.finish_with_error(&lease, a, Outcome::RETRY, "a: \"x\"\n\\ ✓"),
    )
    .await;
    assert_eq!(r.unwrap(), Some(ItemState::Pending));
    assert_eq!(calls, 2, "the owned key's read, then one transaction");
    let r = store
        .finish_with_error(&lease, b, Outcome::DeadLetter, "b")
        .await;
    assert_eq!(r.unwrap(), Some(ItemState::DeadLettered));
    let both = vec![text(a, "a: \"x\"\n\\ ✓"), text(b, "b")];
    assert_eq!(error_keys(&store).await, both);

    // Claimed, then handed back without text: the text stays; an empty text too.
    assert_eq!(store.claim(&lease, 10).await.unwrap().len(), 1);
    store.finish(&lease, a, Outcome::RETRY).await.unwrap();
    assert_eq!(store.claim(&lease, 10).await.unwrap().len(), 1);
    store
        .finish_with_error(&lease, a, Outcome::RETRY, "")
        .await
        .unwrap();
    assert_eq!(error_keys(&store).await, both);

    // Its owner dead and swept, the item goes back with its text.
    assert_eq!(store.claim(&lease, 10).await.unwrap().len(), 1);
    assert!(store.release(&lease).await.unwrap());
    let swept = store.sweep(lease.token).await.unwrap();
    assert_eq!(swept.requeued, [a]);
    assert_eq!(error_keys(&store).await, both);
    let record = store.item(a).await.unwrap().unwrap();
    assert_eq!(record.last_error.as_deref(), Some("a: \"x\"\n\\ ✓"));

    // A dead letter's retry keeps it; completing and cancelling delete it.
    store.retry_dead_letter(b).await.unwrap();
    assert_eq!(error_keys(&store).await, both);
    assert_eq!(store.cancel(a).await.unwrap(), Some(ItemState::Pending));
    assert_eq!(error_keys(&store).await, [text(b, "b")]);
    let lease = acquire_member(&store, "w2", "h", ttl_times(&store, 30)).await;
    assert_eq!(store.claim(&lease, 10).await.unwrap().len(), 1);
    store.complete(&lease, b).await.unwrap();
    assert_eq!(error_keys(&store).await, []);
}

/// A store on a fresh namespace of the shared member keeping idempotency keys for
/// `retention_s` seconds (`key_retention_s`), with a 1 s request timeout (which the
/// key leases' ttl adds to the retention).
async fn keyed_store(retention_s: u64) -> Option<EtcdStore> {
    let server = liveness_testkit::etcd::shared()?;
    let url = server.url_with(&format!("key_retention_s={retention_s}&timeout_ms=1000"));
    Some(
        EtcdStore::connect(config(&url, fresh_namespace()))
            .await
            .unwrap(),
    )
}

/// The etcd lease `key`'s idempotency key is bound to (0: none), and the item id it
/// holds; `None` once etcd has no such key.
async fn enqueue_key(store: &EtcdStore, key: liveness_core::RequestId) -> Option<(i64, u64)> {
    let kv = store
        .get_one(&store.keys().enqueue_key(&key.to_hex()))
        .await
        .unwrap()?;
    Some((kv.lease(), crate::core::number(&kv).unwrap()))
}

/// With a 2 s key retention: a keyed repeat within it answers the first id; the
/// key is bound to an etcd lease that every key written in its bucket shares (one
/// grant for them all), and that outlives the retention; once etcd has expired it,
/// and not before the retention has passed, a repeat adds a new item.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_share_a_lease_and_are_forgotten_after_their_retention() {
    use liveness_core::{EnqueueOptions, RequestId};
    let Some(store) = keyed_store(2).await else {
        return;
    };
    let retention = Duration::from_secs(2);
    assert_eq!(store.capabilities().key_retention, Some(retention));
    let leases = &store.inner.key_leases;
    let min = store.capabilities().min_ttl;
    // A sixteenth of 2 s is under etcd's minimum ttl: the bucket is that minimum.
    assert_eq!(leases.bucket, min.max(Duration::from_secs(1)));

    let grants = || Calls::read(&store.inner.calls.grants);
    let before = grants();
    let a = RequestId::random();
    let start = tokio::time::Instant::now();
    let first = store.enqueue(b"a", EnqueueOptions::keyed(a)).await.unwrap();
    assert_eq!(grants() - before, 1, "the bucket's lease");
    let (lease, held) = enqueue_key(&store, a).await.expect("the key is kept");
    assert_eq!(held, first.0);
    assert_ne!(lease, 0, "the key is bound to an etcd lease");
    let left = store.time_to_live(lease).await.unwrap();
    assert!(
        left > 2 && left <= leases.ttl_secs,
        "{left} s left of {} s",
        leases.ttl_secs
    );
    let again = store.enqueue(b"a", EnqueueOptions::keyed(a)).await.unwrap();
    assert_eq!(again, first, "a repeat within the retention");

    // More keyed enqueues in the same bucket: bound to the same lease, no grant.
    let mut keys = Vec::new();
    for _ in 0..20 {
        let key = RequestId::random();
        store
            .enqueue(b"k", EnqueueOptions::keyed(key))
            .await
            .unwrap();
        keys.push(key);
    }
    let within = start.elapsed() < leases.bucket;
    let mut bound = Vec::new();
    for key in &keys {
        bound.push(enqueue_key(&store, *key).await.expect("kept").0);
    }
    bound.dedup();
    if within {
        assert_eq!(bound, vec![lease], "one lease for the bucket's keys");
        assert_eq!(grants() - before, 1, "no grant after the first");
    } else {
        // A slow machine: the bucket ended during the loop.
        println!("the bucket ended after {:?}", start.elapsed());
        assert!(bound.len() <= 3, "{bound:?}");
    }

    // Repeats answer the first id until etcd forgets the key, never before the
    // retention has passed, then add a new item.
    // The lease's ttl (retention + bucket + timeout), etcd's 500 ms revoke pass, and
    // room for a loaded machine.
    let latest = crate::core::secs(leases.ttl_secs) + Duration::from_secs(4);
    let gone = loop {
        let got = store.enqueue(b"a", EnqueueOptions::keyed(a)).await.unwrap();
        let at = start.elapsed();
        if got != first {
            break at;
        }
        assert!(at < latest, "still kept after {at:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(gone >= retention, "forgotten after {gone:?}");
    println!(
        "a {retention:?} key retention (lease ttl {} s) forgot the key after {gone:?}",
        leases.ttl_secs
    );
    let (_, held) = enqueue_key(&store, a).await.expect("kept anew");
    assert_ne!(held, first.0, "the new item's id");
    assert_eq!(
        store.item_counts().await.unwrap().pending,
        22,
        "a, 20 keys, a again"
    );
}

/// A key lease that ended early (revoked by hand: etcd deletes its keys) fails the
/// next keyed enqueue's put with "lease not found": it grants a new lease and
/// writes once more, the key is kept on the new lease, and nothing was written twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_key_lease_is_replaced() {
    use liveness_core::{EnqueueOptions, RequestId};
    let Some(store) = keyed_store(3600).await else {
        return;
    };
    let (a, b) = (RequestId::random(), RequestId::random());
    let first = store.enqueue(b"a", EnqueueOptions::keyed(a)).await.unwrap();
    let (lease, _) = enqueue_key(&store, a).await.expect("kept");
    assert!(store.revoke(lease).await.unwrap());
    assert_eq!(enqueue_key(&store, a).await, None, "revoked with its lease");

    let grants = Calls::read(&store.inner.calls.grants);
    let second = store.enqueue(b"b", EnqueueOptions::keyed(b)).await.unwrap();
    assert_eq!(second.0, first.0 + 1, "written once");
    assert_eq!(Calls::read(&store.inner.calls.grants) - grants, 1);
    let (renewed, held) = enqueue_key(&store, b).await.expect("kept");
    assert_eq!(held, second.0);
    assert!(renewed != 0 && renewed != lease, "{renewed} after {lease}");
    assert!(store.time_to_live(renewed).await.unwrap() > 3600);
    let again = store.enqueue(b"b", EnqueueOptions::keyed(b)).await.unwrap();
    assert_eq!(again, second);
    assert_eq!(store.item_counts().await.unwrap().pending, 2);
}
