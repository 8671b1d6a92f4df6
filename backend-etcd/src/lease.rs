//! The lease side of [`EtcdStore`]: reading a key's record and lease-bound key at one
//! revision and judging them ([`Snapshot`]), and the etcd lease calls (grant, revoke,
//! time to live) the trait methods are made of.

use std::time::Duration;

use etcd_client::{KeyValue, PutOptions, Txn, TxnOp, TxnResponse};
use liveness_core::durability::StoreLostState;
use liveness_core::{Error, FencingToken, Key, Lease, LostReason, Result, Ttl};

use crate::error::{corrupt, is_not_found, map, Fault};
use crate::keys::Record;
use crate::store::EtcdStore;
use crate::txn::{create_rev, first, get, mod_rev, put, ranges, token_i64, MAX_TRIES};
use crate::BACKEND;

/// The etcd lease ttl for a liveness ttl: whole seconds, rounded UP.
pub(crate) fn etcd_secs(ttl: Ttl) -> i64 {
    i64::try_from(ttl.as_millis().div_ceil(1000)).unwrap_or(i64::MAX)
}

pub(crate) fn secs(s: i64) -> Duration {
    Duration::from_secs(u64::try_from(s).unwrap_or(0))
}

/// A lease record as read, with its token.
#[derive(Clone, Debug)]
pub(crate) struct Current {
    /// The record's mod revision (what a transaction that changes it compares).
    pub(crate) mod_rev: i64,
    /// The record.
    pub(crate) rec: Record,
    /// The lease's fencing token.
    pub(crate) token: FencingToken,
}

/// A record and a lease-bound key read at one revision.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// The record, if any.
    pub(crate) record: Option<Current>,
    /// The lease-bound key, if etcd has not deleted it.
    pub(crate) live: Option<KeyValue>,
    /// The revision the reads saw (0: not known). A token above it was never
    /// handed out by this etcd: it lost its data (restored without
    /// `--bump-revision`, or started afresh).
    pub(crate) revision: i64,
}

impl Snapshot {
    pub(crate) fn from(rec: Option<KeyValue>, live: Option<KeyValue>) -> Result<Snapshot> {
        let record = match rec {
            None => None,
            Some(kv) => {
                let rec = Record::decode(kv.value()).ok_or_else(|| corrupt(kv.key()))?;
                let token = FencingToken(
                    rec.token
                        .unwrap_or_else(|| u64::try_from(kv.mod_revision()).unwrap_or(0)),
                );
                Some(Current {
                    mod_rev: kv.mod_revision(),
                    rec,
                    token,
                })
            }
        };
        Ok(Snapshot {
            record,
            live,
            revision: 0,
        })
    }

    /// The snapshot, read at the revision `resp` reports.
    pub(crate) fn at(mut self, resp: &TxnResponse) -> Snapshot {
        self.revision = resp.header().map_or(0, |h| h.revision());
        self
    }

    /// True when the lease-bound key exists and belongs to the record's token.
    pub(crate) fn is_live(&self) -> bool {
        match (&self.record, &self.live) {
            (Some(c), Some(l)) => u64::try_from(l.create_revision()).ok() == Some(c.token.0),
            _ => false,
        }
    }

    /// Why `lease` is not current and live, or the record when it is.
    pub(crate) fn check(self, lease: &Lease) -> Result<Current> {
        let live = self.is_live();
        match self.record {
            None if self.revision > 0 && lease.token.0 > self.revision.unsigned_abs() => {
                Err(StoreLostState::of(BACKEND, lease))
            }
            None => Err(lease.lost(LostReason::Released)),
            Some(c) if c.token != lease.token => Err(lease.lost(LostReason::Superseded)),
            Some(_) if !live => Err(lease.lost(LostReason::Expired)),
            Some(c) => Ok(c),
        }
    }
}

impl EtcdStore {
    /// Reads a key's record and lease-bound key at one revision.
    pub(crate) async fn snapshot(&self, key: &Key) -> Result<Snapshot> {
        let k = self.keys();
        let resp = self
            .txn(Txn::new().and_then(vec![get(&k.record(key)), get(&k.live(key))]))
            .await?;
        let r = ranges(&resp);
        Ok(Snapshot::from(first(r.first()), first(r.get(1)))?.at(&resp))
    }

    pub(crate) async fn grant(&self, ttl: Ttl) -> Result<i64> {
        crate::store::Calls::count(&self.inner.calls.grants);
        let _flying = self.inner.calls.flying();
        let resp = self
            .inner
            .lease
            .clone()
            .grant(etcd_secs(ttl), None)
            .await
            .map_err(map)?;
        Ok(resp.id())
    }

    /// Revokes an etcd lease: Ok(true) when it existed, Ok(false) when etcd no longer
    /// knew it (expired, or revoked before).
    pub(crate) async fn revoke(&self, id: i64) -> Result<bool> {
        match self.inner.lease.clone().revoke(id).await {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(map(e)),
        }
    }

    pub(crate) fn revoke_later(&self, id: i64) {
        let mut lease = self.inner.lease.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = lease.revoke(id).await;
            });
        }
    }

    /// Remaining seconds of an etcd lease by etcd's countdown (truncated), or -1 when
    /// etcd no longer knows it.
    pub(crate) async fn time_to_live(&self, id: i64) -> Result<i64> {
        match self.inner.lease.clone().time_to_live(id, None).await {
            Ok(r) => Ok(r.ttl()),
            Err(e) if is_not_found(&e) => Ok(-1),
            Err(e) => Err(map(e)),
        }
    }

    /// `lease` renewed, with etcd's countdown (`ttl_secs`) as its time left.
    pub(crate) fn renewed(lease: &Lease, ttl_secs: i64) -> Lease {
        Lease {
            expires_in: lease.ttl.duration().min(secs(ttl_secs)),
            ..lease.clone()
        }
    }

    /// Renewal with another ttl than the current one: a new etcd lease of the new
    /// ttl takes the lease-bound key over (its create revision, the token, stays),
    /// and the old etcd lease is revoked.
    pub(crate) async fn renew_with_ttl(&self, lease: &Lease) -> Result<Lease> {
        for _ in 0..MAX_TRIES {
            let current = self.snapshot(&lease.key).await?.check(lease)?;
            self.inner.info.caps.check_ttl(lease.ttl)?;
            let id = self.grant(lease.ttl).await?;
            let txn = self.move_txn(lease, &current, id, lease.ttl);
            let resp = match self.txn(txn).await {
                Ok(r) => r,
                Err(e) => {
                    self.revoke_later(id);
                    return Err(e);
                }
            };
            if resp.succeeded() {
                self.inner.slots.remove(&lease.key, lease.token);
                self.revoke_later(current.rec.lease_id);
                return Ok(lease.renewed());
            }
            self.revoke_later(id);
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    /// The transaction that moves `lease` (as `current` read it) to the etcd lease
    /// `id` with `ttl`: the lease-bound key and the record are rewritten under `id`,
    /// guarded by the record being unchanged and the key still carrying the token.
    pub(crate) fn move_txn(&self, lease: &Lease, current: &Current, id: i64, ttl: Ttl) -> Txn {
        let k = self.keys();
        let (rec_key, live_key) = (k.record(&lease.key), k.live(&lease.key));
        let rec = Record {
            token: Some(lease.token.0),
            ttl,
            lease_id: id,
            holder: current.rec.holder.clone(),
        };
        Txn::new()
            .when(vec![
                mod_rev(&rec_key, current.mod_rev),
                create_rev(&live_key, token_i64(lease.token)),
            ])
            .and_then(vec![
                TxnOp::put(
                    live_key.as_str(),
                    "",
                    Some(PutOptions::new().with_lease(id)),
                ),
                put(&rec_key, rec.encode()),
            ])
    }

    /// Why a transaction guarded by `lease` being live failed: the lease's loss, read
    /// from the `or_else` reads of its record and lease-bound key.
    pub(crate) fn lost_from(&self, lease: &Lease, resp: &TxnResponse) -> Result<Error> {
        let r = ranges(resp);
        let snap = Snapshot::from(first(r.first()), first(r.get(1)))?.at(resp);
        Ok(match snap.check(lease) {
            Err(e) => e,
            // Live after all: the transaction lost a race on an item instead.
            Ok(_) => Error::unavailable(BACKEND, Fault::Contention),
        })
    }
}
