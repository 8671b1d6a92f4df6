//! The Redis bench: the liveness bench kit's figures beside the raw primitives, in
//! one run against one redis-server.
//!
//! `cargo bench -p liveness-redis --bench bench` (flags after `--`: `--seconds 3 --members
//! 1000,10000,100000 --concurrency 1,64 --deaths 20`). Uses `LIVENESS_REDIS_URL` when
//! set, else starts a private redis-server (no persistence).
//!
//! Printed per concurrency level:
//! - `framework`: renewals/s through `Arc<dyn Store>::renew` (the kit's `renewals`);
//! - `raw script`: the same renew Lua script (`renew_many.lua` with one lease, as the
//!   store sends a single renewal) by EVALSHA in a bare loop on one multiplexed
//!   connection of the redis client, same concurrency;
//! - `SET PX`: `redis-benchmark -c C SET key v PX 10000` (C connections);
//! - the ratio framework ÷ raw script;
//! - `join batch`: keys taken per second by one `acquire` after the other and by one
//!   `acquire_many` of `max_batch` keys (one script), and the ratio.

use std::sync::Arc;
use std::time::Duration;

use liveness_conformance::bench::{self, Options};
use liveness_conformance::bench_util;
use liveness_core::{Checker, CheckerConfig, Store, Ttl};
use liveness_testkit::redis::RedisServer;

mod common;
use common::{connection, store};
use tokio::time::Instant;

const REPEATS: usize = 3;

/// The renew script in a bare client loop: `concurrency` tasks on one multiplexed
/// connection, each renewing its own lease.
async fn raw_renewals(url: &str, concurrency: usize, seconds: f64) -> f64 {
    let s = store(url).await;
    let ns = s.namespace().clone();
    // The bare client on the same server (plain `redis://` only: the bench's own
    // server, or a plain LIVENESS_REDIS_URL).
    let conn = connection(url).await;
    // Every lease is taken before the clock starts: only renewals are timed.
    let ttl = Ttl::from_secs(3600).unwrap_or_else(|e| panic!("{e}"));
    let workers: Vec<_> = bench_util::member_leases(&s, "raw", concurrency, "raw", ttl)
        .await
        .into_iter()
        .map(|lease| {
            let run = liveness_redis::raw::renew_run(&ns, lease.key.space());
            let name = lease.key.name().as_str().to_owned();
            (run, name, lease.token, conn.clone())
        })
        .collect();
    let per_second = bench_util::ops_per_second(workers, seconds, |worker| async move {
        let ((expiry_key, prefix), name, token, mut conn) = worker;
        // One run of one lease: the space's expiry index, its lease key prefix, the
        // count, then the lease.
        let r: redis::RedisResult<Vec<i64>> = liveness_redis::raw::renew_script()
            .key(&expiry_key)
            .arg(&prefix)
            .arg(1)
            .arg(&name)
            .arg(token.0)
            .arg(3_600_000u64)
            .invoke_async(&mut conn)
            .await;
        (((expiry_key, prefix), name, token, conn), r == Ok(vec![1]))
    })
    .await;
    let _ = s.purge().await;
    per_second
}

/// `redis-benchmark -c C -n N SET key:rand v PX 10000`, parsed from its quiet output.
fn redis_benchmark(url: &str, concurrency: usize, seconds: f64, expected: f64) -> Option<f64> {
    let parsed = url::Url::parse(url).ok()?;
    if parsed.scheme() != "redis" || !parsed.username().is_empty() || parsed.password().is_some() {
        return None;
    }
    let host = parsed.host_str()?.to_owned();
    let port = parsed.port().unwrap_or(6379);
    let bin = liveness_testkit::find_binary("redis-benchmark", &["/usr/bin"])?;
    // Enough requests to run about as long as the other measurements.
    let n = ((expected * seconds) as u64).clamp(20_000, 5_000_000);
    let out = std::process::Command::new(bin)
        .args(["-h", &host, "-p", &port.to_string()])
        .args([
            "-c",
            &concurrency.to_string(),
            "-n",
            &n.to_string(),
            "-r",
            "100000",
            "-q",
        ])
        .args(["SET", "liveness_bench:__rand_int__", "v", "PX", "10000"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "\n");
    // "SET liveness_bench:__rand_int__ v PX 10000: 81234.00 requests per second, ..."
    text.lines()
        .filter_map(|l| l.split(": ").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .filter_map(|num| num.parse::<f64>().ok())
        .next_back()
}

fn main() {
    let options = Options::from_args();
    let Some(server) = RedisServer::start() else {
        eprintln!("bench: no redis-server (skipped)");
        return;
    };
    let url = server.url().to_owned();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    rt.block_on(async move {
        let version: String = {
            let mut conn = connection(&url).await;
            let info: String = redis::cmd("INFO")
                .arg("server")
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            info.lines()
                .find_map(|l| l.strip_prefix("redis_version:"))
                .unwrap_or("?")
                .to_owned()
        };
        println!("== liveness bench: backend redis (redis-server {version}) ==");
        // The machine may be shared: interleave the two renewal measurements, three
        // times each, and report medians.
        for &c in &options.concurrency {
            let mut framework = Vec::new();
            let mut raw = Vec::new();
            for _ in 0..REPEATS {
                let s = store(&url).await;
                let purge = s.clone();
                framework.push(
                    bench::renewals(Arc::new(s) as Arc<dyn Store>, c, options.seconds)
                        .await
                        .per_second,
                );
                let _ = purge.purge().await;
                raw.push(raw_renewals(&url, c, options.seconds).await);
            }
            let (framework, raw) = (liveness_conformance::bench::median(&mut framework), liveness_conformance::bench::median(&mut raw));
            let set = redis_benchmark(&url, c, options.seconds, raw)
                .map(|v| format!("{v:>8.0}"))
                .unwrap_or_else(|| "     n/a".into());
            println!(
                "renewals/s members={c:<3} framework={framework:>8.0} raw script={raw:>8.0} SET PX (redis-benchmark)={set}  ratio framework/raw={:.2}",
                framework / raw
            );
        }
        {
            let s = store(&url).await;
            bench::print_acquires(&s, REPEATS).await;
            let _ = s.purge().await;
        }
        for &m in &options.members {
            for pct in [0usize, 1] {
                let s = store(&url).await;
                let again = s.clone();
                let expired = m * pct / 100;
                let r = bench::checker_round(Arc::new(s) as Arc<dyn Store>, m, expired).await;
                // Later rounds over the same (now steady) fleet: the median of 21.
                let checker = Checker::new(Arc::new(again.clone()), CheckerConfig::default());
                let mut steady = Vec::new();
                for _ in 0..21 {
                    let start = Instant::now();
                    let _ = checker.round().await;
                    steady.push(start.elapsed().as_secs_f64());
                }
                println!(
                    "checker round members={:<7} expired={:<5} first round={:>10.3?} round_trips={:<5} next rounds (median of 21)={:>10.3?}",
                    r.members,
                    r.expired,
                    r.time,
                    r.round_trips,
                    Duration::from_secs_f64(liveness_conformance::bench::median(&mut steady)),
                );
                let _ = again.purge().await;
            }
        }
        let s = store(&url).await;
        let d = bench::detection(Arc::new(s.clone()) as Arc<dyn Store>, options.deaths).await;
        let _ = s.purge().await;
        println!("{d}");
    });
}
