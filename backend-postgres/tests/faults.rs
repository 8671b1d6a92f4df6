//! Fault scenarios against a real PostgreSQL: a server restart in the middle of a
//! run, and a connection killed with `pg_terminate_backend`.

use std::sync::Arc;
use std::time::Duration;

use liveness_conformance::fleet;
use liveness_core::{
    Checker, CheckerConfig, EnqueueOptions, Error, Member, MemberConfig, Store, Ttl,
};
use liveness_postgres::AdvisoryElection;
use liveness_testkit::postgres::PgServer;

/// Retries a store call through a transient outage, up to a deadline.
async fn eventually<T, F, Fut>(what: &str, within: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = liveness_core::Result<T>>,
{
    let until = tokio::time::Instant::now() + within;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if e.is_retryable() && tokio::time::Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{what} failed: {e}"),
        }
    }
}

/// A store on the shared server in a namespace of its own; `None` when there is no
/// server to test against.
async fn fresh_store() -> Option<liveness_postgres::PostgresStore> {
    let server = liveness_testkit::postgres::shared()?;
    let ns = liveness_conformance::fresh_namespace();
    let url = server.url_with(&format!("ns={ns}"));
    Some(liveness_postgres::connect(&url).await.unwrap())
}

/// Ends the session that holds the advisory lock of `dispatcher`, as the server does
/// on `pg_terminate_backend`, `idle_session_timeout`, a restart or a failover.
async fn terminate_leader_session(pool: &sqlx::PgPool) {
    let pid: i32 = sqlx::query_scalar("SELECT pid FROM advisory_leaders WHERE name = 'dispatcher'")
        .fetch_one(pool)
        .await
        .unwrap();
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(pool)
        .await
        .unwrap();
    assert!(killed);
}

/// `candidate` takes the lock once its holder's session is gone (within 10 s).
async fn lead_after_the_session_ends(
    candidate: &AdvisoryElection,
) -> liveness_postgres::AdvisoryLeadership {
    fleet::wait_for(
        "the lock is free once its session ended",
        Duration::from_secs(10),
        || async { candidate.try_lead().await.unwrap() },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn server_restart_mid_run_loses_nothing() {
    let Some(mut server) = PgServer::start() else {
        return;
    };
    let ns = liveness_conformance::fresh_namespace();
    let url = server.url_with(&format!("ns={ns}&acquire_timeout_ms=1000"));
    let store: Arc<dyn Store> = Arc::new(liveness_postgres::connect(&url).await.unwrap());

    for i in 0..20u32 {
        store
            .enqueue(&i.to_be_bytes(), EnqueueOptions::default())
            .await
            .unwrap();
    }
    // A ttl well beyond a restart's length: the member must survive it.
    let ttl = Ttl::from_secs(15).unwrap();
    let member = Member::join(
        store.clone(),
        MemberConfig::new("worker", ttl)
            .unwrap()
            .renew_every(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    let token = member.token();
    let claimed = member.claim(10).await.unwrap();
    assert_eq!(claimed.len(), 10);
    let checker = Checker::new(store.clone(), CheckerConfig::default());

    // A fast shutdown and a start on the same port and data, in the middle of the run.
    let server = tokio::task::spawn_blocking(move || {
        server.restart().unwrap_or_else(|e| panic!("restart: {e}"));
        server
    })
    .await
    .unwrap();

    // The pool reconnects: the same lease renews, no new token, no loss signal.
    let lease = member.lease();
    let renewed = eventually("renew after restart", Duration::from_secs(20), || {
        store.renew(&lease)
    })
    .await;
    assert_eq!(renewed.token, token);
    assert_eq!(member.token(), token, "the member rejoined: a false death");
    assert!(
        !member.cancelled().is_cancelled(),
        "the member's work was cancelled: a false death"
    );

    // No false death: the checker finds nothing to reap and nothing to sweep.
    let report = eventually("checker round", Duration::from_secs(10), || checker.round()).await;
    assert!(report.deaths.is_empty(), "{report:?}");
    assert!(report.swept.is_empty(), "{report:?}");

    // No item lost: 10 pending + 10 owned, and the owner can still complete them.
    let counts = eventually("counts", Duration::from_secs(10), || store.item_counts()).await;
    assert_eq!(
        (counts.pending, counts.owned, counts.dead_lettered),
        (10, 10, 0)
    );
    for c in &claimed {
        eventually("complete", Duration::from_secs(10), || member.complete(c)).await;
    }
    let rest = member.claim(100).await.unwrap();
    assert_eq!(rest.len(), 10);
    for c in &rest {
        member.complete(c).await.unwrap();
    }
    let counts = store.item_counts().await.unwrap();
    assert_eq!(
        (counts.pending, counts.owned, counts.dead_lettered),
        (0, 0, 0)
    );
    member.leave(Duration::from_secs(1)).await.unwrap();
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn terminated_connection_ends_advisory_leadership_at_once() {
    let Some(store) = fresh_store().await else {
        return;
    };
    // A long check interval: only the broken connection can explain a quick loss.
    let a = AdvisoryElection::new(&store, "dispatcher", "a")
        .unwrap()
        .check_every(Duration::from_secs(60))
        .unwrap();
    let b = AdvisoryElection::new(&store, "dispatcher", "b").unwrap();
    let leader = a.try_lead().await.unwrap().expect("free role");
    assert!(b.try_lead().await.unwrap().is_none());

    terminate_leader_session(store.pool()).await;

    let lost = leader.cancelled();
    tokio::time::timeout(Duration::from_secs(10), lost.cancelled())
        .await
        .expect("the cancellation did not fire after the connection was killed");
    assert!(leader.is_lost());

    // The lock went with the session: another candidate takes over, fenced above.
    let second = lead_after_the_session_ends(&b).await;
    assert!(second.token() > leader.token());
    second.resign().await.unwrap();
}

/// A leader whose process froze while the server dropped its session (here
/// `pg_terminate_backend`; equally `idle_session_timeout`, a restart, a failover)
/// wakes with a contender already leading. Its first look, before any of its tasks
/// ran, must answer lost: the background task that would notice the dead connection
/// has not run yet, so only a local deadline can say it.
///
/// The freeze: the leader lives on a current-thread runtime that is driven only
/// inside `block_on`; between two `block_on` calls none of its tasks runs.
#[test]
fn a_frozen_advisory_leader_wakes_lost_before_its_task_runs() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    let url = server.url_with(&format!("ns={}", liveness_conformance::fresh_namespace()));
    let frozen = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outside = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let every = Duration::from_millis(100);
    let timeout = Duration::from_millis(300);
    let (leader, store) = frozen.block_on(async {
        let store = liveness_postgres::connect(&url).await.unwrap();
        let a = AdvisoryElection::new(&store, "dispatcher", "a")
            .unwrap()
            .check_every(every)
            .unwrap()
            .ping_timeout(timeout)
            .unwrap();
        let leader = a.try_lead().await.unwrap().expect("free role");
        // A few turns of the holding loop: the leadership is healthy.
        tokio::time::sleep(every * 3).await;
        assert!(!leader.is_lost());
        (leader, store)
    });

    // Frozen from here on. Meanwhile the server drops the session and a contender
    // takes the lock.
    let second = outside.block_on(async {
        let other = liveness_postgres::connect(&url).await.unwrap();
        terminate_leader_session(other.pool()).await;
        let b = AdvisoryElection::new(&other, "dispatcher", "b").unwrap();
        let second = lead_after_the_session_ends(&b).await;
        // The freeze outlasts the leader's local deadline: `2 × check_every +
        // ping_timeout` past the send of the last turn answered before it froze.
        tokio::time::sleep(every * 2 + timeout + Duration::from_millis(100)).await;
        second
    });

    // The leader wakes: its first synchronous look, before its task ran.
    assert!(
        leader.is_lost(),
        "a frozen leader woke and believed it still leads while another does"
    );
    assert!(
        matches!(leader.check(), Err(Error::Lost { token, .. }) if token == leader.token()),
        "check() let a frozen leader act: {:?}",
        leader.check()
    );
    assert!(leader.cancelled().is_cancelled());
    assert!(second.token() > leader.token());
    frozen.block_on(async move {
        drop(leader);
        drop(store);
    });
    outside.block_on(second.resign()).unwrap();
}

/// Timings whose sum would overflow in the holding loop (after leadership was handed
/// out: the task died, the lock went with its connection, and the leader was never
/// told) are refused up front, naming the setting; the largest accepted ones lead and
/// hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisory_timings_out_of_range_are_refused_naming_the_field() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let election = || AdvisoryElection::new(&store, "dispatcher", "a").unwrap();
    for (field, refused) in [
        ("check_every", election().check_every(Duration::MAX)),
        ("check_every", election().check_every(Duration::ZERO)),
        (
            "check_every",
            election().check_every(AdvisoryElection::MAX_TIMING + Duration::from_nanos(1)),
        ),
        ("ping_timeout", election().ping_timeout(Duration::MAX)),
        ("ping_timeout", election().ping_timeout(Duration::ZERO)),
    ] {
        match refused {
            Err(Error::InvalidInput { what, .. }) if what == field => {}
            other => panic!("{field}: expected InvalidInput naming it, got {other:?}"),
        }
    }

    let widest = election()
        .check_every(Duration::from_millis(50))
        .unwrap()
        .ping_timeout(AdvisoryElection::MAX_TIMING)
        .unwrap();
    let leader = widest.try_lead().await.unwrap().expect("free role");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(leader.check().unwrap(), leader.token());
    leader.resign().await.unwrap();
    assert!(election().try_lead().await.unwrap().is_some());
}
