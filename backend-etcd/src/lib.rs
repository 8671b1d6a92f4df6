#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod batch;
mod config;
mod core;
mod deaths;
mod delays;
mod endpoints;
mod error;
mod etcd_lease;
mod items;
mod keepalive;
mod key_leases;
mod keys;
mod lease;
mod operator;
mod riders;
mod session;
mod signal;
mod sweep_members;
#[cfg(test)]
mod tests;
mod watch;

pub use crate::config::{EtcdConfig, SCHEMES, URL};
pub use crate::core::{EtcdStore, MAX_BATCH, MAX_PAYLOAD};

/// The backend's name, as [`liveness_core::Store::backend`] reports it and as errors
/// name it.
pub const BACKEND: &str = "etcd";

/// Parses `url` ([`EtcdConfig::from_url`]) and connects ([`EtcdStore::connect`]).
///
/// Fails with [`liveness_core::Error::InvalidInput`] on a malformed URL, with
/// [`liveness_core::Error::Unavailable`] when no member answers, and with
/// [`liveness_core::Error::Backend`] when the cluster refuses the connection (bad
/// credentials, unreadable TLS files).
pub async fn connect(url: &str) -> liveness_core::Result<EtcdStore> {
    EtcdStore::connect(EtcdConfig::from_url(url)?).await
}
