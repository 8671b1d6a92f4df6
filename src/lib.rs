#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub use liveness_core::*;

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
