//! A bounded multi-producer, single-consumer queue of stack samples that signal handlers can use:
//! no allocation, no lock, no waiting (a full queue drops the sample and counts it).
//!
//! The design is Dmitry Vyukov's bounded queue: every slot carries a sequence number that says
//! whether it is free for the producer at position `pos` (`seq == pos`) or holds a sample for the
//! consumer (`seq == pos + 1`). A producer reserves a slot, lets AsyncGetCallTrace write the frames
//! straight into the slot's frame buffer, then publishes it; nothing is copied.
//! Crates such as crossbeam's `ArrayQueue` spin while another thread is mid-operation, which a
//! signal handler must never do, hence this small queue of our own.

#![allow(unsafe_code)]

use crate::sync::lock;
use jvmprof_jvmti::asgct::CallFrame;
use std::cell::UnsafeCell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the handler records besides the frames.
#[derive(Clone, Copy, Debug, Default)]
pub struct Header {
    pub tid: u32,
    /// Frames written (> 0), or a failure code (≤ 0, AsyncGetCallTrace's, or [`NO_JNI_ENV`]).
    pub num_frames: i32,
    pub time_ns: u64,
    /// How many sampling periods this sample stands for: 1, or 1 + the expirations a POSIX
    /// timer missed before this signal was delivered (`si_overrun`).
    pub weight: u32,
    /// The first walk failed and a retry ([`jvmprof_jvmti::vmstructs`]) got the stack.
    pub recovered: bool,
    /// The traced call tree the thread was in (trace mode), 0 for none.
    pub context: u64,
    /// The virtual thread mounted on the thread (a token of `engine::vthreads`), 0 for none.
    pub vthread: u64,
}

/// `num_frames` when the interrupted thread has no JNIEnv (a JVM-internal thread).
pub const NO_JNI_ENV: i32 = -100;
/// `num_frames` of the record a new thread's CPU engine adds for the sampling periods that fell
/// in the CPU the thread used before its clock was armed (JVM thread start-up).
pub const THREAD_START: i32 = -101;

struct Slot {
    seq: AtomicU64,
    header: UnsafeCell<Header>,
}

pub struct Ring {
    slots: Box<[Slot]>,
    frames: Box<[UnsafeCell<CallFrame>]>,
    depth: usize,
    mask: u64,
    enqueue: AtomicU64,
    /// The consumer position; the lock is taken by the single consumer only, never by producers.
    dequeue: Mutex<u64>,
    dropped: AtomicU64,
}

// SAFETY: slot contents are only touched by the one producer that reserved the slot (until it
// publishes with a release store of `seq`) and then by the one consumer (after an acquire load
// of `seq`), so no two threads access a slot's cells at the same time.
unsafe impl Sync for Ring {}
// SAFETY: the ring owns its buffers; the raw method pointers in frames are plain ids.
unsafe impl Send for Ring {}

/// A reserved slot; must be published with [`Ring::publish`].
pub struct Reservation {
    pos: u64,
}

impl Ring {
    /// A ring of `capacity` slots (rounded up to a power of two) of `depth` frames each.
    pub fn new(capacity: usize, depth: usize) -> Ring {
        let capacity = capacity.next_power_of_two().max(2);
        let slots = (0..capacity)
            .map(|i| Slot {
                seq: AtomicU64::new(i as u64),
                header: UnsafeCell::new(Header::default()),
            })
            .collect();
        let frames = (0..capacity * depth)
            .map(|_| UnsafeCell::new(CallFrame::EMPTY))
            .collect();
        Ring {
            slots,
            frames,
            depth,
            mask: capacity as u64 - 1,
            enqueue: AtomicU64::new(0),
            dequeue: Mutex::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    pub fn depth(&self) -> usize {
        self.depth
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    fn slot(&self, pos: u64) -> &Slot {
        // The mask keeps the index in bounds.
        &self.slots[(pos & self.mask) as usize]
    }

    /// Reserves a slot; `None` (and one more dropped sample) when the ring is full.
    /// Async-signal-safe: atomics only, retries only when another producer made progress.
    pub fn reserve(&self) -> Option<Reservation> {
        let mut pos = self.enqueue.load(Ordering::Relaxed);
        loop {
            let seq = self.slot(pos).seq.load(Ordering::Acquire);
            let diff = seq as i64 - pos as i64;
            if diff == 0 {
                match self.enqueue.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Some(Reservation { pos }),
                    Err(current) => pos = current,
                }
            } else if diff < 0 {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return None;
            } else {
                pos = self.enqueue.load(Ordering::Relaxed);
            }
        }
    }

    /// The reserved slot's frame buffer (`depth` frames), for AsyncGetCallTrace to fill.
    pub fn frames_ptr(&self, r: &Reservation) -> *mut CallFrame {
        let start = (r.pos & self.mask) as usize * self.depth;
        self.frames[start..start + self.depth].as_ptr() as *mut CallFrame
    }

    /// Publishes a reserved slot to the consumer.
    pub fn publish(&self, r: Reservation, header: Header) {
        let slot = self.slot(r.pos);
        // SAFETY: this producer owns the slot between reserve and this release store.
        unsafe { *slot.header.get() = header };
        slot.seq.store(r.pos + 1, Ordering::Release);
    }

    /// Hands every published sample, in order, to `f` (header and its frames, top first).
    /// Stops at the first slot that is reserved but not yet published.
    pub fn drain(&self, mut f: impl FnMut(&Header, &[CallFrame])) -> usize {
        let mut pos = lock(&self.dequeue);
        let mut n = 0;
        loop {
            let slot = self.slot(*pos);
            if slot.seq.load(Ordering::Acquire) != *pos + 1 {
                return n;
            }
            // SAFETY: the acquire load above saw the producer's release store, and producers do
            // not touch the slot again until we hand it back below.
            let header = unsafe { *slot.header.get() };
            let count = header.num_frames.clamp(0, self.depth as i32) as usize;
            let start = (*pos & self.mask) as usize * self.depth;
            // SAFETY: as above; UnsafeCell<CallFrame> has the layout of CallFrame.
            let frames = unsafe {
                std::slice::from_raw_parts(self.frames[start..].as_ptr() as *const CallFrame, count)
            };
            f(&header, frames);
            slot.seq.store(*pos + self.mask + 1, Ordering::Release);
            *pos += 1;
            n += 1;
        }
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn push(ring: &Ring, tid: u32, n: i32) -> bool {
        let Some(r) = ring.reserve() else {
            return false;
        };
        let p = ring.frames_ptr(&r);
        for i in 0..n.max(0) as usize {
            // SAFETY: test producer owns the reserved slot's `depth` frames.
            unsafe {
                *p.add(i) = CallFrame {
                    lineno: i as i32,
                    method_id: (tid as usize + 1) as *mut _,
                }
            };
        }
        ring.publish(
            r,
            Header {
                tid,
                num_frames: n,
                time_ns: 0,
                weight: 1,
                recovered: false,
                context: 0,
                vthread: 0,
            },
        );
        true
    }

    #[test]
    fn full_ring_drops_and_counts() {
        let ring = Ring::new(4, 8);
        assert_eq!(ring.capacity(), 4);
        for i in 0..4 {
            assert!(push(&ring, i, 3));
        }
        assert!(!push(&ring, 9, 3));
        assert_eq!(ring.dropped(), 1);
        let mut seen = vec![];
        assert_eq!(ring.drain(|h, f| seen.push((h.tid, f.len()))), 4);
        assert_eq!(seen, vec![(0, 3), (1, 3), (2, 3), (3, 3)]);
        assert!(push(&ring, 5, -2));
        let mut codes = vec![];
        ring.drain(|h, f| codes.push((h.num_frames, f.len())));
        assert_eq!(codes, vec![(-2, 0)]);
    }

    #[test]
    fn concurrent_producers_lose_nothing_they_did_not_count() {
        let ring = Arc::new(Ring::new(1024, 4));
        let producers: Vec<_> = (0..4)
            .map(|t| {
                let ring = ring.clone();
                std::thread::spawn(move || {
                    let mut ok = 0u64;
                    for _ in 0..20_000 {
                        if push(&ring, t, 2) {
                            ok += 1;
                        }
                    }
                    ok
                })
            })
            .collect();
        let mut drained = 0u64;
        let mut frames_ok = true;
        while producers.iter().any(|p| !p.is_finished()) {
            drained += ring.drain(|h, f| {
                frames_ok &= f.len() == 2 && f[1].method_id as usize == h.tid as usize + 1
            }) as u64;
        }
        let pushed: u64 = producers.into_iter().map(|p| p.join().unwrap()).sum();
        drained += ring.drain(|_, _| {}) as u64;
        assert!(frames_ok);
        assert_eq!(pushed, drained);
        assert_eq!(pushed + ring.dropped(), 80_000);
    }
}
