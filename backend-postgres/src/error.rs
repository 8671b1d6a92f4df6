//! Mapping sqlx errors onto the framework's [`Error`] kinds: the one place where this
//! backend decides what is worth retrying.

use liveness_core::Error;

use crate::BACKEND;

/// SQLSTATE classes and codes that mean "try again": connection exceptions (08),
/// transaction rollbacks such as serialization failures and deadlocks (40),
/// insufficient resources (53), operator intervention such as a shutdown or a
/// terminated backend (57P), lock timeouts (55P03), and a read-only transaction
/// (25006): the connection reached a standby (during a failover, or while a virtual
/// IP still points at the old primary), and the next connection may reach the new
/// primary — as Redis's `READONLY` is.
fn transient_sqlstate(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("40")
        || code.starts_with("53")
        || code.starts_with("57P")
        || code == "55P03"
        || code == "57014"
        || code == "25006"
}

/// True when a driver error is a transient transport fault.
pub(crate) fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::BeginFailed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| transient_sqlstate(&c)),
        _ => false,
    }
}

/// Maps a driver error: transient faults to [`Error::Unavailable`], everything else
/// to [`Error::Backend`].
pub(crate) fn map(e: sqlx::Error) -> Error {
    Error::classify(BACKEND, e, is_transient)
}

/// A stored value this build cannot interpret (a corrupt or foreign row):
/// [`liveness_core::Corrupt`]; `what` names the column and the value.
pub(crate) fn corrupt(what: impl Into<std::borrow::Cow<'static, str>>) -> Error {
    Error::corrupt(BACKEND, what)
}

/// What an acquire answers when concurrent acquires kept inserting its key first.
pub(crate) fn insert_races() -> Error {
    Error::unavailable(
        BACKEND,
        std::io::Error::other("acquire kept losing insert races; retry"),
    )
}

/// The namespace's schema has a migration whose text differs from this build's.
#[derive(Debug, thiserror::Error)]
#[error("schema {schema}: {source}")]
pub(crate) struct MigrationFailed {
    pub(crate) schema: String,
    #[source]
    pub(crate) source: sqlx::migrate::MigrateError,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_only_transaction_is_transient() {
        // A standby answers every write with 25006: were it permanent, every member
        // and leader would cancel at once during a failover.
        assert!(transient_sqlstate("25006"));
        assert!(transient_sqlstate("40001"));
        assert!(!transient_sqlstate("25001"));
        assert!(!transient_sqlstate("42P01"));
    }
}
