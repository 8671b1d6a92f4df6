//! Code written once against the public API of `liveness`, as a user and a store
//! author write it: it must keep compiling. A change to the library that breaks this
//! crate breaks its users too, and is a breaking change for the changelog, not an
//! edit to make here.
//!
//! - [`Rebuilt`] is a custom store: it implements the three store traits by passing
//!   each call to a memory store and building every answer again from its parts with
//!   the public constructors, the way a store that reads rows builds them. The
//!   conformance suite runs on it (`tests/suite.rs`), so a constructor that drops a
//!   part fails a scenario.
//! - [`program`] uses members, sessions, the checker and an election as the README
//!   shows them, with configs set through their builder methods.
//!
//! What it may use: constructors, builder methods, public fields read or assigned on
//! an existing value, and matches with a wildcard arm on `#[non_exhaustive]` enums.
//! Never a struct literal of a library type.

use std::sync::Arc;
use std::time::Duration;

use liveness::store::{
    async_trait, Acquire, BatchResult, Capabilities, DeadToken, DeathRecord, EnqueueOptions,
    ExpiredLease, FencingToken, Item, ItemCounts, ItemId, ItemRecord, ItemStateKind, ItemStore,
    JoinAsk, Key, Lease, LeaseInfo, LeaseStatus, LeaseStore, OperatorStore, Outcome, Page,
    RequestId, Result, Space, StoreInfo, StoreTime, Sweep, Swept,
};
use liveness::{
    Checker, CheckerConfig, Election, ElectionConfig, Event, MemberConfig, MemoryStore, Session,
    SessionConfig, Store, Ttl,
};

/// A store that hands every call to a memory store and builds each answer again from
/// its parts.
#[derive(Debug)]
pub struct Rebuilt {
    inner: MemoryStore,
    info: StoreInfo,
}

impl Rebuilt {
    /// A store over `inner`, declaring what it declares.
    pub fn new(inner: MemoryStore) -> Rebuilt {
        let theirs = inner.info();
        let mut caps = Capabilities::default();
        caps.min_ttl = theirs.caps.min_ttl;
        caps.max_ttl = theirs.caps.max_ttl;
        caps.max_batch = theirs.caps.max_batch;
        caps.max_payload = theirs.caps.max_payload;
        caps.death_retention = theirs.caps.death_retention;
        caps.sessions = theirs.caps.sessions;
        caps.pushes_expiry_events = theirs.caps.pushes_expiry_events;
        caps.observer_local_expiry = theirs.caps.observer_local_expiry;
        caps.items = theirs.caps.items;
        caps.operator_views = theirs.caps.operator_views;
        let info = StoreInfo::new("rebuilt", caps, theirs.issuer.clone());
        Rebuilt { inner, info }
    }

    fn lease(&self, l: Lease) -> Lease {
        Lease::granted(&self.info.issuer, l.key, l.holder, l.token, l.ttl)
            .with_expires_in(l.expires_in)
    }

    fn rebuilt(&self, answers: BatchResult<Lease>) -> BatchResult<Lease> {
        Ok(answers?
            .into_iter()
            .map(|a| a.map(|l| self.lease(l)))
            .collect())
    }
}

fn status(s: LeaseStatus) -> LeaseStatus {
    match s {
        LeaseStatus::Live { remaining } => LeaseStatus::with_remaining(remaining),
        LeaseStatus::Expired => LeaseStatus::Expired,
        other => other,
    }
}

fn info(i: LeaseInfo) -> LeaseInfo {
    LeaseInfo::of(i.key, i.holder, i.token, i.ttl, status(i.status)).with_session(i.session)
}

fn item(i: Item) -> Item {
    Item::new(i.id, i.payload, i.attempts, i.max_attempts)
}

fn record(r: ItemRecord) -> ItemRecord {
    ItemRecord::new(item(r.item), r.state)
}

fn expired(e: ExpiredLease) -> ExpiredLease {
    ExpiredLease::new(e.key, e.holder, e.token)
}

fn death(d: DeathRecord) -> DeathRecord {
    let swept = d
        .swept
        .map(|s| Swept::new(s.members, s.requeued, s.dead_lettered));
    DeathRecord::new(d.seq, d.key, d.holder, d.token, d.at, d.cause, swept)
}

#[async_trait]
impl LeaseStore for Rebuilt {
    fn info(&self) -> &StoreInfo {
        &self.info
    }

    async fn acquire_many(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        let asks: Vec<Acquire> = asks
            .iter()
            .map(|a| Acquire::new(a.key.clone(), a.holder.clone(), a.ttl))
            .collect();
        self.rebuilt(self.inner.acquire_many(&asks).await)
    }

    async fn join_session_many(&self, session: &Lease, asks: &[JoinAsk]) -> BatchResult<Lease> {
        self.rebuilt(self.inner.join_session_many(session, asks).await)
    }

    async fn renew_many(&self, leases: &[Lease]) -> BatchResult<Lease> {
        self.rebuilt(self.inner.renew_many(leases).await)
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease).await
    }

    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        Ok(self.inner.inspect(key).await?.map(info))
    }

    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        Ok(self
            .inner
            .expired(space, limit)
            .await?
            .into_iter()
            .map(expired)
            .collect())
    }

    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
        self.inner.reap_many(expired).await
    }

    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        self.inner.next_expiry(space).await
    }
}

#[async_trait]
impl ItemStore for Rebuilt {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        let mut again = EnqueueOptions::default().max_attempts(options.max_attempts);
        if let Some(key) = options.key {
            again = again.key(key);
        }
        self.inner.enqueue(payload, again).await
    }

    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        let items = self.inner.claim_request(lease, n, req).await?;
        Ok(items.into_iter().map(item).collect())
    }

    async fn finish(
        &self,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
    ) -> Result<Option<liveness::ItemState>> {
        let outcome = match outcome {
            Outcome::Completed => Outcome::Completed,
            Outcome::Retry { after } => Outcome::Retry { after },
            Outcome::DeadLetter => Outcome::failed(false),
        };
        self.inner.finish(lease, id, outcome).await
    }

    async fn sweep_many(&self, tokens: &[FencingToken]) -> BatchResult<Sweep> {
        let answers = self.inner.sweep_many(tokens).await?;
        Ok(answers
            .into_iter()
            .map(|a| {
                a.map(|r| {
                    Sweep::new(r.requeued, r.dead_lettered)
                        .with_members(r.members.into_iter().map(expired).collect())
                })
            })
            .collect())
    }

    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        let dead = self.inner.dead_tokens(limit).await?;
        Ok(dead
            .into_iter()
            .map(|d| DeadToken::new(d.key, d.token))
            .collect())
    }

    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        Ok(self.inner.item(id).await?.map(record))
    }
}

#[async_trait]
impl OperatorStore for Rebuilt {
    async fn store_time(&self) -> Result<StoreTime> {
        self.inner.store_time().await
    }

    async fn leases(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let page = match page.after {
            Some(after) => Page::first(page.limit).next(after),
            None => Page::first(page.limit),
        };
        let leases = self.inner.leases(space, page).await?;
        Ok(leases.into_iter().map(info).collect())
    }

    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        let deaths = self.inner.deaths(before, limit).await?;
        Ok(deaths.into_iter().map(death).collect())
    }

    async fn item_counts(&self) -> Result<ItemCounts> {
        let c = self.inner.item_counts().await?;
        Ok(ItemCounts::new(c.pending, c.owned, c.dead_lettered))
    }

    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        let items = self.inner.items(state, page).await?;
        Ok(items.into_iter().map(record).collect())
    }

    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        self.inner.retry_dead_letter(id).await
    }
}

/// A worker, its session's riders, a checker and an election on `store`, as the
/// README shows them: one item enqueued, claimed and completed; then everything
/// leaves. Answers how many items it completed.
pub async fn program(store: Arc<dyn Store>) -> Result<usize> {
    let ttl = Ttl::from_secs(3)?;
    let checker = Checker::new(
        store.clone(),
        CheckerConfig::default()
            .check_every(Duration::from_millis(200))
            .sessions(true),
    )
    .spawn();

    let config = MemberConfig::new("worker-1", ttl)?
        .rejoin(true)
        .progress_timeout(Duration::from_secs(60));
    let member = liveness::Member::join(store.clone(), config).await?;
    let mut events = member.events().subscribe();

    store
        .enqueue(b"job", EnqueueOptions::default().max_attempts(2))
        .await?;
    let mut done = 0;
    for claimed in member.claim(1).await? {
        claimed.check()?;
        member.complete(&claimed).await?;
        done += 1;
    }

    let session = Session::open(store.clone(), SessionConfig::new("process-1", ttl)?).await?;
    let rider = session.join("rider-1").await?;
    rider.check()?;
    session.close(Duration::from_millis(100)).await?;

    let election = Election::new(
        store.clone(),
        ElectionConfig::new("scheduler", "node-1", ttl)?,
    );
    let leadership = election.campaign().await?;
    leadership.check()?;
    leadership.resign().await?;

    member.leave(Duration::from_millis(100)).await?;
    while let Ok(event) = events.try_recv() {
        match event {
            Event::Joined { .. } | Event::Left { .. } => {}
            _ => {}
        }
    }
    checker.stop().await;
    Ok(done)
}
