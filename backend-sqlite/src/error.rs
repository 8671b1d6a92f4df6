//! Mapping sqlx errors onto the framework's [`Error`] kinds: the one place where this
//! backend decides what is worth retrying.

use liveness_core::Error;

use crate::BACKEND;

/// True when a sqlx error is a transient fault: a busy or locked database
/// (`SQLITE_BUSY`, `SQLITE_LOCKED` and their extended codes), I/O, or the pool.
fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            // SQLITE_BUSY (5) and SQLITE_LOCKED (6), with their extended codes.
            .is_some_and(|c| matches!(c & 0xff, 5 | 6)),
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        _ => false,
    }
}

/// Maps a sqlx error: transient faults to [`Error::Unavailable`], everything else to
/// [`Error::Backend`].
pub(crate) fn map(e: sqlx::Error) -> Error {
    Error::classify(BACKEND, e, is_transient)
}

/// Maps a migration error: a failed statement as [`map`] does, anything else
/// (a changed or missing migration) is [`Error::Backend`].
pub(crate) fn map_migrate(e: sqlx::migrate::MigrateError) -> Error {
    match e {
        sqlx::migrate::MigrateError::Execute(e) => map(e),
        other => Error::backend(BACKEND, other),
    }
}

/// A row this build cannot have written ([`liveness_core::Corrupt`]): `what` says
/// which value, and where.
pub(crate) fn corrupt(what: impl Into<std::borrow::Cow<'static, str>>) -> Error {
    Error::corrupt(BACKEND, what)
}
