//! [`FdbStore`]: the lease and item contract, written once over the internal
//! transaction interface ([`crate::kv`]), run on the real client or on the test
//! double. Each trait method runs its transaction body (`ops.rs`) in `transact!`.

use liveness_core::Page;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use liveness_core::store::check_batch;
use liveness_core::sync::lock;
use liveness_core::wake::tick;
use liveness_core::{
    async_trait, Acquire, Capabilities, DeadToken, DeathRecord, EnqueueOptions, ExpiredLease,
    FencingToken, HolderId, Issuer, Item, ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind,
    ItemStore, Key, Lease, LeaseInfo, LeaseStore, Namespace, RequestId, Requeued, Result, Space,
    StoreInfo, StoreTime, Ttl,
};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::{FdbConfig, Options};
use crate::error::corrupt;
use crate::keys::Layout;
use crate::kv::{transact, Database, Stamp};
use crate::observe::Observer;
use crate::ops::{Acquired, Retire};
use crate::BACKEND;

/// The most items one transaction moves: keeps every transaction far below
/// FoundationDB's 10 MB / 5 s limits (500 × a 10,000-byte payload read = 5 MB).
pub(crate) const MAX_BATCH: usize = 500;

/// The largest payload: FoundationDB's advice for values (100,000 bytes is the hard
/// limit; values over 10 kB hurt performance).
pub(crate) const MAX_PAYLOAD: usize = 10_000;

/// The shortest ttl: a few commit round trips, so that a heartbeat every ttl/3 fits.
pub(crate) const MIN_TTL: Duration = Duration::from_millis(500);

/// A lease and item store on FoundationDB (or on the in-crate test double), scoped
/// to one namespace (a tuple subspace `("liveness", ns)`).
///
/// Expiry is observer-local (see the crate docs): each handle judges it on its own
/// monotonic clock from what it has observed, so a fresh handle needs up to one ttl
/// of observation before it can see any lease as expired. Clones share the same
/// observations; separate handles (from `connect` or
/// [`DoubleDatabase::store`](crate::DoubleDatabase::store)) do not.
#[derive(Clone)]
pub struct FdbStore {
    db: Arc<dyn Database>,
    pub(crate) layout: Layout,
    namespace: Namespace,
    /// What this handle observed: its judge of expiry.
    pub(crate) obs: Arc<Mutex<Observer>>,
    wake: Arc<watch::Sender<u64>>,
    /// What the store is: the backend, its capabilities, the issuer of its leases.
    pub(crate) info: StoreInfo,
    /// The host's wall clock when the handle was made, since the Unix epoch: the
    /// epoch of its store time (diagnostics and death records only; never expiry).
    pub(crate) wall_at_start: Duration,
}

impl std::fmt::Debug for FdbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FdbStore")
            .field("db", &self.db)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl FdbStore {
    /// Connects to the cluster named by `config` (feature `native`; without it this
    /// fails with [`Error::Backend`](liveness_core::Error::Backend) saying so).
    pub async fn connect(config: FdbConfig) -> liveness_core::Result<FdbStore> {
        #[cfg(feature = "native")]
        {
            let db = crate::native::NativeDatabase::open(&config)?;
            let cluster = match &config.cluster_file {
                Some(path) => std::fs::canonicalize(path)
                    .unwrap_or_else(|_| path.clone())
                    .display()
                    .to_string(),
                None => "default cluster file".to_owned(),
            };
            Ok(FdbStore::over(
                Arc::new(db),
                &cluster,
                &config.namespace,
                config.options,
            ))
        }
        #[cfg(not(feature = "native"))]
        {
            let _ = config;
            Err(liveness_core::Error::backend(
                BACKEND,
                crate::error::NotCompiled,
            ))
        }
    }

    /// A handle on `namespace` of `db`, which `location` names (a cluster file, a
    /// double's identity) for the handle's [`Issuer`].
    pub(crate) fn over(
        db: Arc<dyn Database>,
        location: &str,
        namespace: &Namespace,
        options: Options,
    ) -> FdbStore {
        let location = format!("{location}|{}", options.prefix);
        FdbStore {
            info: StoreInfo {
                backend: BACKEND,
                caps: Capabilities {
                    min_ttl: MIN_TTL,
                    max_ttl: Ttl::MAX,
                    pushes_expiry_events: false,
                    observer_local_expiry: true,
                    max_batch: MAX_BATCH,
                    max_payload: MAX_PAYLOAD,
                    death_retention: options.death_retention.max(1),
                },
                issuer: Issuer::located(BACKEND, &location, namespace.clone()),
            },
            db,
            layout: Layout::new(&options.prefix, namespace),
            namespace: namespace.clone(),
            obs: Arc::new(Mutex::new(Observer::new())),
            wake: Arc::new(watch::channel(0).0),
            wall_at_start: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default(),
        }
    }

    /// The namespace this handle is scoped to.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }
}

impl FdbStore {
    /// The lease an acquire (or an entry of `acquire_many`) took, committed with
    /// `stamp` (the commit's, `None` when nothing was written) from a call sent at
    /// `sent`: records the write in the observations, forgets the lease it retired.
    fn granted(
        &self,
        key: &Key,
        holder: &HolderId,
        ttl: Ttl,
        outcome: Acquired,
        stamp: Option<Stamp>,
        sent: Instant,
    ) -> liveness_core::Result<Lease> {
        let (token, stamp) = match (outcome, stamp) {
            (Acquired::New { token, retired }, Some(stamp)) => {
                if let Some(old) = retired {
                    lock(&self.obs).forget_stamp(key, &old.stamp);
                    tick(&self.wake);
                }
                (token, stamp)
            }
            (Acquired::Already(rec), _) => (rec.token, rec.stamp),
            (Acquired::New { .. }, None) => return Err(corrupt("commit without versionstamp")),
        };
        lock(&self.obs).wrote(key, stamp, sent, ttl.duration());
        Ok(Lease {
            expires_in: (sent + ttl.duration()).saturating_duration_since(Instant::now()),
            ..Lease::granted(&self.info.issuer, key.clone(), holder.clone(), token, ttl)
        })
    }

    /// After a release or reap: forgets our write, wakes checkers, answers.
    fn retired(&self, key: &Key, outcome: Retire) -> bool {
        match outcome {
            Retire::Done(rec) => {
                if let Some(rec) = rec {
                    lock(&self.obs).forget_stamp(key, &rec.stamp);
                }
                tick(&self.wake);
                true
            }
            Retire::No => false,
        }
    }
}

#[async_trait]
impl LeaseStore for FdbStore {
    fn info(&self) -> &StoreInfo {
        &self.info
    }

    async fn acquire(
        &self,
        key: &Key,
        holder: &HolderId,
        ttl: Ttl,
    ) -> liveness_core::Result<Lease> {
        self.info.caps.check_ttl(ttl)?;
        let sent = Instant::now();
        let nonce = fastrand::u64(..);
        let (outcome, stamp) = transact!(self.db, |tx, at| self
            .acquire_once(tx, at, key, holder, ttl, nonce))?;
        self.granted(key, holder, ttl, outcome, stamp, sent)
    }

    async fn acquire_many(&self, asks: &[Acquire]) -> liveness_core::Result<Vec<Result<Lease>>> {
        check_batch(self.info.caps, "acquires", asks.len())?;
        if asks.is_empty() {
            return Ok(Vec::new());
        }
        // Every entry in one transaction: one commit for the whole batch.
        let sent = Instant::now();
        let nonce = fastrand::u64(..);
        let (outcomes, stamp) = transact!(self.db, |tx, at| self
            .acquire_many_once(tx, at, asks, nonce))?;
        if outcomes.len() != asks.len() {
            return Err(corrupt("acquire_many answered another number of entries"));
        }
        Ok(asks
            .iter()
            .zip(outcomes)
            .map(|(ask, outcome)| {
                self.granted(&ask.key, &ask.holder, ask.ttl, outcome?, stamp, sent)
            })
            .collect())
    }

    async fn renew(&self, lease: &Lease) -> liveness_core::Result<Lease> {
        lease.check_issuer(&self.info.issuer)?;
        let sent = Instant::now();
        let (_, stamp) = transact!(self.db, |tx, _at| self.renew_once(tx, lease))?;
        let stamp = stamp.ok_or_else(|| corrupt("commit without versionstamp"))?;
        lock(&self.obs).wrote(&lease.key, stamp, sent, lease.ttl.duration());
        Ok(Lease {
            expires_in: (sent + lease.ttl.duration()).saturating_duration_since(Instant::now()),
            ..lease.clone()
        })
    }

    async fn release(&self, lease: &Lease) -> liveness_core::Result<bool> {
        lease.check_issuer(&self.info.issuer)?;
        let nonce = fastrand::u64(..);
        let (outcome, _) = transact!(self.db, |tx, at| self.release_once(tx, at, lease, nonce))?;
        Ok(self.retired(&lease.key, outcome))
    }

    async fn inspect(&self, key: &Key) -> liveness_core::Result<Option<LeaseInfo>> {
        Ok(transact!(self.db, |tx, _at| self.inspect_once(tx, key))?.0)
    }

    async fn expired(
        &self,
        space: &Space,
        limit: usize,
    ) -> liveness_core::Result<Vec<ExpiredLease>> {
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        Ok(transact!(self.db, |tx, _at| self.expired_once(tx, space, limit))?.0)
    }

    async fn reap(&self, key: &Key, token: FencingToken) -> liveness_core::Result<bool> {
        let nonce = fastrand::u64(..);
        let (outcome, _) = transact!(self.db, |tx, at| self.reap_once(tx, at, key, token, nonce))?;
        Ok(self.retired(key, outcome))
    }

    async fn reap_many(
        &self,
        expired: &[(Key, FencingToken)],
    ) -> liveness_core::Result<Vec<liveness_core::Result<bool>>> {
        check_batch(self.info.caps, "expired", expired.len())?;
        if expired.is_empty() {
            return Ok(Vec::new());
        }
        // Every reap in one transaction: one commit for a round's deaths. Each entry
        // has its nonce, so a retry after an unknown commit result recognises the
        // reaps that commit applied; a repeat of an entry reads the first's work
        // (read-your-writes) and answers false.
        let nonces: Vec<u64> = expired.iter().map(|_| fastrand::u64(..)).collect();
        let (outcomes, _) = transact!(self.db, |tx, at| async {
            let mut out = Vec::with_capacity(expired.len());
            for ((key, token), nonce) in expired.iter().zip(&nonces) {
                out.push(self.reap_once(tx, at, key, *token, *nonce).await?);
            }
            Ok(out)
        })?;
        if outcomes.len() != expired.len() {
            return Err(corrupt("reap_many answered another number of entries"));
        }
        Ok(expired
            .iter()
            .zip(outcomes)
            .map(|((key, _), outcome)| Ok(self.retired(key, outcome)))
            .collect())
    }

    async fn dead_tokens(&self, limit: usize) -> liveness_core::Result<Vec<DeadToken>> {
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        Ok(transact!(self.db, |tx, _at| self.dead_once(tx, limit))?.0)
    }

    async fn store_time(&self) -> liveness_core::Result<StoreTime> {
        Ok(self.store_now())
    }

    async fn members(
        &self,
        space: &Space,
        page: Page<&Key>,
    ) -> liveness_core::Result<Vec<LeaseInfo>> {
        let Page { after, limit } = page;
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        if after.is_some_and(|k| k.space() != space) {
            return Err(liveness_core::Error::invalid(
                "after",
                liveness_core::InputProblem::OtherSpace,
            ));
        }
        Ok(transact!(self.db, |tx, _at| self
            .members_once(tx, space, after, limit))?
        .0)
    }

    async fn deaths(
        &self,
        before: Option<u64>,
        limit: usize,
    ) -> liveness_core::Result<Vec<DeathRecord>> {
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        Ok(transact!(self.db, |tx, _at| self.deaths_once(tx, before, limit))?.0)
    }

    async fn next_expiry(&self, space: &Space) -> liveness_core::Result<Option<Duration>> {
        Ok(transact!(self.db, |tx, _at| self.next_expiry_once(tx, space))?.0)
    }

    fn wakeups(&self) -> Option<watch::Receiver<u64>> {
        Some(self.wake.subscribe())
    }
}

#[async_trait]
impl ItemStore for FdbStore {
    async fn enqueue(
        &self,
        payload: &[u8],
        options: EnqueueOptions,
    ) -> liveness_core::Result<ItemId> {
        options.validate(payload, self.info.caps.max_payload)?;
        let (max, key) = (options.max_attempts, options.key);
        Ok(ItemId(
            transact!(self.db, |tx, _at| self.enqueue_once(tx, payload, max, key))?.0,
        ))
    }

    async fn claim_request(
        &self,
        lease: &Lease,
        n: usize,
        req: RequestId,
    ) -> liveness_core::Result<Vec<Item>> {
        lease.check_issuer(&self.info.issuer)?;
        let n = self.info.caps.clamp_limit("n", n)?;
        Ok(transact!(self.db, |tx, _at| self.claim_once(tx, lease, n, req))?.0)
    }

    async fn complete(&self, lease: &Lease, id: ItemId) -> liveness_core::Result<()> {
        lease.check_issuer(&self.info.issuer)?;
        transact!(self.db, |tx, at| self.complete_once(tx, at, lease, id))?;
        Ok(())
    }

    async fn fail(
        &self,
        lease: &Lease,
        id: ItemId,
        retry: bool,
    ) -> liveness_core::Result<ItemState> {
        lease.check_issuer(&self.info.issuer)?;
        Ok(transact!(self.db, |tx, at| self.fail_once(tx, at, lease, id, retry))?.0)
    }

    async fn requeue_orphans(&self, token: FencingToken) -> liveness_core::Result<Requeued> {
        let mut total = Requeued::default();
        loop {
            let (batch, _) = transact!(self.db, |tx, _at| self.requeue_once(tx, token))?;
            let Some((moved, done)) = batch else {
                break;
            };
            total.requeued.extend(moved.requeued);
            total.dead_lettered.extend(moved.dead_lettered);
            if done {
                break;
            }
        }
        Ok(total)
    }

    async fn requeue_orphans_many(
        &self,
        tokens: &[FencingToken],
    ) -> liveness_core::Result<Vec<liveness_core::Result<Requeued>>> {
        // As many tokens per transaction as their items fit (`MAX_BATCH` moved, give
        // or take one token's batch): a round's deaths, a few items each, are one
        // commit instead of one per token. A token with more items than fit goes on
        // in the next transaction, exactly as `requeue_orphans` batches them. A
        // repeat of a token reads the first's work (read-your-writes): it moves
        // nothing.
        let mut out: Vec<Requeued> = tokens.iter().map(|_| Requeued::default()).collect();
        let mut next = 0;
        while next < tokens.len() {
            let ((moved, upto), _) = transact!(self.db, |tx, _at| async {
                let mut moved: Vec<(usize, Requeued)> = Vec::new();
                let (mut count, mut i) = (0, next);
                while i < tokens.len() && count < MAX_BATCH {
                    let Some((batch, done)) = self.requeue_once(tx, tokens[i]).await? else {
                        i += 1;
                        continue;
                    };
                    count += batch.requeued.len() + batch.dead_lettered.len();
                    moved.push((i, batch));
                    if !done {
                        break;
                    }
                    i += 1;
                }
                Ok((moved, i))
            })?;
            for (i, batch) in moved {
                out[i].requeued.extend(batch.requeued);
                out[i].dead_lettered.extend(batch.dead_lettered);
            }
            next = upto;
        }
        Ok(out.into_iter().map(Ok).collect())
    }

    async fn item(&self, id: ItemId) -> liveness_core::Result<Option<ItemRecord>> {
        Ok(transact!(self.db, |tx, _at| self.read_record(tx, id.0))?.0)
    }

    async fn item_counts(&self) -> liveness_core::Result<ItemCounts> {
        Ok(transact!(self.db, |tx, _at| self.counts_once(tx))?.0)
    }

    async fn dead_letters(&self, limit: usize) -> liveness_core::Result<Vec<ItemRecord>> {
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        Ok(transact!(self.db, |tx, _at| self.dead_letters_once(tx, limit))?.0)
    }

    async fn items(
        &self,
        state: ItemStateKind,
        page: Page<ItemId>,
    ) -> liveness_core::Result<Vec<ItemRecord>> {
        let Page { after, limit } = page;
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        Ok(transact!(self.db, |tx, _at| self.items_once(tx, state, after, limit))?.0)
    }

    async fn retry_dead_letter(&self, id: ItemId) -> liveness_core::Result<()> {
        transact!(self.db, |tx, at| self.revive_once(tx, at, id))?;
        Ok(())
    }

    async fn retry_dead_letters(&self, limit: usize) -> liveness_core::Result<Vec<ItemId>> {
        let limit = self.info.caps.clamp_limit("limit", limit)?;
        Ok(transact!(self.db, |tx, _at| self.revive_many_once(tx, limit))?.0)
    }
}
