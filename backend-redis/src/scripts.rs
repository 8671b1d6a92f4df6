//! The Lua scripts, one per operation, each prefixed with `scripts/prelude.lua`.
//!
//! [`redis::Script`] sends `EVALSHA` and, when the server answers `NOSCRIPT` (after a
//! restart or `SCRIPT FLUSH`), loads the script and retries.

use std::sync::OnceLock;

use redis::Script;

macro_rules! scripts {
    ($($name:ident),* $(,)?) => {
        /// Every script, compiled (hashed) once per process.
        pub(crate) struct Scripts {
            $(pub(crate) $name: Script,)*
        }

        impl Scripts {
            fn new() -> Scripts {
                Scripts {
                    $($name: Script::new(concat!(
                        include_str!("scripts/prelude.lua"),
                        include_str!(concat!("scripts/", stringify!($name), ".lua")),
                    )),)*
                }
            }
        }
    };
}

scripts!(
    acquire,
    acquire_many,
    renew,
    renew_many,
    release,
    reap,
    reap_many,
    inspect,
    expired,
    dead_tokens,
    store_time,
    next_expiry,
    enqueue,
    claim,
    complete,
    fail,
    requeue_orphans,
    requeue_orphans_many,
    item,
    item_counts,
    dead_letters,
    members,
    deaths,
    items,
    retry_dead_letter,
    retry_dead_letters,
    hello,
);

/// The scripts, hashed on first use.
pub(crate) fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(Scripts::new)
}
