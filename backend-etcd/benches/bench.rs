//! The etcd bench: the liveness bench kit's figures beside a bare etcd-client
//! keep-alive loop, in one run against one etcd member.
//!
//! `cargo bench -p liveness-etcd --bench bench` (flags after `--`: `--seconds 3 --members
//! 1000,10000,100000 --concurrency 1,64 --deaths 20`). Uses `LIVENESS_ETCD_URL` when
//! set, else starts a private etcd member (the test kit's).
//!
//! Printed per concurrency level:
//! - `framework`: renewals/s through `Arc<dyn Store>::renew` (the kit's `renewals`);
//! - `bare keep-alive`: `concurrency` tasks, each with its own etcd lease and its own
//!   `LeaseKeeper` stream, sending one keep-alive and awaiting its answer in a loop:
//!   what a hand-written etcd client does;
//! - the ratio framework ÷ bare.
//!
//! First, acquires/s of 1,000 fresh keys: one `acquire` after the other against
//! `acquire_many` in batches of `max_batch`, and their ratio (`--acquire-only`: only
//! that). Then `renew_many` against one `renew` after the other for a batch of `max_batch`
//! leases on one handle (leases renewed per second, one task), the kit's checker
//! rounds (1 % expired and none) and the detection latency with the expiry watch.

use std::sync::Arc;
use std::time::Duration;

use liveness_conformance::bench::{self, Options};
use liveness_core::Store;
use tokio::time::Instant;

mod common;
use common::store;

const REPEATS: usize = 3;

/// The bare client loop: one etcd lease and one keep-alive stream per task; with
/// `with_key`, one key attached to each lease (as the framework's lease-bound key, or
/// any etcd liveness client's registration key, is).
async fn bare_keep_alive(endpoint: &str, concurrency: usize, seconds: f64, with_key: bool) -> f64 {
    let client = etcd_client::Client::connect([endpoint], None)
        .await
        .unwrap_or_else(|e| panic!("bare client: {e}"));
    let mut streams = Vec::new();
    for _ in 0..concurrency {
        let mut lease = client.lease_client();
        let id = lease
            .grant(3600, None)
            .await
            .unwrap_or_else(|e| panic!("grant: {e}"))
            .id();
        if with_key {
            client
                .kv_client()
                .put(
                    format!("bare/{id}"),
                    "",
                    Some(etcd_client::PutOptions::new().with_lease(id)),
                )
                .await
                .unwrap_or_else(|e| panic!("put: {e}"));
        }
        let pair = lease
            .keep_alive(id)
            .await
            .unwrap_or_else(|e| panic!("keep_alive: {e}"));
        streams.push((id, pair));
    }
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let tasks: Vec<_> = streams
        .into_iter()
        .map(|(_, (mut keeper, mut stream))| {
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < until {
                    if keeper.keep_alive().await.is_err() {
                        break;
                    }
                    match stream.message().await {
                        Ok(Some(r)) if r.ttl() > 0 => n += 1,
                        _ => break,
                    }
                }
                n
            })
        })
        .collect();
    liveness_conformance::bench::per_second(start, tasks).await
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
    let Cli {
        kit: options,
        acquire_only,
    } = bench::args::parse(&[]);
    let Some(server) = liveness_testkit::etcd::shared() else {
        eprintln!("bench: no etcd (skipped)");
        return;
    };
    let url = server.url().to_owned();
    let endpoint = server.endpoint().to_owned();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    let factory = {
        let url = url.clone();
        liveness_conformance::factory(move || {
            let url = url.clone();
            async move { Some(Arc::new(store(&url).await) as Arc<dyn Store>) }
        })
    };
    rt.block_on(async {
        println!("== etcd bench ({}) ==", etcd_version());
        {
            let s = factory().await.unwrap_or_else(|| panic!("no store"));
            bench::print_acquires(&*s, 1).await;
        }
        if acquire_only {
            return;
        }
        for &c in &options.concurrency {
            let (mut fw, mut raw, mut keyed) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..REPEATS {
                let s = factory().await.unwrap_or_else(|| panic!("no store"));
                fw.push(bench::renewals(s, c, options.seconds).await.per_second);
                raw.push(bare_keep_alive(&endpoint, c, options.seconds, false).await);
                keyed.push(bare_keep_alive(&endpoint, c, options.seconds, true).await);
            }
            let (fw, raw, keyed) = (liveness_conformance::bench::median(&mut fw), liveness_conformance::bench::median(&mut raw), liveness_conformance::bench::median(&mut keyed));
            println!(
                "renewals/s   members={c:<4} framework={fw:>9.0} bare keep-alive: lease with a key={keyed:>9.0} (ratio {:.2}), lease alone={raw:>9.0} (ratio {:.2})",
                fw / keyed.max(1.0),
                fw / raw.max(1.0)
            );
        }
        {
            let s = factory().await.unwrap_or_else(|| panic!("no store"));
            let (one, many) = batch_renewals(s, options.seconds).await;
            println!(
                "renew batch  leases={:<4} one by one={one:>9.0}/s renew_many={many:>9.0}/s (ratio {:.2})",
                liveness_etcd::MAX_BATCH,
                many / one.max(1.0)
            );
        }
        for &m in &options.members {
            for pct in [0usize, 1] {
                let s = factory().await.unwrap_or_else(|| panic!("no store"));
                let expired = m * pct / 100;
                let t = Instant::now();
                let r = bench::checker_round(s, m, expired).await;
                println!(
                    "checker round members={:<7} expired={:<5} time={:>10.3?} round_trips={} (setup {:.1?})",
                    r.members,
                    r.expired,
                    r.time,
                    r.round_trips,
                    t.elapsed()
                );
            }
        }
        let s = factory().await.unwrap_or_else(|| panic!("no store"));
        let d = bench::detection(s, options.deaths).await;
        println!("{d}");
    });
}

/// Leases renewed per second for `max_batch` leases on one handle, one task: one
/// `renew` after the other, then `renew_many` of them all.
async fn batch_renewals(store: Arc<dyn Store>, seconds: f64) -> (f64, f64) {
    let caps = store.capabilities();
    let ttl = liveness_core::Ttl::new(caps.min_ttl.max(Duration::from_secs(10)))
        .unwrap_or_else(|e| panic!("ttl: {e}"));
    let leases = liveness_conformance::bench_util::member_leases(
        &*store,
        "batch",
        caps.max_batch,
        "bench",
        ttl,
    )
    .await;
    // Open every keep-alive stream first.
    for l in &leases {
        store
            .renew(l)
            .await
            .unwrap_or_else(|e| panic!("renew: {e}"));
    }
    let run = |many: bool| {
        let (store, leases) = (store.clone(), leases.clone());
        async move {
            let start = Instant::now();
            let until = start + Duration::from_secs_f64(seconds);
            let mut n = 0usize;
            while Instant::now() < until {
                if many {
                    let answers = store
                        .renew_many(&leases)
                        .await
                        .unwrap_or_else(|e| panic!("renew_many: {e}"));
                    n += answers.iter().filter(|a| a.is_ok()).count();
                } else {
                    for l in &leases {
                        if store.renew(l).await.is_ok() {
                            n += 1;
                        }
                    }
                }
            }
            n as f64 / start.elapsed().as_secs_f64()
        }
    };
    let one = run(false).await;
    let many = run(true).await;
    for l in &leases {
        let _ = store.release(l).await;
    }
    (one, many)
}

fn etcd_version() -> String {
    std::process::Command::new("etcd")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_owned))
        .unwrap_or_else(|| "etcd".to_owned())
}
