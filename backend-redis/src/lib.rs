#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod config;
mod durability;
mod error;
mod keys;
mod reply;
mod scripts;
mod store;

pub use config::{RedisConfig, URL};
pub use store::{RedisStore, MAX_PAYLOAD};

/// The backend's name, as [`liveness_core::LeaseStore::backend`] reports it and as
/// errors name it.
pub const BACKEND: &str = "redis";

/// The URL schemes this backend serves: `redis://` (plain TCP) and `rediss://` (TLS).
pub const SCHEMES: &[&str] = &["redis", "rediss"];

/// The bare renew primitive, for the bench's baseline: the same Lua script the store
/// runs, without the trait, the validation or the error mapping. Not a stable API.
#[doc(hidden)]
pub mod raw {
    use liveness_core::{Key, Namespace};

    /// The renew script (`KEYS`: lease, expiry index, token counter; `ARGV`: name,
    /// token, ttl ms).
    pub fn renew_script() -> &'static redis::Script {
        &crate::scripts::scripts().renew
    }

    /// The `KEYS` of a renewal of `key` in `namespace`.
    pub fn renew_keys(namespace: &Namespace, key: &Key) -> [String; 3] {
        let keys = crate::keys::Keys::new(namespace);
        [keys.lease(key), keys.expiry(key.space()), keys.tokens()]
    }
}

/// Parses `url` ([`RedisConfig::from_url`]) and connects ([`RedisStore::connect`]).
///
/// Fails with [`liveness_core::Error::InvalidInput`] on a malformed URL, with
/// [`liveness_core::Error::Unavailable`] when the server cannot be reached, and with
/// [`liveness_core::Error::Backend`] when it refuses the connection (authentication,
/// TLS, a server too old for the scripts).
pub async fn connect(url: &str) -> liveness_core::Result<RedisStore> {
    RedisStore::connect(RedisConfig::from_url(url)?).await
}
