//! Virtual threads in wall mode: a bounded registry of the live virtual threads, kept by the
//! JVMTI VirtualThreadStart/End events, and the sampling of a bounded number of them per tick.
//!
//! JVMTI's GetAllStackTraces lists platform threads only, so the safepoint engine alone sees the
//! carriers (parked in `Continuation.run` or running a virtual thread's code under it) and never
//! a virtual thread that is unmounted (sleeping, parked, blocked, waiting for a carrier). Here:
//! - **Registry.** VirtualThreadStart (on the virtual thread, at its first mount) takes its
//!   name (`virtual #id name`) and a JNI global reference to it and puts them in a slot; the
//!   thread's token (registration serial and slot) goes into its JVMTI thread-local storage, and
//!   while it is mounted into its carrier's cell of the thread table (for CPU samples, see
//!   [`super::vcpu`]). VirtualThreadEnd finds the slot by the token and takes it off the live
//!   list. Only the writer thread deletes references and frees slots ([`reap`], at its next
//!   tick, after the samples taken before the end are named), so a reference it picked stays
//!   valid for its whole tick. At most [`MAX_TRACKED`] threads (live plus ended-not-reaped) are
//!   held: 131,072 slots of about 64 bytes with their names, plus one JNI global reference each,
//!   under 16 MiB at the bound; threads beyond it are counted (`virtual_threads_untracked`) and
//!   not sampled.
//! - **Sampling.** Each wall tick picks [`PER_TICK`] live threads uniformly at random without
//!   replacement (a partial Fisher–Yates shuffle of the dense live list), or all of them when
//!   fewer are live, and takes their stacks and states in one GetThreadListStackTraces call (a
//!   mounted thread gives its own frames, an unmounted one the frames kept in its continuation).
//!   A tick with `n` live threads and `k` picks stands for `n` thread-intervals of wall time, so
//!   the picks share `n` as integer weights that differ by at most one
//!   (`floor((i+1)·n/k) − floor(i·n/k)`): every live virtual thread has the same expected weight
//!   per tick, 1, and wall shares between virtual threads stay true however many are live.
//!
//! Threads alive when the session starts (at attach, say) post no VirtualThreadStart: they are
//! adopted from the JDK's thread containers (`ThreadContainers.root()` and its children, which
//! track every virtual thread unless `-Djdk.trackAllThreads=false`), once, at the start.

use crate::sampler::threads::ThreadTable;
use crate::sync::lock;
use jvmprof_jvmti::{Env, JThread, Jni, ThreadRef, os};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// The most virtual threads held at once (live, plus ended ones whose reference the writer
/// deletes at its next tick).
pub const MAX_TRACKED: usize = 1 << 17;
/// Virtual threads sampled per wall tick, at most.
pub const PER_TICK: usize = 64;

const NO_POS: u32 = u32::MAX;

struct Slot {
    thread: Option<ThreadRef>,
    /// Index in `live`, or NO_POS (free, or ended and not yet reaped).
    pos: u32,
    /// The registration this slot holds (tokens name it, so a reused slot is told apart).
    serial: u64,
    /// `virtual #id name`, the thread's profile name.
    label: Box<str>,
}

struct Registry {
    /// Whether a session records virtual threads.
    on: bool,
    /// Engines of the session that use the registry ([`start`] / [`stop`]).
    users: usize,
    /// Registrations so far, over every session (a token's serial).
    serial: u64,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Slots of the live threads, densely.
    live: Vec<u32>,
    /// Slots of threads that ended, whose reference the writer deletes (see [`reap`]).
    ended: Vec<u32>,
    started: u64,
    /// Threads alive at the start, registered from the thread containers.
    adopted: u64,
    untracked: u64,
    rng: u64,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    on: false,
    users: 0,
    serial: 0,
    slots: Vec::new(),
    free: Vec::new(),
    live: Vec::new(),
    ended: Vec::new(),
    started: 0,
    adopted: 0,
    untracked: 0,
    rng: 0,
});

/// A tracked thread's token, in its JVMTI thread-local storage and (while it is mounted) in its
/// carrier's thread-table cell: registration serial and slot + 1, never 0.
fn encode(serial: u64, slot: u32) -> u64 {
    (serial << 18) | (slot as u64 + 1)
}

fn decode(token: u64) -> (u64, u32) {
    (
        token >> 18,
        ((token & ((1 << 18) - 1)) as u32).wrapping_sub(1),
    )
}

impl Registry {
    fn held(&self) -> usize {
        self.live.len() + self.ended.len()
    }

    /// Registers a thread; returns its token.
    fn insert(&mut self, thread: ThreadRef, label: Box<str>) -> u64 {
        self.serial += 1;
        let pos = self.live.len() as u32;
        let fresh = Slot {
            thread: Some(thread),
            pos,
            serial: self.serial,
            label,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = fresh;
                s
            }
            None => {
                self.slots.push(fresh);
                (self.slots.len() - 1) as u32
            }
        };
        self.live.push(slot);
        encode(self.serial, slot)
    }

    /// The slot of a token, if it still holds that registration (live, or ended not reaped).
    fn slot(&self, token: u64) -> Option<&Slot> {
        let (serial, slot) = decode(token);
        self.slots
            .get(slot as usize)
            .filter(|s| s.serial == serial && s.thread.is_some())
    }

    /// The thread of `slot` ended: out of the live list; the writer reaps it.
    fn end(&mut self, token: u64) {
        let (serial, slot) = decode(token);
        let Some(s) = self.slots.get_mut(slot as usize) else {
            return;
        };
        if s.serial != serial || s.pos == NO_POS {
            return;
        }
        let pos = s.pos as usize;
        s.pos = NO_POS;
        self.ended.push(slot);
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

/// The thread table whose carrier cells say which virtual thread is mounted (CPU mode's
/// signal handler copies the cell into each sample; root mode's CPU timer reads it).
static MOUNT_TABLE: OnceLock<&'static ThreadTable> = OnceLock::new();
/// Sessions' parts that need the mount events (CPU sampling, root mode's CPU timer).
static MOUNT_USERS: Mutex<usize> = Mutex::new(0);
/// Users of the mount events that need each virtual thread's mounted CPU time (root mode's CPU
/// timer): reading the carrier's CPU clock at every mount and unmount is a system call.
static CPU_ACCOUNTING: AtomicUsize = AtomicUsize::new(0);
/// CPU time (ns) each slot's thread used while mounted, up to its last unmount: a fixed array,
/// so that the mount events and root mode's CPU timer reach it without a lock.
static MOUNTED_CPU: OnceLock<Box<[AtomicU64]>> = OnceLock::new();

fn mounted_cpu(slot: u32) -> Option<&'static AtomicU64> {
    MOUNTED_CPU.get()?.get(slot as usize)
}

fn on_mount(env: &Env, mounted: bool) {
    if mounted {
        note_mount(current_token(env));
    } else {
        note_unmount();
    }
}

/// On a carrier, with a tracked virtual thread (a token) just mounted (mount event, start):
/// the carrier runs it from now, its CPU time counted from here.
fn note_mount(token: u64) {
    if let Some(table) = MOUNT_TABLE.get() {
        let cpu = match CPU_ACCOUNTING.load(Ordering::Relaxed) {
            0 => 0,
            _ => os::thread_cpu_ns(),
        };
        table.set_mounted(os::gettid(), token, cpu);
    }
}

/// On a carrier whose virtual thread is leaving (unmount event, end): its CPU time since the
/// mount goes to its account, and the carrier runs none.
fn note_unmount() {
    let Some(table) = MOUNT_TABLE.get() else {
        return;
    };
    let tid = os::gettid();
    let (token, at) = table.mounted_at(tid);
    if token != 0
        && at != 0
        && CPU_ACCOUNTING.load(Ordering::Relaxed) != 0
        && let Some(acc) = mounted_cpu(decode(token).1)
    {
        acc.fetch_add(os::thread_cpu_ns().saturating_sub(at), Ordering::Relaxed);
    }
    table.set_mounted(tid, 0, 0);
}

/// The CPU time (ns) of the calling thread as root mode's CPU timer should see it: `raw` (the
/// OS thread's clock) on a platform thread; on a carrier running a tracked virtual thread, that
/// virtual thread's own CPU time (what it used while mounted). Lock-free, cannot panic.
pub fn thread_cpu(raw: i64) -> i64 {
    let Some(table) = MOUNT_TABLE.get() else {
        return raw;
    };
    let (token, at) = table.mounted_at(os::gettid());
    match (token, mounted_cpu(decode(token).1)) {
        (0, _) | (_, None) => raw,
        (_, Some(acc)) => {
            let before = acc.load(Ordering::Relaxed);
            (before.saturating_add((raw as u64).saturating_sub(at))).min(i64::MAX as u64) as i64
        }
    }
}

/// Turns the mount events on for one more user (the writer thread), writing carrier cells in
/// `table`, with each virtual thread's mounted CPU time kept when `cpu`; needs [`start`]
/// first. False when this JVM has no mount events.
pub fn track_mounts(env: &Env, table: &'static ThreadTable, cpu: bool) -> bool {
    if !std::ptr::eq(*MOUNT_TABLE.get_or_init(|| table), table) {
        return false;
    }
    MOUNTED_CPU.get_or_init(|| (0..MAX_TRACKED).map(|_| AtomicU64::new(0)).collect());
    let mut users = lock(&MOUNT_USERS);
    if *users == 0 && !env.set_mount_handler(Some(on_mount)) {
        return false;
    }
    *users += 1;
    if cpu {
        CPU_ACCOUNTING.fetch_add(1, Ordering::Relaxed);
    }
    true
}

/// One user less of the mount events (`cpu` as it was tracked with); the last one turns them
/// off and clears the cells.
pub fn untrack_mounts(env: &Env, cpu: bool) {
    if cpu {
        CPU_ACCOUNTING.fetch_sub(1, Ordering::Relaxed);
    }
    let mut users = lock(&MOUNT_USERS);
    *users = users.saturating_sub(1);
    if *users == 0 {
        env.set_mount_handler(None);
        if let Some(table) = MOUNT_TABLE.get() {
            table.clear_mounted();
        }
    }
}

/// VirtualThreadStart, on the new virtual thread: registers it while a session records virtual
/// threads.
pub fn on_start(env: &Env, jni: &Jni, thread: JThread) {
    // A thread adopted at the session's start may post its start only now.
    if is_tracked(env.current_thread_local() as u64) {
        return;
    }
    if let Some(token) = register(env, jni, thread, true) {
        if let Some(acc) = mounted_cpu(decode(token).1) {
            acc.store(0, Ordering::Relaxed);
        }
        // The first mount posts VirtualThreadStart, not a mount event.
        note_mount(token);
    }
}

/// Whether `token` names a thread the registry holds now.
fn is_tracked(token: u64) -> bool {
    token != 0 && lock(&REGISTRY).slot(token).is_some()
}

/// Puts `thread` in the registry and its token in its thread-local storage (`current`: the
/// calling thread is `thread`); None when no session records or the registry is full.
fn register(env: &Env, jni: &Jni, thread: JThread, current: bool) -> Option<u64> {
    {
        let mut r = lock(&REGISTRY);
        if !r.on {
            return None;
        }
        if r.held() >= MAX_TRACKED {
            r.untracked += 1;
            return None;
        }
    }
    // JNI outside the lock: these calls may wait for a safepoint.
    let id = jni.java_thread_id(thread).unwrap_or(0);
    let name = env.thread_name(jni, thread).unwrap_or_default();
    let label = match name.is_empty() {
        true => format!("virtual #{id}"),
        false => format!("virtual #{id} {name}"),
    };
    let reference = jni.new_thread_ref(thread)?;
    let mut r = lock(&REGISTRY);
    if !r.on || r.held() >= MAX_TRACKED {
        drop(r);
        jni.delete_thread_ref(reference);
        return None;
    }
    let token = r.insert(reference, label.into_boxed_str());
    r.started += 1;
    drop(r);
    match current {
        true => env.set_current_thread_local(token as usize),
        false => env.set_thread_local(thread, token as usize),
    };
    Some(token)
}

/// Registers the virtual threads that were alive before the session (an attach, or a session
/// after another), as the JDK's thread containers list them; returns how many. Those that end
/// before they are seen again are dropped when a sample finds them gone ([`forget`]).
fn adopt(env: &Env, jni: &Jni) -> usize {
    let mut adopted = 0;
    jni.for_each_virtual_thread(MAX_TRACKED, |t| {
        if is_tracked(env.thread_local(t) as u64) {
            return;
        }
        if env.thread_state(t) & jvmprof_jvmti::thread_state::ALIVE == 0 {
            return; // not started yet (its start event registers it) or ended
        }
        adopted += register(env, jni, t, false).is_some() as usize;
    });
    lock(&REGISTRY).adopted = adopted as u64;
    adopted
}

/// A picked thread was found ended (it may have ended before it was adopted): out of the live
/// list.
pub fn forget(token: u64) {
    lock(&REGISTRY).end(token);
}

/// VirtualThreadEnd, on the ending virtual thread: hands it to the writer to reap.
pub fn on_end(env: &Env) {
    let token = env.current_thread_local() as u64;
    if token != 0 {
        lock(&REGISTRY).end(token);
    }
    // The last unmount posts VirtualThreadEnd, not an unmount event.
    note_unmount();
}

/// The token of the virtual thread mounted on the calling carrier (in a mount event), 0 if it
/// is not tracked.
pub fn current_token(env: &Env) -> u64 {
    env.current_thread_local() as u64
}

/// Starts recording virtual threads for one more user (the writer thread, at a session's
/// start): the first adds the capability and turns the events on. False on a JVM without
/// virtual threads.
pub fn start(env: &Env, jni: &Jni) -> bool {
    {
        let mut r = lock(&REGISTRY);
        if r.users > 0 {
            r.users += 1;
            return true;
        }
    }
    if !env.add_virtual_thread_capability() {
        return false;
    }
    {
        let mut r = lock(&REGISTRY);
        r.on = true;
        r.users = 1;
        r.started = 0;
        r.adopted = 0;
        r.untracked = 0;
        r.rng = jvmprof_jvmti::os::monotonic_ns() | 1;
    }
    if env.virtual_thread_events(true).is_err() {
        let mut r = lock(&REGISTRY);
        r.on = false;
        r.users = 0;
        return false;
    }
    // After the events are on: a thread is either listed now or posts its start later.
    adopt(env, jni);
    true
}

/// One user less (the writer thread); the last turns the events off and deletes every
/// reference.
pub fn stop(env: &Env, jni: &Jni) {
    {
        let mut r = lock(&REGISTRY);
        r.users = r.users.saturating_sub(1);
        if r.users > 0 {
            return;
        }
    }
    let _ = env.virtual_thread_events(false);
    // While any environment holds the capability, HotSpot calls into the VM at every mount and
    // unmount of every virtual thread (measured: about 20 % more CPU for 100k virtual threads
    // waking 110k times a second): the application must not go on paying after the session.
    env.relinquish_virtual_thread_capability();
    let refs: Vec<ThreadRef> = {
        let mut r = lock(&REGISTRY);
        r.on = false;
        r.live.clear();
        r.free.clear();
        r.ended.clear();
        r.slots.drain(..).filter_map(|s| s.thread).collect()
    };
    for reference in refs {
        jni.delete_thread_ref(reference);
    }
}

/// Deletes the references of the threads that ended and frees their slots (the writer thread:
/// after the samples taken before their end are named).
pub fn reap(jni: &Jni) {
    let refs: Vec<ThreadRef> = {
        let mut r = lock(&REGISTRY);
        let ended = std::mem::take(&mut r.ended);
        let mut refs = Vec::with_capacity(ended.len());
        for slot in ended {
            if let Some(s) = r.slots.get_mut(slot as usize)
                && let Some(t) = s.thread.take()
            {
                s.label = Box::default();
                refs.push(t);
                r.free.push(slot);
            }
        }
        refs
    };
    for reference in refs {
        jni.delete_thread_ref(reference);
    }
}

/// A tracked virtual thread: its profile name and (until the writer reaps it) its reference.
pub struct Identity {
    pub label: String,
    pub thread: JThread,
}

/// The thread a token names, unless it was reaped since.
pub fn identity(token: u64) -> Option<Identity> {
    let r = lock(&REGISTRY);
    let s = r.slot(token)?;
    Some(Identity {
        label: s.label.to_string(),
        thread: s.thread.as_ref()?.thread(),
    })
}

/// One tick's picks: the threads (global references, valid until the writer reaps them), their
/// names and weights, and how many were live.
pub struct Picks {
    pub threads: Vec<JThread>,
    pub tokens: Vec<u64>,
    pub labels: Vec<String>,
    pub weights: Vec<u64>,
    pub live: usize,
}

/// Reaps the threads that ended, then picks up to `k` live threads at random with weights
/// summing to the number live (see the module comment). On the writer thread only.
pub fn pick(jni: &Jni, k: usize) -> Picks {
    reap(jni);
    let mut r = lock(&REGISTRY);
    let n = r.live.len();
    let k = k.min(n);
    for i in 0..k {
        let j = i + (r.next_random() % (n - i) as u64) as usize;
        r.swap_live(i, j);
    }
    let (mut threads, mut labels) = (Vec::with_capacity(k), Vec::with_capacity(k));
    let mut tokens = Vec::with_capacity(k);
    for &s in &r.live[..k] {
        let slot = &r.slots[s as usize];
        if let Some(t) = slot.thread.as_ref() {
            threads.push(t.thread());
            labels.push(slot.label.to_string());
            tokens.push(encode(slot.serial, s));
        }
    }
    let picked = threads.len().max(1) as u64;
    let weights = (0..threads.len() as u64)
        .map(|i| (i + 1) * n as u64 / picked - i * n as u64 / picked)
        .collect();
    Picks {
        threads,
        tokens,
        labels,
        weights,
        live: n,
    }
}

/// (virtual threads registered since the session started, threads not tracked because the
/// registry was full), for the profile's metadata.
pub fn counts() -> (u64, u64) {
    let r = lock(&REGISTRY);
    (r.started - r.adopted, r.untracked)
}

/// Threads registered at the session's start from the thread containers.
pub fn adopted() -> u64 {
    lock(&REGISTRY).adopted
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
    fn tokens_round_trip_and_are_never_zero() {
        const { assert!(MAX_TRACKED < 1 << 18) };
        for (serial, slot) in [(0u64, 0u32), (7, 131_071), ((1 << 46) - 1, 5)] {
            assert_ne!(encode(serial, slot), 0);
            assert_eq!(decode(encode(serial, slot)), (serial, slot));
        }
    }
}
