//! Mapping driver errors onto the framework's [`Error`] kinds.

use liveness_core::Error;

use crate::BACKEND;

/// SQLSTATE classes and codes that mean "try again": connection exceptions (08),
/// transaction rollbacks such as serialization failures and deadlocks (40),
/// insufficient resources (53), operator intervention such as a shutdown or a
/// terminated backend (57P), lock timeouts (55P03), and a read-only transaction
/// (25006): the server is a standby, or a primary being demoted — a failover in
/// progress, or a virtual IP briefly pointing at a standby.
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
    if is_transient(&e) {
        Error::unavailable(BACKEND, e)
    } else {
        Error::backend(BACKEND, e)
    }
}

/// A stored value this version cannot interpret (a corrupt or foreign row).
#[derive(Debug, thiserror::Error)]
#[error("unexpected value in the {what} column: {value}")]
pub(crate) struct Corrupt {
    pub(crate) what: &'static str,
    pub(crate) value: String,
}

pub(crate) fn corrupt(what: &'static str, value: impl std::fmt::Display) -> Error {
    Error::backend(
        BACKEND,
        Corrupt {
            what,
            value: value.to_string(),
        },
    )
}

/// The namespace's schema was migrated by a newer version of this crate.
#[derive(Debug, thiserror::Error)]
#[error(
    "schema {schema} has migration {version} applied, which this build does not know: it was \
     created by a newer version of backend-postgres; upgrade this program (refusing to touch it)"
)]
pub(crate) struct SchemaTooNew {
    pub(crate) schema: String,
    pub(crate) version: i64,
}

/// The namespace's schema has a migration whose text differs from this build's.
#[derive(Debug, thiserror::Error)]
#[error("schema {schema}: {source}")]
pub(crate) struct MigrationFailed {
    pub(crate) schema: String,
    #[source]
    pub(crate) source: sqlx::migrate::MigrateError,
}
