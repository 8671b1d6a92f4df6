#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod advisory;
mod batch;
mod config;
mod conns;
mod core;
mod deaths;
mod durability;
mod error;
mod items;
mod lease;
mod operator;
#[cfg(test)]
mod tests;

pub use advisory::{AdvisoryElection, AdvisoryLeadership};
pub use config::{PostgresConfig, SCHEMES, URL};
pub use core::{PostgresStore, SCHEMA_VERSION};

/// The backend's name, as [`liveness_core::Store::backend`] reports it and as
/// errors name it.
pub const BACKEND: &str = "postgres";

/// Connects to the store a `postgres://` URL names (see [`PostgresConfig::from_url`]
/// and the crate docs' table for the parameters), creating and migrating the
/// namespace's schema if needed. A URL that [`PostgresConfig::from_url`] refuses is
/// [`liveness_core::Error::InvalidInput`] before any connection is attempted.
pub async fn connect(url: &str) -> liveness_core::Result<PostgresStore> {
    PostgresStore::connect(PostgresConfig::from_url(url)?).await
}
