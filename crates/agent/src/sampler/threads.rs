//! A fixed-size, lock-free map from Linux tid to the thread's JNIEnv, stack bounds and trace
//! context (the traced call tree it is in, which trace mode's Java runtime writes straight into
//! the slot's cell), filled at ThreadStart and
//! read by the signal handler (which may neither lock nor allocate, and must not rely on lazily
//! allocated thread-local storage of a dlopen'ed library).
//!
//! Open addressing with linear probing; a removed entry becomes a tombstone that a later insert
//! reuses, so thread churn does not fill the table. Each tid is inserted and removed only by its
//! own thread (ThreadStart / ThreadEnd run on the thread itself), so entries never race.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

const EMPTY: u32 = 0;
const TOMBSTONE: u32 = u32::MAX;

pub struct ThreadTable {
    tids: Box<[AtomicU32]>,
    envs: Box<[AtomicPtr<c_void>]>,
    /// The thread's stack (lowest address, highest address), or (0, 0) when unknown.
    stacks: Box<[(AtomicUsize, AtomicUsize)]>,
    /// The traced call tree the thread is in (0: none), written by the thread itself.
    contexts: Box<[AtomicU64]>,
    /// `Thread.getId()` of the thread whose context the slot holds (0: none published).
    java_ids: Box<[AtomicU64]>,
    /// The token of the virtual thread mounted on this carrier (0: none), written by the
    /// VirtualThreadMount/Unmount events on the carrier itself and read by the signal handler.
    mounted: Box<[AtomicU64]>,
    /// The carrier's CPU time (ns) when that virtual thread mounted.
    mounted_cpu: Box<[AtomicU64]>,
    /// Whether any thread was given a context cell since the contexts were last cleared (the
    /// safepoint sampler skips its scans otherwise).
    contexts_in_use: AtomicBool,
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
            contexts: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
            java_ids: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
            mounted: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
            mounted_cpu: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
            contexts_in_use: AtomicBool::new(false),
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
                if cur != tid {
                    // A new thread in this slot: nothing of the slot's last thread carries over.
                    self.contexts[idx].store(0, Ordering::Release);
                    self.java_ids[idx].store(0, Ordering::Release);
                    self.mounted[idx].store(0, Ordering::Release);
                }
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

    /// The trace context of `tid` (0: none). Async-signal-safe.
    pub fn context(&self, tid: u32) -> u64 {
        self.find(tid)
            .map_or(0, |idx| self.contexts[idx].load(Ordering::Relaxed))
    }

    /// The cell the thread `tid` (the caller, with its JNIEnv `env`) writes its trace context
    /// into, its slot claimed if it has none yet (a thread that started before the agent);
    /// `java_id` is its `Thread.getId()`, for samplers that know threads by that. None when the
    /// table is full.
    pub fn context_cell(&self, tid: u32, env: *mut c_void, java_id: u64) -> Option<&AtomicU64> {
        let idx = match self.find(tid) {
            Some(idx) => idx,
            None => {
                if !self.insert(tid, env) {
                    return None;
                }
                self.find(tid)?
            }
        };
        self.java_ids[idx].store(java_id, Ordering::Release);
        self.contexts_in_use.store(true, Ordering::Release);
        Some(&self.contexts[idx])
    }

    /// Forgets every thread's context (a trace session ended).
    pub fn clear_contexts(&self) {
        self.contexts_in_use.store(false, Ordering::Release);
        for c in self.contexts.iter() {
            c.store(0, Ordering::Release);
        }
    }

    /// Every published context by `Thread.getId()` (for the safepoint sampler).
    pub fn contexts_by_java_id(&self) -> std::collections::HashMap<u64, u64> {
        let mut m = std::collections::HashMap::new();
        if !self.contexts_in_use.load(Ordering::Acquire) {
            return m;
        }
        for idx in 0..=self.mask {
            let t = self.tids[idx].load(Ordering::Acquire);
            if t == EMPTY || t == TOMBSTONE {
                continue;
            }
            let id = self.java_ids[idx].load(Ordering::Acquire);
            let c = self.contexts[idx].load(Ordering::Relaxed);
            if id != 0 && c != 0 {
                m.insert(id, c);
            }
        }
        m
    }

    /// Notes the virtual thread (a token, 0: none) now mounted on the carrier `tid`; nothing
    /// when `tid` is not in the table.
    /// `cpu_ns` is the carrier's CPU time at the mount. Only the carrier itself writes its cell.
    pub fn set_mounted(&self, tid: u32, token: u64, cpu_ns: u64) {
        if let Some(idx) = self.find(tid) {
            self.mounted_cpu[idx].store(cpu_ns, Ordering::Relaxed);
            self.mounted[idx].store(token, Ordering::Release);
        }
    }

    /// The virtual thread mounted on `tid` (0: none) and the carrier's CPU time at its mount.
    pub fn mounted_at(&self, tid: u32) -> (u64, u64) {
        self.find(tid).map_or((0, 0), |idx| {
            let token = self.mounted[idx].load(Ordering::Acquire);
            (token, self.mounted_cpu[idx].load(Ordering::Relaxed))
        })
    }

    /// The virtual thread mounted on `tid` (0: none). Async-signal-safe: no lock, no allocation.
    pub fn mounted(&self, tid: u32) -> u64 {
        self.find(tid)
            .map_or(0, |idx| self.mounted[idx].load(Ordering::Acquire))
    }

    /// Forgets every mounted virtual thread (when a session stops tracking them).
    pub fn clear_mounted(&self) {
        for m in self.mounted.iter() {
            m.store(0, Ordering::Release);
        }
    }

    /// Every known thread's tid by its JNIEnv address (for naming a virtual thread's carrier).
    pub fn tids_by_env(&self) -> std::collections::HashMap<usize, u32> {
        let mut m = std::collections::HashMap::new();
        for idx in 0..=self.mask {
            let t = self.tids[idx].load(Ordering::Acquire);
            if t == EMPTY || t == TOMBSTONE {
                continue;
            }
            let env = self.envs[idx].load(Ordering::Acquire);
            if !env.is_null() {
                m.insert(env as usize, t);
            }
        }
        m
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

    #[test]
    fn contexts_follow_their_thread() {
        let t = ThreadTable::new(8);
        assert!(t.insert(10, p(1)));
        let cell = t.context_cell(10, p(1), 77).unwrap();
        cell.store(5, Ordering::Relaxed);
        assert_eq!(t.context(10), 5);
        // A thread the table did not know yet (started before the agent) claims a slot.
        t.context_cell(11, p(2), 78)
            .unwrap()
            .store(6, Ordering::Relaxed);
        assert_eq!(t.context(11), 6);
        assert_eq!(t.lookup(11), p(2));
        let by_id = t.contexts_by_java_id();
        assert_eq!((by_id.get(&77), by_id.get(&78)), (Some(&5), Some(&6)));
        // A new thread taking a removed thread's slot starts without its context.
        t.remove(10);
        assert_eq!(t.context(10), 0);
        for tid in [10, 18, 26, 34, 42, 50, 58] {
            t.insert(tid, p(3));
        }
        assert!((0..8).all(|i| t.contexts[i].load(Ordering::Relaxed) != 5));
    }
}
