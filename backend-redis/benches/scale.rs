//! The scale bench of the liveness bench kit (`liveness_conformance::scale`) on one
//! redis-server, plus the server's own CPU per call over each run.
//!
//! `cargo bench -p backend-redis --bench scale -- --members 10000 --ttl 10s --seconds 60
//! [--batch-ms 2|0] [--overload --steal 30]`. Uses `LIVENESS_REDIS_URL` when set, else
//! starts a private redis-server (no persistence). The store's response timeout is the
//! heartbeat's recommended client timeout ([`HeartbeatConfig::client_timeout`]).

use std::sync::Arc;
use std::time::Duration;

use backend_redis::{RedisConfig, RedisStore};
use liveness_conformance::scale::{self, ScaleOptions};
use liveness_core::{HeartbeatConfig, Store, Ttl};
use liveness_testkit::redis::RedisServer;

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

fn main() {
    let options = ScaleOptions::from_args();
    let server = match std::env::var("LIVENESS_REDIS_URL") {
        Ok(_) => None,
        Err(_) => match RedisServer::start() {
            Some(s) => Some(s),
            None => {
                eprintln!("scale: no redis-server (skipped)");
                return;
            }
        },
    };
    let url = std::env::var("LIVENESS_REDIS_URL")
        .ok()
        .or_else(|| server.as_ref().map(|s| s.url().to_owned()))
        .unwrap_or_default();
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
        }
    });
}
