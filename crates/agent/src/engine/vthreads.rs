//! Virtual threads in wall mode: a bounded registry of the live virtual threads, kept by the
//! JVMTI VirtualThreadStart/End events, and the sampling of a bounded number of them per tick.
//!
//! JVMTI's GetAllStackTraces lists platform threads only, so the safepoint engine alone sees the
//! carriers (parked in `Continuation.run` or running a virtual thread's code under it) and never
//! a virtual thread that is unmounted (sleeping, parked, blocked, waiting for a carrier). Here:
//! - **Registry.** VirtualThreadStart (on the virtual thread, at its first mount) makes a JNI
//!   global reference to it and puts it in a slot; the slot number goes into the thread's JVMTI
//!   thread-local storage with the session's generation. VirtualThreadEnd finds the slot there
//!   and moves the reference to an `ended` list. Only the writer thread deletes references (at its
//!   next tick), so a reference it picked stays valid for its whole tick. At most
//!   [`MAX_TRACKED`] threads (live plus ended-not-yet-deleted) are held: 131,072 slots of 24
//!   bytes plus one JNI global reference each, about 4 MiB at the bound; threads beyond it are
//!   counted (`virtual_threads_untracked`) and not sampled.
//! - **Sampling.** Each wall tick picks [`PER_TICK`] live threads uniformly at random without
//!   replacement (a partial Fisher–Yates shuffle of the dense live list), or all of them when
//!   fewer are live, and takes their stacks and states in one GetThreadListStackTraces call (a
//!   mounted thread gives its own frames, an unmounted one the frames kept in its continuation).
//!   A tick with `n` live threads and `k` picks stands for `n` thread-intervals of wall time, so
//!   the picks share `n` as integer weights that differ by at most one
//!   (`floor((i+1)·n/k) − floor(i·n/k)`): every live virtual thread has the same expected weight
//!   per tick, 1, and wall shares between virtual threads stay true however many are live.
//!
//! Threads that started before the session (at attach) have no VirtualThreadStart and are not
//! seen.

use crate::sync::lock;
use jvmprof_jvmti::{Env, JThread, Jni, ThreadRef};
use std::sync::Mutex;

/// The most virtual threads held at once (live, plus ended ones whose reference the writer
/// deletes at its next tick).
pub const MAX_TRACKED: usize = 1 << 17;
/// Virtual threads sampled per wall tick, at most.
pub const PER_TICK: usize = 64;

const NO_POS: u32 = u32::MAX;

struct Slot {
    thread: Option<ThreadRef>,
    /// Index in `live`, or NO_POS.
    pos: u32,
}

struct Registry {
    /// The running session's generation (0: no session records virtual threads).
    generation: u32,
    last_generation: u32,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Slots of the live threads, densely.
    live: Vec<u32>,
    /// References of threads that ended, for the writer to delete.
    ended: Vec<ThreadRef>,
    started: u64,
    untracked: u64,
    rng: u64,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    generation: 0,
    last_generation: 0,
    slots: Vec::new(),
    free: Vec::new(),
    live: Vec::new(),
    ended: Vec::new(),
    started: 0,
    untracked: 0,
    rng: 0,
});

/// The thread-local value of a tracked thread: generation and slot + 1, never 0.
fn encode(generation: u32, slot: u32) -> usize {
    ((generation as usize) << 32) | (slot as usize + 1)
}

fn decode(value: usize) -> (u32, u32) {
    ((value >> 32) as u32, (value as u32).wrapping_sub(1))
}

impl Registry {
    fn held(&self) -> usize {
        self.live.len() + self.ended.len()
    }

    fn insert(&mut self, thread: ThreadRef) -> u32 {
        let pos = self.live.len() as u32;
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Slot {
                    thread: Some(thread),
                    pos,
                };
                s
            }
            None => {
                self.slots.push(Slot {
                    thread: Some(thread),
                    pos,
                });
                (self.slots.len() - 1) as u32
            }
        };
        self.live.push(slot);
        slot
    }

    fn remove(&mut self, slot: u32) {
        let Some(s) = self.slots.get_mut(slot as usize) else {
            return;
        };
        let (Some(thread), pos) = (s.thread.take(), s.pos) else {
            return;
        };
        s.pos = NO_POS;
        self.ended.push(thread);
        self.free.push(slot);
        let pos = pos as usize;
        if pos < self.live.len() {
            self.live.swap_remove(pos);
            if let Some(&moved) = self.live.get(pos) {
                self.slots[moved as usize].pos = pos as u32;
            }
        }
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*, seeded at the session's start.
        let mut x = self.rng.max(1);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn swap_live(&mut self, a: usize, b: usize) {
        self.live.swap(a, b);
        let (sa, sb) = (self.live[a], self.live[b]);
        self.slots[sa as usize].pos = a as u32;
        self.slots[sb as usize].pos = b as u32;
    }
}

/// VirtualThreadStart, on the new virtual thread: registers it while a session records virtual
/// threads.
pub fn on_start(env: &Env, jni: &Jni, thread: JThread) {
    let generation = {
        let mut r = lock(&REGISTRY);
        if r.generation == 0 {
            return;
        }
        if r.held() >= MAX_TRACKED {
            r.untracked += 1;
            return;
        }
        r.generation
    };
    // JNI outside the lock: NewGlobalRef may wait for a safepoint.
    let Some(reference) = jni.new_thread_ref(thread) else {
        return;
    };
    let mut r = lock(&REGISTRY);
    if r.generation != generation {
        drop(r);
        jni.delete_thread_ref(reference);
        return;
    }
    let slot = r.insert(reference);
    r.started += 1;
    drop(r);
    env.set_current_thread_local(encode(generation, slot));
}

/// VirtualThreadEnd, on the ending virtual thread: hands its reference to the writer.
pub fn on_end(env: &Env) {
    let value = env.current_thread_local();
    if value == 0 {
        return;
    }
    let (generation, slot) = decode(value);
    let mut r = lock(&REGISTRY);
    if generation == r.generation {
        r.remove(slot);
    }
}

/// Starts recording virtual threads (the writer thread, at a wall session's start): adds the
/// capability and turns the events on. False on a JVM without virtual threads.
pub fn start(env: &Env) -> bool {
    if !env.add_virtual_thread_capability() {
        return false;
    }
    {
        let mut r = lock(&REGISTRY);
        r.last_generation = r.last_generation.wrapping_add(1).max(1);
        r.generation = r.last_generation;
        r.started = 0;
        r.untracked = 0;
        r.rng = jvmprof_jvmti::os::monotonic_ns() | 1;
    }
    if env.virtual_thread_events(true).is_err() {
        lock(&REGISTRY).generation = 0;
        return false;
    }
    true
}

/// Stops recording (the writer thread): events off, every reference deleted.
pub fn stop(env: &Env, jni: &Jni) {
    let _ = env.virtual_thread_events(false);
    let refs: Vec<ThreadRef> = {
        let mut r = lock(&REGISTRY);
        r.generation = 0;
        r.live.clear();
        r.free.clear();
        let mut refs: Vec<ThreadRef> = std::mem::take(&mut r.ended);
        refs.extend(r.slots.drain(..).filter_map(|s| s.thread));
        refs
    };
    for reference in refs {
        jni.delete_thread_ref(reference);
    }
}

/// One tick's picks: the threads (global references, valid until the writer's next tick) and
/// the weight of each, and how many were live.
pub struct Picks {
    pub threads: Vec<JThread>,
    pub weights: Vec<u64>,
    pub live: usize,
}

/// Deletes the references of threads that ended, and picks up to `k` live threads at random
/// with weights summing to the number live (see the module comment). On the writer thread only.
pub fn pick(jni: &Jni, k: usize) -> Picks {
    let (ended, picks) = {
        let mut r = lock(&REGISTRY);
        let ended = std::mem::take(&mut r.ended);
        let n = r.live.len();
        let k = k.min(n);
        for i in 0..k {
            let j = i + (r.next_random() % (n - i) as u64) as usize;
            r.swap_live(i, j);
        }
        let threads: Vec<JThread> = r.live[..k]
            .iter()
            .filter_map(|&s| r.slots[s as usize].thread.as_ref().map(|t| t.thread()))
            .collect();
        let k = threads.len().max(1) as u64;
        let weights = (0..threads.len() as u64)
            .map(|i| (i + 1) * n as u64 / k - i * n as u64 / k)
            .collect();
        (
            ended,
            Picks {
                threads,
                weights,
                live: n,
            },
        )
    };
    for reference in ended {
        jni.delete_thread_ref(reference);
    }
    picks
}

/// (virtual threads registered since the session started, threads not tracked because the
/// registry was full), for the profile's metadata.
pub fn counts() -> (u64, u64) {
    let r = lock(&REGISTRY);
    (r.started, r.untracked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_share_the_live_count_and_differ_by_at_most_one() {
        for (n, k) in [(10_000u64, 64u64), (65, 64), (64, 64), (100_003, 64)] {
            let w: Vec<u64> = (0..k).map(|i| (i + 1) * n / k - i * n / k).collect();
            assert_eq!(w.iter().sum::<u64>(), n);
            let (lo, hi) = (w.iter().min().unwrap(), w.iter().max().unwrap());
            assert!(hi - lo <= 1, "{n}/{k}: {lo}..{hi}");
        }
    }

    #[test]
    fn thread_local_values_round_trip_and_are_never_zero() {
        for (g, s) in [(1u32, 0u32), (7, 131_071), (u32::MAX, 5)] {
            assert_ne!(encode(g, s), 0);
            assert_eq!(decode(encode(g, s)), (g, s));
        }
    }
}
