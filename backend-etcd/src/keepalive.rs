//! Keep-alive slots: one etcd keep-alive stream per lease a handle renews, opened on
//! the first renewal and reopened once when it breaks.
//!
//! A slot belongs to one liveness lease: its key AND its token (a lease forged with
//! another key's token never finds it). A slot that nobody renewed for twice its ttl
//! is dropped, with its stream, the next time the handle looks slots up: a `Member`
//! or `Leadership` dropped without releasing does not keep a stream open for as long
//! as the store handle lives (its etcd lease expires by etcd's countdown meanwhile).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{LeaseClient, LeaseKeepAliveStream, LeaseKeeper};
use liveness_core::sync::lock;
use liveness_core::{Error, FencingToken, Key, Result, Ttl};
use tokio::time::Instant;

use crate::error::{is_not_found, map, Fault};
use crate::BACKEND;

/// How often, at most, a lookup sweeps the slots for idle ones.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// A keep-alive stream kept per lease this handle renews.
pub(crate) struct Slot {
    /// The liveness key the lease is on.
    pub(crate) key: Key,
    /// The etcd lease the stream keeps alive.
    pub(crate) lease_id: i64,
    /// The liveness ttl that etcd lease was granted for.
    pub(crate) ttl: Ttl,
    /// When a renewal last looked this slot up (the handle's monotonic clock; only
    /// used to drop idle slots, never to judge expiry).
    used: Mutex<Instant>,
    stream: tokio::sync::Mutex<Option<(LeaseKeeper, LeaseKeepAliveStream)>>,
}

impl Slot {
    /// True when nobody renewed through this slot for twice its ttl: its etcd lease
    /// has expired unless another handle renews it.
    fn idle(&self, now: Instant) -> bool {
        now.duration_since(*lock(&self.used)) > self.ttl.duration() * 2
    }
}

#[derive(Default)]
struct Table {
    by_token: HashMap<u64, Arc<Slot>>,
    swept: Option<Instant>,
}

impl Table {
    /// Drops idle slots, at most once per [`SWEEP_EVERY`].
    fn sweep(&mut self, now: Instant) {
        if self
            .swept
            .is_some_and(|t| now.duration_since(t) < SWEEP_EVERY)
        {
            return;
        }
        self.swept = Some(now);
        self.by_token.retain(|_, s| !s.idle(now));
    }
}

/// The slots of one handle (shared by its clones), by fencing token.
#[derive(Default)]
pub(crate) struct Slots(Mutex<Table>);

impl Slots {
    /// The slot of the lease on `key` with `token`, if this handle renewed it before
    /// (and not too long ago).
    pub(crate) fn get(&self, key: &Key, token: FencingToken) -> Option<Arc<Slot>> {
        let now = Instant::now();
        let mut t = lock(&self.0);
        t.sweep(now);
        let slot = t.by_token.get(&token.0).filter(|s| s.key == *key)?.clone();
        *lock(&slot.used) = now;
        Some(slot)
    }

    /// A fresh slot (no stream yet) for the lease on `key` with `token`, held by etcd
    /// lease `lease_id` of `ttl`; replaces the old one.
    pub(crate) fn set(&self, key: &Key, token: FencingToken, lease_id: i64, ttl: Ttl) -> Arc<Slot> {
        let now = Instant::now();
        let slot = Arc::new(Slot {
            key: key.clone(),
            lease_id,
            ttl,
            used: Mutex::new(now),
            stream: tokio::sync::Mutex::new(None),
        });
        let mut t = lock(&self.0);
        t.sweep(now);
        t.by_token.insert(token.0, slot.clone());
        slot
    }

    /// Forgets the slot of the lease on `key` with `token` (its stream closes).
    pub(crate) fn remove(&self, key: &Key, token: FencingToken) {
        let mut t = lock(&self.0);
        if t.by_token.get(&token.0).is_some_and(|s| s.key == *key) {
            t.by_token.remove(&token.0);
        }
    }

    /// How many slots (keep-alive streams, open or not yet opened) the handle keeps.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.0).by_token.len()
    }
}

/// etcd's answer to one keep-alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeptAlive {
    /// The seconds the etcd lease has left by the answering lessor's countdown; 0
    /// when etcd no longer knows the lease.
    pub(crate) left: i64,
    /// The raft term stamped on the answer: the term the answering member has
    /// applied up to (0 when the answer carried no header, as when opening a stream
    /// failed). A deposed leader answers with the term it led in, older than the
    /// cluster's.
    pub(crate) term: u64,
}

impl KeptAlive {
    /// The answer for an etcd lease etcd no longer knows.
    const UNKNOWN: KeptAlive = KeptAlive { left: 0, term: 0 };
}

impl Slot {
    /// One keep-alive request on the lease's stream, opening (or, once, reopening)
    /// the stream first when needed.
    ///
    /// The answer is always one read off the stream, with its header: opening a
    /// stream sends a first keep-alive whose answer etcd-client keeps to itself, so a
    /// fresh stream gets a second one. Cancel-safe: the answer read is this call's
    /// own; a call dropped mid-way drops the stream, never leaving its answer for
    /// the next call to read. Whether the answer counts is the caller's call
    /// (see `EtcdStore::renew_judged`): a deposed leader answers too.
    pub(crate) async fn keep_alive(
        &self,
        client: &LeaseClient,
        timeout: Duration,
    ) -> Result<KeptAlive> {
        let slot = self;
        let timed_out = || Error::unavailable(BACKEND, Fault::Timeout(timeout));
        let mut guard = slot.stream.lock().await;
        for _ in 0..2 {
            if guard.is_none() {
                let opened =
                    tokio::time::timeout(timeout, client.clone().keep_alive(slot.lease_id))
                        .await
                        .map_err(|_| timed_out())?;
                match opened {
                    Ok(pair) => *guard = Some(pair),
                    Err(e) if is_not_found(&e) => return Ok(KeptAlive::UNKNOWN),
                    Err(e) => return Err(map(e)),
                }
            }
            // Out of the slot while the exchange runs: a caller that drops this call
            // after the request went out and before its answer was read (a timeout
            // around `renew`) drops the stream with it, so that the answer is never
            // read by the next renewal as its own. The next one opens a fresh stream.
            let Some((mut keeper, mut stream)) = guard.take() else {
                continue;
            };
            let exchange = async {
                keeper.keep_alive().await?;
                stream.message().await
            };
            match tokio::time::timeout(timeout, exchange).await {
                Ok(Ok(Some(resp))) => {
                    *guard = Some((keeper, stream));
                    return Ok(KeptAlive {
                        left: resp.ttl().max(0),
                        term: resp.header().map_or(0, |h| h.raft_term()),
                    });
                }
                // A broken stream (the member restarted, the connection reset): it
                // is dropped; open a fresh one once.
                Ok(Ok(None)) | Ok(Err(_)) => {}
                // Dropped with its unread answer.
                Err(_) => return Err(timed_out()),
            }
        }
        Err(Error::unavailable(
            BACKEND,
            etcd_client::Error::LeaseKeepAliveError("keep-alive stream closed".into()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::FutureExt;
    use liveness_core::{Key, Store};

    use crate::tests::{holder, store, ttl_times};

    /// A renewal dropped by its caller after its keep-alive went out and before its
    /// answer was read (a timeout around `renew`) leaves no answer behind: the next
    /// keep-alive on the slot reads its own answer, not the dropped one's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_renewal_leaves_no_answer_for_the_next() {
        let Some(store) = store().await else { return };
        let ttl = ttl_times(&store, 10);
        let key = Key::member("m").unwrap();
        let lease = store.acquire(&key, &holder(), ttl).await.unwrap();
        store.renew(&lease).await.unwrap();
        // Polled once, then dropped: the keep-alive is sent, its answer never read.
        let dropped = store.renew(&lease).now_or_never();
        assert!(dropped.is_none(), "the renewal was not dropped mid-way");
        // Let the dropped keep-alive's answer (the lease alive) arrive, then end the
        // etcd lease: a keep-alive sent from now on is answered "unknown".
        tokio::time::sleep(Duration::from_millis(200)).await;
        let slot = store.inner.slots.get(&key, lease.token).unwrap();
        assert!(store.revoke(slot.lease_id).await.unwrap());
        let kept = slot
            .keep_alive(&store.inner.lease, store.inner.timeout)
            .await
            .unwrap();
        assert_eq!(
            kept.left, 0,
            "the keep-alive read the answer to a dropped one: {kept:?}"
        );
    }
}
