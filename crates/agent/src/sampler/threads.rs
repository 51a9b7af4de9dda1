//! A fixed-size, lock-free map from Linux tid to the thread's JNIEnv and stack bounds, filled at
//! ThreadStart and
//! read by the signal handler (which may neither lock nor allocate, and must not rely on lazily
//! allocated thread-local storage of a dlopen'ed library).
//!
//! Open addressing with linear probing; a removed entry becomes a tombstone that a later insert
//! reuses, so thread churn does not fill the table. Each tid is inserted and removed only by its
//! own thread (ThreadStart / ThreadEnd run on the thread itself), so entries never race.

use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};

const EMPTY: u32 = 0;
const TOMBSTONE: u32 = u32::MAX;

pub struct ThreadTable {
    tids: Box<[AtomicU32]>,
    envs: Box<[AtomicPtr<c_void>]>,
    /// The thread's stack (lowest address, highest address), or (0, 0) when unknown.
    stacks: Box<[(AtomicUsize, AtomicUsize)]>,
    mask: usize,
}

impl ThreadTable {
    pub fn new(capacity: usize) -> ThreadTable {
        let capacity = capacity.next_power_of_two();
        ThreadTable {
            tids: (0..capacity).map(|_| AtomicU32::new(EMPTY)).collect(),
            envs: (0..capacity)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            stacks: (0..capacity)
                .map(|_| (AtomicUsize::new(0), AtomicUsize::new(0)))
                .collect(),
            mask: capacity - 1,
        }
    }

    fn start(&self, tid: u32) -> usize {
        (tid as usize).wrapping_mul(0x9E37_79B9) & self.mask
    }

    /// Records `env` for `tid`; false when the table is full (the thread then goes unsampled
    /// unless the caller has another way to find its JNIEnv).
    pub fn insert(&self, tid: u32, env: *mut c_void) -> bool {
        self.insert_with_stack(tid, env, (0, 0))
    }

    /// [`insert`](Self::insert), with the thread's stack bounds (lowest, highest address).
    pub fn insert_with_stack(&self, tid: u32, env: *mut c_void, stack: (usize, usize)) -> bool {
        if tid == EMPTY || tid == TOMBSTONE {
            return false;
        }
        let start = self.start(tid);
        for i in 0..=self.mask {
            let idx = (start + i) & self.mask;
            let cur = self.tids[idx].load(Ordering::Acquire);
            let claimed = cur == tid
                || ((cur == EMPTY || cur == TOMBSTONE)
                    && self.tids[idx]
                        .compare_exchange(cur, tid, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok());
            if claimed {
                self.stacks[idx].0.store(stack.0, Ordering::Release);
                self.stacks[idx].1.store(stack.1, Ordering::Release);
                self.envs[idx].store(env, Ordering::Release);
                return true;
            }
        }
        false
    }

    /// The JNIEnv of `tid`, or null. Async-signal-safe: atomics only, bounded probing.
    pub fn lookup(&self, tid: u32) -> *mut c_void {
        self.find(tid).map_or(std::ptr::null_mut(), |idx| {
            self.envs[idx].load(Ordering::Acquire)
        })
    }

    /// The stack bounds of `tid` (lowest, highest address), when known. Async-signal-safe.
    pub fn stack(&self, tid: u32) -> Option<(usize, usize)> {
        let idx = self.find(tid)?;
        let lo = self.stacks[idx].0.load(Ordering::Acquire);
        let hi = self.stacks[idx].1.load(Ordering::Acquire);
        (lo < hi).then_some((lo, hi))
    }

    fn find(&self, tid: u32) -> Option<usize> {
        let start = self.start(tid);
        for i in 0..=self.mask {
            let idx = (start + i) & self.mask;
            let cur = self.tids[idx].load(Ordering::Acquire);
            if cur == tid {
                return Some(idx);
            }
            if cur == EMPTY {
                break;
            }
        }
        None
    }

    pub fn remove(&self, tid: u32) {
        let start = self.start(tid);
        for i in 0..=self.mask {
            let idx = (start + i) & self.mask;
            let cur = self.tids[idx].load(Ordering::Acquire);
            if cur == tid {
                self.envs[idx].store(std::ptr::null_mut(), Ordering::Release);
                self.tids[idx].store(TOMBSTONE, Ordering::Release);
                return;
            }
            if cur == EMPTY {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: usize) -> *mut c_void {
        n as *mut c_void
    }

    #[test]
    fn insert_lookup_remove_and_reuse() {
        let t = ThreadTable::new(8);
        assert!(t.insert(10, p(1)));
        assert!(t.insert(18, p(2)));
        assert_eq!(t.lookup(10), p(1));
        assert_eq!(t.lookup(18), p(2));
        assert!(t.lookup(11).is_null());
        t.remove(10);
        assert!(t.lookup(10).is_null());
        assert_eq!(t.lookup(18), p(2), "probe chains survive a removal");
        for tid in 100..107 {
            assert!(t.insert(tid, p(tid as usize)));
        }
        assert!(!t.insert(200, p(3)), "a full table refuses");
        t.remove(103);
        assert!(t.insert(200, p(3)), "tombstones are reused");
        assert_eq!(t.lookup(200), p(3));
        assert_eq!(t.lookup(106), p(106));
    }
}
