#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

// What a user of the framework writes: the state machines, their configurations and
// events, the values they hand out, the errors, and `connect`.
pub use liveness_core::{
    Backoff, Batcher, CancellationToken, CheckStep, Checker, CheckerConfig, CheckerHandle,
    CheckerStatus, Claimed, Death, DeathCause, DeathRecord, Election, ElectionConfig,
    EnqueueOptions, Error, Event, EventBus, FencingToken, Generation, HeartbeatConfig, HolderId,
    HolderLoss, InputProblem, Item, ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind, Key,
    Leadership, Lease, LeaseInfo, LeaseStatus, LocalDeadline, LostCause, Member, MemberConfig,
    MemoryServer, MemoryStore, Name, Namespace, Page, Result, RoundReport, Session, SessionConfig,
    Skipped, Space, Store, StoreTime, Sweep, Swept, Ttl, DEFAULT_MAX_ATTEMPTS, MAX_NAMESPACE_LEN,
    MAX_NAME_LEN,
};
// The worker runner and the producer's handle.
pub use liveness_core::{Job, JobError, Queue, Worker, WorkerConfig, WorkerHandle, WorkerReport};
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
