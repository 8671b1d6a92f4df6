//! The PostgreSQL bench: the conformance bench kit's figures, beside the raw
//! primitive in the same run.
//!
//! - renewals/s through the framework (`Store::renew` on `Arc<dyn Store>`, a
//!   `renew_many` of one lease, which runs the renew statement) at 1 and 64
//!   concurrent members;
//! - the renew statement's UPDATE in a bare sqlx loop, same concurrency;
//! - `pgbench` running the same single-row UPDATE, same concurrency (prepared mode);
//! - the ratios framework / bare and framework / pgbench;
//! - one checker round over 1k / 10k / 100k live members, 0 % and 1 % expired;
//! - detection latency;
//! - first, acquires/s of 1,000 fresh keys: one `acquire` after the other against
//!   `acquire_many` (one batch of `max_batch`), and their ratio.
//!
//! Run: `cargo bench -p liveness-postgres --bench bench -- [--seconds 3]
//! [--members 1000,10000,100000] [--concurrency 1,64] [--acquire-only]`. It starts its own server
//! through the test kit (or uses `LIVENESS_POSTGRES_URL`).

use std::sync::Arc;

use liveness_conformance::bench::{self, Options};
use liveness_conformance::bench_util;
use liveness_core::{Lease, OperatorStore, Store, Ttl};

/// The store's renew statement (`RENEW` in `src/lease.rs`; its parameters: $1 space,
/// $2 name, $3 token, $4 ttl_ms), copied because the crate keeps its statements
/// private. A unit test in `src/lease.rs` fails when the two differ.
const RENEW: &str = r#"
UPDATE leases SET expires_at = clock_timestamp() + $4 * interval '1 millisecond', ttl_ms = $4
WHERE space = $1 AND name = $2 AND token = $3 AND expires_at > clock_timestamp()
  AND (synced OR token >= token_epoch() << 40)
"#;

fn store_url(server: &liveness_testkit::postgres::PgServer, ns: &str) -> String {
    server.url_with(&format!("ns={ns}&max_connections=80"))
}

async fn fresh(
    server: &'static liveness_testkit::postgres::PgServer,
) -> liveness_postgres::PostgresStore {
    let ns = liveness_conformance::fresh_namespace();
    let store = liveness_postgres::connect(&store_url(server, ns.as_str()))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    // Open connections before measuring (SCRAM authentication costs a few
    // milliseconds of CPU per connection): every contender starts warm.
    for _ in 0..3 {
        let calls: Vec<_> = (0..72)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { store.store_time().await })
            })
            .collect();
        for c in calls {
            let _ = c.await;
        }
    }
    store
}

/// `n` leases for a bare loop, on the members `{prefix}0` on, held for a minute
/// (longer than a run).
async fn bench_leases(
    store: &liveness_postgres::PostgresStore,
    prefix: &str,
    n: usize,
) -> Vec<Lease> {
    bench_util::member_leases(store, prefix, n, "bench", Ttl::from_secs(60).unwrap()).await
}

/// The renew statement's UPDATE for `lease`, bare, on `conn`: whether it renewed.
async fn renew_bare<'c, E: sqlx::PgExecutor<'c>>(conn: E, lease: &Lease) -> bool {
    let r = sqlx::query(RENEW)
        .bind(lease.key.space().as_str())
        .bind(lease.key.name().as_str())
        .bind(lease.token.0 as i64)
        .bind(lease.ttl.as_millis() as i64)
        .execute(conn)
        .await;
    matches!(r, Ok(ref done) if done.rows_affected() == 1)
}

/// The renew UPDATE in a bare sqlx loop through a sqlx `PgPool`: `concurrency` tasks,
/// one lease each.
async fn bare_renewals(
    store: &liveness_postgres::PostgresStore,
    concurrency: usize,
    seconds: f64,
) -> f64 {
    let leases = bench_leases(store, "bare", concurrency).await;
    // A plain sqlx pool of the store's size, warmed.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(80)
        .connect_with(store.pool().connect_options().as_ref().clone())
        .await
        .unwrap();
    let mut held = Vec::new();
    for _ in 0..concurrency {
        held.push(pool.acquire().await.unwrap());
    }
    drop(held);
    let workers: Vec<_> = leases.into_iter().map(|l| (l, pool.clone())).collect();
    bench_util::ops_per_second(workers, seconds, |(lease, pool)| async move {
        let done = renew_bare(&pool, &lease).await;
        ((lease, pool), done)
    })
    .await
}

/// The same UPDATE in a bare loop on dedicated connections (no pool): sqlx without its
/// pool's acquire/release (sqlx's pool pings every connection returned to it).
async fn dedicated_renewals(
    store: &liveness_postgres::PostgresStore,
    concurrency: usize,
    seconds: f64,
) -> f64 {
    use sqlx::Connection;
    // The pool's options carry the namespace's search_path already.
    let options = store.pool().connect_options().as_ref().clone();
    let mut work = Vec::new();
    for lease in bench_leases(store, "ded", concurrency).await {
        let conn = sqlx::postgres::PgConnection::connect_with(&options)
            .await
            .unwrap();
        work.push((lease, conn));
    }
    bench_util::ops_per_second(work, seconds, |(lease, mut conn)| async move {
        let done = renew_bare(&mut conn, &lease).await;
        ((lease, conn), done)
    })
    .await
}

/// pgbench running the same single-row UPDATE on `concurrency` rows, one per client.
/// The rows are the framework run's leases `r0..` whose tokens are 1.. in order
/// (acquired one by one in a fresh namespace).
fn pgbench(
    server: &liveness_testkit::postgres::PgServer,
    schema: &str,
    statement: &str,
    concurrency: usize,
    seconds: f64,
) -> Option<f64> {
    let bin = liveness_testkit::find_binary(
        "pgbench",
        &[
            "/usr/lib/postgresql/15/bin",
            "/usr/lib/postgresql/16/bin",
            "/usr/local/bin",
        ],
    )?;
    let url = url::Url::parse(server.url()).ok()?;
    let dir = tempfile::tempdir().ok()?;
    let script = dir.path().join("renew.sql");
    // The statement's parameters, as pgbench variables: client i renews lease r<i>,
    // whose token is i + 1.
    let script_text = statement
        .replace("$1", "'members'")
        .replace("$2", "('r' || :client_id)")
        .replace("$3", "(:client_id + 1)")
        .replace("$4", "60000");
    std::fs::write(&script, format!("{};\n", script_text.trim())).ok()?;
    let out = std::process::Command::new(bin)
        .env("PGPASSWORD", url.password().unwrap_or(""))
        .env("PGOPTIONS", format!("-c search_path={schema}"))
        .args(["-n", "-M", "prepared", "-h"])
        .arg(url.host_str().unwrap_or("127.0.0.1"))
        .arg("-p")
        .arg(url.port().unwrap_or(5432).to_string())
        .arg("-U")
        .arg(url.username())
        .arg("-c")
        .arg(concurrency.to_string())
        .arg("-j")
        .arg(concurrency.min(2).to_string())
        .arg("-T")
        .arg(format!("{}", seconds.ceil() as u64))
        .arg("-f")
        .arg(&script)
        .arg(url.path().trim_start_matches('/'))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        eprintln!(
            "pgbench failed: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    text.lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l.trim_start_matches("tps = ").split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The bench's command line: the kit's options and `--acquire-only`.
#[derive(clap::Args)]
struct Cli {
    #[command(flatten)]
    kit: Options,
    /// Only the acquires/s figures.
    #[arg(long)]
    acquire_only: bool,
}

fn main() {
    let Some(server) = liveness_testkit::postgres::shared() else {
        return;
    };
    let Cli {
        kit: options,
        acquire_only,
    } = bench::args::parse(&[]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        println!("== liveness bench: backend postgres ==");
        {
            let store: Arc<dyn Store> = Arc::new(fresh(server).await);
            bench::print_acquires(&*store, 1).await;
        }
        if acquire_only {
            return;
        }
        for &c in &options.concurrency {
            let store = fresh(server).await;
            let schema = store.schema().to_owned();
            let dyn_store: Arc<dyn Store> = Arc::new(store.clone());
            let framework = bench::renewals(dyn_store, c, options.seconds).await.per_second;
            let bare = bare_renewals(&store, c, options.seconds).await;
            let dedicated = dedicated_renewals(&store, c, options.seconds).await;
            let seconds = options.seconds;
            let pg = tokio::task::spawn_blocking(move || {
                pgbench(server, &schema, RENEW, c, seconds)
            })
            .await
            .ok()
            .flatten();
            println!(
                "renewals/s   members={c:<3} framework={framework:>8.0}  sqlx-PgPool loop={bare:>8.0} (x{:.2})  \
                 sqlx dedicated-connection loop={dedicated:>8.0} (x{:.2})",
                framework / bare,
                framework / dedicated
            );
            match pg {
                Some(tps) => println!(
                    "             members={c:<3} pgbench={tps:>8.0}  framework/pgbench={:.2}",
                    framework / tps
                ),
                None => println!("             members={c:<3} pgbench: not available"),
            }
        }
        for &m in &options.members {
            for pct in [0usize, 1] {
                let store: Arc<dyn Store> = Arc::new(fresh(server).await);
                println!("{}", bench::checker_round(store, m, m * pct / 100).await);
            }
        }
        let store: Arc<dyn Store> = Arc::new(fresh(server).await);
        println!("{}", bench::detection(store, options.deaths).await);
    });
}
