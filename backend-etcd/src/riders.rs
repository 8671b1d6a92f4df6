//! The riding members a handle knows of: which session each rides, so that a claim's
//! guard can judge it through that session.

use std::collections::HashMap;
use std::sync::Mutex;

use liveness_core::sync::lock;
use liveness_core::{FencingToken, Key, Lease};

/// The riding members a handle joined or met, by key: their token and their
/// session's key and token. A claim's guard judges them through their session
/// ([`EtcdStore::live_guard`]); a member not known here is learnt on its first
/// claim, which then asks again.
#[derive(Default)]
pub(crate) struct Riders(Mutex<HashMap<Key, (FencingToken, Key, FencingToken)>>);

impl Riders {
    /// Remembers that `lease` rides the session `session` with token `st`.
    pub(crate) fn remember(&self, lease: &Lease, session: &Key, st: FencingToken) {
        lock(&self.0).insert(lease.key.clone(), (lease.token, session.clone(), st));
    }

    /// The session `lease` rides (its key and token), when this handle knows it.
    pub(crate) fn of(&self, lease: &Lease) -> Option<(Key, FencingToken)> {
        match lock(&self.0).get(&lease.key) {
            Some((token, session, st)) if *token == lease.token => Some((session.clone(), *st)),
            _ => None,
        }
    }

    /// Forgets `lease` (released).
    pub(crate) fn forget(&self, lease: &Lease) {
        let mut riders = lock(&self.0);
        if riders
            .get(&lease.key)
            .is_some_and(|(t, _, _)| *t == lease.token)
        {
            riders.remove(&lease.key);
        }
    }
}
