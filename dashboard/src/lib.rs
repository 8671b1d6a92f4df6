//! A live operator dashboard for a liveness store, as an [`axum::Router`]: who is
//! alive, who leads each singleton role, who died and where their items went, what is
//! stuck in the dead-letter set, how the checker is doing, and a few small charts.
//!
//! ```no_run
//! use std::sync::Arc;
//! use liveness_core::{MemoryStore, Store};
//! use liveness_dashboard::{Dashboard, Options};
//!
//! # async fn serve() -> std::io::Result<()> {
//! let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
//! let app = Dashboard::new(store, Options::default()).router();
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9464").await?;
//! axum::serve(listener, app).await
//! # }
//! ```
//!
//! Every list is read a page at a time with the store's paged reads
//! ([`OperatorStore::leases`](liveness_core::OperatorStore::leases),
//! [`OperatorStore::items`](liveness_core::OperatorStore::items),
//! [`OperatorStore::deaths`](liveness_core::OperatorStore::deaths)), so the page stays small
//! and fast whatever the fleet's size. The page refreshes itself every second. It
//! loads nothing from another host: its script and style are compiled into the binary.
//!
//! Actions (retrying dead letters) are off unless [`Options::actions`] carries an
//! access token; then only a `POST` with that token in the `X-Liveness-Token` header,
//! from the dashboard's own origin, is obeyed, and every other one answers 403.

mod actions;
mod data;
mod samples;
mod view;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use liveness_core::{Space, Store};

pub use data::Grouping;

/// Whether the dashboard obeys actions, and the token they must carry.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum Actions {
    /// Read-only: every action answers 403 (the default).
    #[default]
    Off,
    /// Actions are obeyed when they carry this token in the `X-Liveness-Token` header.
    Token(String),
}

impl std::fmt::Debug for Actions {
    // The token never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Actions::Off => f.write_str("Off"),
            Actions::Token(_) => f.write_str("Token(<redacted>)"),
        }
    }
}

/// How the dashboard reads and shows the store.
#[derive(Clone, Debug)]
pub struct Options {
    /// The space whose leases are listed (`OperatorStore::leases`); default `members`.
    pub space: Space,
    /// Whether actions are obeyed (default [`Actions::Off`]).
    pub actions: Actions,
    /// What the page names the store by, such as its URL: pass it through
    /// [`redact_url`] first, so that no password reaches the page. Default empty.
    pub store_description: String,
    /// How many rows one page of a list shows; default 50 (at most 500).
    pub page_size: usize,
    /// How long one store read may take before the page says the store does not
    /// answer; default 2 s.
    pub timeout: Duration,
    /// How often the charts take a sample; default 1 s.
    pub sample_every: Duration,
    /// The host names the dashboard answers to (the `Host` header without its port);
    /// any other answers 421, which stops a page of another site from reading this
    /// one through a DNS name rebound to its address. Empty (the default): any host.
    /// Set it for a dashboard bound to a loopback address: `127.0.0.1`, `localhost`,
    /// `[::1]`.
    pub hosts: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            space: Space::members(),
            actions: Actions::Off,
            store_description: String::new(),
            page_size: 50,
            timeout: Duration::from_secs(2),
            sample_every: Duration::from_secs(1),
            hosts: Vec::new(),
        }
    }
}

/// The checker's state as the page shows it, from a [`CheckerSource`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckerState {
    /// True while its rounds complete in time.
    pub healthy: bool,
    /// One line: what `/health` answers ("ok: last round completed 0.4s ago", "store
    /// unreachable: rounds failing for 3.0s: ...", "rounds stuck: ...").
    pub summary: String,
    /// How long ago the last round completed, if one did.
    pub last_round: Option<Duration>,
}

/// Where the page learns about the checker running next to it (if any).
pub trait CheckerSource: Send + Sync + 'static {
    /// The checker's state now.
    fn state(&self) -> CheckerState;
}

/// Builds the dashboard's [`Router`] over a store.
pub struct Dashboard {
    store: Arc<dyn Store>,
    options: Options,
    checker: Option<Arc<dyn CheckerSource>>,
}

impl std::fmt::Debug for Dashboard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dashboard")
            .field("backend", &self.store.backend())
            .field("options", &self.options)
            .field("checker", &self.checker.is_some())
            .finish()
    }
}

/// What every handler shares.
pub(crate) struct Shared {
    pub store: Arc<dyn Store>,
    pub options: Options,
    pub checker: Option<Arc<dyn CheckerSource>>,
    pub samples: samples::Ring,
}

impl Dashboard {
    /// A dashboard over `store`, shown as `options` say.
    pub fn new(store: Arc<dyn Store>, mut options: Options) -> Self {
        // A page is at most what the store lists in one call.
        let max_batch = store.capabilities().max_batch.max(1);
        options.page_size = options.page_size.clamp(1, 500).min(max_batch);
        Dashboard {
            store,
            options,
            checker: None,
        }
    }

    /// Shows the state of the checker that `source` follows.
    pub fn checker(mut self, source: Arc<dyn CheckerSource>) -> Self {
        self.checker = Some(source);
        self
    }

    /// The routes: `GET /` (the page), `GET /parts` (its live part, which the page
    /// fetches every second), `GET /assets/*` (its script and style), and the actions
    /// `POST /actions/retry/{id}`, `POST /actions/retry-all` and
    /// `POST /actions/cancel/{id}`.
    ///
    /// Called inside a tokio runtime, it starts the task that samples the store for
    /// the charts; the task ends when the router (and every clone of it) is dropped.
    pub fn router(self) -> Router {
        let shared = Arc::new(Shared {
            store: self.store,
            options: self.options,
            checker: self.checker,
            samples: samples::Ring::default(),
        });
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::spawn(samples::run(Arc::downgrade(&shared)));
        }
        Router::new()
            .route("/", get(page))
            .route("/parts", get(parts))
            .route("/assets/app.js", get(script))
            .route("/assets/app.css", get(style))
            .route("/actions/retry/{id}", post(actions::retry_one))
            .route("/actions/retry-all", post(actions::retry_all))
            .route("/actions/cancel/{id}", post(actions::cancel_one))
            .layer(axum::middleware::from_fn_with_state(
                shared.clone(),
                only_known_hosts,
            ))
            .with_state(shared)
    }
}

/// A dashboard mounted before its store is known: a server can answer its other
/// paths (`/health`, `/metrics`) at once and give the dashboard its store once
/// connected. Until then every request it gets answers 503.
///
/// ```
/// use axum::Router;
/// use liveness_dashboard::Deferred;
///
/// let later = Deferred::default();
/// let app: Router = Router::new().fallback_service(later.router());
/// // ... once the store is connected:
/// // later.set(Dashboard::new(store, options).router());
/// ```
#[derive(Clone, Debug, Default)]
pub struct Deferred(Arc<OnceLock<Router>>);

impl Deferred {
    /// Gives the dashboard its router; false (and nothing changes) when it had one.
    pub fn set(&self, router: Router) -> bool {
        self.0.set(router).is_ok()
    }

    /// A router that hands every request to the one given by [`Deferred::set`], or
    /// answers 503 until then.
    pub fn router(&self) -> Router {
        let slot = self.0.clone();
        Router::new().fallback(move |req: Request| {
            let slot = slot.clone();
            async move {
                match slot.get() {
                    Some(router) => {
                        use tower::ServiceExt;
                        match router.clone().oneshot(req).await {
                            Ok(response) => response,
                            Err(never) => match never {},
                        }
                    }
                    None => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the dashboard is connecting to the store\n",
                    )
                        .into_response(),
                }
            }
        })
    }
}

/// The page's script and style, compiled in: nothing is fetched from another host.
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/app.css");

/// What the page may load: only its own script and style, from its own origin.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   connect-src 'self'; img-src 'self'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

/// Answers 421 to a request for a host not in [`Options::hosts`] (when set).
async fn only_known_hosts(
    State(shared): State<Arc<Shared>>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    let hosts = &shared.options.hosts;
    if !hosts.is_empty() {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        if !hosts.iter().any(|h| h == host_name(host)) {
            return (
                StatusCode::MISDIRECTED_REQUEST,
                "this dashboard does not answer to that host name\n",
            )
                .into_response();
        }
    }
    next.run(req).await
}

/// The host name of a `Host` header: without its port (`[::1]:80` → `[::1]`).
fn host_name(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((name, port)) if !port.contains(']') => name,
        _ => host,
    }
}

/// An HTML answer with the headers every page carries.
fn html(body: String) -> Response {
    let mut response = Html(body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

async fn page(State(shared): State<Arc<Shared>>, Query(view): Query<data::View>) -> Response {
    let snapshot = data::read(&shared, &view).await;
    html(view::page(&shared, &view, &snapshot).into_string())
}

async fn parts(State(shared): State<Arc<Shared>>, Query(view): Query<data::View>) -> Response {
    let snapshot = data::read(&shared, &view).await;
    html(view::live(&shared, &view, &snapshot).into_string())
}

fn asset(body: &'static str, kind: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

async fn script() -> Response {
    asset(SCRIPT, "text/javascript; charset=utf-8")
}

async fn style() -> Response {
    asset(STYLE, "text/css; charset=utf-8")
}

/// The host names a page served on `addr` should answer to ([`Options::hosts`]): on
/// a loopback address, `localhost` and the address itself (so that no other site's
/// page can read it through a DNS name rebound to 127.0.0.1); none (any host) for
/// another address.
///
/// ```
/// use liveness_dashboard::loopback_hosts;
/// assert_eq!(loopback_hosts("127.0.0.1:9464".parse().unwrap()), ["localhost", "127.0.0.1"]);
/// assert!(loopback_hosts("[::1]:9464".parse().unwrap()).contains(&"[::1]".to_string()));
/// assert!(loopback_hosts("0.0.0.0:9464".parse().unwrap()).is_empty());
/// ```
pub fn loopback_hosts(addr: std::net::SocketAddr) -> Vec<String> {
    if !addr.ip().is_loopback() {
        return Vec::new();
    }
    let mut hosts = vec!["localhost".to_string(), addr.ip().to_string()];
    if let std::net::IpAddr::V6(ip) = addr.ip() {
        hosts.push(format!("[{ip}]"));
    }
    hosts
}

/// `url` with its password (in the user part, or a `password=` query parameter)
/// replaced by `***`: what [`Options::store_description`] may show.
///
/// ```
/// use liveness_dashboard::redact_url;
/// assert_eq!(
///     redact_url("postgres://app:s3cret@db:5432/x?ns=a"),
///     "postgres://app:***@db:5432/x?ns=a"
/// );
/// assert_eq!(redact_url("redis://h:6379?ns=a&password=pw"), "redis://h:6379?ns=a&password=***");
/// assert_eq!(redact_url("sqlite:///tmp/a.db?ns=a"), "sqlite:///tmp/a.db?ns=a");
/// ```
pub fn redact_url(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = String::with_capacity(url.len());
    match base.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(end);
            out.push_str(scheme);
            out.push_str("://");
            match authority.rsplit_once('@') {
                Some((userinfo, host)) => {
                    match userinfo.split_once(':') {
                        Some((user, _)) => {
                            out.push_str(user);
                            out.push_str(":***");
                        }
                        None => out.push_str(userinfo),
                    }
                    out.push('@');
                    out.push_str(host);
                }
                None => out.push_str(authority),
            }
            out.push_str(path);
        }
        None => out.push_str(base),
    }
    if let Some(query) = query {
        out.push('?');
        let params: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if is_secret_param(k) => format!("{k}=***"),
                _ => p.to_string(),
            })
            .collect();
        out.push_str(&params.join("&"));
    }
    out
}

fn is_secret_param(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["password", "pass", "passwd", "token", "secret"].contains(&name.as_str())
}
