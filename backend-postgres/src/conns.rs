//! A small pool of dedicated connections for the store's statements.
//!
//! sqlx's `Pool` pings every connection as it comes back (one more round trip per
//! operation, on the next caller's path); the bench shows it halves throughput. Every
//! store operation is one statement, so this pool needs less: a connection goes back
//! to the idle list only when its statement completed (with rows or with a database
//! error); one whose statement hit a transport fault, or whose caller was cancelled
//! mid-statement, is dropped (closed) instead, and a fresh one is opened on demand.
//!
//! New connections go through [`Servers`]: with a host list, to the first server
//! (starting with the last one that worked) that answers and is a primary, so the
//! store follows a promoted standby by itself.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use liveness_core::sync::lock;
use liveness_core::{Error, Result};
use sqlx::postgres::{PgArguments, PgConnectOptions, PgConnection, PgRow};
use sqlx::{Connection, Postgres};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{is_transient, map};
use crate::BACKEND;

/// A statement with its parameters bound.
pub(crate) type Query<'q> = sqlx::query::Query<'q, Postgres, PgArguments>;

/// Runs `$q.$method(conn)` on a connection checked out of `$conns`, and gives the
/// connection back unless the outcome says it may be broken ([`Checkout::finish`]).
/// A macro, not a function: each sqlx method returns its own future type.
macro_rules! on_conn {
    ($conns:expr, $q:ident . $method:ident) => {{
        let mut c = $conns.checkout().await?;
        let Some(conn) = c.conn.as_mut() else {
            return Err(Error::unavailable(BACKEND, sqlx::Error::PoolClosed));
        };
        let r = $q.$method(conn).await;
        c.finish(&r);
        r.map_err(map)
    }};
}

/// The servers a connection may go to, in order, and which one worked last.
pub(crate) struct Servers {
    options: Vec<PgConnectOptions>,
    current: AtomicUsize,
}

/// Why a server of a host list was passed over: it is in recovery (a standby).
#[derive(Debug, thiserror::Error)]
#[error("every server of the host list is unreachable or a standby (in recovery); last: {last}")]
pub(crate) struct NoPrimary {
    last: String,
}

impl Servers {
    /// `options`: one per server, in order (at least one).
    pub(crate) fn new(options: Vec<PgConnectOptions>) -> Self {
        Servers {
            options,
            current: AtomicUsize::new(0),
        }
    }

    /// The options of the server that worked last.
    pub(crate) fn current(&self) -> &PgConnectOptions {
        let i = self.current.load(Ordering::Relaxed) % self.options.len().max(1);
        &self.options[i]
    }

    /// A new connection. One server: to it. A list: to the first one, starting with
    /// the one that worked last, that answers within `timeout` and is not in
    /// recovery; `Unavailable` when none is.
    pub(crate) async fn connect(&self, timeout: Duration) -> Result<PgConnection> {
        let open = |options: &PgConnectOptions| {
            let options = options.clone();
            async move {
                tokio::time::timeout(timeout, PgConnection::connect_with(&options))
                    .await
                    .map_err(|_| Error::unavailable(BACKEND, sqlx::Error::PoolTimedOut))?
                    .map_err(map)
            }
        };
        if self.options.len() == 1 {
            return open(&self.options[0]).await;
        }
        let start = self.current.load(Ordering::Relaxed);
        let mut last = String::new();
        for step in 0..self.options.len() {
            let i = (start + step) % self.options.len();
            let options = &self.options[i];
            let mut conn = match open(options).await {
                Ok(conn) => conn,
                Err(e) if e.is_retryable() => {
                    last = e.to_string();
                    continue;
                }
                Err(e) => return Err(e),
            };
            let standby = tokio::time::timeout(
                timeout,
                sqlx::query_scalar::<_, bool>("SELECT pg_is_in_recovery()").fetch_one(&mut conn),
            )
            .await;
            match standby {
                Ok(Ok(false)) => {
                    if i != start % self.options.len() {
                        tracing::info!(
                            host = options.get_host(),
                            port = options.get_port(),
                            "postgres: connecting to another server of the host list (a failover?)"
                        );
                    }
                    self.current.store(i, Ordering::Relaxed);
                    return Ok(conn);
                }
                Ok(Ok(true)) => {
                    last = format!("{}:{} is a standby", options.get_host(), options.get_port());
                }
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = format!("{}:{} timed out", options.get_host(), options.get_port()),
            }
        }
        Err(Error::unavailable(BACKEND, NoPrimary { last }))
    }
}

pub(crate) struct Conns {
    /// How many statements were sent (each is one round trip): a relaxed counter for
    /// tests and diagnostics, never for decisions.
    statements: AtomicU64,
    servers: Arc<Servers>,
    idle: Mutex<Vec<PgConnection>>,
    permits: Arc<Semaphore>,
    acquire_timeout: Duration,
}

struct Checkout<'a> {
    pool: &'a Conns,
    conn: Option<PgConnection>,
    _permit: OwnedSemaphorePermit,
}

impl Checkout<'_> {
    /// Returns the connection to the idle list unless the outcome says it may be
    /// broken. A checkout dropped without `finish` (a cancelled caller) closes it.
    fn finish<T>(mut self, outcome: &std::result::Result<T, sqlx::Error>) {
        if let Err(e) = outcome {
            if is_transient(e) {
                return;
            }
        }
        if let Some(conn) = self.conn.take() {
            lock(&self.pool.idle).push(conn);
        }
    }
}

impl Conns {
    pub(crate) fn new(servers: Arc<Servers>, max: u32, acquire_timeout: Duration) -> Self {
        Conns {
            statements: AtomicU64::new(0),
            servers,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(max.max(1) as usize)),
            acquire_timeout,
        }
    }

    /// How many statements this pool has sent (each one round trip).
    #[cfg(test)]
    pub(crate) fn statements(&self) -> u64 {
        self.statements.load(Ordering::Relaxed)
    }

    /// A connection for one statement (counted in [`Conns::statements`]).
    async fn checkout(&self) -> Result<Checkout<'_>> {
        self.statements.fetch_add(1, Ordering::Relaxed);
        let permit =
            tokio::time::timeout(self.acquire_timeout, self.permits.clone().acquire_owned())
                .await
                .map_err(|_| Error::unavailable(BACKEND, sqlx::Error::PoolTimedOut))?
                .map_err(|_| Error::unavailable(BACKEND, sqlx::Error::PoolClosed))?;
        let idle = lock(&self.idle).pop();
        let conn = match idle {
            Some(c) => c,
            None => self.servers.connect(self.acquire_timeout).await?,
        };
        Ok(Checkout {
            pool: self,
            conn: Some(conn),
            _permit: permit,
        })
    }

    pub(crate) async fn fetch_one(&self, q: Query<'_>) -> Result<PgRow> {
        on_conn!(self, q.fetch_one)
    }

    /// Runs a statement, returning the number of rows it affected.
    pub(crate) async fn execute(&self, q: Query<'_>) -> Result<u64> {
        on_conn!(self, q.execute).map(|done| done.rows_affected())
    }

    pub(crate) async fn fetch_optional(&self, q: Query<'_>) -> Result<Option<PgRow>> {
        on_conn!(self, q.fetch_optional)
    }

    pub(crate) async fn fetch_all(&self, q: Query<'_>) -> Result<Vec<PgRow>> {
        on_conn!(self, q.fetch_all)
    }
}

impl Drop for Conns {
    fn drop(&mut self) {
        // Dropping a PgConnection closes its socket; nothing else to do.
        lock(&self.idle).clear();
    }
}
