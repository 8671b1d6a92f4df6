#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub use liveness_core::*;

mod connect;
pub use connect::{connect, schemes, MEMORY_URL};

/// The etcd backend (feature `etcd`).
#[cfg(feature = "etcd")]
pub use backend_etcd;
/// The FoundationDB backend (feature `fdb`).
#[cfg(feature = "fdb")]
pub use backend_fdb;
/// The PostgreSQL backend (feature `postgres`).
#[cfg(feature = "postgres")]
pub use backend_postgres;
/// The Redis backend (feature `redis`).
#[cfg(feature = "redis")]
pub use backend_redis;
/// The SQLite backend (feature `sqlite`, on by default).
#[cfg(feature = "sqlite")]
pub use backend_sqlite;
