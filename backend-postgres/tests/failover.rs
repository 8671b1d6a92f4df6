//! Failover from a PostgreSQL primary to its streaming standby while a [`Fleet`]
//! (three members, one checker, 150 items) works, every handle connected through a
//! loopback forwarder that plays the virtual IP: the primary is killed (SIGKILL), the
//! standby promoted (`pg_ctl promote`), and the forwarder switched to it.
//!
//! - **Synchronous replication** (`synchronous_standby_names='*'`, the recommended
//!   setting for a standby one fails over to): every acknowledged commit is on the
//!   standby. Asserted: every item completes (none lost, none dead-lettered); tokens
//!   after the promotion exceed every token before it; a probe lease nobody renews is
//!   refused (`Lost`) once reported expired; no member's work is handed on before the
//!   member saw `Lost`.
//! - **Asynchronous replication**: the primary acknowledges commits the standby may
//!   not have received when it dies. Asserted: every item completes (the items were
//!   enqueued long before the fault, and none is stranded), no token is handed out
//!   twice, and tokens after the promotion exceed every token before it. Measured and
//!   printed: early reaps, the standby's WAL lag at the kill — what async replication
//!   can lose. Two more tests make that loss certain: the standby stops receiving WAL
//!   while the primary releases a member's lease, requeues its items and hands out
//!   more tokens than the sequence logs ahead; or while a member completes an item
//!   (the new primary refuses the member's old lease, so the item is done again).
//!
//! - **A standby answering writes** (the virtual IP moved to it before the promotion):
//!   SQLSTATE 25006 is `Unavailable`, and a member renewing through it keeps its lease.
//!
//! Tokens are the server's timeline in front of a sequence's value. PostgreSQL
//! WAL-logs a sequence 32 values ahead of the value it hands out (`SEQ_LOG_VALS`),
//! and a standby replays that logged value; a standby that lacks the last records
//! continues the sequence below tokens already handed out. The promotion starts a new
//! timeline, so its tokens sort above every token before it all the same. The run
//! prints the sequence's `last_value` on both servers before the fault.

use std::sync::Arc;
use std::time::Duration;

use liveness_conformance::fleet::{self, Fleet};
use liveness_conformance::{fresh_namespace, member_key};
use liveness_core::{Error, Event, HolderId, Namespace, Store, Ttl};
use liveness_testkit::postgres_standby::{PgPair, Replication};
use tokio::time::Instant;

const DEADLINE: Duration = Duration::from_secs(90);
const ITEMS: usize = 150;

/// How the clients reach the primary, and follow the promotion.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Route {
    /// Through the forwarder (a virtual IP), which the test switches to the standby.
    Forwarder,
    /// By the URL's host list (`primary,standby`): the store finds the new primary.
    HostList,
}

async fn connect(pair: &PgPair, ns: &Namespace) -> liveness_postgres::PostgresStore {
    connect_by(pair, ns, Route::Forwarder).await
}

async fn connect_by(
    pair: &PgPair,
    ns: &Namespace,
    route: Route,
) -> liveness_postgres::PostgresStore {
    let base = match route {
        Route::Forwarder => pair.url(),
        Route::HostList => pair.host_list_url(),
    };
    let url = format!("{base}&ns={ns}&acquire_timeout_ms=1000");
    liveness_postgres::connect(&url).await.unwrap()
}

struct Figures {
    tokens_twice: usize,
    early_reaps: usize,
    not_above: usize,
}

impl Figures {
    /// What any promotion guarantees, asynchronous replication included: tokens
    /// carry the server's timeline, so none is handed out twice and every token after
    /// the promotion is above every token before it.
    fn assert_tokens_never_go_back(&self) {
        assert_eq!(self.tokens_twice, 0, "a token was handed out twice");
        assert_eq!(
            self.not_above, 0,
            "a token after the promotion is not above every one before"
        );
    }

    /// What a synchronous standby guarantees across the promotion.
    fn assert_nothing_lost(&self) {
        self.assert_tokens_never_go_back();
        assert_eq!(
            self.early_reaps, 0,
            "work was handed on before its holder saw Lost"
        );
    }
}

/// Runs `sql` on the server at `port` every 20 ms until it answers `want`, failing
/// the test with `what` if it has not by `until` (a blocking wait, for
/// `block_in_place`).
fn poll_until(
    pair: &PgPair,
    port: u16,
    sql: &str,
    want: &str,
    until: std::time::Instant,
    what: &str,
) {
    while pair.psql(port, sql).unwrap_or_default() != want {
        assert!(std::time::Instant::now() < until, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the standby has replayed everything the primary wrote, then stops it
/// receiving WAL (its `primary_conninfo` emptied) while the primary goes on: what the
/// primary acknowledges from now on is what an asynchronous standby loses.
fn stop_streaming(pair: &PgPair) {
    tokio::task::block_in_place(|| {
        let lsn = pair
            .psql(pair.primary_port(), "SELECT pg_current_wal_lsn()")
            .unwrap();
        let caught_up = format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn");
        let until = std::time::Instant::now() + DEADLINE;
        poll_until(
            pair,
            pair.standby_port(),
            &caught_up,
            "t",
            until,
            "the standby never caught up",
        );
        pair.psql(
            pair.standby_port(),
            "ALTER SYSTEM SET primary_conninfo = ''",
        )
        .unwrap();
        pair.psql(pair.standby_port(), "SELECT pg_reload_conf()")
            .unwrap();
        poll_until(
            pair,
            pair.primary_port(),
            "SELECT count(*) FROM pg_stat_replication",
            "0",
            until,
            "the standby kept streaming",
        );
    });
}

/// The primary dies and the standby is promoted; the forwarder sends the stores to
/// it.
fn fail_over(pair: &mut PgPair) {
    tokio::task::block_in_place(|| {
        pair.kill_primary();
        pair.promote().unwrap();
        pair.proxy().switch(pair.standby_port());
    });
}

/// A fresh namespace on `pair` with `items` items enqueued and one member (ttl 3 s)
/// joined: its store, a second store for a checker, and the member.
async fn one_member(
    pair: &PgPair,
    items: u32,
) -> (Arc<dyn Store>, Arc<dyn Store>, liveness_core::Member) {
    let ns = fresh_namespace();
    let store: Arc<dyn Store> = Arc::new(connect(pair, &ns).await);
    let checker_store: Arc<dyn Store> = Arc::new(connect(pair, &ns).await);
    for i in 0..items {
        store
            .enqueue(&i.to_be_bytes(), Default::default())
            .await
            .unwrap();
    }
    let member = liveness_core::Member::join(
        store.clone(),
        liveness_core::MemberConfig::new("w", Ttl::from_secs(3).unwrap())
            .unwrap()
            .renew_every(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    (store, checker_store, member)
}

/// With a checker running on `checker_store`, has `member` claim and complete items
/// until none is left pending or owned, failing the test if some are stranded after
/// [`DEADLINE`]. `before` lists the tokens handed out before the promotion.
async fn complete_all(
    store: &Arc<dyn Store>,
    checker_store: Arc<dyn Store>,
    member: &liveness_core::Member,
    before: &[liveness_core::FencingToken],
) {
    let checker = liveness_core::Checker::new(
        checker_store,
        liveness_core::CheckerConfig::default().check_every(Duration::from_millis(200)),
    )
    .spawn();
    let until = Instant::now() + DEADLINE;
    loop {
        let counts = fleet::retry_unavailable(DEADLINE, || store.item_counts())
            .await
            .unwrap();
        if counts == liveness_core::ItemCounts::default() {
            break;
        }
        assert!(
            Instant::now() < until,
            "items stranded after the promotion: {counts:?}; member token {}, tokens before {before:?}",
            member.token()
        );
        match member.claim(5).await {
            Ok(got) => {
                for c in got {
                    let _ = member.complete(&c).await;
                }
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    checker.stop().await;
}

async fn run(replication: Replication) -> Option<Figures> {
    run_by(replication, Route::Forwarder).await
}

async fn run_by(replication: Replication, route: Route) -> Option<Figures> {
    let mut pair = PgPair::start(replication)?;
    let ttl = Ttl::from_secs(3).unwrap();
    let ns = fresh_namespace();
    let (on, in_ns) = (&pair, &ns);
    let world = Fleet::start_connected(
        move || async move { Arc::new(connect_by(on, in_ns, route).await) as Arc<dyn Store> },
        3,
        ttl,
        ITEMS,
        DEADLINE,
    )
    .await;
    world.wait_working(ITEMS as u64 - 20).await;

    let probe_store = connect_by(&pair, &ns, route).await;
    let (probe_key, probe, probe_due) = fleet::acquire_probe(&probe_store, ttl).await;

    // The sequence as each server sees it: the standby replays the value the primary
    // WAL-logged ahead of what it handed out.
    let seq = format!("SELECT last_value FROM liveness_{ns}.tokens");
    let (on_primary, on_standby) = tokio::task::block_in_place(|| {
        (
            pair.psql(pair.primary_port(), &seq).unwrap_or_default(),
            pair.psql(pair.standby_port(), &seq).unwrap_or_default(),
        )
    });

    let before_tokens = world.tokens();
    let before = world.joined();
    let fault_at = Instant::now();
    let lag = tokio::task::block_in_place(|| {
        let lsn = pair
            .psql(pair.primary_port(), "SELECT pg_current_wal_lsn()")
            .unwrap();
        pair.kill_primary();
        let lag = pair
            .psql(
                pair.standby_port(),
                &format!("SELECT greatest(pg_wal_lsn_diff('{lsn}', pg_last_wal_receive_lsn()), 0)"),
            )
            .unwrap_or_default();
        pair.promote().unwrap();
        if route == Route::Forwarder {
            pair.proxy().switch(pair.standby_port());
        }
        lag
    });
    let failover = fault_at.elapsed();

    // A lease acquired after the failover: its token exceeds every token before it,
    // the probe's included.
    let (fresh, max_before_fault) =
        fleet::assert_fresh_token_above(&probe_store, &before_tokens, &probe, ttl, DEADLINE).await;

    fleet::wait_expired_or_gone(&probe_store, &probe_key, DEADLINE).await;
    let detection = Instant::now().saturating_duration_since(probe_due);
    fleet::assert_renewal_refused(&probe_store, &probe, DEADLINE).await;

    let kept = world.kept_after(&before_tokens, ttl).await;
    world.assert_all_completed_none_dead().await;
    let tokens = world.tokens_since(&before);
    let after = &tokens.after;
    let max_before = tokens.max_before.unwrap();
    let figures = Figures {
        tokens_twice: tokens.twice,
        early_reaps: world.early_reaps().len(),
        not_above: after.iter().filter(|t| **t <= max_before).count(),
    };
    eprintln!(
        "FIGURES postgres failover, {replication:?}, {route:?}: failover (kill, promote, switch) \
         {failover:?}; members kept their lease {kept}/3, lost {}; probe lease (ttl {:?}) \
         reported expired {detection:?} after its nominal expiry; sequence last_value \
         before the fault: primary {on_primary}, standby {on_standby}; tokens: max before \
         {max_before_fault}, first fresh lease after the failover {}, members' after {after:?}, not above the max before {}, handed out twice {}; \
         WAL bytes the standby lacked at the kill (at least): {lag}; items lost 0/{ITEMS}; \
         member leases reaped before their holder saw Lost: {}",
        3 - kept,
        ttl.duration(),
        fresh.token,
        figures.not_above,
        figures.tokens_twice,
        figures.early_reaps
    );
    world.shut_down().await;
    Some(figures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn synchronous_standby_promoted_mid_run_loses_nothing_and_tokens_increase() {
    if let Some(f) = run(Replication::Synchronous).await {
        f.assert_nothing_lost();
    }
}

/// The clients name both servers in the URL (`primary,standby`) instead of a
/// virtual IP: after the promotion each handle's next connection finds the new
/// primary by itself. The same guarantees as through the forwarder.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_host_list_follows_the_promoted_standby_by_itself() {
    if let Some(f) = run_by(Replication::Synchronous, Route::HostList).await {
        f.assert_nothing_lost();
    }
}

/// What asynchronous replication loses depends on the standby's lag at the instant
/// of the kill, but tokens never go back: asserted, no token is handed out twice,
/// every token after the promotion is above every token before it, and every item
/// completes (nothing stranded). Work handed on before its holder saw `Lost` is
/// printed, not asserted: a renewal the standby lacked leaves the lease to expire
/// early on the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn asynchronous_standby_promoted_mid_run_hands_no_token_out_twice() {
    if let Some(f) = run(Replication::Asynchronous).await {
        f.assert_tokens_never_go_back();
    }
}

/// A virtual IP that points at the standby for a moment before the
/// promotion (or a connection that lands on a standby) makes every write fail with
/// SQLSTATE 25006 (read-only transaction). That is a transient state of the cluster,
/// like a failover in progress: it must be `Unavailable` (retried), never a permanent
/// error that makes every member and leader give up at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standby_answering_writes_read_only_is_unavailable_until_promoted() {
    let Some(mut pair) = PgPair::start(Replication::Synchronous) else {
        return;
    };
    let ns = fresh_namespace();
    let store: Arc<dyn Store> = Arc::new(connect(&pair, &ns).await);
    let probe_store = connect(&pair, &ns).await;
    let ttl = Ttl::from_secs(9).unwrap();
    let probe = probe_store
        .acquire(&member_key("probe"), &HolderId::new("probe").unwrap(), ttl)
        .await
        .unwrap();
    let bus = liveness_core::EventBus::new(1024);
    let mut events = bus.subscribe();
    let member = liveness_core::Member::join(
        store,
        liveness_core::MemberConfig::new("w", ttl)
            .unwrap()
            .renew_every(Duration::from_millis(300))
            .events(bus),
    )
    .await
    .unwrap();
    let token = member.token();

    // The "virtual IP" moves to the standby before it is promoted.
    tokio::task::block_in_place(|| {
        pair.kill_primary();
        pair.proxy().switch(pair.standby_port());
    });
    let window = Instant::now() + Duration::from_millis(1500);
    let mut answers = 0;
    while Instant::now() < window {
        match probe_store.renew(&probe).await {
            Err(Error::Unavailable { .. }) => answers += 1,
            other => panic!("a read-only standby answered a renewal with {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(answers > 0);
    tokio::task::block_in_place(|| pair.promote()).unwrap();

    // Once promoted, the same lease renews again: nobody lost anything.
    fleet::retry_unavailable(DEADLINE, || probe_store.renew(&probe))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(
        member.token(),
        token,
        "the member lost its lease to a read-only standby"
    );
    while let Ok(e) = events.try_recv() {
        assert!(
            !matches!(e, Event::Lost { .. }),
            "the member gave up on a read-only standby: {e:?}"
        );
    }
    let _ = member.leave(Duration::from_millis(100)).await;
}

/// The window asynchronous replication loses, made exact: the standby stops
/// receiving WAL (its `primary_conninfo` emptied) while the primary goes on. In that
/// window a member's lease is released (its two claimed items requeued, its work told
/// to stop), the member re-joins under a new token, and more tokens are drawn than
/// the sequence logs ahead; then the primary dies and the standby, which saw none of
/// it, is promoted. The new primary has the member's old lease, live, with the two
/// items still owned under it, and its sequence is behind the tokens handed out.
///
/// Asserted: no token is handed out twice and every token after the promotion is
/// above every token before it (the member's old lease, revived by the promotion, is
/// taken over, not adopted again), and nothing is stranded: a checker hands the two
/// items back and every item completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_window_revives_no_token_and_strands_no_item() {
    let Some(mut pair) = PgPair::start(Replication::Asynchronous) else {
        return;
    };
    let (store, checker_store, member) = one_member(&pair, 10).await;
    let ttl = Ttl::from_secs(3).unwrap();
    let mut tokens = vec![member.token()];
    let claimed = member.claim(2).await.unwrap();
    assert_eq!(claimed.len(), 2);

    // The standby has all of that, then stops receiving.
    stop_streaming(&pair);

    // The lost window: the member's lease is released and its items requeued; the
    // member sees Lost and re-joins under a new token; more tokens are drawn.
    assert!(store.release(&member.lease()).await.unwrap());
    store.sweep(tokens[0]).await.unwrap();
    fleet::wait_until("the member re-joined", DEADLINE, || async {
        member.token() != tokens[0]
    })
    .await;
    tokens.push(member.token());
    let holder = HolderId::new("drawer").unwrap();
    for i in 0..40 {
        let lease = store
            .acquire(&member_key(&format!("d{i}")), &holder, ttl)
            .await
            .unwrap();
        tokens.push(lease.token);
        store.release(&lease).await.unwrap();
    }
    let max_before = *tokens.iter().max().unwrap();

    fail_over(&mut pair);

    // The member finds its lease superseded on the new primary and re-joins; the
    // lease the promotion revived must not come back to it.
    let lost_window = tokens[1];
    fleet::wait_until(
        "the member re-joined after the promotion",
        DEADLINE,
        || async { member.token() != lost_window },
    )
    .await;
    let after = member.token();
    assert!(
        !tokens.contains(&after),
        "after the promotion the member holds token {after} again, handed out before it: {tokens:?}"
    );
    assert!(
        after > max_before,
        "token {after} after the promotion, not above {max_before}; before: {tokens:?}"
    );

    // Nothing stranded: with a checker running, the member completes every item.
    drop(claimed);
    complete_all(&store, checker_store, &member, &tokens).await;
    assert!(
        member.token() > max_before,
        "the member acts under token {} after the promotion, not above {max_before}",
        member.token()
    );
    let _ = member.leave(Duration::from_millis(100)).await;
}

/// A completion the promotion lost: the member claims an item, the standby stops
/// receiving, the member completes the item (the primary acknowledges it), and the
/// primary dies. The promoted standby still has that item owned under the member's
/// token, and the member's lease live: the member, which is done with the item, would
/// renew that lease forever and nobody would ever hand the item back.
///
/// Asserted: the new primary refuses to renew a lease drawn on an earlier timeline
/// under asynchronous replication (the member sees `Lost` and re-joins under a token
/// above every one before), so the checker reaps the old lease, requeues the item and
/// every item completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_completion_the_promotion_lost_is_handed_back() {
    let Some(mut pair) = PgPair::start(Replication::Asynchronous) else {
        return;
    };
    let (store, checker_store, member) = one_member(&pair, 4).await;
    let before = vec![member.token()];
    let claimed = member.claim(1).await.unwrap();
    assert_eq!(claimed.len(), 1);
    stop_streaming(&pair);

    // Acknowledged by the primary, never seen by the standby.
    member.complete(&claimed[0]).await.unwrap();
    fail_over(&mut pair);
    drop(claimed);
    complete_all(&store, checker_store, &member, &before).await;
    assert!(
        member.token() > before[0],
        "the member kept the lease of the lost timeline"
    );
    let _ = member.leave(Duration::from_millis(100)).await;
}
