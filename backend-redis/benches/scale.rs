//! The scale bench of the liveness bench kit (`liveness_conformance::scale`) on one
//! redis-server, plus the server's own CPU per call over each run.
//!
//! `cargo bench -p liveness-redis --bench scale -- --members 10000 --ttl 10s --seconds 60
//! [--batch-ms 2|0] [--overload --steal 30]`. Uses `LIVENESS_REDIS_URL` when set, else
//! starts a private redis-server (no persistence). The store's response timeout is the
//! heartbeat's recommended client timeout ([`HeartbeatConfig::client_timeout`]).
//!
//! After each run, the raw primitive on the same server: as many bare lease hashes,
//! renewed at the same rate in batches of the run's mean size (each pass over the
//! leases in a new random order, as a fleet's renewals come: see [`Passes`]) by a
//! script that does only the two commands a renewal needs (read the lease, write its
//! expiry) — no token or expiry check, no index, no epoch. Its server CPU per
//! renewal, beside the framework's, gives the ratio, whatever the machine.
//!
//! Then the framework's own renewal alone, on the same terms: as many leases taken
//! through the store, renewed with `renew_many` at the same rate and batch size from
//! one task, with no fleet, checker or member process beside it. The framework's
//! figure in the fleet run includes what the fleet adds (checker rounds, deaths and
//! their reaps); this one is the renewal script's own cost, and its ratio to the raw
//! primitive is the framework's overhead per renewal.

use std::sync::Arc;
use std::time::Duration;

use liveness_conformance::bench_util;
use liveness_conformance::scale::{self, ScaleOptions};
use liveness_core::{HeartbeatConfig, HolderId, LeaseStore, Store, Ttl};
use liveness_redis::{RedisConfig, RedisStore};

mod common;
use common::server;

/// used_cpu_user + used_cpu_sys of the server, and its total command calls.
async fn server_cpu(url: &str) -> Option<(f64, u64)> {
    match server_cpu_of(url).await {
        Ok(v) => Some(v),
        Err(e) => {
            eprintln!("scale: reading the redis-server's CPU failed: {e}");
            None
        }
    }
}

async fn connection(url: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(url.split('?').next().unwrap_or(url))?;
    // Generous timeouts: right after a run the server may still be busy with the
    // fleet's last calls.
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(10)))
        .set_response_timeout(Some(Duration::from_secs(10)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// The server's process id (`INFO server`), for the per-phase server CPU figure.
async fn server_pid(url: &str) -> Option<u32> {
    let mut conn = connection(url).await.ok()?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse().ok())
}

async fn server_cpu_of(url: &str) -> redis::RedisResult<(f64, u64)> {
    let mut conn = connection(url).await?;
    let cpu: String = redis::cmd("INFO").arg("cpu").query_async(&mut conn).await?;
    let field = |name: &str| -> f64 {
        cpu.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let stats: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut conn)
        .await?;
    let calls = stats
        .lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Ok((field("used_cpu_user:") + field("used_cpu_sys:"), calls))
}

/// The raw primitive's script: per lease (ARGV: a key prefix, then names), read the
/// lease hash and write its expiry.
const RAW_RENEW: &str = r"
local n = 0
for i = 2, #ARGV do
  local key = ARGV[1] .. ARGV[i]
  redis.call('HMGET', key, 't', 'e', 'ttl', 'ep', 'ix')
  redis.call('HSET', key, 'e', '1767225600000000')
  n = n + 1
end
return n
";

/// The leases (by index) of one renewal call after another, pass after pass: each pass
/// renews every lease once, in a new random order. A fleet's members come due in no
/// particular order, so the server meets their leases (and their places in the expiry
/// index) scattered in memory; renewing them in the order they were written would
/// measure a cache-friendly order no fleet has (framework renewal alone measured
/// 11.8–12.6 µs per renewal in write order, 13.4–13.9 µs shuffled: see
/// `docs/measurements/redis.md`).
struct Passes {
    order: Vec<usize>,
    at: usize,
    /// xorshift64 state: enough to shuffle a bench's order (not for secrets).
    rng: u64,
}

impl Passes {
    fn new(n: usize) -> Self {
        Passes {
            order: (0..n).collect(),
            at: 0,
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// Up to `batch` indexes, never crossing into the next pass (empty when n is 0).
    fn next(&mut self, batch: usize) -> &[usize] {
        if self.order.is_empty() {
            return &[];
        }
        if self.at == 0 {
            // Fisher–Yates.
            for i in (1..self.order.len()).rev() {
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                self.order.swap(i, (self.rng % (i as u64 + 1)) as usize);
            }
        }
        let from = self.at;
        let to = (from + batch.max(1)).min(self.order.len());
        self.at = to % self.order.len();
        &self.order[from..to]
    }
}

/// Calls `renew` with `batch` indexes of `n` leases at a time, pass after pass (see
/// [`Passes`]), paced at `per_sec` renewals a second, for `seconds`. `renew` answers
/// how many of its leases it renewed; the first error ends the run. Returns the
/// renewals and the wall seconds taken.
async fn paced<E>(
    n: usize,
    per_sec: f64,
    batch: usize,
    seconds: u64,
    mut renew: impl AsyncFnMut(&[usize]) -> Result<u64, E>,
) -> Result<(u64, f64), E> {
    let batch = batch.clamp(1, n.max(1));
    // Paced per renewal: a pass's last call may be short.
    let each = Duration::from_secs_f64(1.0 / per_sec.max(1.0));
    let start = tokio::time::Instant::now();
    let mut next = start;
    let mut renewed = 0u64;
    let mut passes = Passes::new(n);
    while n > 0 && start.elapsed() < Duration::from_secs(seconds) {
        let ids = passes.next(batch);
        next += each * ids.len() as u32;
        renewed += renew(ids).await?;
        tokio::time::sleep_until(next).await;
    }
    Ok((renewed, start.elapsed().as_secs_f64()))
}

/// Renews `members` bare lease hashes with [`RAW_RENEW`] at `per_sec` renewals a
/// second, `batch` per call, for `seconds`; returns the server's CPU µs per renewal
/// and the share of one core, or `None` when the server could not be read.
async fn raw_renewals(
    url: &str,
    members: usize,
    per_sec: f64,
    batch: usize,
    seconds: u64,
) -> redis::RedisResult<Option<(f64, f64)>> {
    let mut conn = connection(url).await?;
    let prefix = format!(
        "raw:{{{}}}:l:members/",
        liveness_conformance::fresh_namespace()
    );
    for chunk in (0..members).collect::<Vec<_>>().chunks(1000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("HSET")
                .arg(format!("{prefix}m{i}"))
                .arg(&[
                    "h", "w", "t", "1", "e", "1", "ttl", "10000", "ep", "1", "ix", "1",
                ])
                .ignore();
        }
        pipe.query_async::<()>(&mut conn).await?;
    }
    let script = redis::Script::new(RAW_RENEW);
    let before = server_cpu_of(url).await?;
    let (renewed, wall) = paced(members, per_sec, batch, seconds, async |ids: &[usize]| {
        let mut call = script.prepare_invoke();
        call.arg(&prefix);
        for i in ids {
            call.arg(format!("m{i}"));
        }
        call.invoke_async::<u64>(&mut conn).await
    })
    .await?;
    let after = server_cpu_of(url).await?;
    let mut purge = redis::pipe();
    for i in 0..members {
        purge.cmd("DEL").arg(format!("{prefix}m{i}")).ignore();
    }
    purge.query_async::<()>(&mut conn).await?;
    let cpu = after.0 - before.0;
    Ok((renewed > 0).then(|| (cpu * 1e6 / renewed as f64, cpu / wall * 100.0)))
}

/// Takes `members` leases with ttl `ttl` through a fresh [`RedisStore`] namespace and
/// renews them with `renew_many` at `per_sec` renewals a second, `batch` per call, for
/// `seconds`, as [`raw_renewals`] does with its bare hashes; returns the server's CPU
/// µs per renewal and the share of one core (`None`: the server could not be read or
/// nothing was renewed). A renewal that fails is reported and ends the run.
async fn framework_renewals(
    url: &str,
    members: usize,
    ttl: Ttl,
    per_sec: f64,
    batch: usize,
    seconds: u64,
) -> liveness_core::Result<Option<(f64, f64)>> {
    let config = RedisConfig::from_url(url)?
        .with_namespace(liveness_conformance::fresh_namespace())
        .with_response_timeout(Duration::from_secs(10))?;
    let store = RedisStore::connect(config).await?;
    let holder = HolderId::new("scale-alone")?;
    let mut leases = bench_util::member_leases_batched(&store, "m", members, &holder, ttl).await?;
    let Ok(before) = server_cpu_of(url).await else {
        return Ok(None);
    };
    let n = leases.len();
    let (renewed, wall) = paced(n, per_sec, batch, seconds, async |ids: &[usize]| {
        let asked: Vec<_> = ids.iter().map(|&i| leases[i].clone()).collect();
        for (&i, answer) in ids.iter().zip(store.renew_many(&asked).await?) {
            leases[i] = answer?;
        }
        Ok::<_, liveness_core::Error>(ids.len() as u64)
    })
    .await?;
    let after = server_cpu_of(url).await;
    store.purge().await?;
    let Ok(after) = after else {
        return Ok(None);
    };
    let cpu = after.0 - before.0;
    Ok((renewed > 0).then(|| (cpu * 1e6 / renewed as f64, cpu / wall * 100.0)))
}

fn main() {
    let options = ScaleOptions::from_args();
    let Some((_server, url)) = server("scale") else {
        return;
    };
    let ttl = Ttl::new(Duration::from_millis(options.ttl.as_millis() as u64))
        .unwrap_or_else(|e| panic!("ttl: {e}"));
    let timeout = HeartbeatConfig::new(ttl).client_timeout();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    rt.block_on(async move {
        for &n in &options.members {
            let config = RedisConfig::from_url(&url)
                .unwrap_or_else(|e| panic!("{e}"))
                .with_namespace(liveness_conformance::fresh_namespace())
                .with_response_timeout(timeout)
                .unwrap_or_else(|e| panic!("{e}"));
            let store = RedisStore::connect(config)
                .await
                .unwrap_or_else(|e| panic!("connect: {e}"));
            let purge = store.clone();
            let before = server_cpu(&url).await;
            let start = std::time::Instant::now();
            let one = ScaleOptions {
                members: vec![n],
                server_pid: match options.server_pid {
                    Some(pid) => Some(pid),
                    None => server_pid(&url).await,
                },
                ..options.clone()
            };
            let s: Arc<dyn Store> = Arc::new(store);
            scale::run(
                liveness_conformance::factory(move || {
                    let s = s.clone();
                    async move { Some(s) }
                }),
                one,
            )
            .await;
            let wall = start.elapsed().as_secs_f64();
            if let (Some((c0, n0)), Some((c1, n1))) = (before, server_cpu(&url).await) {
                let calls = n1.saturating_sub(n0).max(1);
                println!(
                    "redis-server over the whole run (join included): {:.1} % of one core, {} commands (those run inside scripts included), {:.1} µs CPU per command; client response timeout {timeout:?}",
                    (c1 - c0) / wall * 100.0,
                    calls,
                    (c1 - c0) * 1e6 / calls as f64
                );
            }
            let _ = purge.purge().await;
            // The raw primitive at the rate the fleet sends (members / renew_every with
            // renew_every = ttl / 3, plus the 10 % that early jitter adds), 100 a call
            // (a 100k run's batches average about 120).
            let per_sec = n as f64 * 3.3 / ttl.duration().as_secs_f64();
            let batch = 100;
            let raw = match raw_renewals(&url, n, per_sec, batch, 20).await {
                Ok(Some((us, core))) => {
                    println!(
                        "raw primitive {n} bare lease hashes, {per_sec:.0} renewals/s, {batch} a call, 20 s: script HMGET + HSET per lease: server {core:.1} % of one core, {us:.1} µs per renewal (compare the framework's µs per renewal in the run above)"
                    );
                    Some(us)
                }
                Ok(None) => {
                    println!("raw primitive: nothing renewed");
                    None
                }
                Err(e) => {
                    eprintln!("scale: the raw primitive failed: {e}");
                    None
                }
            };
            match framework_renewals(&url, n, ttl, per_sec, batch, 20).await {
                Ok(Some((us, core))) => println!(
                    "framework renewal alone {n} leases, {per_sec:.0} renewals/s, {batch} a call, 20 s, no fleet: renew_many: server {core:.1} % of one core, {us:.1} µs per renewal{}",
                    raw.map_or(String::new(), |raw| format!(
                        ", {:.2} × the raw primitive",
                        us / raw
                    ))
                ),
                Ok(None) => println!("framework renewal alone: nothing renewed"),
                Err(e) => eprintln!("scale: the framework renewal alone failed: {e}"),
            }
        }
    });
}
