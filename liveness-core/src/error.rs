//! The one error type of the framework.
//!
//! Every backend maps its failures onto these backend-neutral kinds, so the state
//! machines (and users) can decide what to do without knowing which store is behind
//! the trait: retry an [`Error::Unavailable`], re-acquire after an [`Error::Lost`], drop
//! the work after an [`Error::Fenced`], fix the call after an [`Error::InvalidInput`].

use std::time::Duration;

use crate::types::{FencingToken, HolderId, ItemId, Key};

/// A boxed error source from a backend's client library.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The result type of every store operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The answer of a batch call (`acquire_many`, `renew_many`, `reap_many`, ...):
/// `Err` when the call as a whole failed, and then no entry took effect that the
/// method's contract does not name; else one answer per entry sent, in the order
/// sent, each entry succeeding or failing alone.
pub type BatchResult<T> = Result<Vec<Result<T>>>;

/// One entry of a `join_session_many` batch: the member's key and its holder.
pub type JoinAsk = (Key, HolderId);

/// Why a lease holder no longer holds its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostCause {
    /// The store clock passed the lease's expiry. An expired lease is never renewed,
    /// even when nobody else took the key: acquire again for a new token.
    Expired,
    /// Another acquisition holds the key now, under a newer token.
    Superseded,
    /// The key has no lease any more: it was released, or it expired and was reaped.
    Released,
    /// The holder gave the lease up itself, before the store could expire it: its
    /// local safety deadline passed without a successful renewal, its renewals failed
    /// permanently, or it stopped renewing. Answered by the holder's own checks
    /// ([`Leadership::check`](crate::Leadership::check),
    /// [`Claimed::check`](crate::Claimed::check)), never by a store.
    GaveUp,
    /// The store's server was promoted from an asynchronous replica, or restored from
    /// a backup, after the lease was drawn: writes made under it (a completion, a
    /// release) may be gone, so it is not renewed. Its items go back to the queue when
    /// it is reaped; acquire again for a new token.
    Failover,
    /// A job the member held made no progress (no
    /// [`Claimed::progress`](crate::Claimed::progress) or
    /// [`Member::progress`](crate::Member::progress) since its claim) for its
    /// [`progress_timeout`](crate::MemberConfig::progress_timeout): its watchdog told the
    /// work to stop, gave it the safety margin, handed its items back and released the
    /// lease. Answered by the member's own checks, never by a store.
    Stalled,
}

impl std::fmt::Display for LostCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LostCause::Expired => "expired",
            LostCause::Superseded => "superseded by a newer token",
            LostCause::Released => "released or reaped",
            LostCause::GaveUp => "given up by its holder (local safety deadline passed)",
            LostCause::Failover => "drawn before a failover that may have lost its writes",
            LostCause::Stalled => "released by its watchdog: its work made no progress in time",
        })
    }
}

/// What is wrong with an input that was rejected with [`Error::InvalidInput`].
///
/// An input rejected with one of these never changed any state in the store.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InputProblem {
    /// The value is empty.
    Empty,
    /// The value is longer than allowed.
    TooLong {
        /// The maximum length in bytes.
        max: usize,
        /// The length that was given.
        len: usize,
    },
    /// The value contains a control character (or, for names that form store keys,
    /// a character outside the allowed set).
    ForbiddenChar {
        /// The first offending character.
        ch: char,
    },
    /// The bytes are not valid UTF-8.
    NotUtf8,
    /// A duration is shorter than the store's minimum.
    TooShort {
        /// The store's minimum.
        min: Duration,
        /// The duration that was given.
        got: Duration,
    },
    /// A duration is longer than the store's maximum.
    TooLongDuration {
        /// The store's maximum.
        max: Duration,
        /// The duration that was given.
        got: Duration,
    },
    /// A count (limit, batch size, attempts) is zero.
    Zero,
    /// A value that does not parse (a URL, an option).
    Malformed {
        /// What was expected.
        expected: &'static str,
    },
    /// A URL scheme that no compiled-in backend serves.
    UnknownScheme {
        /// The scheme that was given.
        scheme: String,
        /// The schemes compiled into this build.
        known: Vec<&'static str>,
    },
    /// The lease belongs to another namespace or store than the one it was given to.
    ForeignLease,
    /// A URL query parameter the store does not take (names are case-sensitive).
    UnknownParameter {
        /// The parameter's name, as given.
        name: String,
        /// The parameters the store takes.
        known: Vec<&'static str>,
    },
    /// A URL query parameter given more than once.
    RepeatedParameter {
        /// The parameter's name.
        name: String,
    },
    /// No item with this id is in the store (never enqueued, or completed).
    NoSuchItem,
    /// The item is not in the dead-letter set (pending or owned): only a
    /// dead-lettered item can be retried.
    NotDeadLettered,
    /// A paging cursor that does not belong to the listing (a key of another space).
    OtherSpace,
    /// An operation this store does not offer (its [`Capabilities`](crate::Capabilities)
    /// say which it does): work items on a store for elections alone, or the
    /// operator's views on a store that keeps none. `what` names the operation.
    Unsupported,
    /// A URL query parameter without a value (`ns=` or `ns`).
    EmptyParameter {
        /// The parameter's name.
        name: String,
    },
    /// A URL parameter (or port) that is not a whole number in its range.
    OutOfRange {
        /// The parameter's name.
        name: &'static str,
        /// The smallest value accepted.
        min: u64,
        /// The largest value accepted.
        max: u64,
        /// The value that was given.
        got: String,
    },
    /// A URL parameter whose value is not one the store accepts.
    BadValue {
        /// The parameter's name.
        name: &'static str,
        /// The value that was given.
        got: String,
        /// What is accepted.
        expected: String,
    },
}

impl std::fmt::Display for InputProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InputProblem::Empty => write!(f, "must not be empty"),
            InputProblem::TooLong { max, len } => {
                write!(f, "is {len} bytes long, the maximum is {max}")
            }
            InputProblem::ForbiddenChar { ch } => {
                write!(f, "contains the forbidden character {ch:?}")
            }
            InputProblem::NotUtf8 => write!(f, "is not valid UTF-8"),
            InputProblem::TooShort { min, got } => {
                write!(
                    f,
                    "is {got:?}, shorter than this store's minimum of {min:?}"
                )
            }
            InputProblem::TooLongDuration { max, got } => {
                write!(f, "is {got:?}, longer than this store's maximum of {max:?}")
            }
            InputProblem::Zero => write!(f, "must be at least 1"),
            InputProblem::Malformed { expected } => write!(f, "is malformed: expected {expected}"),
            InputProblem::UnknownScheme { scheme, known } => write!(
                f,
                "has the unknown scheme {scheme:?}; schemes compiled into this build: {}",
                known.join(", ")
            ),
            InputProblem::ForeignLease => write!(f, "belongs to another store or namespace"),
            InputProblem::NoSuchItem => write!(f, "names no item in this namespace"),
            InputProblem::NotDeadLettered => write!(f, "is not dead-lettered"),
            InputProblem::OtherSpace => write!(f, "is a key of another space"),
            InputProblem::Unsupported => write!(f, "is not offered by this store"),
            InputProblem::UnknownParameter { name, known } => write!(
                f,
                "has the unknown parameter `{name}` (names are case-sensitive); this store takes: {}",
                known.join(", ")
            ),
            InputProblem::RepeatedParameter { name } => {
                write!(f, "gives the parameter `{name}` more than once; give it once")
            }
            InputProblem::EmptyParameter { name } => write!(
                f,
                "gives the parameter `{name}` no value; give one, or leave `{name}` out for its default"
            ),
            InputProblem::OutOfRange {
                name,
                min,
                max,
                got,
            } => write!(
                f,
                "has `{name}={got}`: expected a whole number from {min} to {max}"
            ),
            InputProblem::BadValue {
                name,
                got,
                expected,
            } => write!(f, "has `{name}={got}`: expected {expected}"),
        }
    }
}

/// The error of every operation in the framework.
///
/// The variants are backend-neutral. [`Error::is_retryable`] tells transient transport
/// faults (worth retrying with backoff) from permanent answers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `acquire` found a live lease on the key.
    #[error("lease {key} is held by {holder} (token {token})")]
    Held {
        /// The key that was asked for.
        key: Key,
        /// Who holds it now.
        holder: HolderId,
        /// The current holder's fencing token.
        token: FencingToken,
    },
    /// The caller's lease is no longer current: it must stop acting under that token.
    #[error("lease {key} (token {token}) is lost: {reason}")]
    Lost {
        /// The lease's key.
        key: Key,
        /// The token that is no longer current.
        token: FencingToken,
        /// Why it was lost.
        reason: LostCause,
    },
    /// An item operation was refused because the item is no longer owned by the token
    /// given (it was requeued, completed, or dead-lettered): a stale owner can do no harm.
    #[error("item {item} is not owned by token {token}")]
    Fenced {
        /// The item.
        item: ItemId,
        /// The token that tried to act on it.
        token: FencingToken,
    },
    /// The input was rejected before anything changed.
    #[error("invalid {what}: {problem}")]
    InvalidInput {
        /// Which input (`"key"`, `"ttl"`, `"payload"`, ...).
        what: &'static str,
        /// What is wrong with it.
        problem: InputProblem,
    },
    /// A transient fault (connection refused or reset, timeout, busy database,
    /// serialization conflict): the operation may or may not have been applied, and
    /// retrying it with backoff is expected to succeed.
    #[error("{backend} store unavailable: {source}")]
    Unavailable {
        /// The backend's name (`"redis"`, `"postgres"`, ...).
        backend: &'static str,
        /// The client library's error.
        #[source]
        source: BoxError,
    },
    /// A permanent failure of the backend (a schema it does not know, a refused
    /// command, a corrupt record). Retrying will not help.
    #[error("{backend} store error: {source}")]
    Backend {
        /// The backend's name.
        backend: &'static str,
        /// The client library's error.
        #[source]
        source: BoxError,
    },
}

impl Error {
    /// True for faults worth retrying with backoff ([`Error::Unavailable`]); false for
    /// every answer that retrying cannot change.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Unavailable { .. })
    }

    /// Shorthand for an [`Error::InvalidInput`].
    pub fn invalid(what: &'static str, problem: InputProblem) -> Self {
        Error::InvalidInput { what, problem }
    }

    /// Shorthand for an [`Error::Unavailable`] from any error source.
    pub fn unavailable(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Unavailable {
            backend,
            source: source.into(),
        }
    }

    /// Shorthand for an [`Error::Backend`] from any error source.
    pub fn backend(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Backend {
            backend,
            source: source.into(),
        }
    }

    /// The reason, when this is an [`Error::Lost`].
    pub fn lost_reason(&self) -> Option<LostCause> {
        match self {
            Error::Lost { reason, .. } => Some(*reason),
            _ => None,
        }
    }
}

/// A stored record (a row, a key's value, a script's reply) that this build cannot
/// have written: a corrupt or foreign record, or one of another version. The source
/// of an [`Error::Backend`], built with [`Error::corrupt`]; every backend reports
/// such records with this one type.
///
/// ```
/// use liveness_core::{Corrupt, Error};
///
/// let e = Error::corrupt("mystore", "the token column holds -3");
/// assert!(!e.is_retryable());
/// match &e {
///     Error::Backend { source, .. } => assert!(source.is::<Corrupt>()),
///     other => panic!("{other:?}"),
/// }
/// assert_eq!(
///     e.to_string(),
///     "mystore store error: corrupt record: the token column holds -3"
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("corrupt record: {what}")]
#[non_exhaustive]
pub struct Corrupt {
    /// What could not be read, and where (a column, a key, an operation's reply).
    pub what: std::borrow::Cow<'static, str>,
}

/// The schema of a store's database is newer than this build knows (a newer version
/// of the backend migrated it): the backend refuses it rather than misread it, and
/// leaves it untouched. The source of an [`Error::Backend`].
///
/// ```
/// use liveness_core::{Error, SchemaTooNew};
///
/// let e = Error::backend(
///     "mystore",
///     SchemaTooNew::new("/tmp/x.db", 3, 2),
/// );
/// assert_eq!(
///     e.to_string(),
///     "mystore store error: /tmp/x.db: database schema version 3 is newer than this build \
///      supports (2); upgrade liveness"
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{location}: database schema version {found} is newer than this build supports \
     ({supported}); upgrade liveness"
)]
#[non_exhaustive]
pub struct SchemaTooNew {
    /// Where the schema lives (a database file, a PostgreSQL schema).
    pub location: String,
    /// The newest migration version applied to the database.
    pub found: i64,
    /// The newest migration version this build carries.
    pub supported: i64,
}

impl SchemaTooNew {
    /// The schema at `location` is at version `found`; this build carries up to
    /// `supported`.
    pub fn new(location: impl Into<String>, found: i64, supported: i64) -> SchemaTooNew {
        SchemaTooNew {
            location: location.into(),
            found,
            supported,
        }
    }
}

impl Error {
    /// An [`Error::Backend`] whose source is a [`Corrupt`] record: `what` says which
    /// record and what is wrong with it.
    pub fn corrupt(backend: &'static str, what: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        Error::backend(backend, Corrupt { what: what.into() })
    }

    /// A client library's error as [`Error::Unavailable`] when `is_transient` says
    /// so, else as [`Error::Backend`]: the last step of every backend's error mapping
    /// (`error::map`), which supplies the classification.
    ///
    /// ```
    /// use liveness_core::Error;
    ///
    /// let timed_out = std::io::Error::from(std::io::ErrorKind::TimedOut);
    /// let e = Error::classify("mystore", timed_out, |e| e.kind() == std::io::ErrorKind::TimedOut);
    /// assert!(e.is_retryable());
    /// ```
    pub fn classify<E: Into<BoxError>>(
        backend: &'static str,
        source: E,
        is_transient: impl FnOnce(&E) -> bool,
    ) -> Self {
        if is_transient(&source) {
            Error::unavailable(backend, source)
        } else {
            Error::backend(backend, source)
        }
    }
}
