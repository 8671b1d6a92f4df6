//! A store call as data: the [`Op`] it is, the owned [`Request`] with its arguments,
//! the typed [`Reply`], and [`dispatch`], which runs a request on a store. What
//! [`layer`](crate::layer)'s intercepts see, and what a test can record or replay.

use std::time::Duration;

use crate::error::Result;
use crate::item::{
    EnqueueOptions, Item, ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind, RequestId,
    Requeued,
};
use crate::lease::{Acquire, DeadToken, DeathRecord, ExpiredLease, Lease, LeaseInfo};
use crate::store::{Page, Store};
use crate::types::{FencingToken, HolderId, Key, Space, StoreTime, Ttl};
#[cfg(doc)]
use crate::{error::Error, layer::Intercept, store::ItemStore, store::LeaseStore};

/// A store operation: one variant per round-trip method of [`LeaseStore`] and
/// [`ItemStore`] (the provided `claim` is [`Op::Claim`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// [`LeaseStore::acquire`].
    Acquire,
    /// [`LeaseStore::acquire_many`].
    AcquireMany,
    /// [`LeaseStore::join_session`].
    JoinSession,
    /// [`LeaseStore::join_session_many`].
    JoinSessionMany,
    /// [`LeaseStore::renew`].
    Renew,
    /// [`LeaseStore::renew_many`].
    RenewMany,
    /// [`LeaseStore::release`].
    Release,
    /// [`LeaseStore::inspect`].
    Inspect,
    /// [`LeaseStore::expired`].
    Expired,
    /// [`LeaseStore::reap`].
    Reap,
    /// [`LeaseStore::reap_many`].
    ReapMany,
    /// [`LeaseStore::dead_tokens`].
    DeadTokens,
    /// [`LeaseStore::store_time`].
    StoreTime,
    /// [`LeaseStore::next_expiry`].
    NextExpiry,
    /// [`LeaseStore::members`].
    Members,
    /// [`LeaseStore::deaths`].
    Deaths,
    /// [`ItemStore::enqueue`].
    Enqueue,
    /// [`ItemStore::claim_request`].
    Claim,
    /// [`ItemStore::complete`].
    Complete,
    /// [`ItemStore::fail`].
    Fail,
    /// [`ItemStore::requeue_orphans`].
    RequeueOrphans,
    /// [`ItemStore::requeue_orphans_many`].
    RequeueOrphansMany,
    /// [`ItemStore::item`].
    Item,
    /// [`ItemStore::item_counts`].
    ItemCounts,
    /// [`ItemStore::dead_letters`].
    DeadLetters,
    /// [`ItemStore::items`].
    Items,
    /// [`ItemStore::retry_dead_letter`].
    RetryDeadLetter,
    /// [`ItemStore::retry_dead_letters`].
    RetryDeadLetters,
}

impl Op {
    /// The method's name (`"renew_many"`), for spans, logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::AcquireMany => "acquire_many",
            Op::JoinSession => "join_session",
            Op::JoinSessionMany => "join_session_many",
            Op::Renew => "renew",
            Op::RenewMany => "renew_many",
            Op::Release => "release",
            Op::Inspect => "inspect",
            Op::Expired => "expired",
            Op::Reap => "reap",
            Op::ReapMany => "reap_many",
            Op::DeadTokens => "dead_tokens",
            Op::StoreTime => "store_time",
            Op::NextExpiry => "next_expiry",
            Op::Members => "members",
            Op::Deaths => "deaths",
            Op::Enqueue => "enqueue",
            Op::Claim => "claim",
            Op::Complete => "complete",
            Op::Fail => "fail",
            Op::RequeueOrphans => "requeue_orphans",
            Op::RequeueOrphansMany => "requeue_orphans_many",
            Op::Item => "item",
            Op::ItemCounts => "item_counts",
            Op::DeadLetters => "dead_letters",
            Op::Items => "items",
            Op::RetryDeadLetter => "retry_dead_letter",
            Op::RetryDeadLetters => "retry_dead_letters",
        }
    }

    /// True for the calls a [`Checker`](crate::Checker) round makes (finding, reaping
    /// and sweeping the dead, and sleeping until the next expiry).
    pub fn is_checker_call(self) -> bool {
        matches!(
            self,
            Op::Expired
                | Op::Reap
                | Op::ReapMany
                | Op::DeadTokens
                | Op::NextExpiry
                | Op::RequeueOrphans
                | Op::RequeueOrphansMany
        )
    }
}

/// One store call with its arguments, owned: what an [`Intercept`] receives. One
/// variant per [`Op`], named alike, with the method's arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[allow(missing_docs)] // the fields are the trait methods' arguments, documented there
pub enum Request {
    /// [`LeaseStore::acquire`].
    Acquire {
        key: Key,
        holder: HolderId,
        ttl: Ttl,
    },
    /// [`LeaseStore::acquire_many`].
    AcquireMany(Vec<Acquire>),
    /// [`LeaseStore::join_session`].
    JoinSession {
        session: Lease,
        key: Key,
        holder: HolderId,
    },
    /// [`LeaseStore::join_session_many`].
    JoinSessionMany {
        session: Lease,
        asks: Vec<(Key, HolderId)>,
    },
    /// [`LeaseStore::renew`].
    Renew(Lease),
    /// [`LeaseStore::renew_many`].
    RenewMany(Vec<Lease>),
    /// [`LeaseStore::release`].
    Release(Lease),
    /// [`LeaseStore::inspect`].
    Inspect(Key),
    /// [`LeaseStore::expired`].
    Expired { space: Space, limit: usize },
    /// [`LeaseStore::reap`].
    Reap { key: Key, token: FencingToken },
    /// [`LeaseStore::reap_many`].
    ReapMany(Vec<(Key, FencingToken)>),
    /// [`LeaseStore::dead_tokens`].
    DeadTokens { limit: usize },
    /// [`LeaseStore::store_time`].
    StoreTime,
    /// [`LeaseStore::next_expiry`].
    NextExpiry(Space),
    /// [`LeaseStore::members`].
    Members { space: Space, page: Page<Key> },
    /// [`LeaseStore::deaths`].
    Deaths { before: Option<u64>, limit: usize },
    /// [`ItemStore::enqueue`].
    Enqueue {
        payload: Vec<u8>,
        options: EnqueueOptions,
    },
    /// [`ItemStore::claim_request`].
    Claim {
        lease: Lease,
        n: usize,
        req: RequestId,
    },
    /// [`ItemStore::complete`].
    Complete { lease: Lease, id: ItemId },
    /// [`ItemStore::fail`].
    Fail {
        lease: Lease,
        id: ItemId,
        retry: bool,
    },
    /// [`ItemStore::requeue_orphans`].
    RequeueOrphans(FencingToken),
    /// [`ItemStore::requeue_orphans_many`].
    RequeueOrphansMany(Vec<FencingToken>),
    /// [`ItemStore::item`].
    Item(ItemId),
    /// [`ItemStore::item_counts`].
    ItemCounts,
    /// [`ItemStore::dead_letters`].
    DeadLetters { limit: usize },
    /// [`ItemStore::items`].
    Items {
        state: ItemStateKind,
        page: Page<ItemId>,
    },
    /// [`ItemStore::retry_dead_letter`].
    RetryDeadLetter(ItemId),
    /// [`ItemStore::retry_dead_letters`].
    RetryDeadLetters { limit: usize },
}

impl Request {
    /// Which operation this is.
    pub fn op(&self) -> Op {
        match self {
            Request::Acquire { .. } => Op::Acquire,
            Request::AcquireMany(_) => Op::AcquireMany,
            Request::JoinSession { .. } => Op::JoinSession,
            Request::JoinSessionMany { .. } => Op::JoinSessionMany,
            Request::Renew(_) => Op::Renew,
            Request::RenewMany(_) => Op::RenewMany,
            Request::Release(_) => Op::Release,
            Request::Inspect(_) => Op::Inspect,
            Request::Expired { .. } => Op::Expired,
            Request::Reap { .. } => Op::Reap,
            Request::ReapMany(_) => Op::ReapMany,
            Request::DeadTokens { .. } => Op::DeadTokens,
            Request::StoreTime => Op::StoreTime,
            Request::NextExpiry(_) => Op::NextExpiry,
            Request::Members { .. } => Op::Members,
            Request::Deaths { .. } => Op::Deaths,
            Request::Enqueue { .. } => Op::Enqueue,
            Request::Claim { .. } => Op::Claim,
            Request::Complete { .. } => Op::Complete,
            Request::Fail { .. } => Op::Fail,
            Request::RequeueOrphans(_) => Op::RequeueOrphans,
            Request::RequeueOrphansMany(_) => Op::RequeueOrphansMany,
            Request::Item(_) => Op::Item,
            Request::ItemCounts => Op::ItemCounts,
            Request::DeadLetters { .. } => Op::DeadLetters,
            Request::Items { .. } => Op::Items,
            Request::RetryDeadLetter(_) => Op::RetryDeadLetter,
            Request::RetryDeadLetters { .. } => Op::RetryDeadLetters,
        }
    }

    /// The lease the call acts under (renew, release, claim, complete, fail; the
    /// session of a join).
    pub fn lease(&self) -> Option<&Lease> {
        match self {
            Request::JoinSession { session: lease, .. }
            | Request::JoinSessionMany { session: lease, .. }
            | Request::Renew(lease)
            | Request::Release(lease)
            | Request::Claim { lease, .. }
            | Request::Complete { lease, .. }
            | Request::Fail { lease, .. } => Some(lease),
            _ => None,
        }
    }

    /// The key it acts on (acquire, inspect, reap; the lease's key for calls made
    /// under a lease; the page's `after` of `members`).
    pub fn key(&self) -> Option<&Key> {
        match self {
            Request::Acquire { key, .. }
            | Request::JoinSession { key, .. }
            | Request::Inspect(key)
            | Request::Reap { key, .. } => Some(key),
            Request::Members { page, .. } => page.after.as_ref(),
            _ => self.lease().map(|l| &l.key),
        }
    }

    /// The space it scans (expired, next_expiry, members).
    pub fn space(&self) -> Option<&Space> {
        match self {
            Request::Expired { space, .. }
            | Request::NextExpiry(space)
            | Request::Members { space, .. } => Some(space),
            _ => None,
        }
    }

    /// The token it acts on (a lease's token, a reaped or swept token).
    pub fn token(&self) -> Option<FencingToken> {
        match self {
            Request::Reap { token, .. } | Request::RequeueOrphans(token) => Some(*token),
            _ => self.lease().map(|l| l.token),
        }
    }

    /// The item it acts on (complete, fail, item, retry_dead_letter; the page's
    /// `after` of `items`).
    pub fn item(&self) -> Option<ItemId> {
        match self {
            Request::Complete { id, .. }
            | Request::Fail { id, .. }
            | Request::Item(id)
            | Request::RetryDeadLetter(id) => Some(*id),
            Request::Items { page, .. } => page.after,
            _ => None,
        }
    }

    /// How many entries a batch carries, or the `n` / `limit` asked for; 1 otherwise.
    pub fn n(&self) -> usize {
        match self {
            Request::AcquireMany(v) => v.len(),
            Request::JoinSessionMany { asks, .. } => asks.len(),
            Request::RenewMany(v) => v.len(),
            Request::ReapMany(v) => v.len(),
            Request::RequeueOrphansMany(v) => v.len(),
            Request::Expired { limit, .. }
            | Request::DeadTokens { limit }
            | Request::Deaths { limit, .. }
            | Request::DeadLetters { limit }
            | Request::RetryDeadLetters { limit } => *limit,
            Request::Members { page, .. } => page.limit,
            Request::Items { page, .. } => page.limit,
            Request::Claim { n, .. } => *n,
            _ => 1,
        }
    }

    /// A `*_many` request as one single-entry request per entry, in order (what the
    /// trait's default `*_many` methods send); `Err(self)` for any other request.
    pub fn split(self) -> std::result::Result<Vec<Request>, Box<Request>> {
        Ok(match self {
            Request::AcquireMany(asks) => asks
                .into_iter()
                .map(|a| Request::Acquire {
                    key: a.key,
                    holder: a.holder,
                    ttl: a.ttl,
                })
                .collect(),
            Request::JoinSessionMany { session, asks } => asks
                .into_iter()
                .map(|(key, holder)| Request::JoinSession {
                    session: session.clone(),
                    key,
                    holder,
                })
                .collect(),
            Request::RenewMany(leases) => leases.into_iter().map(Request::Renew).collect(),
            Request::ReapMany(pairs) => pairs
                .into_iter()
                .map(|(key, token)| Request::Reap { key, token })
                .collect(),
            Request::RequeueOrphansMany(tokens) => {
                tokens.into_iter().map(Request::RequeueOrphans).collect()
            }
            other => return Err(Box::new(other)),
        })
    }
}

/// A store's answer to one [`Request`]: the variant of the same name, holding what the
/// method returns.
#[derive(Debug)]
#[non_exhaustive]
#[allow(missing_docs)] // each holds the return value of the method of its name
pub enum Reply {
    Acquire(Lease),
    AcquireMany(Vec<Result<Lease>>),
    JoinSession(Lease),
    JoinSessionMany(Vec<Result<Lease>>),
    Renew(Lease),
    RenewMany(Vec<Result<Lease>>),
    Release(bool),
    Inspect(Option<LeaseInfo>),
    Expired(Vec<ExpiredLease>),
    Reap(bool),
    ReapMany(Vec<Result<bool>>),
    DeadTokens(Vec<DeadToken>),
    StoreTime(StoreTime),
    NextExpiry(Option<Duration>),
    Members(Vec<LeaseInfo>),
    Deaths(Vec<DeathRecord>),
    Enqueue(ItemId),
    Claim(Vec<Item>),
    Complete(()),
    Fail(ItemState),
    RequeueOrphans(Requeued),
    RequeueOrphansMany(Vec<Result<Requeued>>),
    Item(Option<ItemRecord>),
    ItemCounts(ItemCounts),
    DeadLetters(Vec<ItemRecord>),
    Items(Vec<ItemRecord>),
    RetryDeadLetter(()),
    RetryDeadLetters(Vec<ItemId>),
}

impl Reply {
    /// Which operation this answers.
    pub fn op(&self) -> Op {
        match self {
            Reply::Acquire(_) => Op::Acquire,
            Reply::AcquireMany(_) => Op::AcquireMany,
            Reply::JoinSession(_) => Op::JoinSession,
            Reply::JoinSessionMany(_) => Op::JoinSessionMany,
            Reply::Renew(_) => Op::Renew,
            Reply::RenewMany(_) => Op::RenewMany,
            Reply::Release(_) => Op::Release,
            Reply::Inspect(_) => Op::Inspect,
            Reply::Expired(_) => Op::Expired,
            Reply::Reap(_) => Op::Reap,
            Reply::ReapMany(_) => Op::ReapMany,
            Reply::DeadTokens(_) => Op::DeadTokens,
            Reply::StoreTime(_) => Op::StoreTime,
            Reply::NextExpiry(_) => Op::NextExpiry,
            Reply::Members(_) => Op::Members,
            Reply::Deaths(_) => Op::Deaths,
            Reply::Enqueue(_) => Op::Enqueue,
            Reply::Claim(_) => Op::Claim,
            Reply::Complete(_) => Op::Complete,
            Reply::Fail(_) => Op::Fail,
            Reply::RequeueOrphans(_) => Op::RequeueOrphans,
            Reply::RequeueOrphansMany(_) => Op::RequeueOrphansMany,
            Reply::Item(_) => Op::Item,
            Reply::ItemCounts(_) => Op::ItemCounts,
            Reply::DeadLetters(_) => Op::DeadLetters,
            Reply::Items(_) => Op::Items,
            Reply::RetryDeadLetter(_) => Op::RetryDeadLetter,
            Reply::RetryDeadLetters(_) => Op::RetryDeadLetters,
        }
    }
}

/// A layer answered a request with the reply of another operation: a bug in that
/// layer, reported as the source of an [`Error::Backend`] (never a panic).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a store layer answered {asked} with a reply to {got}")]
pub struct WrongReply {
    /// The operation asked.
    pub asked: &'static str,
    /// The operation the reply belongs to.
    pub got: &'static str,
}

/// Runs `req` on `store`: calls the method of the request's name with its arguments.
pub async fn dispatch(store: &dyn Store, req: Request) -> Result<Reply> {
    Ok(match req {
        Request::Acquire { key, holder, ttl } => {
            Reply::Acquire(store.acquire(&key, &holder, ttl).await?)
        }
        Request::AcquireMany(asks) => Reply::AcquireMany(store.acquire_many(&asks).await?),
        Request::JoinSession {
            session,
            key,
            holder,
        } => Reply::JoinSession(store.join_session(&session, &key, &holder).await?),
        Request::JoinSessionMany { session, asks } => {
            Reply::JoinSessionMany(store.join_session_many(&session, &asks).await?)
        }
        Request::Renew(lease) => Reply::Renew(store.renew(&lease).await?),
        Request::RenewMany(leases) => Reply::RenewMany(store.renew_many(&leases).await?),
        Request::Release(lease) => Reply::Release(store.release(&lease).await?),
        Request::Inspect(key) => Reply::Inspect(store.inspect(&key).await?),
        Request::Expired { space, limit } => Reply::Expired(store.expired(&space, limit).await?),
        Request::Reap { key, token } => Reply::Reap(store.reap(&key, token).await?),
        Request::ReapMany(pairs) => Reply::ReapMany(store.reap_many(&pairs).await?),
        Request::DeadTokens { limit } => Reply::DeadTokens(store.dead_tokens(limit).await?),
        Request::StoreTime => Reply::StoreTime(store.store_time().await?),
        Request::NextExpiry(space) => Reply::NextExpiry(store.next_expiry(&space).await?),
        Request::Members { space, page } => {
            let page = Page {
                after: page.after.as_ref(),
                limit: page.limit,
            };
            Reply::Members(store.members(&space, page).await?)
        }
        Request::Deaths { before, limit } => Reply::Deaths(store.deaths(before, limit).await?),
        Request::Enqueue { payload, options } => {
            Reply::Enqueue(store.enqueue(&payload, options).await?)
        }
        Request::Claim { lease, n, req } => {
            Reply::Claim(store.claim_request(&lease, n, req).await?)
        }
        Request::Complete { lease, id } => Reply::Complete(store.complete(&lease, id).await?),
        Request::Fail { lease, id, retry } => Reply::Fail(store.fail(&lease, id, retry).await?),
        Request::RequeueOrphans(token) => {
            Reply::RequeueOrphans(store.requeue_orphans(token).await?)
        }
        Request::RequeueOrphansMany(tokens) => {
            Reply::RequeueOrphansMany(store.requeue_orphans_many(&tokens).await?)
        }
        Request::Item(id) => Reply::Item(store.item(id).await?),
        Request::ItemCounts => Reply::ItemCounts(store.item_counts().await?),
        Request::DeadLetters { limit } => Reply::DeadLetters(store.dead_letters(limit).await?),
        Request::Items { state, page } => Reply::Items(store.items(state, page).await?),
        Request::RetryDeadLetter(id) => Reply::RetryDeadLetter(store.retry_dead_letter(id).await?),
        Request::RetryDeadLetters { limit } => {
            Reply::RetryDeadLetters(store.retry_dead_letters(limit).await?)
        }
    })
}
