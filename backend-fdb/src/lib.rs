#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod batch;
mod config;
mod core;
mod deaths;
mod double;
mod error;
mod items;
mod keys;
mod kv;
mod lease;
#[cfg(feature = "native")]
mod native;
mod observe;
mod operator;
mod session;

pub use crate::core::FdbStore;
pub use config::{FdbConfig, SCHEMES, URL};
pub use double::{DoubleDatabase, DoubleError};
pub use error::NotCompiled;
#[cfg(feature = "native")]
pub use native::stop_network;

/// The backend's name, as [`liveness_core::Store::backend`] reports it and as errors
/// name it.
pub const BACKEND: &str = "fdb";

/// Connects to the FoundationDB cluster named by `url` (see [`FdbConfig::from_url`]).
///
/// Needs the `native` feature (and libfdb_c at link and run time); without it, fails
/// with [`liveness_core::Error::Backend`] holding [`NotCompiled`]. With it, the first
/// call starts the client's network thread for the whole process (stop it with
/// `stop_network` before exiting).
pub async fn connect(url: &str) -> liveness_core::Result<FdbStore> {
    FdbStore::connect(FdbConfig::from_url(url)?).await
}
