//! Accessors the backends' configurations share.

/// Generates, inside a backend configuration's `impl` block, the accessors every
/// configuration with `existing_only: bool` and `death_retention: usize` fields
/// offers: `with_existing_only` (documented by the attributes given after the type,
/// as what "a store that is there already" means differs per backend),
/// `existing_only` and `death_retention`. For the backends' use only.
#[doc(hidden)]
#[macro_export]
macro_rules! existing_only_accessors {
    ($config:ident, $(#[$with_doc:meta])*) => {
        $(#[$with_doc])*
        pub fn with_existing_only(mut self, existing_only: bool) -> $config {
            self.existing_only = existing_only;
            self
        }

        #[doc = concat!(
            "Whether connecting opens only a store that is there already\n([`",
            stringify!($config),
            "::with_existing_only`]; default false)."
        )]
        pub fn existing_only(&self) -> bool {
            self.existing_only
        }

        /// How many death records ([`OperatorStore::deaths`](liveness_core::OperatorStore::deaths))
        /// the namespace keeps, the newest ones (default
        /// [`DEFAULT_DEATH_RETENTION`](liveness_core::DEFAULT_DEATH_RETENTION)).
        pub fn death_retention(&self) -> usize {
            self.death_retention
        }
    };
}
