//! The links' one way to take a lock.

use std::sync::Mutex;

/// Locks `m`, whether or not a holder panicked.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section is a single insert, remove or clone.
    m.lock().unwrap_or_else(|p| p.into_inner())
}
