//! Job queues, failure detection and leader election for worker fleets, over Redis,
//! PostgreSQL, etcd, FoundationDB or an embedded SQLite file. A dead, frozen or
//! partitioned worker is declared dead exactly once and its unfinished jobs run again
//! elsewhere (at least once); a singleton role has at most one holder, fenced by
//! tokens. Only the store's clock decides expiry: no machine's wall clock is trusted.
//!
//! # What you use
//!
//! - [`connect`] opens a store by URL (`sqlite://`, `redis://`, `postgres://`,
//!   `etcd://`, `fdb://`, `memory://`), among the backends compiled in by feature.
//! - [`Queue`] adds jobs; [`Worker`] runs them with an async handler, up to
//!   [`WorkerConfig::concurrency`] at a time, and runs an elected [`Checker`] inside so
//!   that a dead worker's jobs run again.
//! - [`Member`] is a worker's lease with your own claim loop ([`Member::claim`],
//!   [`Member::complete`], [`Member::fail`]); [`Session`] carries many members of one
//!   process on one lease.
//! - [`Election`] keeps a singleton role: its [`Leadership`] hands out the
//!   [`FencingToken`] the leader sends with every write, and a
//!   [`CancellationToken`] that fires the moment leadership is lost or may be.
//! - [`Checker`] declares expired members dead, once each, and requeues their items.
//!   Some process must run one: [`Worker`] does by default.
//! - Every failure is one [`Error`]: `Held`, `Lost`, `Fenced`, `InvalidInput`,
//!   `Unavailable` (retryable), `Backend`.
//! - [`store`] is for store authors: the traits, layers and the helpers backends share.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//!
//! use liveness::{Queue, Ttl, Worker, WorkerConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> liveness::Result<()> {
//! let store = liveness::connect("memory://?ns=app").await?;
//! Queue::new(store.clone()).enqueue(b"resize image 42").await?;
//!
//! let config = WorkerConfig::new("worker-1", Ttl::from_secs(5)?)?.concurrency(8);
//! let worker = Worker::start(store, config, |job| async move {
//!     let token = job.check()?; // send it with every side effect
//!     println!("{} (token {token})", String::from_utf8_lossy(job.payload()));
//!     Ok(())
//! })
//! .await?;
//!
//! tokio::time::sleep(Duration::from_millis(200)).await;
//! assert_eq!(worker.shutdown(Duration::from_secs(5)).await?.completed, 1);
//! # Ok(()) }
//! ```
//!
//! # Features
//!
//! `sqlite` (default), `redis`, `postgres`, `etcd` (its build needs `protoc` and the
//! well-known protos) and `fdb` (needs the FoundationDB client library `libfdb_c`).
//! The repository's README has the full tour, the operator's command and the figures.
#![deny(missing_docs)]

// What a user of the framework writes: the state machines, their configurations and
// events, the values they hand out, the errors, and `connect`.
pub use liveness_core::{
    Backoff, Batcher, CancellationToken, CheckStep, Checker, CheckerConfig, CheckerHandle,
    CheckerStatus, Claimed, Death, DeathCause, DeathRecord, Election, ElectionConfig,
    EnqueueOptions, Error, Event, EventBus, FencingToken, Generation, HeartbeatConfig, HolderId,
    HolderLoss, InputProblem, Item, ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind, Key,
    Leadership, Lease, LeaseInfo, LeaseStatus, LocalDeadline, LostCause, Member, MemberConfig,
    MemoryServer, MemoryStore, Name, Namespace, Page, QueueCounts, QueueName, Result, RoundReport,
    Session, SessionConfig, Skipped, Space, Store, StoreTime, Sweep, Swept, Ttl,
    DEFAULT_MAX_ATTEMPTS, MAX_CLAIM_QUEUES, MAX_DELAY, MAX_NAMESPACE_LEN, MAX_NAME_LEN,
};
// The worker runner and the producer's handle.
pub use liveness_core::{
    Job, JobEnd, JobError, Queue, Worker, WorkerConfig, WorkerHandle, WorkerReport,
};
// The modules a user reads beside them: metric names, the local clocks, URLs, and
// each state machine's own.
pub use liveness_core::{
    checker, clock, election, error, events, member, metrics, session, url, worker,
};

/// What a store author needs, beside what the root offers: the three store traits
/// and the types their methods name, store middleware (layers) and a store call as
/// data, the input checks, and the in-crate helpers every backend shares. The
/// `liveness-conformance` suite checks a store against it.
pub mod store {
    pub use liveness_core::prelude::*;
    pub use liveness_core::{
        async_trait, checked, durability, layer, request, BoxError, CheckInput, Corrupt, Intercept,
        Layer, Next, Op, Reply, Request, SchemaTooNew, StoreBuilder, Traced,
    };
}

mod connect;
pub use connect::{connect, connect_existing, feature_of, schemes, MEMORY_URL};

/// The etcd backend (feature `etcd`).
#[cfg(feature = "etcd")]
pub use liveness_etcd;
/// The FoundationDB backend (feature `fdb`).
#[cfg(feature = "fdb")]
pub use liveness_fdb;
/// The PostgreSQL backend (feature `postgres`).
#[cfg(feature = "postgres")]
pub use liveness_postgres;
/// The Redis backend (feature `redis`).
#[cfg(feature = "redis")]
pub use liveness_redis;
/// The SQLite backend (feature `sqlite`, on by default).
#[cfg(feature = "sqlite")]
pub use liveness_sqlite;

/// The README's code blocks, compiled and run as doc tests, so that every program it
/// shows compiles as a reader copies it.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
