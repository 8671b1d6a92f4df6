//! The pending signal across processes ([`ItemStore::pending`]): every script that
//! makes items pending (an enqueue, a retry, a sweep that requeued, a dead letter
//! retried) publishes one message on the namespace's shard channel
//! ([`Keys::pending_signal`], `SPUBLISH`), and a handle's first `pending()` starts a
//! task that subscribes to it (`SSUBSCRIBE`) on a connection of its own and ticks the
//! handle's watch channel on every message, whichever process sent it.
//!
//! The task reconnects after a lost connection (closed, unsubscribed by the server,
//! or a health `PING` unanswered) with a bounded, jittered backoff, ticks once after
//! each subscription (messages sent while it was not subscribed are lost), and stops
//! when the last clone of the handle is dropped.
//!
//! [`ItemStore::pending`]: liveness_core::ItemStore::pending
//! [`Keys::pending_signal`]: crate::keys::Keys::pending_signal

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use liveness_core::wake::tick;
use liveness_core::{Backoff, Error, Result};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, PushInfo, PushKind, Value};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::config::RedisConfig;
use crate::conns::{client, Conn};
use crate::core::{array, int, text, unexpected};
use crate::error::map;
use crate::keys::Keys;
use crate::BACKEND;

/// The first pause before a reconnection; it doubles up to [`RECONNECT_MAX`].
const RECONNECT_FIRST: Duration = Duration::from_millis(100);

/// The longest pause between two reconnections; a subscription that lived this long
/// starts the next loss's pauses again from [`RECONNECT_FIRST`].
const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// How often an idle subscription `PING`s its server, so that a server that stopped
/// answering without closing the connection (frozen, cut off) is noticed.
const HEALTH_CHECK: Duration = Duration::from_secs(10);

/// A handle's pending signal, shared by its clones: the watch channel every
/// `pending()` receiver reads, and the task that feeds it, started on the first call.
pub(crate) struct PendingSignal {
    signal: Arc<watch::Sender<u64>>,
    source: Source,
    listener: Mutex<Option<Listener>>,
}

impl PendingSignal {
    /// The signal of a handle connected with `config` through `conn` (`root_cert`:
    /// the CA the handle's connection checks the server against). Connects nothing.
    pub(crate) fn new(
        config: &RedisConfig,
        conn: &Conn,
        keys: &Keys,
        root_cert: Option<Vec<u8>>,
    ) -> Result<PendingSignal> {
        let node = match (conn, config.cluster_nodes().first()) {
            (Conn::Cluster(_), Some(seed)) => Node::Cluster {
                conn: conn.clone(),
                template: resp3((**seed).clone()),
                root_cert,
            },
            _ => {
                let url = resp3(config.client_url().clone());
                Node::Single(client(url.as_str(), root_cert)?)
            }
        };
        Ok(PendingSignal {
            signal: Arc::new(watch::channel(0).0),
            source: Source {
                channel: keys.pending_signal(),
                node,
                connect_timeout: config.connect_timeout(),
                response_timeout: config.response_timeout(),
            },
            listener: Mutex::new(None),
        })
    }

    /// A receiver of the signal; starts the listening task when it is not running
    /// (the first call, or after the runtime it ran on shut down). `None` outside a
    /// Tokio runtime: no task can listen there, and the caller polls.
    ///
    /// The receiver is taken before the task starts, so it sees the tick that follows
    /// the task's subscription however soon that comes.
    pub(crate) fn receiver(&self) -> Option<watch::Receiver<u64>> {
        let rx = self.signal.subscribe();
        let mut listener = self.listener.lock().unwrap_or_else(PoisonError::into_inner);
        if listener.as_ref().is_none_or(|l| l.task.is_finished()) {
            let runtime = tokio::runtime::Handle::try_current().ok()?;
            let task = runtime.spawn(listen(self.source.clone(), self.signal.clone()));
            *listener = Some(Listener { task });
        }
        Some(rx)
    }
}

/// The running listening task; dropping it (with the last clone of the handle)
/// stops the task, which closes its connection.
struct Listener {
    task: JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Where and how the task subscribes.
#[derive(Clone)]
struct Source {
    /// The namespace's shard channel.
    channel: String,
    node: Node,
    connect_timeout: Duration,
    response_timeout: Duration,
}

/// The server the task subscribes on.
#[derive(Clone)]
enum Node {
    /// The single server, through a client of its own speaking RESP3 (a subscribed
    /// connection that still answers `PING`, its messages pushed).
    Single(redis::Client),
    /// The primary serving the channel's slot in a Redis Cluster, looked up anew at
    /// each (re)connection through the handle's own cluster connection; `template`
    /// is a configured node's URL (scheme, credentials, RESP3) whose host and port
    /// are replaced by that primary's.
    Cluster {
        conn: Conn,
        template: url::Url,
        root_cert: Option<Vec<u8>>,
    },
}

/// `url` asking for RESP3 (the store's own `protocol` setting is for its other
/// connection).
fn resp3(mut url: url::Url) -> url::Url {
    url.set_query(Some("protocol=resp3"));
    url
}

impl Node {
    /// A client of the server to subscribe on for `channel`.
    async fn client(&self, channel: &str) -> Result<redis::Client> {
        match self {
            Node::Single(client) => Ok(client.clone()),
            Node::Cluster {
                conn,
                template,
                root_cert,
            } => {
                let (host, port) = slot_owner(&mut conn.clone(), channel).await?;
                let mut url = template.clone();
                let host = match host.contains(':') {
                    true => format!("[{host}]"),
                    false => host,
                };
                if url.set_host(Some(&host)).is_err() || url.set_port(Some(port)).is_err() {
                    return Err(unexpected(
                        "CLUSTER SLOTS",
                        "a node address that is no URL host",
                    ));
                }
                client(url.as_str(), root_cert.clone())
            }
        }
    }
}

/// The address (`CLUSTER SLOTS`: host, port) of the primary serving `channel`'s
/// slot, as the node the cluster connection routes the channel's slot to sees it.
async fn slot_owner(conn: &mut Conn, channel: &str) -> Result<(String, u16)> {
    const OP: &str = "CLUSTER SLOTS";
    let mut keyslot = redis::cmd("CLUSTER");
    keyslot.arg("KEYSLOT").arg(channel);
    let slot = int(OP, &conn.query_at(keyslot, channel).await.map_err(map)?)?;
    let mut slots = redis::cmd("CLUSTER");
    slots.arg("SLOTS");
    for range in array(OP, conn.query_at(slots, channel).await.map_err(map)?)? {
        let mut fields = array(OP, range)?.into_iter();
        let mut next = || fields.next().unwrap_or(Value::Nil);
        let (first, last) = (int(OP, &next())?, int(OP, &next())?);
        if !(first..=last).contains(&slot) {
            continue;
        }
        let mut primary = array(OP, next())?.into_iter();
        let host = text(OP, primary.next().unwrap_or(Value::Nil))?;
        let port = u16::try_from(int(OP, &primary.next().unwrap_or(Value::Nil))?)
            .map_err(|_| unexpected(OP, "a port out of range"))?;
        if host.is_empty() || host == "?" {
            return Err(unexpected(OP, "a primary without an address"));
        }
        return Ok((host, port));
    }
    Err(Error::unavailable(
        BACKEND,
        format!("no node serves slot {slot} of the pending signal's channel"),
    ))
}

/// Subscribes, ticks, and after a loss subscribes again, until aborted. The first
/// failed attempt after a success (or at the start) is a warning, the next ones of the
/// same outage are debug lines.
async fn listen(source: Source, signal: Arc<watch::Sender<u64>>) {
    let mut backoff = Backoff::new(RECONNECT_FIRST, RECONNECT_MAX);
    let mut warned = false;
    loop {
        match source.subscribe(&signal).await {
            Ok(mut subscription) => {
                warned = false;
                let since = Instant::now();
                // Messages sent before the subscription, or while it was lost, are gone:
                // a tick stands for them (a tick with nothing pending costs one claim).
                tick(&signal);
                let why = subscription.lost().await;
                tracing::debug!(
                    channel = %source.channel,
                    %why,
                    "the pending signal's subscription was lost: it subscribes again"
                );
                if since.elapsed() >= RECONNECT_MAX {
                    backoff = Backoff::new(RECONNECT_FIRST, RECONNECT_MAX);
                }
            }
            Err(e) if !warned => {
                warned = true;
                tracing::warn!(
                    channel = %source.channel,
                    error = %e,
                    "the pending signal could not subscribe: idle workers poll until it \
                     does; it tries again"
                );
            }
            Err(e) => tracing::debug!(
                channel = %source.channel,
                error = %e,
                "the pending signal could not subscribe: it tries again"
            ),
        }
        tokio::time::sleep(backoff.next()).await;
    }
}

impl Source {
    /// A connection of its own, subscribed to the channel, whose messages tick
    /// `signal`.
    async fn subscribe(&self, signal: &Arc<watch::Sender<u64>>) -> Result<Subscription> {
        let client = self.node.client(&self.channel).await?;
        let lost = Arc::new(Notify::new());
        let (on_message, on_lost) = (signal.clone(), lost.clone());
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_push_sender(move |push: PushInfo| {
                match push.kind {
                    PushKind::SMessage => tick(&on_message),
                    // The connection closed, or the server dropped the subscription
                    // (its slot moved away from the node's shard).
                    PushKind::Disconnection | PushKind::SUnsubscribe => on_lost.notify_one(),
                    _ => {}
                }
                Ok::<(), std::convert::Infallible>(())
            });
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(map)?;
        redis::cmd("SSUBSCRIBE")
            .arg(&self.channel)
            .query_async::<Value>(&mut conn)
            .await
            .map_err(map)?;
        Ok(Subscription { conn, lost })
    }
}

/// A live subscription: its connection, and what its push handler notifies when the
/// subscription ends.
struct Subscription {
    conn: MultiplexedConnection,
    lost: Arc<Notify>,
}

impl Subscription {
    /// Waits until the subscription is lost, `PING`ing the server every
    /// [`HEALTH_CHECK`]; answers why.
    async fn lost(&mut self) -> String {
        loop {
            tokio::select! {
                _ = self.lost.notified() => {
                    return "the connection closed or the server unsubscribed it".to_owned();
                }
                _ = tokio::time::sleep(HEALTH_CHECK) => {
                    if let Err(e) = redis::cmd("PING").query_async::<Value>(&mut self.conn).await {
                        return format!("a health PING failed: {e}");
                    }
                }
            }
        }
    }
}
