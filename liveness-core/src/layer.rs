//! Store middleware, as tower does it: an [`Intercept`] sees every call a store gets
//! as an owned [`Request`], decides what to do with it, hands it on through [`Next`]
//! (or not) and sees the [`Reply`] — it may change either. A [`Layer`] is the factory
//! that puts one in front of a store, and [`StoreBuilder`] stacks layers.
//!
//! Every call of every [`LeaseStore`](crate::LeaseStore) and [`ItemStore`](crate::ItemStore) method, the `*_many` batches
//! included, passes through the intercept as one request. The forwarding is
//! generated from each operation's one declaration in [`crate::request`], so a new
//! store operation reaches every layer in the tree (input checks, tracing, metrics,
//! timing, fault injection) with no edit here.
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use liveness_core::layer::{Intercept, Next, Reply, Request, StoreBuilder};
//! use liveness_core::{async_trait, Error, MemoryStore, Result, Store};
//!
//! /// Counts round trips, and the renewals that came back `Lost`.
//! #[derive(Debug, Default)]
//! struct Counted { calls: AtomicU64, lost: AtomicU64 }
//!
//! #[async_trait]
//! impl Intercept for Counted {
//!     async fn call(&self, req: Request, next: Next) -> Result<Reply> {
//!         self.calls.fetch_add(1, Ordering::Relaxed);
//!         let reply = next.run(req).await;
//!         if let Ok(Reply::RenewMany(answers)) = &reply {
//!             let lost = answers.iter().filter(|a| matches!(a, Err(Error::Lost { .. }))).count();
//!             self.lost.fetch_add(lost as u64, Ordering::Relaxed);
//!         }
//!         reply
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let counted = Arc::new(Counted::default());
//! let store: Arc<dyn Store> = StoreBuilder::new(Arc::new(MemoryStore::new()))
//!     .layer(counted.clone())
//!     .build();
//! store.store_time().await.unwrap();
//! assert_eq!(store.backend(), "memory");
//! assert_eq!(counted.calls.load(Ordering::Relaxed), 1);
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::store::{only, Store};

pub use crate::request::{dispatch, Op, Reply, Request, WrongReply};

/// A boxed, owned future: what [`Next::run`] returns, free to be spawned.
pub type BoxReply = Pin<Box<dyn Future<Output = Result<Reply>> + Send + 'static>>;

/// The rest of the stack below an [`Intercept`]: the store (or the next layer) a
/// request goes on to. Cheap to clone; [`Next::run`] owns everything it needs, so its
/// future may be spawned, delayed or dropped.
#[derive(Clone, Debug)]
pub struct Next {
    inner: Arc<dyn Store>,
}

impl Next {
    /// The next step for requests to `inner`.
    pub fn new(inner: Arc<dyn Store>) -> Next {
        Next { inner }
    }

    /// Sends `req` on: the inner store's answer.
    pub fn run(self, req: Request) -> BoxReply {
        Box::pin(async move { dispatch(&*self.inner, req).await })
    }

    /// The store below (for its [`StoreInfo`](crate::StoreInfo)).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner
    }
}

/// Middleware in front of a store: sees each call as a [`Request`] and answers it,
/// usually by sending it on through [`Next::run`] and returning (or changing) the
/// reply.
///
/// # Guarantees
/// - Every round-trip method of the wrapped store, the `*_many` batches included, is
///   one call of [`Intercept::call`] (unless [`Intercept::split_batches`]); a request
///   reaches the inner store only through `next`, at most as often as the intercept
///   sends it.
/// - `info`, `capabilities`, `issuer` and `wakeups` are the inner store's.
#[async_trait]
pub trait Intercept: Send + Sync + std::fmt::Debug + 'static {
    /// Answers one request. The default sends it on unchanged.
    async fn call(&self, req: Request, next: Next) -> Result<Reply> {
        next.run(req).await
    }

    /// False (the default): a `*_many` call is one request. True: it is split into
    /// one single-entry request per entry ([`Request::split`]), each through
    /// [`Intercept::call`], and the answers are joined in order (for an intercept that
    /// acts per lease or per token, as the trait's default loops do).
    fn split_batches(&self) -> bool {
        false
    }

    /// True for an intercept that makes every check of
    /// [`CheckInput`](crate::CheckInput) before sending a call on (that layer alone
    /// says so): [`checked`](crate::checked()) then adds no second one.
    fn checks_input(&self) -> bool {
        false
    }
}

/// Puts something in front of a store: tower's `Layer`, for stores. Every
/// `Arc<I>` of an [`Intercept`] is one (the stack shares the `Arc`, so its owner can
/// read counters or turn knobs while the store is in use).
pub trait Layer: Send + Sync {
    /// `inner` behind this layer.
    fn layer(&self, inner: Arc<dyn Store>) -> Arc<dyn Store>;
}

impl<I: Intercept> Layer for Arc<I> {
    fn layer(&self, inner: Arc<dyn Store>) -> Arc<dyn Store> {
        Arc::new(Intercepted::new(inner, self.clone()))
    }
}

/// Stacks layers in front of a store, as tower's `ServiceBuilder`: the first layer
/// added is the outermost (it sees a call first and its reply last).
///
/// ```
/// use std::sync::Arc;
/// use liveness_core::layer::StoreBuilder;
/// use liveness_core::{CheckInput, MemoryStore, Store};
///
/// let store: Arc<dyn Store> = StoreBuilder::new(Arc::new(MemoryStore::new()))
///     .layer(Arc::new(CheckInput))
///     .build();
/// assert_eq!(store.backend(), "memory");
/// ```
pub struct StoreBuilder {
    store: Arc<dyn Store>,
    layers: Vec<Box<dyn Layer>>,
}

impl std::fmt::Debug for StoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreBuilder")
            .field("store", &self.store)
            .field("layers", &self.layers.len())
            .finish()
    }
}

impl StoreBuilder {
    /// A stack with `store` at the bottom and no layer yet.
    pub fn new(store: Arc<dyn Store>) -> StoreBuilder {
        StoreBuilder {
            store,
            layers: Vec::new(),
        }
    }

    /// Adds `layer` below the layers added before.
    pub fn layer(mut self, layer: impl Layer + 'static) -> StoreBuilder {
        self.layers.push(Box::new(layer));
        self
    }

    /// The store with every layer in front of it.
    pub fn build(self) -> Arc<dyn Store> {
        self.layers
            .iter()
            .rev()
            .fold(self.store, |inner, layer| layer.layer(inner))
    }
}

/// A store behind an [`Intercept`]: what [`Layer::layer`] makes of an `Arc<I>`. It
/// dereferences to the intercept, so the intercept's own methods (counters, knobs)
/// are called on the store directly.
#[derive(Debug)]
pub struct Intercepted<I> {
    inner: Arc<dyn Store>,
    hook: Arc<I>,
}

impl<I> std::ops::Deref for Intercepted<I> {
    type Target = I;
    fn deref(&self) -> &I {
        &self.hook
    }
}

impl<I: Intercept> Intercepted<I> {
    /// `inner` behind `hook`.
    pub fn new(inner: Arc<dyn Store>, hook: Arc<I>) -> Self {
        Intercepted { inner, hook }
    }

    /// The intercept.
    pub fn hook(&self) -> &Arc<I> {
        &self.hook
    }

    /// The store behind it.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// Sends `req` through the intercept (split first when it asks for that).
    pub(crate) async fn send(&self, req: Request) -> Result<Reply> {
        if self.hook.split_batches() {
            let op = req.op();
            match req.split() {
                Ok(parts) => return self.send_split(op, parts).await,
                Err(req) => return self.hook.call(*req, Next::new(self.inner.clone())).await,
            }
        }
        self.hook.call(req, Next::new(self.inner.clone())).await
    }

    /// One call per entry, joined as the `*_many` answer of `op`.
    async fn send_split(&self, op: Op, parts: Vec<Request>) -> Result<Reply> {
        let mut replies = Vec::with_capacity(parts.len());
        for part in parts {
            replies.push(self.hook.call(part, Next::new(self.inner.clone())).await);
        }
        let backend = self.inner.backend();
        /// The answers of the parts, joined as the reply `$op`.
        macro_rules! joined {
            ($op:ident) => {
                Reply::$op(join(backend, op, replies, |r| match r {
                    Reply::$op(v) => Ok(v),
                    other => Err(other.op()),
                }))
            };
        }
        Ok(match op {
            Op::AcquireMany => joined!(AcquireMany),
            Op::JoinSessionMany => joined!(JoinSessionMany),
            Op::RenewMany => joined!(RenewMany),
            Op::ReapMany => joined!(ReapMany),
            _ => joined!(SweepMany),
        })
    }
}

/// The answers of a split batch's parts (each a batch of one), in order.
fn join<T>(
    backend: &'static str,
    asked: Op,
    replies: Vec<Result<Reply>>,
    take: impl Fn(Reply) -> std::result::Result<Vec<Result<T>>, Op>,
) -> Vec<Result<T>> {
    replies
        .into_iter()
        .map(|r| {
            only(
                backend,
                take(r?).map_err(|other| wrong(backend, asked, other)),
            )
        })
        .collect()
}

impl<I> Intercepted<I> {
    /// The error for a reply of another operation than `asked`.
    pub(crate) fn wrong(&self, asked: Op, got: Op) -> Error {
        wrong(self.inner.backend(), asked, got)
    }
}

fn wrong(backend: &'static str, asked: Op, got: Op) -> Error {
    Error::backend(
        backend,
        WrongReply {
            asked: asked.name(),
            got: got.name(),
        },
    )
}
