//! Mapping etcd client errors onto the framework's [`Error`] kinds: the one place
//! where this backend decides what is worth retrying, and the backend's own faults.

use std::time::Duration;

use liveness_core::Error;

use crate::BACKEND;

/// How many times an optimistic transaction is retried under contention before the
/// call gives up with [`Fault::Contention`] (`Unavailable`).
pub(crate) const MAX_TRIES: usize = 64;

/// The retries of one call's optimistic transaction: one that lost a race is tried
/// again, at once the first two times, then after a jittered pause that doubles from
/// 1 ms up to 50 ms, until the handle's timeout has passed since the call began and
/// [`MAX_TRIES`] tries were made: only then does the call give up with
/// [`Fault::Contention`]. Claimers racing for the same lowest pending items then take
/// turns instead of failing.
pub(crate) struct Conflicts {
    lost: u32,
    until: tokio::time::Instant,
}

impl Conflicts {
    /// The retries of a call beginning now, on a handle with `timeout`.
    pub(crate) fn new(timeout: Duration) -> Conflicts {
        Conflicts {
            lost: 0,
            until: tokio::time::Instant::now() + timeout,
        }
    }

    /// After a lost race: waits before the next try; false when the call must give
    /// up.
    pub(crate) async fn again(&mut self) -> bool {
        self.lost = self.lost.saturating_add(1);
        if self.lost as usize >= MAX_TRIES && tokio::time::Instant::now() >= self.until {
            return false;
        }
        if self.lost > 2 {
            let cap = Duration::from_millis(1u64 << (self.lost - 3).min(6))
                .min(Duration::from_millis(50));
            let pause = cap.mul_f64(0.5 + fastrand::f64() / 2.0);
            tokio::time::sleep(pause).await;
        }
        true
    }
}

/// What went wrong inside this backend (the source of a `Backend` or `Unavailable`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Fault {
    #[error("lease-bound key {0:?} exists without its record")]
    BoundWithoutRecord(String),
    #[error("gave up after {MAX_TRIES} conflicting transactions")]
    Contention,
    #[error("a task of this call failed: {0}")]
    Task(String),
    #[error("etcd did not answer within {0:?}")]
    Timeout(Duration),
    /// A keep-alive answered in another raft term than a read made after it: maybe by
    /// a deposed leader, whose renewal the cluster does not keep.
    #[error(
        "a keep-alive was answered in raft term {answered}, a read after it in term \
         {current}: the renewal is not counted"
    )]
    TermChanged { answered: u64, current: u64 },
    #[cfg(feature = "tls")]
    #[error("could not read {0:?}")]
    Unreadable(std::path::PathBuf, #[source] std::io::Error),
}

/// Maps an etcd client error: transport faults, timeouts, leader changes and
/// overload to [`Error::Unavailable`]; everything else to [`Error::Backend`].
pub(crate) fn map(e: etcd_client::Error) -> Error {
    Error::classify(BACKEND, e, is_transient)
}

/// True for transport faults, timeouts, leader changes and overload.
fn is_transient(e: &etcd_client::Error) -> bool {
    use etcd_client::Error as E;
    use tonic::Code;
    match e {
        E::GRpcStatus(s) => matches!(
            s.code(),
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Cancelled
                | Code::Aborted
                | Code::ResourceExhausted
                | Code::Unknown
        ),
        E::TransportError(_)
        | E::IoError(_)
        | E::LeaseKeepAliveError(_)
        | E::WatchError(_)
        | E::EndpointError(_) => true,
        _ => false,
    }
}

/// True when etcd answered that a lease does not exist (expired or revoked).
pub(crate) fn is_not_found(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => s.code() == tonic::Code::NotFound,
        etcd_client::Error::LeaseKeepAliveError(m) => m.contains("not found"),
        _ => false,
    }
}

/// True when etcd answered that the revision a read asked for was compacted away.
pub(crate) fn is_compacted(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.code() == tonic::Code::OutOfRange)
}

/// A value this build cannot have written ([`liveness_core::Corrupt`]); `what`
/// says where (see [`at_key`]).
pub(crate) fn corrupt(what: impl Into<std::borrow::Cow<'static, str>>) -> Error {
    Error::corrupt(BACKEND, what)
}

/// The detail of a corrupt value at etcd key `key`, for [`corrupt`].
pub(crate) fn at_key(key: &[u8]) -> String {
    format!(
        "corrupt value at etcd key {:?}",
        String::from_utf8_lossy(key)
    )
}
