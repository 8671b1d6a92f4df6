//! Small synchronization helpers shared by the core and the backends.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, also when a thread panicked while holding it.
///
/// Every mutex in this workspace guards state that each critical section leaves
/// consistent before it can panic (plain inserts, removes and counters), so a
/// poisoned lock carries no torn state: the guard is taken back instead of
/// propagating the panic to every later caller.
///
/// ```
/// use std::sync::Mutex;
/// use liveness_core::sync::lock;
///
/// let m = Mutex::new(1);
/// *lock(&m) += 1;
/// assert_eq!(*lock(&m), 2);
/// ```
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
