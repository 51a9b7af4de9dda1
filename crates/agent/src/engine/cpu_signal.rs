//! The CPU engine: a per-thread CPU clock sends SIGPROF to the thread that used the CPU, the
//! signal handler ([`crate::sampler::signal`]) walks its stack with AsyncGetCallTrace into the
//! lock-free ring, and `poll` moves the ring's samples into the sink.
//!
//! Only running threads are sampled: a thread's clock advances only while it is on a CPU. The
//! clock is a perf event on the thread's task clock where `perf_event_open` is allowed (it fires
//! on time, also at 1 ms), else a POSIX CPU timer (checked at the kernel's tick; its late
//! expirations are counted through the sample's weight). Either way each thread's first period
//! is drawn uniformly from (0, interval], so a thread that lives for less CPU than one interval
//! is sampled with the right probability instead of never.
//!
//! Failed walks are kept as `[unknown: reason]` samples and counted by reason; samples of JVM
//! threads that have no Java stack are named by kind (`[JIT compiler]`, `[GC]`, `[VM thread]`).
//! The profile's metadata names the clock (`cpu_engine`) and compares the CPU time the samples
//! cover with the process's own CPU time over the session (`cpu_coverage`).

use super::api::{Engine, EngineCtx};
use crate::options::{CpuClock, Options};
use crate::sampler::ring::{Header, NO_JNI_ENV, Ring, THREAD_START};
use crate::sampler::signal::{self, SignalSampler};
use crate::sink::Sink;
use crate::sync::lock;
use jvmprof_jvmti::asgct::{self, CallFrame};
use jvmprof_jvmti::os::{self, ThreadCpuTimer};
use jvmprof_jvmti::perf::{self, PerfEvent, Scope};
use jvmprof_jvmti::{Jni, MethodId};
use jvmprof_profile::{Metric, ThreadState};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Slots in the CPU sample ring. At 1 ms on every core of a 2-core machine the writer, draining
/// every 50 ms, finds about 100 samples; 1024 leaves room for bursts, and for more cores the
/// writer drains more often ([`CpuSignal::period`]).
const RING_CAPACITY: usize = 1024;

/// The writer's polls of the ring: as seldom as this (each wake-up of the writer preempts a
/// thread of the application), as often as that (many cores at a short interval).
const LONGEST_POLL: Duration = Duration::from_millis(50);
const SHORTEST_POLL: Duration = Duration::from_millis(10);

/// The most CPU a thread is taken to have used starting up before its ThreadStart event.
const MAX_START_UP_CPU_NS: u64 = 10_000_000;

/// The one signal sampler of the process. A handler may still be running on some thread after a
/// session stops, so the sampler is never freed: it is made once (leaked) and reused by every
/// later session, so repeated attach sessions do not grow the target's memory. Its depth is
/// the first session's; a later session that asks for more is walked to that depth.
static SAMPLER: OnceLock<&'static SignalSampler> = OnceLock::new();

/// What drives the samples of one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Perf(Scope),
    Timer,
}

/// One thread's CPU clock; dropping it stops it.
#[allow(dead_code)] // held for its Drop
enum Clock {
    Perf(PerfEvent),
    Timer(ThreadCpuTimer),
}

pub struct CpuSignal {
    sampler: &'static SignalSampler,
    source: Source,
    interval_ns: u64,
    depth: usize,
    clocks: Mutex<HashMap<u32, Clock>>,
    /// Whether failed walks are retried.
    recover: bool,
    /// Threads whose clock could not be made (their CPU goes unsampled).
    arm_failures: AtomicU64,
    /// JVM-internal threads given a CPU timer in a perf-events session.
    internal_timers: AtomicU64,
    /// Process CPU time and the writer's own at start, for the coverage line.
    cpu_at_start: AtomicU64,
    /// The agent's own threads (writer, collector link): never armed.
    own_tids: Arc<Mutex<HashSet<u32>>>,
    stats: Mutex<Stats>,
    /// The ring's drop count when this session began (the ring outlives sessions).
    dropped_before: u64,
    /// Virtual threads' identity and whole stacks, on a JVM that has them.
    vcpu: std::sync::OnceLock<super::vcpu::VirtualCpu>,
    env: jvmprof_jvmti::Env,
}

#[derive(Default)]
struct Stats {
    walk_failures: HashMap<&'static str, u64>,
    non_java: u64,
    /// Sampling periods the drained samples stand for (sum of weights).
    periods: u64,
    /// Samples that stood for more than one period (late timer expirations).
    weighted: u64,
    /// Samples whose first walk failed and whose retry got the stack.
    recovered: u64,
    /// Each thread's last stack, whose shared part a new sample reuses.
    last_stacks: LastStacks,
}

/// The most threads [`LastStacks`] remembers; it starts over beyond (tids are reused, so the
/// table would otherwise grow with thread churn).
const LAST_STACK_THREADS: usize = 4096;

/// A frame key that stands for the `[truncated]` root of a walk that reached the depth.
const TRUNCATED_KEY: (u64, u32) = (u64::MAX, u32::MAX);

/// Each thread's previous stack, root first, as the ring holds it (jmethodID and line field per
/// frame), with the profile stack of every prefix. A new sample of the thread shares the root
/// part of its stack with the previous one (1 ms apart, a thread has seldom left its callers):
/// that part costs one comparison per frame, and only the frames above it take a symbol lookup
/// and a stack-tree step. On javac at 1 ms, where 12k of 14k stacks are distinct, a full
/// conversion per sample was a quarter of the writer's time. jmethodIDs are never reused for
/// another method, so a remembered prefix stays right for the session.
#[derive(Default)]
struct LastStacks {
    threads: HashMap<u32, LastStack, foldhash::fast::RandomState>,
}

#[derive(Default)]
struct LastStack {
    keys: Vec<(u64, u32)>,
    ids: Vec<u32>,
}

impl LastStacks {
    /// The profile stack of `frames` (top first) sampled on `tid`; `frame` makes the profile
    /// frame of a key (one of `frames`, or [`TRUNCATED_KEY`]) for the part not shared.
    fn stack<T: StackTree>(
        &mut self,
        tid: u32,
        truncated: bool,
        frames: &[CallFrame],
        sink: &mut T,
        mut frame: impl FnMut(&mut T, (u64, u32)) -> u32,
    ) -> u32 {
        if self.threads.len() >= LAST_STACK_THREADS && !self.threads.contains_key(&tid) {
            self.threads.clear();
        }
        let last = self.threads.entry(tid).or_default();
        let keys = truncated.then_some(TRUNCATED_KEY).into_iter().chain(
            frames
                .iter()
                .rev()
                .map(|f| (f.method_id as usize as u64, f.lineno as u32)),
        );
        let mut depth = 0;
        let mut parent = None;
        for key in keys {
            if depth < last.keys.len() && last.keys[depth] == key {
                parent = Some(last.ids[depth]);
            } else {
                last.keys.truncate(depth);
                last.ids.truncate(depth);
                let f = frame(sink, key);
                let id = sink.child_stack(parent, f);
                last.keys.push(key);
                last.ids.push(id);
                parent = Some(id);
            }
            depth += 1;
        }
        last.keys.truncate(depth);
        last.ids.truncate(depth);
        parent.unwrap_or_else(|| sink.stack(&[]))
    }
}

/// Where [`LastStacks`] interns stacks: the session's sink (or, in tests, a bare builder).
trait StackTree {
    fn child_stack(&mut self, parent: Option<u32>, frame: u32) -> u32;
    fn stack(&mut self, frames: &[u32]) -> u32;
}

impl StackTree for Sink {
    fn child_stack(&mut self, parent: Option<u32>, frame: u32) -> u32 {
        Sink::child_stack(self, parent, frame)
    }
    fn stack(&mut self, frames: &[u32]) -> u32 {
        Sink::stack(self, frames)
    }
}

impl CpuSignal {
    /// None when this JVM has no AsyncGetCallTrace; an error when `cpu_engine=perf` was asked
    /// for and perf events cannot be opened here.
    pub fn new(
        ctx: EngineCtx,
        options: &Options,
        own_tids: Arc<Mutex<HashSet<u32>>>,
    ) -> Result<Option<CpuSignal>, String> {
        let Some(asgct) = asgct::lookup() else {
            return Ok(None);
        };
        let source = match (options.cpu_clock, perf::available()) {
            (CpuClock::Timer, _) | (CpuClock::Auto, None) => Source::Timer,
            (CpuClock::Auto | CpuClock::Perf, Some(scope)) => Source::Perf(scope),
            (CpuClock::Perf, None) => {
                return Err("cpu_engine=perf: perf_event_open is not allowed here (see \
                     /proc/sys/kernel/perf_event_paranoid); use cpu_engine=timer or auto"
                    .into());
            }
        };
        let depth = options.depth;
        let sampler = *SAMPLER.get_or_init(|| {
            Box::leak(Box::new(SignalSampler {
                ring: Ring::new(RING_CAPACITY, depth),
                threads: ctx.threads,
                asgct,
                vm: ctx.vm,
                active: AtomicBool::new(false),
                period_ns: AtomicU64::new(0),
                anchors: std::sync::OnceLock::new(),
                recover: AtomicBool::new(true),
            }))
        });
        Ok(Some(CpuSignal {
            vcpu: std::sync::OnceLock::new(),
            env: ctx.env,
            sampler,
            source,
            interval_ns: options.interval.as_nanos() as u64,
            depth: depth.min(sampler.ring.depth()),
            clocks: Mutex::new(HashMap::new()),
            recover: options.recover_walks,
            arm_failures: AtomicU64::new(0),
            internal_timers: AtomicU64::new(0),
            cpu_at_start: AtomicU64::new(0),
            own_tids,
            stats: Mutex::new(Stats::default()),
            dropped_before: sampler.ring.dropped(),
        }))
    }

    /// Starts a CPU clock for `tid` unless it has one or is the agent's own. The sampling
    /// phase is uniform: the first expiry falls at a point uniform in (0, interval] of the
    /// thread's CPU time. `born`: the thread is starting now and this runs on it, so the CPU it
    /// already used (JVM thread start-up) counts too: periods that fell in it are recorded at
    /// once as a `[thread start]` sample, and the clock's first expiry is what remains of the
    /// phase. Expected samples are then the thread's whole CPU over the interval, however short
    /// the thread's life.
    fn arm(&self, tid: u32, born: bool) {
        if lock(&self.own_tids).contains(&tid) {
            return;
        }
        let mut clocks = lock(&self.clocks);
        let std::collections::hash_map::Entry::Vacant(e) = clocks.entry(tid) else {
            return;
        };
        let period = self.interval_ns.max(1);
        let phase = 1 + splitmix64(tid as u64 ^ os::monotonic_ns()) % period;
        // The first expiry, measured as late as possible (just before the clock starts).
        let first = || {
            let used = if born { os::thread_cpu_ns() } else { 0 };
            // More CPU than a thread's start-up takes: an OS thread that lived before it became
            // this Java thread (the launcher's thread re-attached as DestroyJavaVM, a native
            // thread attached through JNI), already sampled while it ran.
            let used = if used > MAX_START_UP_CPU_NS { 0 } else { used };
            if phase > used {
                phase - used
            } else {
                let missed = (used - phase) / period + 1;
                self.record_start(tid, missed);
                period - (used - phase) % period
            }
        };
        let clock = match self.source_for(tid) {
            Source::Perf(scope) => PerfEvent::open(tid, period, scope)
                .and_then(|e| e.enable(first(), period).map(|()| Clock::Perf(e))),
            Source::Timer => ThreadCpuTimer::start(tid, first(), period).map(Clock::Timer),
        };
        match clock {
            Ok(c) => {
                e.insert(c);
            }
            // A thread that ended before its clock was made is not a failure.
            Err(err) if os::is_gone(&err) => {}
            Err(_) => {
                self.arm_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The clock for `tid`: the session's, except that JVM-internal threads (JIT compilers,
    /// GC, the VM thread) get a POSIX CPU timer where the session uses perf events. They have
    /// no Java stack to walk and switch often, and a perf event costs at every context switch
    /// (an hrtimer reprogrammed, a VM exit on a virtual machine); the timer's expiries, weighted
    /// by their overruns, account their CPU as fully at the kernel's tick.
    fn source_for(&self, tid: u32) -> Source {
        match self.source {
            Source::Perf(_)
                if os::thread_comm(tid)
                    .as_deref()
                    .and_then(crate::sink::internal_thread_kind)
                    .is_some() =>
            {
                self.internal_timers.fetch_add(1, Ordering::Relaxed);
                Source::Timer
            }
            s => s,
        }
    }

    /// Records `periods` sampling periods of a starting thread's CPU, used before its clock ran.
    fn record_start(&self, tid: u32, periods: u64) {
        let ring = &self.sampler.ring;
        if let Some(slot) = ring.reserve() {
            ring.publish(
                slot,
                Header {
                    tid,
                    num_frames: THREAD_START,
                    time_ns: os::monotonic_ns(),
                    weight: periods.min(u32::MAX as u64) as u32,
                    recovered: false,
                    context: 0,
                    vthread: 0,
                },
            );
        }
    }

    /// Arms clocks for threads not seen starting and drops those of threads that are gone.
    fn reconcile_timers(&self) {
        let live: HashSet<u32> = os::process_thread_ids().into_iter().collect();
        for tid in &live {
            self.arm(*tid, false);
        }
        let own = lock(&self.own_tids).clone();
        lock(&self.clocks).retain(|tid, _| live.contains(tid) && !own.contains(tid));
    }
}

impl Engine for CpuSignal {
    fn name(&self) -> &'static str {
        "asgct"
    }

    /// Often enough that every CPU sampled at the interval fills at most a quarter of the ring
    /// between two polls, within [`SHORTEST_POLL`, `LONGEST_POLL`].
    fn period(&self) -> Duration {
        if self.vcpu.get().is_some() {
            // Virtual threads' stacks are completed at the poll (see vcpu.rs): the sooner the
            // more of them are still in the method their sample shows.
            return SHORTEST_POLL;
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        let ns = (RING_CAPACITY as u64 / 4).saturating_mul(self.interval_ns) / cpus;
        Duration::from_nanos(ns).clamp(SHORTEST_POLL, LONGEST_POLL)
    }

    fn start(&self, jni: &Jni) -> Result<(), String> {
        if self.sampler.anchors.get().is_none()
            && let Some(a) = jvmprof_jvmti::vmstructs::Anchors::find(jni)
        {
            let _ = self.sampler.anchors.set(a);
        }
        // Samples a previous session left in the ring are not this session's.
        self.sampler.ring.drain(|_, _| {});
        self.sampler
            .period_ns
            .store(self.interval_ns, Ordering::Relaxed);
        self.sampler.recover.store(self.recover, Ordering::Relaxed);
        self.cpu_at_start
            .store(os::process_cpu_ns(), Ordering::Relaxed);
        signal::activate(self.sampler)
            .map_err(|e| format!("cannot install SIGPROF handler: {e}"))?;
        if let Some(v) = super::vcpu::VirtualCpu::start(self.env, jni, self.sampler.threads) {
            let _ = self.vcpu.set(v);
        }
        self.reconcile_timers();
        Ok(())
    }

    fn poll(&self, jni: &Jni, sink: &mut Sink) {
        let mut stats = lock(&self.stats);
        let depth = self.depth;
        let interval_ns = self.interval_ns;
        let vcpu = self.vcpu.get();
        let mut virtual_samples = Vec::new();
        self.sampler.ring.drain(|header, frames: &[CallFrame]| {
            if vcpu.is_some() && header.vthread != 0 && header.num_frames > 0 {
                let truncated = header.num_frames as usize >= depth;
                let frames = &frames[..frames.len().min(depth)];
                virtual_samples.push(super::vcpu::Pending {
                    header: *header,
                    frames: frames
                        .iter()
                        .map(|f| (f.method_id as usize as u64, f.lineno as i64))
                        .collect(),
                    truncated,
                });
                stats.periods += header.weight.max(1) as u64;
                return;
            }
            let weight = header.weight.max(1) as u64;
            stats.periods += weight;
            if weight > 1 {
                stats.weighted += 1;
            }
            if header.recovered {
                stats.recovered += 1;
            }
            let values = sink.values(&[
                (Metric::Samples, weight),
                (Metric::Ns, weight * interval_ns),
            ]);
            let (thread, internal) = sink.thread_of_tid(header.tid);
            let stack_id = if header.num_frames > 0 {
                let truncated = header.num_frames as usize >= depth;
                let frames = &frames[..frames.len().min(depth)];
                stats.last_stacks.stack(
                    header.tid,
                    truncated,
                    frames,
                    sink,
                    |sink, (method, line)| {
                        if (method, line) == TRUNCATED_KEY {
                            sink.synthetic("[truncated]")
                        } else if method == 0 {
                            sink.synthetic("[unknown method]")
                        } else {
                            sink.java_frame(jni, MethodId(method as usize), line as i32 as i64)
                        }
                    },
                )
            } else {
                let frame = if let Some(kind) = internal {
                    // A JVM-internal thread (JIT compiler, GC, VM thread): no Java stack to walk.
                    stats.non_java += 1;
                    sink.synthetic(kind)
                } else if header.num_frames == THREAD_START {
                    sink.synthetic("[thread start]")
                } else if header.num_frames == NO_JNI_ENV {
                    stats.non_java += 1;
                    sink.synthetic("[JVM internal]")
                } else {
                    let reason = asgct::failure_reason(header.num_frames);
                    *stats.walk_failures.entry(reason).or_default() += 1;
                    sink.synthetic(&format!("[unknown: {reason}]"))
                };
                sink.stack(&[frame])
            };
            let weight = weight.min(u32::MAX as u64) as u32;
            sink.add_at(
                thread,
                stack_id,
                ThreadState::Running,
                &values,
                header.time_ns,
                weight,
                header.context,
            );
        });
        if let Some(v) = vcpu {
            v.add(jni, sink, virtual_samples, interval_ns, depth);
        }
    }

    fn housekeeping(&self) {
        self.reconcile_timers();
    }

    fn stop(&self, jni: &Jni) {
        signal::deactivate(self.sampler);
        if let Some(v) = self.vcpu.get() {
            v.stop(jni);
        }
        lock(&self.clocks).clear();
        // What the process used, less the writer thread (this one: the agent's own work).
        let used = os::process_cpu_ns()
            .saturating_sub(self.cpu_at_start.load(Ordering::Relaxed))
            .saturating_sub(os::thread_cpu_ns());
        self.cpu_at_start.store(used, Ordering::Relaxed);
    }

    fn finish(&self, _jni: &Jni, sink: &mut Sink) {
        if let Some(v) = self.vcpu.get() {
            let (samples, completed, not_completed) = v.counts();
            let (seen, untracked) = super::vthreads::counts();
            super::note(
                sink,
                &[
                    ("virtual_threads_seen", seen.to_string()),
                    (
                        "virtual_threads_adopted",
                        super::vthreads::adopted().to_string(),
                    ),
                    ("virtual_threads_untracked", untracked.to_string()),
                    ("virtual_thread_samples", samples.to_string()),
                    ("virtual_stacks_completed", completed.to_string()),
                    ("virtual_stacks_not_completed", not_completed.to_string()),
                ],
            );
        }
        let stats = lock(&self.stats);
        let process_ns = self.cpu_at_start.load(Ordering::Relaxed);
        let sampled_ns = stats.periods * self.interval_ns;
        let meta = sink.meta_mut();
        for (k, v) in &stats.walk_failures {
            *meta.walk_failures.entry(k.to_string()).or_default() += v;
        }
        let engine = match self.source {
            Source::Perf(Scope::All) => "perf",
            Source::Perf(Scope::User) => "perf-user",
            Source::Timer => "timer",
        };
        let coverage = if process_ns > 0 {
            format!("{:.3}", sampled_ns as f64 / process_ns as f64)
        } else {
            "n/a".into()
        };
        let lost_ring = self.dropped();
        for (k, v) in [
            ("cpu_engine", engine.to_string()),
            ("non_java_samples", stats.non_java.to_string()),
            ("cpu_sampled_ns", sampled_ns.to_string()),
            ("cpu_process_ns", process_ns.to_string()),
            ("cpu_coverage", coverage),
            ("cpu_weighted_samples", stats.weighted.to_string()),
            ("walks_recovered", stats.recovered.to_string()),
            (
                "walk_recovery",
                match (self.recover, self.sampler.anchors.get().is_some()) {
                    (false, _) => "off",
                    (true, true) => "anchor+caller",
                    (true, false) => "caller",
                }
                .into(),
            ),
            ("lost_ring_full", lost_ring.to_string()),
            (
                "cpu_timer_internal_threads",
                self.internal_timers.load(Ordering::Relaxed).to_string(),
            ),
            (
                "lost_unarmed_threads",
                self.arm_failures.load(Ordering::Relaxed).to_string(),
            ),
        ] {
            meta.extra.insert(k.into(), v);
        }
    }

    fn dropped(&self) -> u64 {
        self.sampler.ring.dropped() - self.dropped_before
    }

    fn thread_started(&self, tid: u32) {
        self.arm(tid, tid == os::gettid());
    }

    fn thread_ended(&self, tid: u32) {
        lock(&self.clocks).remove(&tid);
    }
}

/// A well-mixed 64-bit hash (splitmix64's finaliser): a cheap per-thread random first period.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jvmprof_profile::{Frame, Meta, ProfileBuilder};

    impl StackTree for ProfileBuilder {
        fn child_stack(&mut self, parent: Option<u32>, frame: u32) -> u32 {
            ProfileBuilder::child_stack(self, parent, frame)
        }
        fn stack(&mut self, frames: &[u32]) -> u32 {
            ProfileBuilder::stack(self, frames)
        }
    }

    fn frame_of(b: &mut ProfileBuilder, (method, line): (u64, u32)) -> u32 {
        let name = if (method, line) == TRUNCATED_KEY {
            "[truncated]".to_string()
        } else {
            format!("m{method}")
        };
        b.frame(Frame::java("C", &name, &line.to_string(), 0))
    }

    #[test]
    fn a_stack_built_from_the_last_one_is_the_stack_built_whole() {
        // Samples of two threads, interleaved: repeats, a deeper and a shallower stack, a new
        // root, the same frames truncated, a negative line field, then a thread-table reset.
        type Walk = (u32, bool, &'static [(u64, i32)]);
        let walks: &[Walk] = &[
            (1, false, &[(3, 30), (2, 20), (1, 10)]),
            (1, false, &[(3, 30), (2, 20), (1, 10)]),
            (2, false, &[(4, 40), (2, 20), (1, 10)]),
            (1, false, &[(5, 50), (3, 31), (2, 20), (1, 10)]),
            (1, false, &[(2, 20), (1, 10)]),
            (1, false, &[(2, 20), (9, 10)]),
            (2, true, &[(4, 40), (2, 20), (1, 10)]),
            (2, false, &[(4, -3), (2, 20), (1, 10)]),
            (1, false, &[(7, 1)]),
        ];
        let mut last = LastStacks::default();
        let mut b = ProfileBuilder::new(Meta::default());
        for &(tid, truncated, walk) in walks.iter().chain(walks) {
            let frames: Vec<CallFrame> = walk
                .iter()
                .map(|&(m, l)| CallFrame {
                    lineno: l,
                    method_id: std::ptr::without_provenance_mut(m as usize),
                })
                .collect();
            let got = last.stack(tid, truncated, &frames, &mut b, frame_of);
            let mut whole: Vec<u32> = Vec::new();
            if truncated {
                whole.push(frame_of(&mut b, TRUNCATED_KEY));
            }
            for &(m, l) in walk.iter().rev() {
                whole.push(frame_of(&mut b, (m, l as u32)));
            }
            assert_eq!(
                got,
                b.stack(&whole),
                "tid {tid} walk {walk:?} truncated {truncated}"
            );
        }
        // Past the thread limit the table starts over instead of growing.
        let one = [CallFrame {
            lineno: 1,
            method_id: std::ptr::without_provenance_mut(1),
        }];
        for tid in 0..(LAST_STACK_THREADS as u32 + 10) {
            last.stack(tid, false, &one, &mut b, frame_of);
        }
        assert!(last.threads.len() <= LAST_STACK_THREADS);
    }
}
