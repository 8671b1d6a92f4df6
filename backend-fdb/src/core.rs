//! [`FdbStore`]: the store handle, its set-up (on the real client or on the test
//! double), and the steps every transaction body shares: reading the read version
//! into this handle's observations, reading and decoding lease and item records,
//! writing a lease and declaring one dead, moving an item between states. The bodies
//! themselves are in the files of the operations that run them (`lease.rs`,
//! `batch.rs`, `session.rs`, `deaths.rs`, `items.rs`, `operator.rs`), each one attempt
//! run by [`transact!`] inside FoundationDB's retry loop.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use liveness_core::sync::lock;
use liveness_core::wake::tick;
use liveness_core::{
    Acquire, BatchResult, Capabilities, FencingToken, HolderId, Issuer, Item, ItemId, ItemRecord,
    ItemState, Key, Lease, LostCause, Namespace, QueueName, StoreInfo, StoreTime, Ttl,
};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::{FdbConfig, Options};
use crate::error::corrupt;
use crate::keys::{
    decode_dead, decode_u64, encode_dead, encode_index_value, Count, ItemMeta, Layout, LeaseRec,
};
use crate::kv::{Attempt, Database, Fail, Stamp, Transaction};
use crate::observe::Observer;
use crate::BACKEND;

/// Runs a transaction body (an `async fn(&mut dyn Transaction, &Attempt, ..) ->
/// Result<T, Fail>` call) in FoundationDB's retry loop: commit, and on a retryable
/// failure `on_error` and run the body again. Evaluates to
/// `liveness_core::Result<(T, Option<Stamp>)>`.
macro_rules! transact {
    ($db:expr, |$tx:ident, $at:ident| $body:expr) => {{
        async {
            let mut txn = match $db.begin().await {
                Ok(txn) => txn,
                Err(e) => return Err($crate::error::map(e)),
            };
            let mut attempt = $crate::kv::Attempt::default();
            loop {
                let outcome = {
                    let $tx: &mut dyn $crate::kv::Transaction = &mut *txn;
                    let $at = &attempt;
                    $body.await
                };
                let err = match outcome {
                    Ok(value) => match txn.commit().await {
                        Ok(stamp) => break Ok((value, stamp)),
                        Err(e) => e,
                    },
                    Err($crate::kv::Fail::Stop(e)) => break Err(e),
                    Err($crate::kv::Fail::Db(e)) => e,
                };
                attempt.maybe_committed |= err.maybe_committed();
                if let Err(e) = txn.on_error(err).await {
                    break Err($crate::error::map(e));
                }
            }
        }
        .await
    }};
}

pub(crate) use transact;

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
    pub(crate) db: Arc<dyn Database>,
    pub(crate) layout: Layout,
    namespace: Namespace,
    /// What this handle observed: its judge of expiry.
    pub(crate) obs: Arc<Mutex<Observer>>,
    /// Ticks on this handle's own releases and reaps (`wakeups`).
    pub(crate) wake: Arc<watch::Sender<u64>>,
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
            let cluster = match config.cluster_file() {
                Some(path) => std::fs::canonicalize(path)
                    .unwrap_or_else(|_| path.to_path_buf())
                    .display()
                    .to_string(),
                None => "default cluster file".to_owned(),
            };
            Ok(FdbStore::over(
                Arc::new(db),
                &cluster,
                config.namespace(),
                config.options().clone(),
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
        let caps = Capabilities::default()
            .min_ttl(MIN_TTL)
            .max_ttl(Ttl::MAX)
            .pushes_expiry_events(false)
            .observer_local_expiry(true)
            .max_batch(MAX_BATCH)
            .max_payload(MAX_PAYLOAD)
            .death_retention(options.death_retention.max(1))
            .sessions(true)
            .items(true)
            .operator_views(true)
            .error_text(true)
            .queues(true)
            // No store clock to count a retention by: idempotency keys are kept for
            // good (README, "Idempotency keys").
            .key_retention(None);
        FdbStore {
            info: StoreInfo::new(
                BACKEND,
                caps,
                Issuer::located(BACKEND, &location, namespace.clone()),
            ),
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

    /// The handle's store time: its own monotonic clock, anchored at the Unix epoch
    /// by the host clock read once when the handle was made (for diagnostics and
    /// death records; expiry never uses it).
    pub(crate) fn store_now(&self) -> StoreTime {
        StoreTime::from_epoch(self.wall_at_start + lock(&self.obs).since_epoch(Instant::now()))
    }
}

/// A ttl as stored (milliseconds) as a duration.
pub(crate) fn ttl_of(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// Stops the attempt: `lease` is lost for `reason`.
pub(crate) fn lost(lease: &Lease, reason: LostCause) -> Fail {
    Fail::Stop(lease.lost(reason))
}

/// What one release or reap attempt did.
pub(crate) enum Declared {
    /// It removed the lease and declared its token dead (`None`: an earlier attempt
    /// of this call did, unknown result).
    Done(Option<LeaseRec>),
    /// The lease was not there as required: nothing changed.
    No,
}

/// What one attempt did with an entry of an acquire or join batch.
pub(crate) enum Acquired {
    /// It wrote a new lease with `token`, first declaring dead the expired lease
    /// `superseded` held (if any).
    New {
        token: FencingToken,
        superseded: Option<LeaseRec>,
    },
    /// An earlier attempt of this call committed (unknown result); this is its record.
    Already(LeaseRec),
}

// After the commit: what a call's outcome means for this handle's observations and
// wake-ups.
impl FdbStore {
    /// The leases a batch of acquires or joins took, committed with `stamp` (the
    /// commit's, `None` when nothing was written) from a call sent at `sent`: each
    /// entry forgets the lease it declared dead; a lease of its own (`riding: None`) is
    /// recorded as this handle's write, while a riding member (`riding`: its
    /// session's deadline) has no expiry of its own to observe and stands as its
    /// session does.
    pub(crate) fn granted(
        &self,
        asks: &[Acquire],
        outcomes: Vec<liveness_core::Result<Acquired>>,
        stamp: Option<Stamp>,
        sent: Instant,
        riding: Option<Instant>,
    ) -> BatchResult<Lease> {
        if outcomes.len() != asks.len() {
            return Err(corrupt("a batch answered another number of entries"));
        }
        let grant = |ask: &Acquire, outcome: Acquired| {
            let (token, stamp) = match outcome {
                Acquired::New { token, superseded } => {
                    if let Some(old) = superseded {
                        lock(&self.obs).forget_stamp(&ask.key, &old.stamp);
                        tick(&self.wake);
                    }
                    (token, stamp)
                }
                Acquired::Already(rec) => (rec.token, Some(rec.stamp)),
            };
            let until = match riding {
                Some(until) => until,
                None => {
                    let stamp = stamp.ok_or_else(|| {
                        corrupt("a versionstamped commit returned no versionstamp")
                    })?;
                    let ttl = ask.ttl.duration();
                    lock(&self.obs).wrote(&ask.key, stamp, sent, ttl);
                    sent + ttl
                }
            };
            let (key, holder) = (ask.key.clone(), ask.holder.clone());
            Ok(
                Lease::granted(&self.info.issuer, key, holder, token, ask.ttl)
                    .with_expires_in(until.saturating_duration_since(Instant::now())),
            )
        };
        Ok(asks
            .iter()
            .zip(outcomes)
            .map(|(ask, outcome)| grant(ask, outcome?))
            .collect())
    }

    /// After a release or reap: forgets our write, wakes checkers, answers.
    pub(crate) fn declared_dead(&self, key: &Key, outcome: Declared) -> bool {
        match outcome {
            Declared::Done(rec) => {
                if let Some(rec) = rec {
                    lock(&self.obs).forget_stamp(key, &rec.stamp);
                }
                tick(&self.wake);
                true
            }
            Declared::No => false,
        }
    }
}

// The steps the transaction bodies share: each runs inside one attempt.
impl FdbStore {
    /// Reads the read version and checkpoints it: returns this handle's "now" for
    /// every expiry decision of the attempt.
    pub(crate) async fn observe(&self, tx: &mut dyn Transaction) -> Result<Instant, Fail> {
        let rv = tx.read_version().await?;
        let now = Instant::now();
        lock(&self.obs).checkpoint(now, rv);
        Ok(now)
    }

    /// True when `rec` on `key` has stood a whole ttl as this handle saw it by `now`.
    pub(crate) fn is_expired(&self, key: &Key, rec: &LeaseRec, now: Instant) -> bool {
        lock(&self.obs).is_expired(key, &rec.stamp, ttl_of(rec.ttl_ms), now)
    }

    /// Reads and decodes the lease record of `key` (a `snapshot` read adds no read
    /// conflict).
    pub(crate) async fn read_lease(
        &self,
        tx: &mut dyn Transaction,
        key: &Key,
        snapshot: bool,
    ) -> Result<Option<LeaseRec>, Fail> {
        match tx.get(&self.layout.lease(key), snapshot).await? {
            Some(raw) => {
                let rec = LeaseRec::decode(&raw)?;
                // Sizes how much observation history this handle keeps.
                lock(&self.obs).note_ttl(ttl_of(rec.ttl_ms));
                Ok(Some(rec))
            }
            None => Ok(None),
        }
    }

    /// Removes the lease record and its index entry (a riding member's: its entry
    /// among its session's riders) and puts the token in the dead set: declares it
    /// dead (the caller records the death, or links it to its session's record).
    pub(crate) fn declare_dead(
        &self,
        tx: &mut dyn Transaction,
        key: &Key,
        rec: &LeaseRec,
        nonce: u64,
    ) {
        tx.clear(&self.layout.lease(key));
        match &rec.session {
            None => tx.clear(&self.layout.index(key, rec.ttl_ms, &rec.stamp)),
            Some((_, session)) => tx.clear(&self.layout.rider(*session, key)),
        }
        tx.set(&self.layout.dead(rec.token), &encode_dead(nonce, key));
    }

    /// Writes the lease record under the commit's stamp, and its index entry; or,
    /// with `ride`, a riding member's record (stamped, but with no index entry: it
    /// has no expiry of its own) and its entry among the session's riders. Nothing of
    /// the session is written: a join never conflicts with the session's renewal.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_lease(
        &self,
        tx: &mut dyn Transaction,
        key: &Key,
        token: FencingToken,
        ttl_ms: u64,
        nonce: u64,
        holder: &HolderId,
        ride: Option<&Lease>,
    ) {
        let session = ride.map(|session| (&session.key, session.token));
        tx.set_versionstamped_value(
            &self.layout.lease(key),
            &LeaseRec::encode_stamped(token, ttl_ms, nonce, holder, session),
        );
        match ride {
            None => tx.set_versionstamped_key(
                &self.layout.index_stamped(key, ttl_ms),
                &encode_index_value(token, holder),
            ),
            Some(session) => tx.set(&self.layout.rider(session.token, key), b""),
        }
    }

    /// True when an earlier attempt of this call (same nonce) declared `token` dead.
    pub(crate) async fn we_declared_dead(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        token: FencingToken,
        nonce: u64,
    ) -> Result<bool, Fail> {
        if !at.maybe_committed {
            return Ok(false);
        }
        match tx.get(&self.layout.dead(token), false).await? {
            Some(raw) => Ok(decode_dead(&raw)?.0 == nonce),
            None => Ok(false),
        }
    }

    /// Reads and raises the namespace's `which` counter (a read-write: concurrent
    /// users conflict and retry), returning the new value.
    pub(crate) async fn next_counter(
        &self,
        tx: &mut dyn Transaction,
        which: &str,
    ) -> Result<u64, Fail> {
        let key = self.layout.counter(which);
        let n = match tx.get(&key, false).await? {
            Some(raw) => decode_u64(&raw)?,
            None => 0,
        };
        let next = n + 1;
        tx.set(&key, &next.to_be_bytes());
        Ok(next)
    }

    /// Checks that `lease` is current and live for this handle: the record and, for
    /// a riding member, its session's deadline (a snapshot read guarded by the
    /// session's dead-set entry: see `session_deadline`), which it returns.
    pub(crate) async fn check_current(
        &self,
        tx: &mut dyn Transaction,
        lease: &Lease,
    ) -> Result<(LeaseRec, Option<Instant>), Fail> {
        let now = self.observe(tx).await?;
        let Some(rec) = self.read_lease(tx, &lease.key, false).await? else {
            return Err(lost(lease, LostCause::Released));
        };
        if rec.token != lease.token {
            return Err(lost(lease, LostCause::Superseded));
        }
        let session = match &rec.session {
            None if self.is_expired(&lease.key, &rec, now) => {
                return Err(lost(lease, LostCause::Expired))
            }
            None => None,
            Some((skey, stoken)) => {
                match self.session_deadline(tx, skey, *stoken, now, true).await? {
                    Some(deadline) => Some(deadline),
                    None => return Err(lost(lease, LostCause::Expired)),
                }
            }
        };
        Ok((rec, session))
    }

    /// Reads and decodes the metadata of item `id`.
    pub(crate) async fn read_meta(
        &self,
        tx: &mut dyn Transaction,
        id: u64,
        snapshot: bool,
    ) -> Result<Option<ItemMeta>, Fail> {
        match tx.get(&self.layout.item(id), snapshot).await? {
            Some(raw) => Ok(Some(ItemMeta::decode(&raw)?)),
            None => Ok(None),
        }
    }

    /// Reads item `id` as the operator sees it: metadata, payload and the error text
    /// of its latest failure that gave one, by snapshot.
    pub(crate) async fn read_record(
        &self,
        tx: &mut dyn Transaction,
        id: u64,
    ) -> Result<Option<ItemRecord>, Fail> {
        let Some(meta) = self.read_meta(tx, id, true).await? else {
            return Ok(None);
        };
        let payload = tx
            .get(&self.layout.payload(id), true)
            .await?
            .unwrap_or_default();
        let last_error = match tx.get(&self.layout.error(id), true).await? {
            Some(raw) => Some(String::from_utf8(raw).map_err(|_| corrupt("an item's error text"))?),
            None => None,
        };
        let item =
            Item::new(ItemId(id), payload, meta.attempts, meta.max_attempts).with_queue(meta.queue);
        Ok(Some(
            ItemRecord::new(item, meta.state).with_last_error(last_error),
        ))
    }

    /// Adds `delta` to the `which` count of every queue and, for a queue other than
    /// the default, to that queue's (atomic adds: no read conflict).
    pub(crate) fn count_add(
        &self,
        tx: &mut dyn Transaction,
        queue: QueueName,
        which: Count,
        delta: i64,
    ) {
        tx.add(&self.layout.count(which), delta);
        if !queue.is_default() {
            tx.add(&self.layout.queue_count(queue, which), delta);
        }
    }

    /// Moves an item between states, keeping the indexes and counters in step (a
    /// pending item in its own queue's index).
    pub(crate) fn move_item(
        &self,
        tx: &mut dyn Transaction,
        id: u64,
        meta: &mut ItemMeta,
        to: ItemState,
        request: &[u8],
    ) {
        match meta.state {
            ItemState::Pending => tx.clear(&self.layout.pending(meta.queue, id)),
            ItemState::Owned(t) => tx.clear(&self.layout.owned(t, id)),
            ItemState::DeadLettered => tx.clear(&self.layout.dead_letter(id)),
        }
        match to {
            ItemState::Pending => tx.set(&self.layout.pending(meta.queue, id), b""),
            ItemState::Owned(t) => tx.set(&self.layout.owned(t, id), request),
            ItemState::DeadLettered => tx.set(&self.layout.dead_letter(id), b""),
        }
        self.count_add(tx, meta.queue, Count::of(meta.state), -1);
        self.count_add(tx, meta.queue, Count::of(to), 1);
        meta.state = to;
        tx.set(&self.layout.item(id), &meta.encode());
    }

    /// Gives an owned item back: pending, or dead-lettered when out of attempts or
    /// `retry` is false.
    pub(crate) fn hand_back(
        &self,
        tx: &mut dyn Transaction,
        id: u64,
        meta: &mut ItemMeta,
        retry: bool,
    ) -> ItemState {
        let to = if retry && meta.attempts < meta.max_attempts {
            ItemState::Pending
        } else {
            ItemState::DeadLettered
        };
        self.move_item(tx, id, meta, to, &[]);
        to
    }
}
