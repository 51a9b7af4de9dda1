//! The CPU engine: a per-thread CPU clock sends SIGPROF to the thread that used the CPU, the
//! signal handler ([`crate::sampler::signal`]) walks its stack with AsyncGetCallTrace into the
//! lock-free ring, and `poll` moves the ring's samples into the sink.
//!
//! Only running threads are sampled: a thread's clock advances only while it is on a CPU.
//! Failed walks are kept as `[unknown: reason]` samples and counted by reason; samples of JVM
//! threads that have no Java stack are named by kind (`[JIT compiler]`, `[GC]`, `[VM thread]`).

use super::{Engine, EngineCtx};
use crate::options::Options;
use crate::sampler::ring::{NO_JNI_ENV, Ring};
use crate::sampler::signal::{self, SignalSampler};
use crate::sink::Sink;
use jvmprof_jvmti::asgct::{self, CallFrame};
use jvmprof_jvmti::os::{self, ThreadCpuTimer};
use jvmprof_jvmti::{Jni, MethodId};
use jvmprof_profile::{Metric, ThreadState};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};

/// Slots in the CPU sample ring. At 1 ms on every core of a 2-core machine the writer, draining
/// every 10 ms, finds about 20 samples; 1024 leaves room for bursts and many cores.
const RING_CAPACITY: usize = 1024;

/// The one signal sampler of the process. A handler may still be running on some thread after a
/// session stops, so the sampler is never freed: it is made once (leaked) and reused by every
/// later session, so repeated attach sessions do not grow the target's memory. Its depth is
/// the first session's; a later session that asks for more is walked to that depth.
static SAMPLER: OnceLock<&'static SignalSampler> = OnceLock::new();

pub struct CpuSignal {
    sampler: &'static SignalSampler,
    interval_ns: u64,
    depth: usize,
    timers: Mutex<HashMap<u32, ThreadCpuTimer>>,
    /// The agent's own threads (writer, collector link): never armed.
    own_tids: Arc<Mutex<HashSet<u32>>>,
    stats: Mutex<Stats>,
    /// The ring's drop count when this session began (the ring outlives sessions).
    dropped_before: u64,
}

#[derive(Default)]
struct Stats {
    walk_failures: HashMap<&'static str, u64>,
    non_java: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl CpuSignal {
    /// None when this JVM has no AsyncGetCallTrace.
    pub fn new(
        ctx: EngineCtx,
        options: &Options,
        own_tids: Arc<Mutex<HashSet<u32>>>,
    ) -> Option<CpuSignal> {
        let asgct = asgct::lookup()?;
        let depth = options.depth;
        let sampler = *SAMPLER.get_or_init(|| {
            Box::leak(Box::new(SignalSampler {
                ring: Ring::new(RING_CAPACITY, depth),
                threads: ctx.threads,
                asgct,
                vm: ctx.vm,
                active: AtomicBool::new(false),
            }))
        });
        Some(CpuSignal {
            sampler,
            interval_ns: options.interval.as_nanos() as u64,
            depth: depth.min(sampler.ring.depth()),
            timers: Mutex::new(HashMap::new()),
            own_tids,
            stats: Mutex::new(Stats::default()),
            dropped_before: sampler.ring.dropped(),
        })
    }

    /// Arms a CPU timer for `tid` unless it has one or is the agent's own.
    fn arm(&self, tid: u32) {
        if lock(&self.own_tids).contains(&tid) {
            return;
        }
        let mut timers = lock(&self.timers);
        if let std::collections::hash_map::Entry::Vacant(e) = timers.entry(tid)
            && let Ok(t) = ThreadCpuTimer::start(tid, self.interval_ns)
        {
            e.insert(t);
        }
    }

    /// Arms timers for threads not seen starting and drops those of threads that are gone.
    fn reconcile_timers(&self) {
        let live: HashSet<u32> = os::process_thread_ids().into_iter().collect();
        for tid in &live {
            self.arm(*tid);
        }
        let own = lock(&self.own_tids).clone();
        lock(&self.timers).retain(|tid, _| live.contains(tid) && !own.contains(tid));
    }
}

impl Engine for CpuSignal {
    fn name(&self) -> &'static str {
        "asgct"
    }

    fn start(&self, _jni: &Jni) -> Result<(), String> {
        // Samples a previous session left in the ring are not this session's.
        self.sampler.ring.drain(|_, _| {});
        signal::activate(self.sampler)
            .map_err(|e| format!("cannot install SIGPROF handler: {e}"))?;
        self.reconcile_timers();
        Ok(())
    }

    fn poll(&self, jni: &Jni, sink: &mut Sink) {
        let mut stats = lock(&self.stats);
        let depth = self.depth;
        let ring_depth = self.sampler.ring.depth();
        let mut stack: Vec<u32> = Vec::with_capacity(ring_depth + 1);
        let values = sink.values(&[(Metric::Samples, 1), (Metric::Ns, self.interval_ns)]);
        self.sampler.ring.drain(|header, frames: &[CallFrame]| {
            stack.clear();
            let (thread, internal) = sink.thread_of_tid(header.tid);
            if header.num_frames > 0 {
                if header.num_frames as usize >= depth {
                    stack.push(sink.synthetic("[truncated]"));
                }
                let frames = &frames[..frames.len().min(depth)];
                for f in frames.iter().rev() {
                    let frame = if f.method_id.is_null() {
                        sink.synthetic("[unknown method]")
                    } else {
                        sink.java_frame(jni, MethodId(f.method_id as usize), f.lineno as i64)
                    };
                    stack.push(frame);
                }
            } else if let Some(kind) = internal {
                // A JVM-internal thread (JIT compiler, GC, VM thread): no Java stack to walk.
                stats.non_java += 1;
                stack.push(sink.synthetic(kind));
            } else if header.num_frames == NO_JNI_ENV {
                stats.non_java += 1;
                stack.push(sink.synthetic("[JVM internal]"));
            } else {
                let reason = asgct::failure_reason(header.num_frames);
                *stats.walk_failures.entry(reason).or_default() += 1;
                stack.push(sink.synthetic(&format!("[unknown: {reason}]")));
            }
            let stack_id = sink.stack(&stack);
            sink.add(thread, stack_id, ThreadState::Running, &values);
        });
    }

    fn housekeeping(&self) {
        self.reconcile_timers();
    }

    fn stop(&self, _jni: &Jni) {
        signal::deactivate(self.sampler);
        lock(&self.timers).clear();
    }

    fn finish(&self, _jni: &Jni, sink: &mut Sink) {
        let stats = lock(&self.stats);
        let meta = sink.meta_mut();
        for (k, v) in &stats.walk_failures {
            *meta.walk_failures.entry(k.to_string()).or_default() += v;
        }
        meta.extra
            .insert("non_java_samples".into(), stats.non_java.to_string());
    }

    fn dropped(&self) -> u64 {
        self.sampler.ring.dropped() - self.dropped_before
    }

    fn thread_started(&self, tid: u32) {
        self.arm(tid);
    }

    fn thread_ended(&self, tid: u32) {
        lock(&self.timers).remove(&tid);
    }
}
