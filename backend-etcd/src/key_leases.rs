//! Idempotency keys (`item/k/<key>`, [`EnqueueOptions::key`]) kept for the store's
//! key retention ([`Capabilities::key_retention`]) on etcd's only clock, the
//! lessor's countdown of etcd leases: each key is put bound to an etcd lease, and
//! etcd deletes it when that lease expires.
//!
//! One lease per bucket of time, not per key: a handle grants a lease on its first
//! keyed enqueue and binds every key it writes to that lease until the bucket ends
//! ([`KeyLeases::bucket`] after the moment before the grant was sent, by the host's
//! boot clock, which counts a suspend: etcd's countdown goes on while this host
//! sleeps, so a bucket must not look younger than it is) or [`KEYS_PER_LEASE`] keys were bound to it; the next keyed
//! enqueue grants the next one. Keyed enqueues so cost one grant per bucket, and an
//! expiry deletes a bounded number of keys at once (etcd applies the revoke of a
//! lease as one transaction over all its keys).
//!
//! Never forgotten early. The lease's ttl is the retention plus the bucket plus the
//! request timeout, each rounded up to whole seconds. etcd starts the countdown when
//! it applies the grant, after the moment the bucket began; a key is put by a request
//! sent before the bucket ends, and a request that is answered is applied within
//! the request timeout of being sent: so the key lives at least the retention after
//! it was written. A leader change restarts every countdown from the full ttl on the
//! new leader (etcd without lease checkpoints): later, never earlier. A key may live
//! up to a bucket plus the timeout plus a second past its retention.
//!
//! A lease that ends before its time (revoked by an operator, or unknown to a
//! cluster restored from a backup) fails the put of the key with "lease not found":
//! the transaction writes nothing, the handle forgets that lease, grants a new one
//! and tries the transaction once more (`enqueue` in `items.rs`). A
//! shared lease is never revoked by this crate.
//!
//! [`EnqueueOptions::key`]: liveness_core::EnqueueOptions::key
//! [`Capabilities::key_retention`]: liveness_core::Capabilities::key_retention

use std::time::Duration;

use liveness_core::{Clock, HostClock, Result};

use crate::core::EtcdStore;

/// The most keys one handle binds to one etcd lease: its expiry deletes them in one
/// transaction, which should stay small.
pub(crate) const KEYS_PER_LEASE: u32 = 1000;

/// How many buckets the retention is cut into: a bucket is a sixteenth of it (at
/// least etcd's minimum ttl), what a key may outlive its retention by.
const BUCKETS: u32 = 16;

/// The etcd leases a handle binds idempotency keys to (its clones share them).
pub(crate) struct KeyLeases {
    /// The lease's ttl, whole seconds: retention + bucket + request timeout.
    pub(crate) ttl_secs: i64,
    /// How long after its grant was sent a lease takes new keys.
    pub(crate) bucket: Duration,
    /// The lease keys are bound to now, if any.
    current: tokio::sync::Mutex<Option<Bucket>>,
}

/// The lease of the current bucket.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    /// The etcd lease.
    lease: i64,
    /// The moment before its grant was sent, by the host's boot clock: the bucket's
    /// start.
    began: Duration,
    /// How many keys were given it.
    keys: u32,
}

impl KeyLeases {
    /// The leases of a handle keeping keys for `retention`, on an etcd whose
    /// minimum ttl is `min_ttl`, with request `timeout`.
    pub(crate) fn new(retention: Duration, min_ttl: Duration, timeout: Duration) -> KeyLeases {
        let up = |d: Duration| d.as_nanos().div_ceil(1_000_000_000);
        let retention = up(retention).max(1);
        let bucket = retention
            .div_ceil(u128::from(BUCKETS))
            .max(up(min_ttl))
            .max(1);
        let ttl = retention + bucket + up(timeout);
        KeyLeases {
            ttl_secs: i64::try_from(ttl).unwrap_or(i64::MAX),
            bucket: Duration::from_secs(u64::try_from(bucket).unwrap_or(u64::MAX)),
            current: tokio::sync::Mutex::new(None),
        }
    }
}

impl EtcdStore {
    /// The etcd lease to bind a key written now to: the current bucket's, or a new
    /// one granted now (once for the handle's concurrent callers).
    pub(crate) async fn key_lease(&self) -> Result<i64> {
        let leases = &self.inner.key_leases;
        let mut current = leases.current.lock().await;
        if let Some(b) = current.as_mut() {
            let age = HostClock::new().boot().saturating_sub(b.began);
            if age < leases.bucket && b.keys < KEYS_PER_LEASE {
                b.keys += 1;
                return Ok(b.lease);
            }
        }
        let began = HostClock::new().boot();
        let lease = self.grant_secs(leases.ttl_secs).await?;
        *current = Some(Bucket {
            lease,
            began,
            keys: 1,
        });
        Ok(lease)
    }

    /// Stops binding keys to `lease`, which etcd no longer knows (it ended early):
    /// the next keyed enqueue grants a new one.
    pub(crate) async fn key_lease_gone(&self, lease: i64) {
        let mut current = self.inner.key_leases.current.lock().await;
        if current.is_some_and(|b| b.lease == lease) {
            *current = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ttl_covers_the_retention_the_bucket_and_the_timeout() {
        let s = Duration::from_secs;
        let l = KeyLeases::new(s(24 * 3600), s(2), s(5));
        assert_eq!(l.bucket, s(5400));
        assert_eq!(l.ttl_secs, 24 * 3600 + 5400 + 5);
        // A short retention: the bucket is etcd's minimum ttl.
        let l = KeyLeases::new(s(2), s(2), Duration::from_millis(1500));
        assert_eq!((l.bucket, l.ttl_secs), (s(2), 2 + 2 + 2));
        // Fractions round up, never down.
        let l = KeyLeases::new(Duration::from_millis(16_500), s(1), s(1));
        assert_eq!((l.bucket, l.ttl_secs), (s(2), 17 + 2 + 1));
    }
}
