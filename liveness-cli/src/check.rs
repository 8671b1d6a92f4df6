//! `liveness check`: a checker as a standalone process, the way most deployments run
//! it. Logs every death as it happens; exits cleanly on SIGTERM or SIGINT. With
//! `--http ADDR` it serves `/metrics` (the Prometheus page), `/health` (200 only
//! while its rounds complete; 503 with the reason otherwise) and the dashboard at `/`.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use liveness::{CancellationToken, Checker, CheckerConfig, CheckerStatus, Event, EventBus, Space};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::{Ctx, Failure};

/// How often the recorder drains its histograms (what the exporter's own listener
/// does by itself).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The least time `/health` allows since the last completed round.
const MIN_HEALTH_BOUND: Duration = Duration::from_secs(5);

/// What `/health` answers: the outcome of the checker's rounds ([`CheckerStatus`]),
/// judged against a bound (3 × `check_every`, at least [`MIN_HEALTH_BOUND`]).
#[derive(Debug)]
pub(crate) struct Health {
    bound: Duration,
    started: Instant,
    status: OnceLock<watch::Receiver<CheckerStatus>>,
}

impl Health {
    fn new(check_every: Duration) -> Self {
        Health {
            bound: check_every.saturating_mul(3).max(MIN_HEALTH_BOUND),
            started: Instant::now(),
            status: OnceLock::new(),
        }
    }

    /// Follows `checker`'s rounds from now on.
    fn attach(&self, checker: &Checker) {
        let _ = self.status.set(checker.status());
    }

    fn verdict(&self) -> Result<String, String> {
        let bound = self.bound;
        let ago = |t: Instant| format!("{:.1}s", t.elapsed().as_secs_f64());
        let status = self
            .status
            .get()
            .map(|rx| rx.borrow().clone())
            .unwrap_or_default();
        {
            let s = &status;
            if let Some(why) = &s.stopped {
                return Err(format!("checker stopped: {why}"));
            }
            if let Some((since, why)) = &s.failing {
                return Err(format!(
                    "store unreachable: rounds failing for {}: {why}",
                    ago(*since)
                ));
            }
            match (s.last_ok, s.running) {
                (Some(ok), _) if ok.elapsed() <= bound => {
                    Ok(format!("ok: last round completed {} ago", ago(ok)))
                }
                (Some(ok), Some(running)) => Err(format!(
                    "rounds stuck: none completed for {} (bound {}); the current one has run for {}",
                    ago(ok),
                    humantime::format_duration(bound),
                    ago(running)
                )),
                (Some(ok), None) => Err(format!(
                    "rounds stuck: none completed for {} (bound {})",
                    ago(ok),
                    humantime::format_duration(bound)
                )),
                (None, Some(running)) if running.elapsed() > bound => Err(format!(
                    "rounds stuck: the first round has run for {} (bound {})",
                    ago(running),
                    humantime::format_duration(bound)
                )),
                (None, _) => Err(format!(
                    "starting: no round completed yet ({} since start)",
                    ago(self.started)
                )),
            }
        }
    }
}

/// Binds `addr`, installs the Prometheus recorder and serves `GET /metrics` and
/// `GET /health` there, and the dashboard on every other path (answering 503 until
/// [`Mount::connect`](crate::dashboard::Mount::connect) gives it the store). Call it
/// before the checker is built: its metric handles bind to the recorder installed
/// then. The returned [`Health`] goes to [`run`], whose rounds keep it current; until
/// the first round it answers 503.
pub(crate) async fn serve_metrics(
    addr: SocketAddr,
    check_every: Duration,
    dashboard: &crate::dashboard::DashboardArgs,
) -> Result<(Arc<Health>, crate::dashboard::Mount), Failure> {
    let health = Arc::new(Health::new(check_every));
    // Checked before anything is bound: a missing token is bad input.
    let (mount, pages) =
        crate::dashboard::Mount::new(addr, dashboard, Arc::new(HealthSource(health.clone())))?;
    // Bind here, so a busy or forbidden address is reported at once.
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Failure::Input(format!("cannot serve http on {addr}: {e}")))?;
    let handle = prometheus()
        .and_then(PrometheusBuilder::install_recorder)
        .map_err(|e| Failure::Other(format!("cannot serve metrics on {addr}: {e}")))?;
    tokio::spawn(upkeep(handle.clone()));
    let app = Router::new()
        .route("/metrics", get(move || std::future::ready(handle.render())))
        .route(
            "/health",
            get({
                let health = health.clone();
                move || std::future::ready(health_answer(&health))
            }),
        )
        .fallback_service(pages);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(%addr, error = %e, "the http server stopped");
        }
    });
    tracing::info!(%addr, "serving the dashboard, /metrics and /health on http://{addr}/");
    Ok((health, mount))
}

/// The Prometheus recorder's builder, with every histogram the framework records
/// ([`liveness::metrics::HISTOGRAMS`]) given its buckets: exported as
/// `_bucket{le=...}`, `_sum` and `_count`, which add up across processes, not as a
/// summary of per-process quantiles.
fn prometheus() -> Result<PrometheusBuilder, BuildError> {
    liveness::metrics::HISTOGRAMS.iter().try_fold(
        PrometheusBuilder::new(),
        |builder, (name, buckets)| {
            builder.set_buckets_for_metric(Matcher::Full((*name).to_owned()), buckets)
        },
    )
}

/// What the dashboard shows of the checker: what `/health` answers.
struct HealthSource(Arc<Health>);

impl liveness_dashboard::CheckerSource for HealthSource {
    fn state(&self) -> liveness_dashboard::CheckerState {
        let verdict = self.0.verdict();
        let last_round = self
            .0
            .status
            .get()
            .and_then(|rx| rx.borrow().last_ok)
            .map(|ok| ok.elapsed());
        let healthy = verdict.is_ok();
        liveness_dashboard::CheckerState {
            healthy,
            summary: verdict.unwrap_or_else(|why| why),
            last_round,
        }
    }
}

/// `/health`'s answer: 200 and a summary, or 503 and the reason, one line each.
fn health_answer(health: &Health) -> (StatusCode, String) {
    match health.verdict() {
        Ok(line) => (StatusCode::OK, line + "\n"),
        Err(line) => (StatusCode::SERVICE_UNAVAILABLE, line + "\n"),
    }
}

/// Drains the recorder's histograms now and then, for ever.
async fn upkeep(handle: PrometheusHandle) {
    loop {
        tokio::time::sleep(UPKEEP_EVERY).await;
        handle.run_upkeep();
    }
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
        Event::Swept {
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

/// The failure of a checker whose task ended before it was told to stop: why, as its
/// status says (or as the task's end says, when the status could not).
fn stopped_by_itself(
    status: &watch::Receiver<CheckerStatus>,
    ended: Result<(), tokio::task::JoinError>,
) -> Failure {
    let why = status
        .borrow()
        .stopped
        .clone()
        .unwrap_or_else(|| match ended {
            Err(e) if e.is_panic() => "the checker's task panicked".to_string(),
            _ => "the checker's task ended".to_string(),
        });
    Failure::Other(format!("the checker stopped: {why}"))
}

/// Runs the checker until SIGTERM or SIGINT, logging its events; `health` (from
/// [`serve_metrics`]) learns the outcome of every round.
pub(crate) async fn run(
    ctx: &Ctx,
    space: &str,
    check_every: Duration,
    health: Option<Arc<Health>>,
) -> Result<(), Failure> {
    let events = EventBus::default();
    let mut rx = events.subscribe();
    let config = CheckerConfig::default()
        .space(Space::new(space)?)
        .check_every(check_every)
        .events(events);
    config.validate()?;
    let checker = Checker::new(ctx.store.clone(), config);
    if let Some(health) = &health {
        health.attach(&checker);
    }
    let status = checker.status();
    let stop = CancellationToken::new();
    let mut task = tokio::spawn({
        let stop = stop.clone();
        async move { checker.run(stop).await }
    });
    tracing::info!(
        backend = ctx.store.backend(),
        namespace = %ctx.store.issuer().namespace(),
        space,
        "checker running; SIGTERM or Ctrl-C stops it"
    );
    let signal = shutdown();
    tokio::pin!(signal);
    loop {
        tokio::select! {
            _ = &mut signal => break,
            // The checker ended by itself (a panic): never a silent stop, nor an exit
            // that looks like a clean one.
            ended = &mut task => {
                return Err(stopped_by_itself(&status, ended));
            }
            event = rx.recv() => match event {
                Ok(event) => log(event),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "too many events to log; some were dropped")
                }
                // The bus closes when the checker is gone: its task ended, which the
                // arm above reports.
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    let ended = (&mut task).await;
                    return Err(stopped_by_itself(&status, ended));
                }
            },
        }
    }
    stop.cancel();
    // The round in progress ends first.
    let _ = (&mut task).await;
    tracing::info!("checker stopped");
    Ok(())
}
