//! `liveness check`: a checker as a standalone process, the way most deployments run
//! it. Logs every death as it happens; exits cleanly on SIGTERM or SIGINT. With
//! `--metrics ADDR` it serves `/metrics` (the Prometheus page) and `/health` (200 only
//! while its rounds complete; 503 with the reason otherwise).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use liveness::{Backoff, CancellationToken, Checker, CheckerConfig, Event, EventBus, Space};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::time::Instant;

use crate::{Ctx, Failure};

/// How often the recorder drains its histograms (what the exporter's own listener
/// does by itself).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The least time `/health` allows since the last completed round.
const MIN_HEALTH_BOUND: Duration = Duration::from_secs(5);

/// The checker's health as `/health` reports it: the rounds of [`run`] write it.
#[derive(Debug)]
pub(crate) struct Health {
    /// How long after the last successful round the checker still counts as healthy:
    /// 3 × `check_every`, at least [`MIN_HEALTH_BOUND`].
    bound: Duration,
    state: Mutex<HealthState>,
}

#[derive(Debug)]
struct HealthState {
    /// When the process started serving.
    started: Instant,
    /// When the last successful round ended.
    last_ok: Option<Instant>,
    /// Since when rounds fail, and the last one's reason; `None` after a success.
    failing: Option<(Instant, String)>,
    /// When the round in progress started.
    running: Option<Instant>,
}

impl Health {
    fn new(check_every: Duration) -> Self {
        Health {
            bound: check_every.saturating_mul(3).max(MIN_HEALTH_BOUND),
            state: Mutex::new(HealthState {
                started: Instant::now(),
                last_ok: None,
                failing: None,
                running: None,
            }),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut HealthState) -> T) -> T {
        // A panic elsewhere while holding the lock leaves plain data behind: use it.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut state)
    }

    fn round_started(&self) {
        self.with(|s| s.running = Some(Instant::now()));
    }

    fn round_succeeded(&self) {
        self.with(|s| {
            s.running = None;
            s.failing = None;
            s.last_ok = Some(Instant::now());
        });
    }

    fn round_failed(&self, why: String) {
        self.with(|s| {
            let now = Instant::now();
            s.running = None;
            let since = s.failing.as_ref().map_or(now, |(since, _)| *since);
            s.failing = Some((since, why));
        });
    }

    /// `Ok` with a one-line summary while the last round succeeded within the bound;
    /// `Err` with a one-line reason otherwise.
    fn verdict(&self) -> Result<String, String> {
        let bound = self.bound;
        let ago = |t: Instant| format!("{:.1}s", t.elapsed().as_secs_f64());
        self.with(|s| {
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
                    ago(s.started)
                )),
            }
        })
    }
}

/// Binds `addr`, installs the Prometheus recorder and serves `GET /metrics` and
/// `GET /health` there (any other path: 404). Call it before the checker is built:
/// its metric handles bind to the recorder installed then. The returned [`Health`]
/// goes to [`run`], whose rounds keep it current; until the first round it answers
/// 503.
pub(crate) async fn serve_metrics(
    addr: SocketAddr,
    check_every: Duration,
) -> Result<Arc<Health>, Failure> {
    // Bind here, so a busy or forbidden address is reported at once.
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Failure::Input(format!("cannot serve metrics on {addr}: {e}")))?;
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| Failure::Other(format!("cannot serve metrics on {addr}: {e}")))?;
    tokio::spawn(upkeep(handle.clone()));
    let health = Arc::new(Health::new(check_every));
    let app = Router::new()
        .route("/metrics", get(move || std::future::ready(handle.render())))
        .route(
            "/health",
            get({
                let health = health.clone();
                move || std::future::ready(health_answer(&health))
            }),
        );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(%addr, error = %e, "the metrics server stopped");
        }
    });
    tracing::info!(%addr, "serving /metrics and /health");
    Ok(health)
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

/// How much of `check_every` a pause between rounds may be shortened by (as in
/// [`Checker::run`]), so checkers started together drift apart.
const CHECK_JITTER: f64 = 0.2;

/// Runs `checker`'s rounds until `stop` fires, paced as [`Checker::run`] paces them
/// (after the next expiry, at most `check_every` apart, sooner on a store wake-up,
/// with backoff while rounds fail), and records each round's outcome in `health`.
/// `stop` is looked at only between rounds: a round in progress ends first.
async fn rounds(
    checker: Checker,
    mut wake: Option<tokio::sync::watch::Receiver<u64>>,
    check_every: Duration,
    health: Option<Arc<Health>>,
    stop: CancellationToken,
) {
    let fresh_backoff = || Backoff::new(Duration::from_millis(10), check_every);
    let mut backoff = fresh_backoff();
    loop {
        if let Some(h) = &health {
            h.round_started();
        }
        let started = Instant::now();
        let outcome = checker.round().await;
        let pause = match outcome {
            Ok(report) if report.listing_failed() => {
                if let Some(h) = &health {
                    let steps: Vec<String> = report
                        .skipped
                        .iter()
                        .map(|s| format!("{:?}", s.step))
                        .collect();
                    h.round_failed(format!(
                        "the store did not answer every listing (skipped: {})",
                        steps.join(", ")
                    ));
                }
                let next = report.next_expiry.unwrap_or(check_every);
                backoff.next().min(next).min(check_every)
            }
            Ok(report) => {
                if let Some(h) = &health {
                    h.round_succeeded();
                }
                if report.more {
                    // Behind: go on soon, never in a tight loop.
                    started
                        .elapsed()
                        .clamp(Duration::from_millis(1), check_every)
                } else {
                    backoff = fresh_backoff();
                    let capped = check_every.mul_f64(1.0 - CHECK_JITTER * fastrand::f64());
                    report
                        .next_expiry
                        .map(|d| d + Duration::from_millis(1))
                        .unwrap_or(check_every)
                        .min(capped)
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "checker round failed");
                if let Some(h) = &health {
                    h.round_failed(e.to_string());
                }
                backoff.next().min(check_every)
            }
        };
        // Never two rounds closer than a fiftieth of `check_every`: a burst of
        // wake-ups is served by one round.
        let until = Instant::now() + pause;
        let gap = (check_every / 50).max(Duration::from_millis(1));
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(gap.min(pause.max(Duration::from_millis(1)))) => {}
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(until) => {}
            _ = liveness::wake::woken(&mut wake) => {}
        }
    }
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
    let config = CheckerConfig {
        space: Space::new(space)?,
        check_every,
        events,
        ..CheckerConfig::default()
    };
    config.validate()?;
    let checker = Checker::new(ctx.store.clone(), config);
    let stop = CancellationToken::new();
    let task = tokio::spawn(rounds(
        checker,
        ctx.store.wakeups(),
        check_every,
        health,
        stop.clone(),
    ));
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
            event = rx.recv() => match event {
                Ok(event) => log(event),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "too many events to log; some were dropped")
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            },
        }
    }
    stop.cancel();
    // The round in progress ends first.
    let _ = task.await;
    tracing::info!("checker stopped");
    Ok(())
}
