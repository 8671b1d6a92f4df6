#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod batch;
mod config;
mod conns;
mod core;
mod deaths;
mod durability;
mod error;
mod items;
mod keys;
mod lease;

pub use crate::config::{RedisConfig, SCHEMES, URL};
pub use crate::core::{connect, RedisStore, MAX_PAYLOAD};

/// The backend's name, as [`liveness_core::LeaseStore::backend`] reports it and as
/// errors name it.
pub const BACKEND: &str = "redis";

/// The bare renew primitive, for the bench's baseline: the same Lua script the store
/// runs, without the trait, the input checks or the error mapping. Not a stable API.
#[doc(hidden)]
pub mod raw {
    pub use crate::lease::{renew_keys, renew_script};
}
