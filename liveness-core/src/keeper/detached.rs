//! What keeps a rider join that does not hand its member over (its caller dropped it,
//! or it gave up) from leaving a member in the store without a handle.
//!
//! A riding member has no expiry of its own: a join the store applied whose member
//! nobody holds would ride the session, holding its name, until the session ends. Two
//! ways lead there, and each is closed here:
//! - the call in flight when the caller drops the join: [`join_detached`] sends it from
//!   a task of its own, which waits for the answer and releases what it joined;
//! - an earlier attempt whose reply was lost (the store may have applied it), not yet
//!   adopted: [`Leftovers`] remembers its key, and when the join ends without handing
//!   that member over, releases the lease it finds there under this instance's holder.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::departure::retried;
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::store::Store;
use crate::types::{HolderId, Key};

/// Sends `call` (a `join_session` or `join_session_many` on `store`) from a task of its
/// own and answers what it answers. If the caller drops this future before the answer
/// comes, the task still waits for it and releases the leases `joined` finds in it.
/// A task that panics answers `Backend`.
pub(crate) async fn join_detached<T, C, J>(store: &Arc<dyn Store>, call: C, joined: J) -> Result<T>
where
    T: Send + 'static,
    C: Future<Output = Result<T>> + Send + 'static,
    J: FnOnce(T) -> Vec<Lease> + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    let store = store.clone();
    tokio::spawn(async move {
        let Err(Ok(answer)) = tx.send(call.await) else {
            return;
        };
        // The caller is gone: nobody will hold these members. They leave.
        for lease in joined(answer) {
            if let Err(e) = retried(|| store.release(&lease)).await {
                tracing::warn!(key = %lease.key, error = %e, "a member joined for a dropped call could not leave");
            }
        }
    });
    rx.await.unwrap_or_else(|_| {
        Err(Error::backend(
            "session",
            "a join task ended without answering",
        ))
    })
}

/// The keys where a rider join may have left a lease of this instance that no handle
/// holds: an attempt of it answered a lease or failed with a transient fault (its
/// reply may be lost), and its member has not been handed over. Dropped (the join
/// ended, answered or not), it looks at each such key in the background and releases
/// the lease it finds there if its holder is the join's instance holder id, which no
/// other instance has.
pub(crate) struct Leftovers {
    store: Arc<dyn Store>,
    keys: HashMap<Key, HolderId>,
    /// False for a lease of its own, which expires by its ttl: nothing is kept.
    riding: bool,
}

impl Leftovers {
    /// No key yet, on `store`, for a join that rides a session when `riding` (else
    /// it keeps nothing: a lease of its own expires by its ttl).
    pub(crate) fn new(store: &Arc<dyn Store>, riding: bool) -> Leftovers {
        Leftovers {
            store: store.clone(),
            keys: HashMap::new(),
            riding,
        }
    }

    /// An attempt on `key` under `holder` left a lease of ours there (answered, and
    /// not yet handed over), or may have (its reply was lost).
    pub(crate) fn maybe_left(&mut self, key: &Key, holder: &HolderId) {
        if self.riding {
            self.keys.insert(key.clone(), holder.clone());
        }
    }

    /// The member of `key` was handed over: its lease is held, nothing is left there.
    pub(crate) fn handed_over(&mut self, key: &Key) {
        self.keys.remove(key);
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        let keys = std::mem::take(&mut self.keys);
        if keys.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = self.store.clone();
        runtime.spawn(async move {
            for (key, holder) in keys {
                let info = match retried(|| store.inspect(&key)).await {
                    Ok(Some(info)) if info.holder == holder => info,
                    Ok(_) => continue,
                    Err(e) => {
                        tracing::warn!(%key, error = %e, "a join's leftover lease could not be looked up");
                        continue;
                    }
                };
                let lease = Lease::granted(store.issuer(), key.clone(), holder, info.token, info.ttl);
                if let Err(e) = retried(|| store.release(&lease)).await {
                    tracing::warn!(%key, error = %e, "a join's leftover lease could not be released");
                }
            }
        });
    }
}
