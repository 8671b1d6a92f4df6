//! The SQLite bench: the conformance bench kit's figures, beside the raw primitive
//! (the renew UPDATE in a bare sqlx loop, no transaction, no framework) in the same
//! run, on a fresh file in a temporary directory; and `join batch`: keys taken per
//! second by one `acquire` after the other and by one `acquire_many` of `max_batch`
//! keys (one transaction), and the ratio.
//!
//! Run: `cargo bench -p liveness-sqlite --bench bench -- [--seconds 3]
//! [--members 1000,10000] [--concurrency 1,64] [--deaths 20] [--synchronous normal]`.

use std::sync::Arc;
use std::time::Duration;

use liveness_conformance::bench::{self, Options};
use liveness_conformance::bench_util;
use liveness_core::{Store, Ttl};
use liveness_sqlite::{SqliteConfig, SqliteStore, Synchronous};

/// Rounds of each join-batch measurement (their median is printed).
const REPEATS: usize = 3;

/// The renew statement's UPDATE, bare: autocommit, no `BEGIN IMMEDIATE`, no checks;
/// the store clock (?5) read the way the store reads it.
const RENEW_BARE: &str = "UPDATE liveness_leases SET expires_boot_ms = ?5 + ?4 \
    WHERE ns = ?1 AND space = 'members' AND name = ?2 AND token = ?3";

/// The store clock in milliseconds: the host's boot clock.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn store_clock_ms() -> i64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).unwrap();
    Duration::from(t).as_millis() as i64
}

/// The store clock in milliseconds: the wall clock where there is no boot clock.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn store_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The renew UPDATE in a bare sqlx loop on the store's pool: `concurrency` tasks, one
/// lease each.
async fn bare_renewals(store: &SqliteStore, concurrency: usize, seconds: f64) -> f64 {
    let ttl = Ttl::from_secs(60).unwrap();
    let leases = bench_util::member_leases(store, "bare", concurrency, "bench", ttl).await;
    let workers: Vec<_> = leases
        .into_iter()
        .map(|lease| (lease, store.pool().clone(), store.namespace().to_string()))
        .collect();
    bench_util::ops_per_second(workers, seconds, |(lease, pool, ns)| async move {
        let r = sqlx::query(RENEW_BARE)
            .bind(&ns)
            .bind(lease.key.name().as_ref())
            .bind(lease.token.0 as i64)
            .bind(lease.ttl.as_millis() as i64)
            .bind(store_clock_ms())
            .execute(&pool)
            .await;
        let done = matches!(r, Ok(ref done) if done.rows_affected() == 1);
        ((lease, pool, ns), done)
    })
    .await
}

/// The bench's command line: the kit's options (`--members` by default 1000,10000)
/// and `--synchronous full|normal`.
#[derive(clap::Args)]
struct Cli {
    #[command(flatten)]
    kit: Options,
    /// The file's `synchronous` setting.
    #[arg(long, default_value = "full", value_parser = ["full", "normal"])]
    synchronous: String,
}

fn main() {
    let Cli {
        kit: options,
        synchronous,
    } = bench::args::parse(&[("members", "1000,10000")]);
    let durability = match synchronous.as_str() {
        "normal" => Synchronous::Normal,
        _ => Synchronous::Full,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.db");
    println!("file {} synchronous={durability:?}", path.display());
    let config = move || {
        SqliteConfig::new(&path, liveness_conformance::fresh_namespace())
            .with_synchronous(durability)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let factory = {
            let config = config.clone();
            liveness_conformance::factory(move || {
                let c = config();
                async move {
                    let store: Arc<dyn Store> = Arc::new(SqliteStore::connect(c).await.unwrap());
                    Some(store)
                }
            })
        };
        for &c in &options.concurrency {
            let store = SqliteStore::connect(config()).await.unwrap();
            let bare = bare_renewals(&store, c, options.seconds).await;
            let framed = bench::renewals(Arc::new(SqliteStore::connect(config()).await.unwrap()), c, options.seconds).await;
            println!(
                "bare UPDATE loop members={c:<6} {bare:>12.0}/s   framework {:>10.0}/s   ratio {:.2}",
                framed.per_second,
                framed.per_second / bare
            );
        }
        {
            let s = SqliteStore::connect(config()).await.unwrap();
            bench::print_acquires(&s, REPEATS).await;
        }
        bench::run(factory, options).await;
    });
}
