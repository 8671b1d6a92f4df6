#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod batch;
mod clock;
mod config;
mod core;
mod deaths;
mod error;
mod items;
mod lease;
mod operator;
#[cfg(test)]
mod tests;
mod turns;

pub use crate::config::{SqliteConfig, Synchronous, SCHEMES, URL};
pub use crate::core::SqliteStore;
#[doc(hidden)]
pub use crate::core::MIGRATIONS;

/// The backend's name, as [`liveness_core::Store::backend`] reports it and as
/// errors name it.
pub const BACKEND: &str = "sqlite";

/// Opens the store a URL names: `sqlite:///abs/path/file.db?ns=NAME` or
/// `sqlite://relative.db`. See [`SqliteConfig::from_url`] for the parameters and
/// [`SqliteStore::connect`] for what connecting does and how it fails.
pub async fn connect(url: &str) -> liveness_core::Result<SqliteStore> {
    SqliteStore::connect(SqliteConfig::from_url(url)?).await
}
