//! The agent's one mutex helper: every lock in the agent is taken through [`lock`], which ignores
//! poisoning, so that a panic contained elsewhere never takes the agent (or the JVM) down with it.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, ignoring poisoning: a panic elsewhere never takes the agent down with it.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
