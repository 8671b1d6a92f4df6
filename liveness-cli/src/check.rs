//! `liveness check`: a checker as a standalone process, the way most deployments run
//! it. Logs every death as it happens; exits cleanly on SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::time::Duration;

use liveness::{Checker, CheckerConfig, Event, EventBus, Space};
use metrics_exporter_prometheus::PrometheusBuilder;

use crate::{Ctx, Failure};

/// Installs the Prometheus recorder and serves `/metrics` and `/health` on `addr`.
/// Call it before the checker is built: its metric handles bind to the recorder
/// installed then.
pub(crate) fn serve_metrics(addr: SocketAddr) -> Result<(), Failure> {
    // Bind here, so a busy or forbidden address is reported at once.
    std::net::TcpListener::bind(addr)
        .map_err(|e| Failure::Input(format!("cannot serve metrics on {addr}: {e}")))?;
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| Failure::Other(format!("cannot serve metrics on {addr}: {e}")))?;
    tracing::info!(%addr, "serving /metrics and /health");
    Ok(())
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub(crate) async fn shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Logs one checker event.
fn log(event: Event) {
    match event {
        Event::Died {
            key,
            holder,
            token,
            requeued,
            dead_lettered,
        } => tracing::info!(%key, %holder, %token, requeued, dead_lettered, "died"),
        Event::OrphansRequeued {
            token,
            requeued,
            dead_lettered,
        } => tracing::info!(%token, requeued, dead_lettered, "swept a dead token's items"),
        Event::ItemDeadLettered { id, token } => {
            tracing::warn!(item = %id, %token, "item dead-lettered: out of attempts")
        }
        Event::CheckSkipped {
            step,
            key,
            token,
            retryable,
        } => tracing::warn!(?step, ?key, ?token, retryable, "checker skipped an entry"),
        _ => {}
    }
}

pub(crate) async fn run(ctx: &Ctx, space: &str, check_every: Duration) -> Result<(), Failure> {
    let events = EventBus::default();
    let mut rx = events.subscribe();
    let config = CheckerConfig {
        space: Space::new(space)?,
        check_every,
        events,
        ..CheckerConfig::default()
    };
    config.validate()?;
    let checker = Checker::new(ctx.store.clone(), config).spawn();
    tracing::info!(
        backend = ctx.store.backend(),
        namespace = %ctx.store.issuer().namespace(),
        space,
        "checker running; SIGTERM or Ctrl-C stops it"
    );
    let stop = shutdown();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            event = rx.recv() => match event {
                Ok(event) => log(event),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "too many events to log; some were dropped")
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            },
        }
    }
    checker.stop().await;
    tracing::info!("checker stopped");
    Ok(())
}
