//! The one sample sink every engine feeds, on the writer thread.
//!
//! An engine hands the sink what it recorded in its own raw form (a thread, jmethodIDs with
//! bytecode indices or ready frames, a thread state, metric values); the sink turns it into
//! profile records exactly once: thread ids, frames (symbolised here, once per distinct method
//! and bci), stacks as (parent, frame) prefixes, and samples. Everything downstream (the native
//! file, the collector link) reads those records; nothing re-symbolises.

use crate::names::ThreadNames;
use crate::symbols::Symbols;
use crate::sync::lock;
use jvmprof_jvmti::{Env, Jni, MethodId};
use jvmprof_profile::{Frame, Meta, Metric, Profile, ProfileBuilder, Thread, ThreadState};
use std::collections::HashMap;
use std::sync::Mutex;

pub struct Sink {
    builder: ProfileBuilder,
    symbols: Symbols,
    env: Env,
    /// tid → Java thread name, filled at ThreadStart (the agent state's table).
    names: &'static Mutex<ThreadNames>,
    /// tid → profile thread index and, for JVM-internal threads, their kind.
    by_tid: HashMap<u32, (u32, Option<&'static str>)>,
    depth: usize,
    /// Samples added so far (the `samples` metric where the session has it, else one per add).
    samples: u64,
    /// With a collector link: what each sample gained since the link last took it (sample index
    /// → values), so the link sends only what changed and never re-scans the profile.
    unsent: Option<HashMap<u32, Vec<u64>>>,
    /// The monotonic clock when the session began: timeline offsets count from here.
    start_ns: u64,
    /// Timed samples that did not fit in the timeline (beyond [`MAX_TIMELINE`]).
    timeline_dropped: u64,
}

/// The most timeline entries a session keeps (16 MB): at a 10 ms interval, 20 busy threads for
/// 8 minutes. The aggregated samples go on past it; only their times are lost, and counted.
pub const MAX_TIMELINE: usize = 1 << 20;

impl Sink {
    pub fn new(meta: Meta, env: Env, names: &'static Mutex<ThreadNames>, depth: usize) -> Sink {
        let start_ns = jvmprof_jvmti::os::monotonic_ns();
        let mut meta = meta;
        // Timeline offsets count from here; with it a user (or a test) can line the timeline
        // up with System.nanoTime() stamps, the same clock.
        meta.extra
            .insert("start_monotonic_ns".into(), start_ns.to_string());
        Sink {
            builder: ProfileBuilder::new(meta),
            symbols: Symbols::default(),
            env,
            names,
            by_tid: HashMap::new(),
            depth,
            samples: 0,
            unsent: None,
            start_ns,
            timeline_dropped: 0,
        }
    }

    /// Keeps what samples gain from now on for [`take_unsent`](Self::take_unsent).
    pub fn track_unsent(&mut self) {
        self.unsent.get_or_insert_with(HashMap::new);
    }

    /// What each sample gained since the last call, by sample index (ascending).
    pub fn take_unsent(&mut self) -> Vec<(u32, Vec<u64>)> {
        let Some(unsent) = self.unsent.as_mut() else {
            return Vec::new();
        };
        let mut v: Vec<(u32, Vec<u64>)> = unsent.drain().collect();
        v.sort_unstable_by_key(|(i, _)| *i);
        v
    }

    /// A value vector with `pairs` set and every other metric of the session 0.
    pub fn values(&self, pairs: &[(Metric, u64)]) -> Vec<u64> {
        let metrics = &self.builder.profile().meta.metrics;
        let mut v = vec![0; metrics.len()];
        for (m, x) in pairs {
            if let Some(i) = metrics.iter().position(|k| k == m) {
                v[i] = *x;
            }
        }
        v
    }

    /// The profile thread of a Linux tid, named by its Java name, else its kernel name; the
    /// second value names the kind of a JVM-internal thread (JIT compiler, GC, VM thread).
    pub fn thread_of_tid(&mut self, tid: u32) -> (u32, Option<&'static str>) {
        if let Some(t) = self.by_tid.get(&tid) {
            return *t;
        }
        let java_name = lock(self.names).get(tid).map(str::to_string);
        let comm = jvmprof_jvmti::os::thread_comm(tid);
        let internal = match (&java_name, &comm) {
            (None, Some(c)) => internal_thread_kind(c),
            _ => None,
        };
        let name = java_name
            .or(comm)
            .unwrap_or_else(|| format!("thread {tid}"));
        let id = self.builder.thread(Thread {
            tid: tid as u64,
            name,
        });
        self.by_tid.insert(tid, (id, internal));
        (id, internal)
    }

    /// Forgets the profile thread of `tid`: its thread ended, and a new one the kernel gives the
    /// tid later is a thread of its own.
    pub fn forget_tid(&mut self, tid: u32) {
        self.by_tid.remove(&tid);
    }

    /// The profile thread of a Java thread known only by name (safepoint walks, exact trees).
    pub fn thread_named(&mut self, name: String) -> u32 {
        self.builder.thread(Thread { tid: 0, name })
    }

    /// The profile thread `name` seen on the native thread `tid` (a virtual thread's carrier, 0
    /// when unmounted).
    pub fn thread_on(&mut self, tid: u32, name: String) -> u32 {
        self.builder.thread(Thread {
            tid: tid as u64,
            name,
        })
    }

    pub fn java_frame(&mut self, jni: &Jni, method: MethodId, bci: i64) -> u32 {
        self.symbols
            .java_frame(&self.env, jni, &mut self.builder, method, bci)
    }

    /// A `[name]` frame the profiler adds.
    pub fn synthetic(&mut self, name: &str) -> u32 {
        self.symbols.synthetic_frame(&mut self.builder, name)
    }

    pub fn frame(&mut self, frame: Frame) -> u32 {
        self.builder.frame(frame)
    }

    /// A stack from root-first frame ids.
    pub fn stack(&mut self, frames: &[u32]) -> u32 {
        self.builder.stack(frames)
    }

    /// The stack whose top frame is `frame` below `parent` (None: a root frame).
    pub fn child_stack(&mut self, parent: Option<u32>, frame: u32) -> u32 {
        self.builder.child_stack(parent, frame)
    }

    /// The root-first stack of a top-first JVMTI stack (`[truncated]` first when it reached the
    /// session's depth), with an optional leaf frame (allocated type, lock class).
    pub fn jvmti_stack(
        &mut self,
        jni: &Jni,
        top_first: &[(MethodId, i64)],
        leaf: Option<Frame>,
    ) -> u32 {
        let mut ids = Vec::with_capacity(top_first.len() + 2);
        if top_first.len() >= self.depth {
            ids.push(self.synthetic("[truncated]"));
        }
        for &(method, bci) in top_first.iter().rev() {
            ids.push(self.java_frame(jni, method, bci));
        }
        if let Some(leaf) = leaf {
            ids.push(self.builder.frame(leaf));
        }
        self.builder.stack(&ids)
    }

    /// Adds `values` to (thread, stack, state) and notes in the timeline that it was taken at
    /// `time_ns` (the monotonic clock) inside the traced call tree `trace` (0: none) and stands
    /// for `weight` sampling periods.
    #[allow(clippy::too_many_arguments)]
    pub fn add_at(
        &mut self,
        thread: u32,
        stack: u32,
        state: ThreadState,
        values: &[u64],
        time_ns: u64,
        weight: u32,
        trace: u64,
    ) {
        let idx = self.add(thread, stack, state, values);
        if self.builder.timeline_len() < MAX_TIMELINE {
            let offset = time_ns.saturating_sub(self.start_ns);
            self.builder.add_time_in(idx, offset, weight, trace);
        } else {
            self.timeline_dropped += 1;
        }
    }

    /// Adds `values` to (thread, stack, state); returns the sample's index.
    pub fn add(&mut self, thread: u32, stack: u32, state: ThreadState, values: &[u64]) -> usize {
        let metrics = &self.builder.profile().meta.metrics;
        self.samples += match metrics.iter().position(|m| *m == Metric::Samples) {
            Some(i) => values.get(i).copied().unwrap_or(0),
            None => 1,
        };
        let idx = self.builder.add(thread, stack, state, values);
        if let Some(unsent) = self.unsent.as_mut() {
            let acc = unsent
                .entry(idx as u32)
                .or_insert_with(|| vec![0; values.len()]);
            for (a, v) in acc.iter_mut().zip(values) {
                *a = a.saturating_add(*v);
            }
        }
        idx
    }

    /// Samples added so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Room for `more` stacks and samples at once (exact trees of millions of contexts).
    pub fn reserve(&mut self, more: usize) {
        self.builder.reserve(more);
    }

    pub fn meta_mut(&mut self) -> &mut Meta {
        self.builder.meta_mut()
    }

    /// Everything recorded so far.
    pub fn profile(&self) -> &Profile {
        self.builder.profile()
    }

    /// Puts what only the end knows into the metadata (timeline entries dropped), before the
    /// last records are written.
    pub fn finish_meta(&mut self) {
        if self.timeline_dropped > 0 {
            let dropped = self.timeline_dropped.to_string();
            self.builder
                .meta_mut()
                .extra
                .insert("timeline_dropped".into(), dropped);
        }
    }

    pub fn finish(mut self) -> Profile {
        self.finish_meta();
        self.builder.finish()
    }
}

/// The kind of a HotSpot-internal thread, by its kernel name (HotSpot names its threads; the
/// compiler threads are JavaThreads hidden from JVMTI, so AsyncGetCallTrace cannot walk them).
pub fn internal_thread_kind(comm: &str) -> Option<&'static str> {
    if comm.starts_with("C1 CompilerThre") || comm.starts_with("C2 CompilerThre") {
        Some("[JIT compiler]")
    } else if comm.starts_with("GC Thread")
        || comm.starts_with("G1 ")
        || comm.starts_with("ZGC")
        || comm.starts_with("Shenandoah")
        || comm.starts_with("ConcurrentGC")
    {
        Some("[GC]")
    } else if comm == "VM Thread" {
        Some("[VM thread]")
    } else if comm.starts_with("VM Periodic") || comm == "Sweeper thread" {
        Some("[JVM internal]")
    } else {
        None
    }
}
