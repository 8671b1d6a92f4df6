//! [`EtcdStore`]: the lease and item contract on etcd v3.
//!
//! See the crate docs (README) for what it guarantees and the key layout in
//! `keys.rs`. In short: each liveness lease is an etcd lease with a lease-bound key
//! (`w/l/<space>/<name>`, its create revision is the fencing token) beside a record
//! (`lease/<space>/<name>`) that is not lease-bound; etcd's own countdown deletes the
//! lease-bound key, and "record present, lease-bound key gone" is "expired, not yet
//! reaped". Every multi-key change is one `Txn` guarded by compares on revisions.

use liveness_core::Page;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, ConnectOptions, GetOptions, GetResponse, KeyValue, KvClient, LeaseClient, PutOptions,
    Txn, TxnOp, TxnResponse, WatchClient,
};
use liveness_core::store::check_batch;
use liveness_core::sync::lock;
use liveness_core::{
    async_trait, Acquire, Capabilities, DeadToken, DeathCause, DeathRecord, EnqueueOptions, Error,
    ExpiredLease, FencingToken, HolderId, Issuer, Item, ItemCounts, ItemId, ItemRecord, ItemState,
    ItemStateKind, ItemStore, Key, Lease, LeaseInfo, LeaseStatus, LeaseStore, LostReason,
    Namespace, RequestId, Requeued, Result, Space, StoreInfo, StoreTime, Ttl,
};
use tokio::sync::watch;

use crate::config::EtcdConfig;
use crate::endpoints::Endpoints;
use crate::error::{corrupt, map, Fault};
use crate::keepalive::{KeptAlive, Slot, Slots};
use crate::keys::{parse_request_id, Keys, Meta, Record};
use crate::lease::{secs, Current, Snapshot};
use crate::txn::{
    create_rev, del, exists, first, first_range, get, mod_rev, put, ranges, revision, token_i64,
    under, version, MAX_TRIES,
};
use crate::watch::ExpiryWatch;
use crate::BACKEND;

/// The most items or leases one call moves or lists. A claim writes 3 keys and reads
/// 1 per item in ONE transaction (and writes the token's claim high-water mark), and
/// etcd refuses transactions of more than 128 operations by default
/// (`--max-txn-ops`): 32 × 4 = 128 (a full batch reads its last body right after).
pub const MAX_BATCH: usize = 32;

/// etcd's default limit on the operations of one transaction (`--max-txn-ops`).
pub const MAX_TXN_OPS: usize = 128;

/// The largest item payload: 1 MiB, under etcd's default request limit of 1.5 MiB
/// (`--max-request-bytes`). etcd is happiest with much smaller values.
pub const MAX_PAYLOAD: usize = 1024 * 1024;

/// Responses may carry up to [`MAX_BATCH`] payloads.
const MAX_DECODE: usize = MAX_BATCH * MAX_PAYLOAD + 4 * 1024 * 1024;

/// What the clones of one handle share.
pub(crate) struct Inner {
    pub(crate) kv: KvClient,
    pub(crate) lease: LeaseClient,
    pub(crate) watch: WatchClient,
    pub(crate) keys: Keys,
    namespace: Namespace,
    endpoints: Vec<String>,
    /// Which of `endpoints` requests go to (members that do not answer are set aside).
    in_use: Endpoints,
    /// The request timeout.
    pub(crate) timeout: Duration,
    pub(crate) started: tokio::time::Instant,
    /// The host's wall clock at `started`, since the Unix epoch: the epoch of this
    /// handle's store time (diagnostics and death records only; never expiry).
    pub(crate) wall_at_start: Duration,
    pub(crate) slots: Slots,
    pub(crate) expiry: Arc<ExpiryWatch>,
    /// What the store is: the backend, its capabilities, the issuer of its leases.
    pub(crate) info: StoreInfo,
    /// What this handle asked etcd for, counted (tests compare costs with them).
    pub(crate) calls: Calls,
}

/// Counts of the etcd requests a handle made, by kind (relaxed counters: for tests
/// and diagnostics, never for decisions).
#[derive(Default)]
pub(crate) struct Calls {
    /// Lease grants.
    pub(crate) grants: AtomicU64,
    /// KV requests: ranges, transactions, puts.
    pub(crate) kv: AtomicU64,
    /// Of those, prefix ranges (what etcd 3.4 serves by walking the range's index).
    pub(crate) ranges: AtomicU64,
    /// Grants and KV requests sent and not yet answered.
    in_flight: AtomicU64,
    /// The most of them in flight at once (what shows requests pipelined on the one
    /// connection rather than sent one after the other).
    pub(crate) most_in_flight: AtomicU64,
}

/// One request in flight, counted in [`Calls`] until dropped (answered or abandoned).
pub(crate) struct InFlight<'a>(&'a Calls);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Calls {
    pub(crate) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request in flight until the guard is dropped.
    pub(crate) fn flying(&self) -> InFlight<'_> {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.most_in_flight.fetch_max(now, Ordering::Relaxed);
        InFlight(self)
    }

    #[cfg(test)]
    pub(crate) fn read(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.expiry.stop();
    }
}

/// What one release attempt ([`EtcdStore::release_from`]) came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Released {
    /// This attempt retired the record (to the dead set): the lease is ended.
    Retired,
    /// Finished without retiring the record: whether the release ended the lease
    /// (false when it was not current; true when its etcd lease was revoked and
    /// somebody else retired the record).
    Done(bool),
    /// The record changed between the read and the write: read again.
    Retry,
}

/// A store handle on one namespace of an etcd cluster. Cheap to clone (clones share
/// the connection, keep-alive streams and expiry watch).
#[derive(Clone)]
pub struct EtcdStore {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.inner.endpoints)
            .field("namespace", &self.inner.namespace)
            .finish()
    }
}

impl EtcdStore {
    /// The ids that end the keys a range read of `prefix` with `opts` returns (the
    /// dead-letter index's keys end with the item id).
    pub(crate) async fn trailing_ids(&self, prefix: String, opts: GetOptions) -> Result<Vec<u64>> {
        self.range(prefix, opts)
            .await?
            .iter()
            .map(|kv| Keys::trailing_id(kv.key()).ok_or_else(|| corrupt(kv.key())))
            .collect()
    }

    /// The keep-alive slot of `lease` on the etcd lease its record names (`current`).
    pub(crate) fn slot_for(&self, lease: &Lease, current: &Current) -> Arc<Slot> {
        let rec = &current.rec;
        self.inner
            .slots
            .set(&lease.key, lease.token, rec.lease_id, rec.ttl)
    }

    /// Connects to the cluster, authenticates when the config has a user, and probes
    /// etcd's minimum lease ttl (a 1 s grant comes back with the server's minimum,
    /// which becomes [`Capabilities::min_ttl`]).
    ///
    /// Fails with [`Error::Unavailable`] when no member answers, and with
    /// [`Error::Backend`] on refused credentials, bad TLS files or a refused grant.
    pub async fn connect(config: EtcdConfig) -> Result<EtcdStore> {
        let mut opts = ConnectOptions::new()
            .with_timeout(config.timeout)
            .with_connect_timeout(config.connect_timeout)
            // etcd refuses pings more often than every 5 s, and pings without streams.
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            .with_keep_alive_while_idle(false);
        if let Some((user, password)) = &config.user {
            opts = opts
                .with_user(user.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        if let Some(tls) = &config.tls {
            opts = with_tls(opts, tls)?;
        }
        let client = tokio::time::timeout(
            config.connect_timeout + config.timeout,
            Client::connect(config.endpoints.clone(), Some(opts.clone())),
        )
        .await
        .map_err(|_| Error::unavailable(BACKEND, Fault::Timeout(config.connect_timeout)))?
        .map_err(map)?;
        let in_use = Endpoints::watch(&client, &config.endpoints, opts, config.timeout);
        let kv = client
            .kv_client()
            .max_decoding_message_size(MAX_DECODE)
            .max_encoding_message_size(MAX_DECODE);
        let mut lease = client.lease_client();
        let watch = client.watch_client().max_decoding_message_size(MAX_DECODE);

        // etcd 3.4 lets anybody use leases: a read in the namespace checks the
        // credentials (and the permissions on the namespace's keys).
        let keys = Keys::new(&config.namespace);
        kv.clone()
            .get(keys.counter(), Some(GetOptions::new().with_count_only()))
            .await
            .map_err(map)?;
        let probe = lease.grant(1, None).await.map_err(map)?;
        let min_secs = probe.ttl().max(1);
        let _ = lease.revoke(probe.id()).await;

        let caps = Capabilities {
            min_ttl: secs(min_secs),
            max_ttl: Ttl::MAX,
            pushes_expiry_events: true,
            observer_local_expiry: false,
            max_batch: MAX_BATCH,
            max_payload: MAX_PAYLOAD,
            death_retention: config.death_retention.max(1),
        };
        Ok(EtcdStore {
            inner: Arc::new(Inner {
                kv,
                lease,
                watch,
                keys,
                namespace: config.namespace.clone(),
                endpoints: config.endpoints.clone(),
                in_use,
                timeout: config.timeout,
                started: tokio::time::Instant::now(),
                wall_at_start: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default(),
                slots: Slots::default(),
                expiry: ExpiryWatch::new(),
                info: StoreInfo {
                    backend: BACKEND,
                    caps,
                    issuer: Issuer::located(
                        BACKEND,
                        &location(&config.endpoints),
                        config.namespace.clone(),
                    ),
                },
                calls: Calls::default(),
            }),
        })
    }

    /// The endpoints this handle's requests go to now, sorted: the configured ones,
    /// less the members set aside because they do not answer (or know no leader).
    /// With several endpoints, each member is asked for its status about once a
    /// second on a connection of its own; one set aside is taken back as soon as it
    /// answers. Never empty: with no member answering, every endpoint is in use.
    pub fn endpoints_in_use(&self) -> Vec<String> {
        self.inner.in_use.in_use()
    }

    /// The namespace this handle is scoped to.
    pub fn namespace(&self) -> &Namespace {
        &self.inner.namespace
    }

    pub(crate) fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// The key-values of a plain (not transactional) range read.
    pub(crate) async fn range(&self, key: String, opts: GetOptions) -> Result<Vec<KeyValue>> {
        Calls::count(&self.inner.calls.kv);
        Calls::count(&self.inner.calls.ranges);
        let _flying = self.inner.calls.flying();
        let mut resp = self
            .inner
            .kv
            .clone()
            .get(key, Some(opts))
            .await
            .map_err(map)?;
        Ok(resp.take_kvs())
    }

    pub(crate) async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        Calls::count(&self.inner.calls.kv);
        let _flying = self.inner.calls.flying();
        self.inner.kv.clone().txn(txn).await.map_err(map)
    }

    pub(crate) async fn get_one(&self, key: &str) -> Result<Option<KeyValue>> {
        Ok(self.get_in_term(key).await?.0)
    }

    /// Reads one etcd key (linearizable, as every read here): its key-value and the
    /// raft term the answer is stamped with.
    async fn get_in_term(&self, key: &str) -> Result<(Option<KeyValue>, u64)> {
        Calls::count(&self.inner.calls.kv);
        let _flying = self.inner.calls.flying();
        let mut resp = self.inner.kv.clone().get(key, None).await.map_err(map)?;
        let term = resp.header().map_or(0, |h| h.raft_term());
        Ok((resp.take_kvs().into_iter().next(), term))
    }

    /// Reads `lease`'s lease-bound key, with the raft term the answer is stamped with.
    async fn read_bound(&self, key: &Key) -> Result<(Option<KeyValue>, u64)> {
        self.get_in_term(&self.keys().live(key)).await
    }

    /// The attempts of one `acquire`: reads the key, and only when it is free or
    /// expired grants the etcd lease (once, into `granted`, reused by later attempts)
    /// and writes the record and lease-bound key in one guarded `Txn`.
    pub(crate) async fn acquire_with(
        &self,
        key: &Key,
        holder: &HolderId,
        ttl: Ttl,
        granted: &mut Option<i64>,
    ) -> Result<Lease> {
        let k = self.keys();
        let (rec_key, live_key) = (k.record(key), k.live(key));
        for _ in 0..MAX_TRIES {
            let snap = self.snapshot(key).await?;
            let live = snap.is_live();
            let (record, bound) = (snap.record, snap.live);
            match (&record, &bound) {
                (Some(c), Some(_)) if live => {
                    return Err(Error::Held {
                        key: key.clone(),
                        holder: c.rec.holder.clone(),
                        token: c.token,
                    })
                }
                (None, Some(_)) => {
                    return Err(Error::backend(BACKEND, Fault::Orphan(live_key.clone())))
                }
                _ => {}
            }
            let id = match *granted {
                Some(id) => id,
                None => *granted.insert(self.grant(ttl).await?),
            };
            let rec = Record {
                token: None,
                ttl,
                lease_id: id,
                holder: holder.clone(),
            }
            .encode();
            let put_live = TxnOp::put(
                live_key.as_str(),
                "",
                Some(PutOptions::new().with_lease(id)),
            );
            let txn = match record {
                // Expired, not yet reaped: retire it to the dead set in this step,
                // with its death record.
                Some(c) => {
                    let death = self
                        .death_write(key, &c.rec.holder, c.token, DeathCause::Superseded)
                        .await?;
                    let mut ops = vec![
                        put(&k.dead(c.token), key.to_string()),
                        put(&rec_key, rec),
                        put_live,
                    ];
                    ops.extend(death.ops);
                    Txn::new()
                        .when(vec![
                            mod_rev(&rec_key, c.mod_rev),
                            version(&live_key, 0),
                            death.compare,
                        ])
                        .and_then(ops)
                }
                None => Txn::new()
                    .when(vec![version(&rec_key, 0), version(&live_key, 0)])
                    .and_then(vec![put(&rec_key, rec), put_live]),
            };
            let resp = self.txn(txn).await?;
            if resp.succeeded() {
                let token = u64::try_from(revision(&resp)).unwrap_or(0);
                return Ok(Lease::granted(
                    &self.inner.info.issuer,
                    key.clone(),
                    holder.clone(),
                    FencingToken(token),
                    ttl,
                ));
            }
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    /// The end of a renewal on `slot`: etcd's answer to its keep-alive (`kept`) and
    /// the lease-bound key as read AFTER that answer came (`bound`, read in raft term
    /// `term`). The renewal counts only when both say the key is still bound to the
    /// slot's etcd lease with this token, and the keep-alive was answered in the term
    /// the read was: else a read tells why, or renews the etcd lease the record names
    /// now.
    ///
    /// Why the terms: etcd 3.4 renews a lease on its leader's lessor alone, without
    /// asking the cluster (3.5.3 made renewals linearizable, etcd-io/etcd#13932). A
    /// leader that was frozen while the others elected a new one still believes it
    /// leads for a moment when it resumes, and answers keep-alives from its own
    /// countdown, which the new leader, counting every lease from its own election,
    /// does not keep. Each answer is stamped with the raft term the answering member
    /// has applied up to. A linearizable read is served only once the current leader
    /// has committed an entry of its own term, so a read made after the answer
    /// carries the current term, and a deposed leader's answer an older one. Equal
    /// terms mean the answer came from the lessor that counts. A differing term is
    /// `Unavailable` (retried), also when the answer was good but came from a member
    /// that had not yet applied the new term.
    ///
    /// Not closed: a keep-alive that a follower forwards is stamped with the
    /// follower's term after the forward. Should the follower apply the new term in
    /// those microseconds while a deposed leader renewed, the check passes (an etcd
    /// that confirms leadership before renewing closes it, upstream).
    async fn renew_judged(
        &self,
        lease: &Lease,
        slot: &Slot,
        kept: KeptAlive,
        bound: Option<KeyValue>,
        term: u64,
    ) -> Result<Lease> {
        let on_slot = |slot: &Slot, bound: Option<KeyValue>| {
            bound.is_some_and(|kv| {
                kv.lease() == slot.lease_id && kv.create_revision() == token_i64(lease.token)
            })
        };
        let counted = |kept: KeptAlive, term: u64| {
            if kept.term == term {
                Ok(Self::renewed(lease, kept.left))
            } else {
                Err(Error::unavailable(
                    BACKEND,
                    Fault::TermChanged {
                        answered: kept.term,
                        current: term,
                    },
                ))
            }
        };
        if kept.left > 0 && on_slot(slot, bound) {
            return counted(kept, term);
        }
        if kept.left <= 0 && kept.term != 0 && kept.term != term {
            // "Unknown lease" from a member behind the cluster (a deposed leader does
            // not know leases granted after it froze): retried, not taken as a loss.
            return counted(kept, term);
        }
        // etcd no longer knows that etcd lease (expired, or released), or this
        // handle's slot is stale (another handle changed the ttl). Read why.
        self.inner.slots.remove(&lease.key, lease.token);
        let current = self.snapshot(&lease.key).await?.check(lease)?;
        if current.rec.lease_id == slot.lease_id {
            // Live by the key but unknown to the lessor: it is being revoked now.
            return Err(lease.lost(LostReason::Expired));
        }
        // The key moved to another etcd lease: the slot's one binds nothing now (its
        // revoke may have failed); end it, and renew the one the record names.
        self.revoke_later(slot.lease_id);
        let slot = self.slot_for(lease, &current);
        if slot.ttl != lease.ttl {
            return self.renew_with_ttl(lease).await;
        }
        let kept = slot
            .keep_alive(&self.inner.lease, self.inner.timeout)
            .await?;
        if kept.left <= 0 {
            self.inner.slots.remove(&lease.key, lease.token);
            return Err(lease.lost(LostReason::Expired));
        }
        let (bound, term) = self.read_bound(&lease.key).await?;
        if !on_slot(&slot, bound) {
            // Moved again meanwhile: the caller's retry reads afresh.
            return Err(Error::unavailable(BACKEND, Fault::Contention));
        }
        counted(kept, term)
    }

    /// One release attempt on `snap`, the key's record and lease-bound key as just
    /// read: revokes the etcd lease the record names, then retires the record if it
    /// is unchanged. [`Released::Retry`] when the record changed in between (another
    /// handle moved the lease to a new etcd lease, or retired it).
    pub(crate) async fn release_from(&self, lease: &Lease, snap: Snapshot) -> Result<Released> {
        let Some(c) = snap.record else {
            return Ok(Released::Done(false));
        };
        if c.token != lease.token {
            return Ok(Released::Done(false));
        }
        // Revoke first: from here on, renewals fail, and should this process stop
        // before the transaction below, the record shows as expired and a checker
        // reaps it (its items are requeued all the same).
        let revoked = self.revoke(c.rec.lease_id).await?;
        let k = self.keys();
        let (rec_key, live_key) = (k.record(&lease.key), k.live(&lease.key));
        let death = self
            .death_write(&lease.key, &c.rec.holder, c.token, DeathCause::Released)
            .await?;
        let mut ops = vec![
            del(&rec_key),
            del(&live_key),
            put(&k.dead(c.token), lease.key.to_string()),
        ];
        ops.extend(death.ops);
        let resp = self
            .txn(
                Txn::new()
                    .when(vec![mod_rev(&rec_key, c.mod_rev), death.compare])
                    .and_then(ops)
                    .or_else(vec![get(&rec_key)]),
            )
            .await?;
        if resp.succeeded() {
            return Ok(Released::Retired);
        }
        // The record changed since the read, or another death took the counter.
        // Still this token's: the lease moved to another etcd lease (which the
        // revoke above did not end), or only the counter moved, so try again.
        // Gone or another token's: a checker or an acquire retired it to the dead set,
        // after the revoke above ended it if that etcd lease was still its own.
        let now = Snapshot::from(first_range(&resp).into_iter().next(), None)?;
        match now.record {
            Some(c) if c.token == lease.token => Ok(Released::Retry),
            _ => Ok(Released::Done(revoked)),
        }
    }
}

#[cfg(feature = "tls")]
fn with_tls(opts: ConnectOptions, tls: &crate::config::TlsConfig) -> Result<ConnectOptions> {
    use etcd_client::{Certificate, Identity, TlsOptions};
    let read = |p: &std::path::PathBuf| {
        std::fs::read(p).map_err(|e| Error::backend(BACKEND, Fault::Unreadable(p.clone(), e)))
    };
    let mut t = TlsOptions::new();
    if let Some(ca) = &tls.ca {
        t = t.ca_certificate(Certificate::from_pem(read(ca)?));
    }
    if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
        t = t.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    if let Some(domain) = &tls.domain {
        t = t.domain_name(domain.clone());
    }
    Ok(opts.with_tls(t))
}

#[cfg(not(feature = "tls"))]
fn with_tls(_: ConnectOptions, _: &crate::config::TlsConfig) -> Result<ConnectOptions> {
    Err(Error::invalid(
        "url",
        liveness_core::InputProblem::Malformed {
            expected: "an etcd:// URL: this build has no TLS (enable the `tls` feature)",
        },
    ))
}

#[async_trait]
impl LeaseStore for EtcdStore {
    fn info(&self) -> &StoreInfo {
        &self.inner.info
    }

    async fn acquire(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Result<Lease> {
        self.inner.info.caps.check_ttl(ttl)?;
        // The etcd lease is granted only once a read found the key free or expired:
        // a losing acquire (the key held live) costs that read, no grant and revoke.
        let mut granted: Option<i64> = None;
        let outcome = self.acquire_with(key, holder, ttl, &mut granted).await;
        self.settle_acquire(key, &outcome, granted);
        outcome
    }

    async fn acquire_many(&self, asks: &[Acquire]) -> Result<Vec<Result<Lease>>> {
        check_batch(self.inner.info.caps, "acquires", asks.len())?;
        self.acquire_batch(asks).await
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        lease.check_issuer(&self.inner.info.issuer)?;
        let slot = match self.inner.slots.get(&lease.key, lease.token) {
            Some(s) => s,
            None => {
                let current = self.snapshot(&lease.key).await?.check(lease)?;
                self.slot_for(lease, &current)
            }
        };
        if slot.ttl != lease.ttl {
            return self.renew_with_ttl(lease).await;
        }
        // The keep-alive counts only while the lease-bound key is still bound to the
        // slot's etcd lease with this token (another handle may have moved it to a
        // new etcd lease, a ttl change, and the old one lives on when its revoke
        // failed), and only when a read made after its answer shows the same raft
        // term (`renew_judged`): the read follows the keep-alive, two round trips.
        let kept = slot
            .keep_alive(&self.inner.lease, self.inner.timeout)
            .await?;
        let (bound, term) = self.read_bound(&lease.key).await?;
        self.renew_judged(lease, &slot, kept, bound, term).await
    }

    async fn renew_many(&self, leases: &[Lease]) -> Result<Vec<Result<Lease>>> {
        check_batch(self.inner.info.caps, "leases", leases.len())?;
        // Leases this handle renews already on their etcd lease (a keep-alive slot of
        // their ttl): every keep-alive goes out at once on its stream, then ONE read
        // of all their lease-bound keys (after the answers: `renew_judged`). The
        // others (a first renewal, a ttl change, another issuer) take `renew`'s path,
        // at the same time.
        let mut fast = Vec::new();
        let mut slow = Vec::new();
        for (i, lease) in leases.iter().enumerate() {
            let slot = (lease.check_issuer(&self.inner.info.issuer).is_ok())
                .then(|| self.inner.slots.get(&lease.key, lease.token))
                .flatten()
                .filter(|slot| slot.ttl == lease.ttl);
            match slot {
                Some(slot) => fast.push((i, slot)),
                None => slow.push(i),
            }
        }
        let k = self.keys();
        let fast_renewals = async {
            let kept = futures::future::join_all(
                fast.iter()
                    .map(|(_, slot)| slot.keep_alive(&self.inner.lease, self.inner.timeout)),
            )
            .await;
            // Read only the keys whose keep-alive was answered.
            let reads: Vec<TxnOp> = fast
                .iter()
                .zip(&kept)
                .filter(|(_, k)| k.is_ok())
                .map(|((i, _), _)| get(&k.live(&leases[*i].key)))
                .collect();
            if reads.is_empty() {
                return Ok((kept, Vec::new(), 0));
            }
            let resp = self.txn(Txn::new().and_then(reads)).await?;
            let term = resp.header().map_or(0, |h| h.raft_term());
            let bound: Vec<Option<KeyValue>> = ranges(&resp)
                .into_iter()
                .map(|mut r| r.take_kvs().into_iter().next())
                .collect();
            Ok::<_, Error>((kept, bound, term))
        };
        let slow_renewals = futures::future::join_all(slow.iter().map(|i| self.renew(&leases[*i])));
        let (fast_answers, slow_answers) = tokio::join!(fast_renewals, slow_renewals);
        let (kept, bound, term) = fast_answers?;
        let mut out: Vec<Option<Result<Lease>>> = leases.iter().map(|_| None).collect();
        for (i, answer) in slow.into_iter().zip(slow_answers) {
            out[i] = Some(answer);
        }
        let mut bound = bound.into_iter();
        let judged = futures::future::join_all(fast.iter().zip(kept).map(|((i, slot), kept)| {
            // The reads are in the order of the answered keep-alives.
            let bound = kept.is_ok().then(|| bound.next().flatten()).flatten();
            async move {
                let lease = &leases[*i];
                match kept {
                    Ok(kept) => self.renew_judged(lease, slot, kept, bound, term).await,
                    Err(e) => Err(e),
                }
            }
        }))
        .await;
        for ((i, _), answer) in fast.iter().zip(judged) {
            out[*i] = Some(answer);
        }
        Ok(out
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(Error::unavailable(BACKEND, Fault::Contention))))
            .collect())
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        lease.check_issuer(&self.inner.info.issuer)?;
        self.inner.slots.remove(&lease.key, lease.token);
        for _ in 0..MAX_TRIES {
            let seen = self.inner.expiry.generation();
            let snap = self.snapshot(&lease.key).await?;
            match self.release_from(lease, snap).await? {
                Released::Retired => {
                    // This release deleted the record: an expiry candidate for it,
                    // as of the read, is stale.
                    self.inner.expiry.forget_upto(&lease.key, seen);
                    return Ok(true);
                }
                Released::Done(ended) => return Ok(ended),
                Released::Retry => {}
            }
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        let snap = self.snapshot(key).await?;
        let live = snap.is_live();
        let Some(c) = snap.record else {
            return Ok(None);
        };
        let status = if live {
            match self.time_to_live(c.rec.lease_id).await? {
                // Unknown to the lessor that answered: revoked since the read, or a
                // member that lost leadership without knowing it yet answered from its
                // stale lessor (LeaseTimeToLive is not linearizable). A second
                // linearizable read decides: a lease-bound key still bound to this
                // token is live.
                left if left < 0 => match self.snapshot(key).await? {
                    again
                        if again.is_live()
                            && again.record.as_ref().map(|r| r.token) == Some(c.token) =>
                    {
                        LeaseStatus::Live {
                            remaining: Duration::from_millis(1),
                        }
                    }
                    _ => LeaseStatus::Expired,
                },
                // etcd reports whole seconds, truncated: the last second reads 0.
                left => LeaseStatus::Live {
                    remaining: secs(left)
                        .min(c.rec.ttl.duration())
                        .max(Duration::from_millis(1)),
                },
            }
        } else {
            LeaseStatus::Expired
        };
        Ok(Some(LeaseInfo {
            key: key.clone(),
            holder: c.rec.holder,
            token: c.token,
            ttl: c.rec.ttl,
            status,
        }))
    }

    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        let limit = self.inner.info.caps.clamp_limit("limit", limit)?;
        self.sync_expiry().await?;
        self.verified(space, limit).await
    }

    async fn reap(&self, key: &Key, token: FencingToken) -> Result<bool> {
        for _ in 0..MAX_TRIES {
            let seen = self.inner.expiry.generation();
            let snap = self.snapshot(key).await?;
            let live = snap.live.is_some();
            let Some(c) = snap.record else {
                self.inner.expiry.forget_upto(key, seen);
                return Ok(false);
            };
            if c.token != token || live {
                return Ok(false);
            }
            let k = self.keys();
            let (rec_key, live_key) = (k.record(key), k.live(key));
            let death = self
                .death_write(key, &c.rec.holder, token, DeathCause::Reaped)
                .await?;
            let mut ops = vec![del(&rec_key), put(&k.dead(token), key.to_string())];
            ops.extend(death.ops);
            let resp = self
                .txn(
                    Txn::new()
                        .when(vec![
                            mod_rev(&rec_key, c.mod_rev),
                            version(&live_key, 0),
                            death.compare,
                        ])
                        .and_then(ops),
                )
                .await?;
            if resp.succeeded() {
                self.inner.expiry.forget_upto(key, seen);
                return Ok(true);
            }
            // The record changed (another reaper, an acquire), or another death
            // took the counter: read again.
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> Result<Vec<Result<bool>>> {
        check_batch(self.inner.info.caps, "expired", expired.len())?;
        self.reap_batch(expired).await
    }

    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        let limit = self.inner.info.caps.clamp_limit("limit", limit)?;
        let k = self.keys();
        self.range(k.deads(), under(limit))
            .await?
            .into_iter()
            .map(|kv| {
                let token = Keys::trailing_id(kv.key()).ok_or_else(|| corrupt(kv.key()))?;
                let key = std::str::from_utf8(kv.value())
                    .ok()
                    .and_then(|s| Key::parse(s).ok())
                    .ok_or_else(|| corrupt(kv.key()))?;
                Ok(DeadToken {
                    key,
                    token: FencingToken(token),
                })
            })
            .collect()
    }

    async fn store_time(&self) -> Result<StoreTime> {
        // etcd exposes no clock reading (its lease countdown runs on the leader and
        // is only visible per lease, in whole seconds). This is the handle's own
        // monotonic clock, anchored at the Unix epoch by the host clock read once at
        // connect (so that death records written by other handles compare, up to
        // the hosts' clock offset): for diagnostics only; no expiry decision ever
        // uses it.
        Ok(self.store_now())
    }

    async fn members(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let Page { after, limit } = page;
        self.member_page(space, after, limit).await
    }

    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        self.death_page(before, limit).await
    }

    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        self.sync_expiry().await?;
        if !self.verified(space, 1).await?.is_empty() {
            return Ok(Some(Duration::ZERO));
        }
        // One live lease of the space: the one the watch's scan or the last call
        // found, read by its key while it lives; else the first by name. etcd 3.4 serves a range with a
        // limit by walking the range's whole index (O(live leases in the space)):
        // a checker pays that only when its probe lease ended, not every round.
        let probe = lock(&self.inner.expiry.probes).get(space).cloned();
        let kv = match probe {
            Some(key) => self.get_one(&key).await?,
            None => None,
        };
        let kv = match kv {
            Some(kv) => kv,
            None => {
                let first_live = self
                    .range(self.keys().lives_in(space), under(1).with_keys_only())
                    .await?;
                let mut probes = lock(&self.inner.expiry.probes);
                let Some(kv) = first_live.into_iter().next() else {
                    probes.remove(space);
                    return Ok(None);
                };
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                probes.insert(space.clone(), key);
                kv
            }
        };
        // The time left of one live lease, at least a second: etcd keeps no expiry
        // index that a client can read, so this is an estimate; the expiry watch
        // wakes the checker the moment etcd expires any lease.
        Ok(Some(match self.time_to_live(kv.lease()).await? {
            left if left < 0 => Duration::ZERO,
            left => secs(left.max(1)),
        }))
    }

    fn wakeups(&self) -> Option<watch::Receiver<u64>> {
        let inner = &self.inner;
        inner.expiry.ensure(&inner.kv, &inner.watch, &inner.keys);
        Some(inner.expiry.wakeups())
    }
}

#[async_trait]
impl ItemStore for EtcdStore {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        options.validate(payload, self.inner.info.caps.max_payload)?;
        let k = self.keys();
        let counter = k.counter();
        let meta = Meta {
            attempts: 0,
            max_attempts: options.max_attempts,
        };
        let key = options.key.map(|key| k.enqueue_key(&key.to_hex()));
        for _ in 0..MAX_TRIES {
            if let Some(key) = &key {
                if let Some(kv) = self.get_one(key).await? {
                    return std::str::from_utf8(kv.value())
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok())
                        .map(ItemId)
                        .ok_or_else(|| corrupt(kv.key()));
                }
            }
            let (last, guard) = match self.get_one(&counter).await? {
                None => (0, version(&counter, 0)),
                Some(kv) => (
                    std::str::from_utf8(kv.value())
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok())
                        .ok_or_else(|| corrupt(kv.key()))?,
                    mod_rev(&counter, kv.mod_revision()),
                ),
            };
            let id = last + 1;
            let mut guards = vec![guard];
            let mut ops = vec![
                put(&counter, id.to_string()),
                put(&k.meta(id), meta.encode_with(ItemState::Pending)),
                put(&k.body(id), payload.to_vec()),
                put(&k.pending(id), meta.encode()),
            ];
            if let Some(key) = &key {
                // Still unused: a concurrent enqueue with this key makes us retry and
                // answer its id.
                guards.push(version(key, 0));
                ops.push(put(key, id.to_string()));
            }
            let resp = self.txn(Txn::new().when(guards).and_then(ops)).await?;
            if resp.succeeded() {
                return Ok(ItemId(id));
            }
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        lease.check_issuer(&self.inner.info.issuer)?;
        let n = self.inner.info.caps.clamp_limit("n", n)?;
        let request_hex = req.to_hex();
        let k = self.keys();
        let (rec_key, live_key) = (k.record(&lease.key), k.live(&lease.key));
        let mark_key = k.claim_mark(lease.token);
        let is_live = create_rev(&live_key, token_i64(lease.token));
        let why_not = || vec![get(&rec_key), get(&live_key)];
        for _ in 0..MAX_TRIES {
            let opts = under(n);
            let resp = self
                .txn(
                    Txn::new()
                        .when(vec![is_live.clone()])
                        .and_then(vec![
                            TxnOp::get(k.pendings(), Some(opts)),
                            TxnOp::get(k.owned_by(lease.token), Some(under(usize::MAX))),
                            get(&mark_key),
                        ])
                        .or_else(why_not()),
                )
                .await?;
            if !resp.succeeded() {
                return Err(self.lost_from(lease, &resp)?);
            }
            let mut reads = ranges(&resp).into_iter().map(|mut g| g.take_kvs());
            let pending = reads.next().unwrap_or_default();
            let owned = reads.next().unwrap_or_default();
            let mark = reads.next().unwrap_or_default().into_iter().next();
            // A repeat of this request answers what it assigned, and assigns nothing.
            let mut earlier = Vec::new();
            for kv in &owned {
                if Meta::request_of(kv.value()) == Some(request_hex.as_str()) {
                    let id = Keys::trailing_id(kv.key()).ok_or_else(|| corrupt(kv.key()))?;
                    let meta = Meta::decode(kv.value()).ok_or_else(|| corrupt(kv.key()))?;
                    earlier.push((id, meta));
                }
            }
            if !earlier.is_empty() {
                let bodies: Vec<TxnOp> = earlier.iter().map(|(id, _)| get(&k.body(*id))).collect();
                let resp = self.txn(Txn::new().and_then(bodies)).await?;
                return claimed_items(k, earlier, ranges(&resp));
            }
            // Else admitted only above the token's high-water mark, which the write
            // below raises (also when nothing is pending): a late or repeated copy,
            // or an older id after a newer one, assigns nothing.
            let mark_guard = match &mark {
                Some(kv) => {
                    let last = parse_request_id(kv.value()).ok_or_else(|| corrupt(kv.key()))?;
                    if req <= last {
                        return Ok(Vec::new());
                    }
                    mod_rev(&mark_key, kv.mod_revision())
                }
                None => version(&mark_key, 0),
            };
            let mut compares = vec![is_live.clone(), mark_guard];
            let mut ops = Vec::with_capacity(pending.len() * 4 + 1);
            ops.push(put(&mark_key, request_hex.clone()));
            let mut claimed = Vec::with_capacity(pending.len());
            for kv in &pending {
                let id = Keys::trailing_id(kv.key()).ok_or_else(|| corrupt(kv.key()))?;
                let meta = Meta::decode(kv.value()).ok_or_else(|| corrupt(kv.key()))?;
                let meta = Meta {
                    attempts: meta.attempts.saturating_add(1),
                    ..meta
                };
                compares.push(mod_rev(&k.pending(id), kv.mod_revision()));
                ops.push(del(&k.pending(id)));
                ops.push(put(
                    &k.owned(lease.token, id),
                    meta.encode_claimed(lease.token, &request_hex),
                ));
                ops.push(put(
                    &k.meta(id),
                    meta.encode_with(ItemState::Owned(lease.token)),
                ));
                claimed.push((id, meta));
            }
            // The bodies are read in the same transaction as far as etcd's limit on
            // operations allows (a full batch leaves one over), the rest right after:
            // bodies never change while the item is owned.
            let mut gets: Vec<TxnOp> = claimed.iter().map(|(id, _)| get(&k.body(*id))).collect();
            let later = gets.split_off(gets.len().min(MAX_TXN_OPS.saturating_sub(ops.len())));
            ops.extend(gets);
            let resp = self
                .txn(Txn::new().when(compares).and_then(ops).or_else(why_not()))
                .await?;
            if !resp.succeeded() {
                match self.lost_from(lease, &resp)? {
                    e @ Error::Lost { .. } => return Err(e),
                    _ => continue,
                }
            }
            let mut bodies = ranges(&resp);
            if !later.is_empty() {
                bodies.extend(ranges(&self.txn(Txn::new().and_then(later)).await?));
            }
            return claimed_items(k, claimed, bodies);
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    async fn complete(&self, lease: &Lease, id: ItemId) -> Result<()> {
        lease.check_issuer(&self.inner.info.issuer)?;
        let k = self.keys();
        let owned = k.owned(lease.token, id.0);
        let resp = self
            .txn(Txn::new().when(vec![exists(&owned)]).and_then(vec![
                del(&owned),
                del(&k.meta(id.0)),
                del(&k.body(id.0)),
            ]))
            .await?;
        if resp.succeeded() {
            Ok(())
        } else {
            Err(lease.fenced(id))
        }
    }

    async fn fail(&self, lease: &Lease, id: ItemId, retry: bool) -> Result<ItemState> {
        lease.check_issuer(&self.inner.info.issuer)?;
        let k = self.keys();
        let owned = k.owned(lease.token, id.0);
        let fenced = || lease.fenced(id);
        for _ in 0..MAX_TRIES {
            let Some(kv) = self.get_one(&owned).await? else {
                return Err(fenced());
            };
            let meta = Meta::decode(kv.value()).ok_or_else(|| corrupt(kv.key()))?;
            let (state, ops) = hand_back(k, &owned, id.0, &meta, retry);
            let resp = self
                .txn(
                    Txn::new()
                        .when(vec![mod_rev(&owned, kv.mod_revision())])
                        .and_then(Vec::from(ops)),
                )
                .await?;
            if resp.succeeded() {
                return Ok(state);
            }
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    async fn requeue_orphans(&self, token: FencingToken) -> Result<Requeued> {
        let k = self.keys();
        let dead = k.dead(token);
        let mut out = Requeued::default();
        let mut conflicts = 0;
        loop {
            let opts = under(MAX_BATCH);
            let resp = self
                .txn(Txn::new().when(vec![exists(&dead)]).and_then(vec![
                    TxnOp::get(k.owned_by(token), Some(opts)),
                    get(&k.death_tally(token)),
                ]))
                .await?;
            if !resp.succeeded() {
                // Not (or no longer) in the dead set: nothing to do.
                return Ok(out);
            }
            let r = ranges(&resp);
            let (tally_cmp, mut swept) = self.sweep_tally(token, first(r.get(1)).as_ref())?;
            let owned = first_range(&resp);
            if owned.is_empty() {
                // The last step: forget the token and write what all the batches
                // (of every concurrent sweeper) moved into its death record.
                if !self.finish_sweep(token, tally_cmp, swept).await? {
                    conflicts += 1;
                    if conflicts >= MAX_TRIES {
                        return Err(Error::unavailable(BACKEND, Fault::Contention));
                    }
                }
                continue;
            }
            let mut compares = vec![exists(&dead), tally_cmp];
            let mut ops = Vec::with_capacity(owned.len() * 3);
            let mut moved = Vec::with_capacity(owned.len());
            for kv in &owned {
                let id = Keys::trailing_id(kv.key()).ok_or_else(|| corrupt(kv.key()))?;
                let meta = Meta::decode(kv.value()).ok_or_else(|| corrupt(kv.key()))?;
                let owned = k.owned(token, id);
                let (state, back) = hand_back(k, &owned, id, &meta, true);
                compares.push(mod_rev(&owned, kv.mod_revision()));
                ops.extend(back);
                moved.push((ItemId(id), state));
                match state {
                    ItemState::Pending => swept.requeued += 1,
                    _ => swept.dead_lettered += 1,
                }
            }
            ops.push(self.tally_op(token, swept));
            let resp = self.txn(Txn::new().when(compares).and_then(ops)).await?;
            if resp.succeeded() {
                for (id, state) in moved {
                    match state {
                        ItemState::Pending => out.requeued.push(id),
                        _ => out.dead_lettered.push(id),
                    }
                }
            } else {
                conflicts += 1;
                if conflicts >= MAX_TRIES {
                    return Err(Error::unavailable(BACKEND, Fault::Contention));
                }
            }
        }
    }

    async fn requeue_orphans_many(&self, tokens: &[FencingToken]) -> Result<Vec<Result<Requeued>>> {
        let mut out = Vec::with_capacity(tokens.len());
        for chunk in tokens.chunks(crate::batch::REQUEUE_CHUNK) {
            out.extend(self.requeue_batch(chunk).await?);
        }
        Ok(out)
    }

    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        let k = self.keys();
        let resp = self
            .txn(Txn::new().and_then(vec![get(&k.meta(id.0)), get(&k.body(id.0))]))
            .await?;
        let r = ranges(&resp);
        let Some(meta_kv) = first(r.first()) else {
            return Ok(None);
        };
        let (meta, state) = match Meta::decode_with(meta_kv.value()) {
            Some((m, Some(s))) => (m, s),
            _ => return Err(corrupt(meta_kv.key())),
        };
        let payload = first(r.get(1))
            .map(|kv| kv.value().to_vec())
            .ok_or_else(|| corrupt(k.body(id.0).as_bytes()))?;
        Ok(Some(ItemRecord {
            item: Item {
                id,
                payload,
                attempts: meta.attempts,
                max_attempts: meta.max_attempts,
            },
            state,
        }))
    }

    async fn item_counts(&self) -> Result<ItemCounts> {
        let k = self.keys();
        let count =
            |p: String| TxnOp::get(p, Some(GetOptions::new().with_prefix().with_count_only()));
        let resp = self
            .txn(Txn::new().and_then(vec![
                count(k.pendings()),
                count(k.owneds()),
                count(k.dead_letters()),
            ]))
            .await?;
        let r = ranges(&resp);
        let n = |i: usize| {
            r.get(i)
                .map(|g| u64::try_from(g.count()).unwrap_or(0))
                .unwrap_or(0)
        };
        Ok(ItemCounts {
            pending: n(0),
            owned: n(1),
            dead_lettered: n(2),
        })
    }

    async fn dead_letters(&self, limit: usize) -> Result<Vec<ItemRecord>> {
        let limit = self.inner.info.caps.clamp_limit("limit", limit)?;
        let k = self.keys();
        let ids = self
            .trailing_ids(k.dead_letters(), under(limit).with_keys_only())
            .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // Dead-lettered items never change again: reading them after the listing is
        // as good as reading them with it.
        let at = |key: String| TxnOp::get(key, None);
        let ops = ids
            .iter()
            .flat_map(|id| [at(k.meta(*id)), at(k.body(*id))])
            .collect::<Vec<_>>();
        let resp = self.txn(Txn::new().and_then(ops)).await?;
        let r = ranges(&resp);
        ids.iter()
            .enumerate()
            .map(|(i, id)| {
                let meta_kv = first(r.get(2 * i)).ok_or_else(|| corrupt(k.meta(*id).as_bytes()))?;
                let meta = Meta::decode(meta_kv.value()).ok_or_else(|| corrupt(meta_kv.key()))?;
                let payload = first(r.get(2 * i + 1))
                    .map(|kv| kv.value().to_vec())
                    .ok_or_else(|| corrupt(k.body(*id).as_bytes()))?;
                Ok(ItemRecord {
                    item: Item {
                        id: ItemId(*id),
                        payload,
                        attempts: meta.attempts,
                        max_attempts: meta.max_attempts,
                    },
                    state: ItemState::DeadLettered,
                })
            })
            .collect()
    }

    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        let Page { after, limit } = page;
        self.item_page(state, after, limit).await
    }

    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        for _ in 0..MAX_TRIES {
            if let Some(mut answer) = self.revive(&[id.0]).await? {
                return answer.pop().unwrap_or(Ok(id.0)).map(|_| ());
            }
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        self.revive_many(limit).await
    }
}

/// The items a claim answers: each `(id, meta)` with its body, read by the `get` ops
/// whose responses are `bodies`, in the same order.
fn claimed_items(
    k: &Keys,
    claimed: Vec<(u64, Meta)>,
    bodies: Vec<GetResponse>,
) -> Result<Vec<Item>> {
    claimed
        .into_iter()
        .zip(bodies.iter())
        .map(|((id, meta), body)| {
            let payload = body
                .kvs()
                .first()
                .map(|kv| kv.value().to_vec())
                .ok_or_else(|| corrupt(k.body(id).as_bytes()))?;
            Ok(Item {
                id: ItemId(id),
                payload,
                attempts: meta.attempts,
                max_attempts: meta.max_attempts,
            })
        })
        .collect()
}

/// The writes that give back item `id`, owned under the index entry `owned` with
/// `meta`: pending when `retry` and it has attempts left, dead-lettered otherwise.
pub(crate) fn hand_back(
    k: &Keys,
    owned: &str,
    id: u64,
    meta: &Meta,
    retry: bool,
) -> (ItemState, [TxnOp; 3]) {
    let (state, index) = if retry && meta.attempts < meta.max_attempts {
        (ItemState::Pending, k.pending(id))
    } else {
        (ItemState::DeadLettered, k.dead_letter(id))
    };
    let ops = [
        del(owned),
        put(&index, meta.encode()),
        put(&k.meta(id), meta.encode_with(state)),
    ];
    (state, ops)
}

/// Where a handle's cluster is, for its [`Issuer`]: the configured endpoints, sorted
/// (no credentials, no timeouts), so that every handle on the same cluster agrees.
fn location(endpoints: &[String]) -> String {
    let mut endpoints = endpoints.to_vec();
    endpoints.sort();
    endpoints.dedup();
    endpoints.join(",")
}
