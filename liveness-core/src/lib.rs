#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod backoff;
pub mod batch;
mod capabilities;
pub mod checked;
pub mod checker;
pub mod clock;
mod config;
mod departure;
pub mod durability;
pub mod election;
pub mod error;
pub mod events;
pub mod heartbeat;
pub mod item;
mod keeper;
pub mod layer;
pub mod lease;
pub mod member;
pub mod memory;
pub mod metrics;
pub mod prelude;
mod queue;
pub mod queue_name;
pub mod request;
pub mod session;
#[cfg(feature = "serde")]
pub mod settings;
pub mod standing;
pub mod store;
pub mod sync;
mod traced;
pub mod types;
mod unreaped;
pub mod url;
pub mod wake;
pub mod worker;

pub use backoff::Backoff;
pub use batch::Batcher;
pub use checked::{checked, CheckInput};
pub use checker::{
    Checker, CheckerConfig, CheckerHandle, CheckerStatus, Death, RoundReport, Skipped,
};
pub use clock::{Clock, HighWater, HostClock, ManualClock, TokioClock};
pub use election::{Election, ElectionConfig, Leadership};
pub use error::{
    BatchResult, BoxError, Corrupt, Error, InputProblem, JoinAsk, LostCause, Result, SchemaTooNew,
};
pub use events::{CheckStep, Event, EventBus, HolderLoss};
pub use heartbeat::HeartbeatConfig;
pub use item::{
    error_text, EnqueueOptions, Item, ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind,
    ItemTimes, Outcome, QueueCounts, RequestId, Sweep, DEAD_LETTER_TRIM,
    DEFAULT_DEAD_LETTER_RETENTION, DEFAULT_KEY_RETENTION, DEFAULT_MAX_ATTEMPTS, MAX_DELAY,
    MAX_ERROR_LEN,
};
pub use layer::{Intercept, Layer, Next, Op, Reply, Request, StoreBuilder};
pub use lease::{
    Acquire, DeadToken, DeathCause, DeathRecord, ExpiredLease, Issuer, Lease, LeaseInfo,
    LeaseStatus, Swept, DEFAULT_DEATH_RETENTION,
};
pub use member::{Claimed, Generation, Member, MemberConfig};
pub use memory::{MemoryServer, MemoryStore};
pub use queue::Queue;
pub use queue_name::{QueueName, MAX_CLAIM_QUEUES, MAX_QUEUE_NAME_LEN};
pub use session::{Session, SessionConfig};
pub use standing::LocalDeadline;
pub use store::{
    Capabilities, ItemStore, LeaseStore, OperatorStore, Page, Store, StoreInfo, StorePart,
};
pub use traced::Traced;
pub use types::{
    FencingToken, HolderId, Key, Name, Namespace, Space, StoreTime, Ttl, MAX_NAMESPACE_LEN,
    MAX_NAME_LEN,
};
pub use worker::{Job, JobEnd, JobError, Worker, WorkerConfig, WorkerHandle, WorkerReport};

/// Re-exported so that users and backends name the same versions.
pub use async_trait::async_trait;
pub use tokio_util::sync::CancellationToken;
