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
mod operator;
mod signal;

pub use crate::config::{RedisConfig, SCHEMES, URL};
pub use crate::core::{connect, RedisStore, MAX_PAYLOAD};

/// The backend's name, as [`liveness_core::Store::backend`] reports it and as errors
/// name it.
pub const BACKEND: &str = "redis";

/// The scripts [`RedisStore::connect`] loads onto the server before it returns, so
/// that a server that cannot run them refuses the connection and the operations find
/// them loaded: every one the crate declares, file by file.
pub(crate) fn all_scripts() -> impl Iterator<Item = &'static redis::Script> {
    [
        crate::core::SCRIPTS,
        crate::lease::SCRIPTS,
        crate::items::SCRIPTS,
        crate::operator::SCRIPTS,
        crate::deaths::SCRIPTS,
        crate::batch::SCRIPTS,
    ]
    .into_iter()
    .flatten()
    .map(|script| &***script)
}

/// The bare renew primitive, for the bench's baseline: the same Lua script the store
/// runs (`renew_many.lua`, a single renewal being a batch of one), without the trait,
/// the input checks or the error mapping. Not a stable API.
#[doc(hidden)]
pub mod raw {
    pub use crate::batch::{renew_run, renew_script};
}

#[cfg(test)]
mod tests {
    /// Every script file (but the two prelude files, which prefix them) is declared and
    /// loaded at connect: none is left to its first `NOSCRIPT`.
    #[test]
    fn connect_loads_every_script_file() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts");
        let files = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with(".lua") && !name.starts_with("prelude"))
            .count();
        let mut hashes: Vec<&str> = crate::all_scripts().map(|s| s.get_hash()).collect();
        hashes.sort_unstable();
        hashes.dedup();
        assert_eq!(
            hashes.len(),
            files,
            "a script file is not declared with scripts!"
        );
    }

    /// The scripts' trim of expired dead letters removes as many per call as the
    /// contract's bound says.
    #[test]
    fn the_scripts_trim_as_many_dead_letters_as_the_contract_says() {
        let prelude = include_str!("scripts/prelude_dead_letters.lua");
        let line = format!(
            "\nlocal DEAD_LETTER_TRIM = {}\n",
            liveness_core::DEAD_LETTER_TRIM
        );
        assert!(prelude.contains(&line), "{line:?}");
    }
}
