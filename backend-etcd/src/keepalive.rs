//! Keep-alive slots: one etcd keep-alive stream per lease a handle renews, opened on
//! the first renewal and reopened once when it breaks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{LeaseClient, LeaseKeepAliveStream, LeaseKeeper};
use liveness_core::sync::lock;
use liveness_core::{Error, FencingToken, Result, Ttl};

use crate::error::{is_not_found, map, Fault};
use crate::lease::etcd_secs;
use crate::BACKEND;

/// A keep-alive stream kept per lease this handle renews.
pub(crate) struct Slot {
    /// The etcd lease the stream keeps alive.
    pub(crate) lease_id: i64,
    /// The liveness ttl that etcd lease was granted for.
    pub(crate) ttl: Ttl,
    stream: tokio::sync::Mutex<Option<(LeaseKeeper, LeaseKeepAliveStream)>>,
}

/// The slots of one handle (shared by its clones), by fencing token.
#[derive(Default)]
pub(crate) struct Slots(Mutex<HashMap<u64, Arc<Slot>>>);

impl Slots {
    /// The slot of the lease with `token`, if this handle renewed it before.
    pub(crate) fn get(&self, token: FencingToken) -> Option<Arc<Slot>> {
        lock(&self.0).get(&token.0).cloned()
    }

    /// A fresh slot (no stream yet) for the lease with `token`, held by etcd lease
    /// `lease_id` of `ttl`; replaces the old one.
    pub(crate) fn set(&self, token: FencingToken, lease_id: i64, ttl: Ttl) -> Arc<Slot> {
        let slot = Arc::new(Slot {
            lease_id,
            ttl,
            stream: tokio::sync::Mutex::new(None),
        });
        lock(&self.0).insert(token.0, slot.clone());
        slot
    }

    /// Forgets the slot of the lease with `token` (its stream closes).
    pub(crate) fn remove(&self, token: FencingToken) {
        lock(&self.0).remove(&token.0);
    }
}

impl Slot {
    /// One keep-alive request on the lease's stream: Ok(ttl seconds), 0 when etcd no
    /// longer knows the lease.
    pub(crate) async fn keep_alive(&self, client: &LeaseClient, timeout: Duration) -> Result<i64> {
        let slot = self;
        let mut guard = slot.stream.lock().await;
        for _ in 0..2 {
            let Some((keeper, stream)) = guard.as_mut() else {
                // Opening the stream sends the first keep-alive and reads its answer.
                let opened =
                    tokio::time::timeout(timeout, client.clone().keep_alive(slot.lease_id))
                        .await
                        .map_err(|_| Error::unavailable(BACKEND, Fault::Timeout(timeout)))?;
                return match opened {
                    Ok(pair) => {
                        *guard = Some(pair);
                        Ok(etcd_secs(slot.ttl))
                    }
                    Err(e) if is_not_found(&e) => Ok(0),
                    Err(e) => Err(map(e)),
                };
            };
            let exchange = async {
                keeper.keep_alive().await?;
                stream.message().await
            };
            match tokio::time::timeout(timeout, exchange).await {
                Ok(Ok(Some(resp))) => return Ok(resp.ttl().max(0)),
                // A broken stream (the member restarted, the connection reset): drop
                // it and open a fresh one once.
                Ok(Ok(None)) | Ok(Err(_)) => *guard = None,
                Err(_) => {
                    *guard = None;
                    return Err(Error::unavailable(BACKEND, Fault::Timeout(timeout)));
                }
            }
        }
        Err(Error::unavailable(
            BACKEND,
            etcd_client::Error::LeaseKeepAliveError("keep-alive stream closed".into()),
        ))
    }
}
