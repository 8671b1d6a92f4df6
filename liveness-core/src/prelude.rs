//! Everything a store implementation names, in one import: the two traits, their
//! argument and answer types, the error enum and `async_trait`, as
//! `examples/src/custom_store.rs` uses them.
//!
//! ```
//! use liveness_core::prelude::*;
//!
//! fn refuse(lease: &Lease) -> Result<()> {
//!     Err(lease.lost(LostCause::Released))
//! }
//! # let key = Key::member("a").unwrap();
//! # let issuer = Issuer::new(Namespace::new("doc").unwrap(), 1);
//! # let holder = HolderId::new("h").unwrap();
//! # let lease = Lease::granted(&issuer, key, holder, FencingToken(1), Ttl::from_secs(1).unwrap());
//! # assert!(matches!(refuse(&lease), Err(Error::Lost { .. })));
//! ```

pub use crate::error::{BatchResult, Error, InputProblem, JoinAsk, LostCause, Result};
pub use crate::item::{
    EnqueueOptions, Item, ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind, ItemTimes,
    Outcome, QueueCounts, RequestId, Sweep,
};
pub use crate::lease::{
    Acquire, DeadToken, DeathCause, DeathRecord, ExpiredLease, Issuer, Lease, LeaseInfo,
    LeaseStatus, Swept,
};
pub use crate::queue_name::QueueName;
pub use crate::store::{
    Capabilities, ItemStore, LeaseStore, OperatorStore, Page, Store, StoreInfo, StorePart,
};
pub use crate::types::{FencingToken, HolderId, Key, Name, Namespace, Space, StoreTime, Ttl};
pub use async_trait::async_trait;
