//! [`EtcdStore`]: the store handle, its connection and the raw round trips every
//! other file is made of.
//!
//! Each liveness lease is an etcd lease with a lease-bound key (`w/l/<space>/<name>`,
//! its create revision is the fencing token) beside a record (`lease/<space>/<name>`)
//! that is not lease-bound (the layout: `keys.rs`); etcd's own countdown deletes the
//! lease-bound key, and "record present, lease-bound key gone" is "expired, not yet
//! reaped". Every multi-key change is one `Txn` guarded by compares on revisions:
//! the compares and operations it is built of, and the reading of its answers
//! ([`Snapshot`]), are here too, with the etcd lease calls (grant, revoke, time to
//! live).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, GetResponse, KeyValue, KvClient,
    LeaseClient, Txn, TxnOp, TxnOpResponse, TxnResponse, WatchClient,
};
use liveness_core::durability::StoreLostState;
use liveness_core::{
    Capabilities, Error, FencingToken, Issuer, Key, Lease, LostCause, Namespace, Result, StoreInfo,
    StoreTime, Ttl,
};

use crate::config::{EtcdConfig, TlsConfig};
use crate::endpoints::Endpoints;
use crate::error::{at_key, corrupt, is_not_found, map, Fault, MAX_TRIES};
use crate::keepalive::Slots;
use crate::key_leases::KeyLeases;
use crate::keys::{Keys, Record};
use crate::riders::Riders;
use crate::signal::PendingSignal;
use crate::watch::{prefix_end, ExpiryWatch};
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
    /// The riding members this handle joined or met (`session.rs`): a claim's guard
    /// judges them through their session.
    pub(crate) riders: Riders,
    /// Claims through this handle take turns: they all race for the lowest pending
    /// items, and would otherwise make each other's transactions fail.
    pub(crate) claims: tokio::sync::Mutex<()>,
    pub(crate) expiry: Arc<ExpiryWatch>,
    /// The pending signal (`ItemStore::pending`), its watch started on first use.
    pub(crate) pending: PendingSignal,
    /// What the store is: the backend, its capabilities, the issuer of its leases.
    pub(crate) info: StoreInfo,
    /// The etcd leases idempotency keys are bound to (`key_leases.rs`).
    pub(crate) key_leases: KeyLeases,
    /// What this handle asked etcd for, counted (tests compare costs with them).
    pub(crate) calls: Calls,
    /// Where a test holds a release between its transaction and its revoke.
    #[cfg(test)]
    pub(crate) between_release_steps: Pause,
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
    /// The keys etcd walked for the ranges read by [`EtcdStore::range_walked`] (the
    /// member sweep's reads of a session's member index): the count etcd answers, which in
    /// etcd 3.4 is every key of the range, whatever the limit.
    pub(crate) walked: AtomicU64,
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

/// Checks, reading only, that the namespace of `config` has any key: the opening of a
/// store with [`EtcdConfig::existing_only`]. Its prefix is the root of the layout in
/// `keys.rs`, `liveness/<ns>/`.
async fn check_existing(kv: &mut KvClient, config: &EtcdConfig) -> Result<()> {
    let ns = config.namespace();
    let found = kv
        .get(
            format!("liveness/{ns}/"),
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .map_err(map)?
        .count();
    if found > 0 {
        return Ok(());
    }
    Err(Error::invalid(
        "namespace",
        liveness_core::InputProblem::BadValue {
            name: "ns",
            got: ns.to_string(),
            expected: format!(
                "a namespace the etcd cluster {} holds (no key under liveness/{ns}/)",
                location(config.endpoints())
            ),
        },
    ))
}

impl EtcdStore {
    /// The ids that end the keys a range read of `prefix` with `opts` returns (the
    /// dead-letter index's keys end with the item id).
    pub(crate) async fn trailing_ids(&self, prefix: String, opts: GetOptions) -> Result<Vec<u64>> {
        self.range(prefix, opts)
            .await?
            .iter()
            .map(|kv| Keys::trailing_id(kv.key()).ok_or_else(|| corrupt(at_key(kv.key()))))
            .collect()
    }

    /// Connects to the cluster, authenticates when the config has a user, and probes
    /// etcd's minimum lease ttl (a 1 s grant comes back with the server's minimum,
    /// which becomes [`Capabilities::min_ttl`]).
    ///
    /// Fails with [`Error::Unavailable`] when no member answers, and with
    /// [`Error::Backend`] on refused credentials, bad TLS files or a refused grant.
    /// With [`EtcdConfig::existing_only`], fails with [`Error::InvalidInput`] (`what:
    /// "namespace"`) when the namespace has no key at all (a count-only read of its
    /// prefix `liveness/<ns>/`), before anything is written.
    pub async fn connect(config: EtcdConfig) -> Result<EtcdStore> {
        let mut opts = ConnectOptions::new()
            .with_timeout(config.timeout())
            .with_connect_timeout(config.connect_timeout())
            // etcd refuses pings more often than every 5 s, and pings without streams.
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            .with_keep_alive_while_idle(false);
        if let Some((user, password)) = config.user() {
            opts = opts.with_user(user, password).with_auto_token_refresh(true);
        }
        if let Some(tls) = config.tls() {
            opts = with_tls(opts, tls)?;
        }
        let client = tokio::time::timeout(
            config.connect_timeout() + config.timeout(),
            Client::connect(config.endpoints().to_vec(), Some(opts.clone())),
        )
        .await
        .map_err(|_| Error::unavailable(BACKEND, Fault::Timeout(config.connect_timeout())))?
        .map_err(map)?;
        let in_use = Endpoints::watch(&client, config.endpoints(), opts, config.timeout());
        let kv = client
            .kv_client()
            .max_decoding_message_size(MAX_DECODE)
            .max_encoding_message_size(MAX_DECODE);
        let mut lease = client.lease_client();
        let watch = client.watch_client().max_decoding_message_size(MAX_DECODE);

        // etcd 3.4 lets anybody use leases: a read in the namespace checks the
        // credentials (and the permissions on the namespace's keys).
        let keys = Keys::new(config.namespace());
        kv.clone()
            .get(keys.counter(), Some(GetOptions::new().with_count_only()))
            .await
            .map_err(map)?;
        if config.existing_only() {
            check_existing(&mut kv.clone(), &config).await?;
        }
        let probe = lease.grant(1, None).await.map_err(map)?;
        let min_secs = probe.ttl().max(1);
        let _ = lease.revoke(probe.id()).await;

        let caps = Capabilities::default()
            .min_ttl(secs(min_secs))
            .max_ttl(Ttl::MAX)
            .pushes_expiry_events(true)
            .observer_local_expiry(false)
            .max_batch(MAX_BATCH)
            .max_payload(MAX_PAYLOAD)
            .death_retention(config.death_retention().max(1))
            .sessions(true)
            .items(true)
            .operator_views(true)
            .delays(true)
            .error_text(true)
            .key_retention(Some(config.key_retention()))
            .queues(true);
        Ok(EtcdStore {
            inner: Arc::new(Inner {
                kv,
                lease,
                watch,
                keys,
                namespace: config.namespace().clone(),
                endpoints: config.endpoints().to_vec(),
                in_use,
                timeout: config.timeout(),
                started: tokio::time::Instant::now(),
                wall_at_start: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default(),
                slots: Slots::default(),
                riders: Riders::default(),
                claims: tokio::sync::Mutex::new(()),
                expiry: ExpiryWatch::new(),
                pending: PendingSignal::new(),
                info: StoreInfo::new(
                    BACKEND,
                    caps,
                    Issuer::located(
                        BACKEND,
                        &location(config.endpoints()),
                        config.namespace().clone(),
                    ),
                ),
                key_leases: KeyLeases::new(
                    config.key_retention(),
                    secs(min_secs),
                    config.timeout(),
                ),
                calls: Calls::default(),
                #[cfg(test)]
                between_release_steps: Pause::default(),
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
        Ok(self.get(key, opts).await?.take_kvs())
    }

    /// [`EtcdStore::range`], adding to [`Calls::walked`] the number of keys etcd
    /// says the range holds (what etcd 3.4 walks to answer it).
    pub(crate) async fn range_walked(
        &self,
        key: String,
        opts: GetOptions,
    ) -> Result<Vec<KeyValue>> {
        let mut resp = self.get(key, opts).await?;
        let walked = u64::try_from(resp.count()).unwrap_or(0);
        self.inner.calls.walked.fetch_add(walked, Ordering::Relaxed);
        Ok(resp.take_kvs())
    }

    /// One plain range read, counted.
    async fn get(&self, key: String, opts: GetOptions) -> Result<GetResponse> {
        self.get_unmapped(key, opts).await.map_err(map)
    }

    /// [`EtcdStore::get`], answering etcd's error as it came (the caller looks at
    /// it before mapping it).
    pub(crate) async fn get_unmapped(
        &self,
        key: impl Into<Vec<u8>>,
        opts: GetOptions,
    ) -> std::result::Result<GetResponse, etcd_client::Error> {
        Calls::count(&self.inner.calls.kv);
        Calls::count(&self.inner.calls.ranges);
        let _flying = self.inner.calls.flying();
        let mut kv = self.inner.kv.clone();
        kv.get(key, Some(opts)).await
    }

    pub(crate) async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        self.txn_unmapped(txn).await.map_err(map)
    }

    /// [`EtcdStore::txn`], answering etcd's error as it came (the caller looks at
    /// it before mapping it).
    pub(crate) async fn txn_unmapped(
        &self,
        txn: Txn,
    ) -> std::result::Result<TxnResponse, etcd_client::Error> {
        Calls::count(&self.inner.calls.kv);
        let _flying = self.inner.calls.flying();
        self.inner.kv.clone().txn(txn).await
    }

    pub(crate) async fn get_one(&self, key: &str) -> Result<Option<KeyValue>> {
        Ok(self.get_in_term(key).await?.0)
    }

    /// Reads one etcd key (linearizable, as every read here): its key-value and the
    /// raft term the answer is stamped with.
    pub(crate) async fn get_in_term(&self, key: &str) -> Result<(Option<KeyValue>, u64)> {
        Calls::count(&self.inner.calls.kv);
        let _flying = self.inner.calls.flying();
        let mut resp = self.inner.kv.clone().get(key, None).await.map_err(map)?;
        let term = resp.header().map_or(0, |h| h.raft_term());
        Ok((resp.take_kvs().into_iter().next(), term))
    }

    /// Reads a key's record and lease-bound key at one revision; for a riding
    /// member's record, also its session's lease-bound key, read while the record is
    /// still the one read (a second transaction, guarded by the record's mod
    /// revision: a riding member's record never changes while it lives).
    pub(crate) async fn snapshot(&self, key: &Key) -> Result<Snapshot> {
        let k = self.keys();
        let (rec_key, live_key) = (k.record(key), k.live(key));
        let both = || vec![get(&rec_key), get(&live_key)];
        let resp = self.txn(Txn::new().and_then(both())).await?;
        let r = ranges(&resp);
        let mut snap = Snapshot::from(first(r.first()), first(r.get(1)))?.at(&resp);
        for _ in 0..MAX_TRIES {
            let (Some((session, _)), Some(c)) = (snap.rides(), &snap.record) else {
                return Ok(snap);
            };
            let resp = self
                .txn(
                    Txn::new()
                        .when(vec![mod_rev(&rec_key, c.mod_rev)])
                        .and_then(vec![get(&k.live(session))])
                        .or_else(both()),
                )
                .await?;
            let r = ranges(&resp);
            if resp.succeeded() {
                snap.session_live = first(r.first());
                return Ok(snap.at(&resp));
            }
            snap = Snapshot::from(first(r.first()), first(r.get(1)))?.at(&resp);
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    pub(crate) async fn grant(&self, ttl: Ttl) -> Result<i64> {
        self.grant_secs(etcd_secs(ttl)).await
    }

    /// Grants an etcd lease of `secs` whole seconds (etcd raises a shorter one to its
    /// minimum ttl).
    pub(crate) async fn grant_secs(&self, secs: i64) -> Result<i64> {
        Calls::count(&self.inner.calls.grants);
        let _flying = self.inner.calls.flying();
        let resp = self
            .inner
            .lease
            .clone()
            .grant(secs, None)
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

    /// The compares that `lease` is current and live, and the reads that tell why
    /// not ([`EtcdStore::lost_from`]): its lease-bound key carries its token; or, for
    /// a member this handle knows rides a session, its record is the one its join
    /// wrote (its mod revision is the token) and the session's lease-bound key
    /// carries the session's token.
    pub(crate) fn live_guard(&self, lease: &Lease) -> (Vec<Compare>, Vec<TxnOp>) {
        let k = self.keys();
        let (rec_key, live_key) = (k.record(&lease.key), k.live(&lease.key));
        match self.inner.riders.of(lease) {
            Some((session, st)) => {
                let session_live = k.live(&session);
                (
                    vec![
                        mod_rev(&rec_key, token_i64(lease.token)),
                        create_rev(&session_live, token_i64(st)),
                    ],
                    vec![get(&rec_key), get(&live_key), get(&session_live)],
                )
            }
            None => (
                vec![create_rev(&live_key, token_i64(lease.token))],
                vec![get(&rec_key), get(&live_key)],
            ),
        }
    }

    /// Why a transaction guarded by [`EtcdStore::live_guard`] failed: the lease's
    /// loss, read from the guard's `or_else` reads. `None` when the lease rides a
    /// session this handle did not know of: it is remembered, and the caller asks
    /// again (its guard now judges the session).
    pub(crate) fn lost_from(&self, lease: &Lease, resp: &TxnResponse) -> Result<Option<Error>> {
        let r = ranges(resp);
        let mut snap = Snapshot::from(first(r.first()), first(r.get(1)))?.at(resp);
        if let (Some((session, st)), Some(c)) = (snap.rides(), &snap.record) {
            match r.get(2) {
                Some(g) => snap.session_live = g.kvs().first().cloned(),
                None if c.token == lease.token => {
                    self.inner.riders.remember(lease, session, *st);
                    return Ok(None);
                }
                None => {}
            }
        }
        Ok(Some(match snap.check(lease) {
            Err(e) => e,
            // Live after all: the transaction lost a race on an item instead.
            Ok(_) => Error::unavailable(BACKEND, Fault::Contention),
        }))
    }

    /// The handle's store time (see [`liveness_core::OperatorStore::store_time`] on
    /// [`EtcdStore`]).
    pub(crate) fn store_now(&self) -> StoreTime {
        StoreTime::from_epoch(self.inner.wall_at_start + self.inner.started.elapsed())
    }
}

#[cfg(feature = "tls")]
fn with_tls(opts: ConnectOptions, tls: &TlsConfig) -> Result<ConnectOptions> {
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
fn with_tls(_: ConnectOptions, _: &TlsConfig) -> Result<ConnectOptions> {
    Err(Error::invalid(
        "url",
        liveness_core::InputProblem::Malformed {
            expected: "an etcd:// URL: this build has no TLS (enable the `tls` feature)",
        },
    ))
}

/// Where a handle's cluster is, for its [`Issuer`]: the configured endpoints, sorted
/// (no credentials, no timeouts), so that every handle on the same cluster agrees.
fn location(endpoints: &[String]) -> String {
    let mut endpoints = endpoints.to_vec();
    endpoints.sort();
    endpoints.dedup();
    endpoints.join(",")
}

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
    /// For a riding member's record: its session's lease-bound key, when it was read
    /// and exists (`None` otherwise: the member is then judged expired).
    pub(crate) session_live: Option<KeyValue>,
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
                let rec = Record::decode(kv.value()).ok_or_else(|| corrupt(at_key(kv.key())))?;
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
            session_live: None,
            revision: 0,
        })
    }

    /// The snapshot, read at the revision `resp` reports.
    pub(crate) fn at(mut self, resp: &TxnResponse) -> Snapshot {
        self.revision = resp.header().map_or(0, |h| h.revision());
        self
    }

    /// True when the lease-bound key exists and belongs to the record's token; for a
    /// riding member, when its session's lease-bound key (as read) belongs to the
    /// session's token.
    pub(crate) fn is_live(&self) -> bool {
        let Some(c) = &self.record else { return false };
        let (bound, token) = match &c.rec.session {
            Some((_, st)) => (&self.session_live, *st),
            None => (&self.live, c.token),
        };
        bound
            .as_ref()
            .is_some_and(|l| l.create_revision() == token_i64(token))
    }

    /// The session the record rides (its key and token), for a riding member.
    pub(crate) fn rides(&self) -> Option<&(Key, FencingToken)> {
        self.record.as_ref()?.rec.session.as_ref()
    }

    /// Why `lease` is not current and live, or the record when it is.
    pub(crate) fn check(self, lease: &Lease) -> Result<Current> {
        let live = self.is_live();
        match self.record {
            None if self.revision > 0 && lease.token.0 > self.revision.unsigned_abs() => {
                Err(StoreLostState::of(BACKEND, lease))
            }
            None => Err(lease.lost(LostCause::Released)),
            Some(c) if c.token != lease.token => Err(lease.lost(LostCause::Superseded)),
            Some(_) if !live => Err(lease.lost(LostCause::Expired)),
            Some(c) => Ok(c),
        }
    }
}

// The compares and operations of transactions, and the reading of their answers.

/// The key's version is `v` (0: the key does not exist).
pub(crate) fn version(k: &str, v: i64) -> Compare {
    Compare::version(k, CompareOp::Equal, v)
}

/// The key was last modified at revision `v`.
pub(crate) fn mod_rev(k: &str, v: i64) -> Compare {
    Compare::mod_revision(k, CompareOp::Equal, v)
}

/// The decimal number `kv` holds (a counter, a cursor, an item id), or corrupt naming
/// its key.
pub(crate) fn number(kv: &KeyValue) -> Result<u64> {
    std::str::from_utf8(kv.value())
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| corrupt(at_key(kv.key())))
}

/// The compare on the counter `key` as read in `kv` (absent: never written), and its
/// value (0 before the first write).
pub(crate) fn counter_at(key: &str, kv: Option<&KeyValue>) -> Result<(Compare, u64)> {
    Ok(match kv {
        None => (version(key, 0), 0),
        Some(kv) => (mod_rev(key, kv.mod_revision()), number(kv)?),
    })
}

/// The key was created at revision `v` (a lease-bound key: its token).
pub(crate) fn create_rev(k: &str, v: i64) -> Compare {
    Compare::create_revision(k, CompareOp::Equal, v)
}

/// The key was not created at revision `v` (absent, or another token's): a session's
/// lease-bound key that no longer carries the session's token.
pub(crate) fn not_create_rev(k: &str, v: i64) -> Compare {
    Compare::create_revision(k, CompareOp::NotEqual, v)
}

/// The key exists.
pub(crate) fn exists(k: &str) -> Compare {
    Compare::version(k, CompareOp::Greater, 0)
}

/// Reads one key.
pub(crate) fn get(k: &str) -> TxnOp {
    TxnOp::get(k, None)
}

/// Writes one key (not lease-bound).
pub(crate) fn put(k: &str, v: impl Into<Vec<u8>>) -> TxnOp {
    TxnOp::put(k, v, None)
}

/// Deletes one key.
pub(crate) fn del(k: &str) -> TxnOp {
    TxnOp::delete(k, None)
}

/// A token as a revision (tokens are revisions; a larger one matches nothing).
pub(crate) fn token_i64(t: FencingToken) -> i64 {
    i64::try_from(t.0).unwrap_or(i64::MAX)
}

/// The range responses of a transaction, in order (puts and deletes skipped).
pub(crate) fn ranges(resp: &TxnResponse) -> Vec<GetResponse> {
    resp.op_responses()
        .into_iter()
        .filter_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g),
            _ => None,
        })
        .collect()
}

/// The first key-value of a range response.
pub(crate) fn first(g: Option<&GetResponse>) -> Option<KeyValue> {
    g.and_then(|g| g.kvs().first().cloned())
}

/// The revision a transaction committed at.
pub(crate) fn revision(resp: &TxnResponse) -> i64 {
    resp.header().map(|h| h.revision()).unwrap_or(0)
}

/// The key-values of a transaction's first range.
pub(crate) fn first_range(resp: &TxnResponse) -> Vec<KeyValue> {
    ranges(resp)
        .into_iter()
        .next()
        .map(|mut g| g.take_kvs())
        .unwrap_or_default()
}

/// A range read of at most `limit` keys under a prefix, in key order.
pub(crate) fn under(limit: usize) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_limit(i64::try_from(limit).unwrap_or(i64::MAX))
}

/// A range read of at most `limit` keys from a start key to the end of `prefix`
/// (the start key is the one the read is sent with: a page's first key).
pub(crate) fn to_prefix_end(prefix: &str, limit: usize) -> GetOptions {
    GetOptions::new()
        .with_range(prefix_end(prefix))
        .with_limit(i64::try_from(limit).unwrap_or(i64::MAX))
}

/// A point where an operation waits while a test looks at the store, once armed.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Pause(
    std::sync::Mutex<
        Option<(
            tokio::sync::oneshot::Sender<()>,
            tokio::sync::oneshot::Receiver<()>,
        )>,
    >,
);

#[cfg(test)]
impl Pause {
    /// Arms the point for the next operation that reaches it: it says so on the
    /// returned receiver, then waits until the returned sender fires (or drops).
    pub(crate) fn arm(
        &self,
    ) -> (
        tokio::sync::oneshot::Receiver<()>,
        tokio::sync::oneshot::Sender<()>,
    ) {
        let (reached, on_reach) = tokio::sync::oneshot::channel();
        let (resume, on_resume) = tokio::sync::oneshot::channel();
        *liveness_core::sync::lock(&self.0) = Some((reached, on_resume));
        (on_reach, resume)
    }

    /// Waits here when armed (once).
    pub(crate) async fn here(&self) {
        let armed = liveness_core::sync::lock(&self.0).take();
        if let Some((reached, resume)) = armed {
            let _ = reached.send(());
            let _ = resume.await;
        }
    }
}
