//! A store call as data: the [`Op`] it is, the owned [`Request`] with its arguments,
//! the typed [`Reply`], and [`dispatch`], which runs a request on a store. What
//! [`layer`](crate::layer)'s intercepts see, and what a test can record or replay.
//!
//! Every store operation is declared once, in the list at the end of this file: its
//! variant name, its trait and method, its arguments as the trait takes them and as
//! a request owns them, and what it returns. `Op`, `Request`, `Reply`, `dispatch`,
//! the forwarding of [`Intercepted`] and the fields a
//! trace shows all come from that one entry. A new operation is that entry plus the
//! trait method it names (and each backend's implementation of it).

use std::time::Duration;

#[cfg(doc)]
use crate::error::Error;
use crate::error::{JoinAsk, Result};
use crate::item::{
    EnqueueOptions, Item, ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind, Outcome,
    QueueCounts, RequestId, Sweep,
};
use crate::layer::{Intercept, Intercepted};
use crate::lease::{Acquire, DeadToken, DeathRecord, ExpiredLease, Lease, LeaseInfo};
use crate::queue_name::QueueName;
use crate::store::{ItemStore, LeaseStore, OperatorStore, Page, Store, StoreInfo, StorePart};
use crate::types::{FencingToken, HolderId, Key, Space, StoreTime};

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

impl Request {
    /// The lease the call acts under (release, claim, finish; a one-lease renewal;
    /// the session of a join).
    pub fn lease(&self) -> Option<&Lease> {
        self.facts().lease
    }

    /// The key it acts on (inspect; a one-entry acquire, join or reap; the lease's
    /// key for calls made under a lease; the page's `after` of `leases`).
    pub fn key(&self) -> Option<&Key> {
        let facts = self.facts();
        facts.key.or(facts.lease.map(|l| &l.key))
    }

    /// The space it scans (expired, next_expiry, members).
    pub fn space(&self) -> Option<&Space> {
        self.facts().space
    }

    /// The token it acts on (a lease's token; the token of a one-entry reap or
    /// requeue).
    pub fn token(&self) -> Option<FencingToken> {
        let facts = self.facts();
        facts.token.or(facts.lease.map(|l| l.token))
    }

    /// The item it acts on (finish, item, retry_dead_letter; the page's `after` of
    /// `items`).
    pub fn item(&self) -> Option<ItemId> {
        self.facts().item
    }

    /// How many entries a batch carries, or the `n` / `limit` asked for; 1 otherwise.
    pub fn n(&self) -> usize {
        self.facts().n.unwrap_or(1)
    }

    /// A batch request (`*_many`) as one batch of one entry per entry, in order;
    /// `Err(self)` for any other request.
    pub fn split(self) -> std::result::Result<Vec<Request>, Box<Request>> {
        Ok(match self {
            Request::AcquireMany { asks } => asks
                .into_iter()
                .map(|a| Request::AcquireMany { asks: vec![a] })
                .collect(),
            Request::JoinSessionMany { session, asks } => asks
                .into_iter()
                .map(|a| Request::JoinSessionMany {
                    session: session.clone(),
                    asks: vec![a],
                })
                .collect(),
            Request::RenewMany { leases } => leases
                .into_iter()
                .map(|l| Request::RenewMany { leases: vec![l] })
                .collect(),
            Request::ReapMany { expired } => expired
                .into_iter()
                .map(|e| Request::ReapMany { expired: vec![e] })
                .collect(),
            Request::SweepMany { tokens } => tokens
                .into_iter()
                .map(|t| Request::SweepMany { tokens: vec![t] })
                .collect(),
            other => return Err(Box::new(other)),
        })
    }
}

/// What a request's arguments say about it: the fields of a trace, read by the
/// accessors of [`Request`]. Each argument's type adds what it knows ([`Fact`]).
#[derive(Default)]
struct Facts<'r> {
    lease: Option<&'r Lease>,
    key: Option<&'r Key>,
    space: Option<&'r Space>,
    token: Option<FencingToken>,
    item: Option<ItemId>,
    n: Option<usize>,
}

/// What an argument of this type tells a trace: a lease, a key, a space, a token,
/// an item, or a count. The first argument of a kind wins.
trait Fact {
    fn note<'r>(&'r self, facts: &mut Facts<'r>);
}

impl Fact for Lease {
    fn note<'r>(&'r self, facts: &mut Facts<'r>) {
        facts.lease.get_or_insert(self);
    }
}
impl Fact for Key {
    fn note<'r>(&'r self, facts: &mut Facts<'r>) {
        facts.key.get_or_insert(self);
    }
}
impl Fact for Space {
    fn note<'r>(&'r self, facts: &mut Facts<'r>) {
        facts.space.get_or_insert(self);
    }
}
impl Fact for FencingToken {
    fn note<'r>(&'r self, facts: &mut Facts<'r>) {
        facts.token.get_or_insert(*self);
    }
}
impl Fact for ItemId {
    fn note<'r>(&'r self, facts: &mut Facts<'r>) {
        facts.item.get_or_insert(*self);
    }
}
/// A count or a limit.
impl Fact for usize {
    fn note<'r>(&'r self, facts: &mut Facts<'r>) {
        facts.n.get_or_insert(*self);
    }
}
impl Fact for Page<Key> {
    fn note<'r>(&'r self, facts: &mut Facts<'r>) {
        facts.key = self.after.as_ref();
        facts.n = Some(self.limit);
    }
}
impl Fact for Page<ItemId> {
    fn note<'r>(&'r self, facts: &mut Facts<'r>) {
        facts.item = self.after;
        facts.n = Some(self.limit);
    }
}
/// A batch: how many entries it carries, and what its one entry says when it
/// carries one (the one-entry forms [`Store`] sends, traced as before).
macro_rules! batch_facts {
    ($($t:ty),*) => {$(
        impl Fact for Vec<$t> {
            fn note<'r>(&'r self, facts: &mut Facts<'r>) {
                if let [one] = self.as_slice() {
                    one.note(facts);
                }
                facts.n = Some(self.len());
            }
        }
    )*};
}
batch_facts!(
    Acquire,
    JoinAsk,
    Lease,
    (Key, FencingToken),
    FencingToken,
    Vec<u8>
);
impl Fact for Acquire {
    fn note<'r>(&'r self, facts: &mut Facts<'r>) {
        self.key.note(facts);
    }
}
impl<A: Fact, B: Fact> Fact for (A, B) {
    fn note<'r>(&'r self, facts: &mut Facts<'r>) {
        self.0.note(facts);
        self.1.note(facts);
    }
}
/// Arguments a trace does not show.
macro_rules! no_facts {
    ($($t:ty),*) => {$(
        impl Fact for $t {
            fn note<'r>(&'r self, _: &mut Facts<'r>) {}
        }
    )*};
}
no_facts!(
    Outcome,
    Vec<QueueName>,
    Option<u64>,
    RequestId,
    EnqueueOptions,
    ItemStateKind,
    HolderId,
    Vec<u8>,
    String
);

/// A trait method's argument as the request owns it.
trait Own<O> {
    fn own(self) -> O;
}
impl<T: Clone> Own<T> for &T {
    fn own(self) -> T {
        self.clone()
    }
}
impl<T: Clone> Own<Vec<T>> for &[T] {
    fn own(self) -> Vec<T> {
        self.to_vec()
    }
}
impl Own<String> for &str {
    fn own(self) -> String {
        self.to_owned()
    }
}
impl Own<Page<Key>> for Page<&Key> {
    fn own(self) -> Page<Key> {
        Page {
            after: self.after.cloned(),
            limit: self.limit,
        }
    }
}

/// A request's field as the trait method takes it.
trait Lend<'a, B> {
    fn lend(&'a self) -> B;
}
impl<'a, T> Lend<'a, &'a T> for T {
    fn lend(&'a self) -> &'a T {
        self
    }
}
impl<'a, T> Lend<'a, &'a [T]> for Vec<T> {
    fn lend(&'a self) -> &'a [T] {
        self
    }
}
impl<'a> Lend<'a, &'a str> for String {
    fn lend(&'a self) -> &'a str {
        self
    }
}
impl<'a> Lend<'a, Page<&'a Key>> for Page<Key> {
    fn lend(&'a self) -> Page<&'a Key> {
        Page {
            after: self.after.as_ref(),
            limit: self.limit,
        }
    }
}
/// Arguments passed by value: the same type on both sides.
macro_rules! as_is {
    ($($t:ty),*) => {$(
        impl Own<$t> for $t {
            fn own(self) -> $t {
                self
            }
        }
        impl Lend<'_, $t> for $t {
            fn lend(&self) -> $t {
                *self
            }
        }
    )*};
}
as_is!(
    Outcome,
    usize,
    FencingToken,
    Option<u64>,
    RequestId,
    ItemId,
    EnqueueOptions,
    ItemStateKind,
    Page<ItemId>
);

/// `true` for an operation a checker round makes, from its entry's `checker` mark.
macro_rules! checker_mark {
    () => {
        false
    };
    (checker) => {
        true
    };
}

/// The part of the contract a trait is.
macro_rules! part_of {
    (LeaseStore) => {
        StorePart::Leases
    };
    (ItemStore) => {
        StorePart::Items
    };
    (OperatorStore) => {
        StorePart::OperatorViews
    };
}

/// An operation's name: its method's, unless its entry gives another.
macro_rules! op_name {
    ($method:ident) => {
        stringify!($method)
    };
    ($method:ident, $label:literal) => {
        $label
    };
}

/// The methods of `Intercepted` that are no round trip: the inner store's, or (for
/// `checks_input`) the layer stack's.
macro_rules! intercepted_extras {
    (LeaseStore) => {
        fn info(&self) -> &StoreInfo {
            self.inner().info()
        }
        fn wakeups(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
            self.inner().wakeups()
        }
        fn checks_input(&self) -> bool {
            self.hook().checks_input() || self.inner().checks_input()
        }
    };
    (ItemStore) => {
        fn pending(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
            self.inner().pending()
        }
        // Written as `async_trait` expands it: the attribute does not see into this
        // macro. The claim travels as `Op::Claim`, from the default queue.
        fn claim_request<'life0, 'life1, 'async_trait>(
            &'life0 self,
            lease: &'life1 Lease,
            n: usize,
            req: RequestId,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<Vec<Item>>> + Send + 'async_trait>,
        >
        where
            'life0: 'async_trait,
            'life1: 'async_trait,
            Self: 'async_trait,
        {
            Box::pin(async move { self.claim_from(lease, &[QueueName::DEFAULT], n, req).await })
        }
    };
    (OperatorStore) => {};
}

/// Declares every store operation once; see the module's docs.
macro_rules! store_ops {
    ($(
        $Trait:ident {$(
            $Op:ident $(($label:literal))? $([$mark:ident])? = $method:ident(
                $($arg:ident: $Borrowed:ty => $Owned:ty),*
            ) -> $Out:ty;
        )*}
    )*) => {
        /// A store operation: one variant per round-trip method of [`LeaseStore`],
        /// [`ItemStore`] and [`OperatorStore`] (a store writes each of them). The
        /// one-entry forms [`Store`] gives (`renew`, `acquire`, ...) travel as their
        /// batch; `claim_from` is [`Op::Claim`], and `claim_request` travels as it,
        /// with the default queue.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Op {$($(
            #[doc = concat!("[`", stringify!($Trait), "::", stringify!($method), "`].")]
            $Op,
        )*)*}

        impl Op {
            /// The method's name (`"renew_many"`), for spans, logs and metric labels.
            pub fn name(self) -> &'static str {
                match self {$($(Op::$Op => op_name!($method $(, $label)?),)*)*}
            }

            /// The part of the contract the operation belongs to (its trait).
            pub fn part(self) -> StorePart {
                match self {$($(Op::$Op => part_of!($Trait),)*)*}
            }

            /// True for the calls a [`Checker`](crate::Checker) round makes (finding,
            /// reaping and sweeping the dead, and sleeping until the next expiry).
            pub fn is_checker_call(self) -> bool {
                match self {$($(Op::$Op => checker_mark!($($mark)?),)*)*}
            }
        }

        /// One store call with its arguments, owned: what an [`Intercept`] receives.
        /// One variant per [`Op`], named alike, with the method's arguments as fields
        /// of the same names.
        #[derive(Clone, Debug, PartialEq, Eq)]
        #[non_exhaustive]
        #[allow(missing_docs)] // the fields are the trait methods' arguments, documented there
        pub enum Request {$($(
            #[doc = concat!("[`", stringify!($Trait), "::", stringify!($method), "`].")]
            $Op { $($arg: $Owned),* },
        )*)*}

        impl Request {
            /// Which operation this is.
            pub fn op(&self) -> Op {
                match self {$($(Request::$Op { .. } => Op::$Op,)*)*}
            }

            /// What the arguments tell a trace.
            fn facts(&self) -> Facts<'_> {
                let mut facts = Facts::default();
                match self {$($(
                    Request::$Op { $($arg),* } => {
                        $(Fact::note($arg, &mut facts);)*
                    }
                )*)*}
                facts
            }
        }

        /// A store's answer to one [`Request`]: the variant of the same name, holding
        /// what the method returns.
        #[derive(Debug)]
        #[non_exhaustive]
        #[allow(missing_docs)] // each holds the return value of the method of its name
        pub enum Reply {$($($Op($Out),)*)*}

        impl Reply {
            /// Which operation this answers.
            pub fn op(&self) -> Op {
                match self {$($(Reply::$Op(_) => Op::$Op,)*)*}
            }
        }

        /// Runs `req` on `store`: calls the method of the request's name with its
        /// arguments.
        pub async fn dispatch(store: &dyn Store, req: Request) -> Result<Reply> {
            Ok(match req {$($(
                Request::$Op { $($arg),* } => Reply::$Op(
                    store.$method($(<$Owned as Lend<'_, $Borrowed>>::lend(&$arg)),*).await?
                ),
            )*)*})
        }

        $(
            #[async_trait::async_trait]
            impl<I: Intercept> $Trait for Intercepted<I> {
                intercepted_extras!($Trait);
                $(
                    async fn $method(&self, $($arg: $Borrowed),*) -> Result<$Out> {
                        let req = Request::$Op { $($arg: Own::own($arg)),* };
                        match self.send(req).await? {
                            Reply::$Op(v) => Ok(v),
                            other => Err(self.wrong(Op::$Op, other.op())),
                        }
                    }
                )*
            }
        )*
    };
}

store_ops! {
    LeaseStore {
        AcquireMany = acquire_many(asks: &[Acquire] => Vec<Acquire>) -> Vec<Result<Lease>>;
        JoinSessionMany = join_session_many(session: &Lease => Lease,
            asks: &[JoinAsk] => Vec<JoinAsk>) -> Vec<Result<Lease>>;
        RenewMany = renew_many(leases: &[Lease] => Vec<Lease>) -> Vec<Result<Lease>>;
        Release = release(lease: &Lease => Lease) -> bool;
        Inspect = inspect(key: &Key => Key) -> Option<LeaseInfo>;
        Expired [checker] = expired(space: &Space => Space, limit: usize => usize)
            -> Vec<ExpiredLease>;
        ReapMany [checker] = reap_many(expired: &[(Key, FencingToken)] => Vec<(Key, FencingToken)>)
            -> Vec<Result<bool>>;
        NextExpiry [checker] = next_expiry(space: &Space => Space) -> Option<Duration>;
    }
    ItemStore {
        Enqueue = enqueue(payload: &[u8] => Vec<u8>, options: EnqueueOptions => EnqueueOptions)
            -> ItemId;
        EnqueueMany = enqueue_many(payloads: &[Vec<u8>] => Vec<Vec<u8>>,
            options: EnqueueOptions => EnqueueOptions) -> Vec<ItemId>;
        Claim ("claim") = claim_from(lease: &Lease => Lease,
            queues: &[QueueName] => Vec<QueueName>, n: usize => usize,
            req: RequestId => RequestId) -> Vec<Item>;
        Finish = finish(lease: &Lease => Lease, id: ItemId => ItemId, outcome: Outcome => Outcome)
            -> Option<ItemState>;
        FinishWithError = finish_with_error(lease: &Lease => Lease, id: ItemId => ItemId,
            outcome: Outcome => Outcome, error: &str => String) -> Option<ItemState>;
        SweepMany [checker] = sweep_many(
            tokens: &[FencingToken] => Vec<FencingToken>) -> Vec<Result<Sweep>>;
        DeadTokens [checker] = dead_tokens(limit: usize => usize) -> Vec<DeadToken>;
        Item = item(id: ItemId => ItemId) -> Option<ItemRecord>;
        NextDue = next_due() -> Option<Duration>;
    }
    OperatorStore {
        StoreTime = store_time() -> StoreTime;
        Leases = leases(space: &Space => Space, page: Page<&Key> => Page<Key>)
            -> Vec<LeaseInfo>;
        Deaths = deaths(before: Option<u64> => Option<u64>, limit: usize => usize)
            -> Vec<DeathRecord>;
        ItemCounts = item_counts() -> ItemCounts;
        QueueCounts = queue_counts() -> Vec<QueueCounts>;
        Items = items(state: ItemStateKind => ItemStateKind, page: Page<ItemId> => Page<ItemId>)
            -> Vec<ItemRecord>;
        RetryDeadLetter = retry_dead_letter(id: ItemId => ItemId) -> ();
        Cancel = cancel(id: ItemId => ItemId) -> Option<ItemState>;
        RetryDeadLetters = retry_dead_letters(limit: usize => usize) -> Vec<ItemId>;
    }
}
