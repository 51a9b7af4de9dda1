//! One profiling session: from start (VMInit or attach) to stop (VM death, the attach duration, or
//! a `stop` command), run by one writer thread attached to the VM as a daemon.
//!
//! The writer thread drains the CPU sampler's ring (or, for wall mode and the safepoint engine,
//! takes all stacks each interval), symbolizes new methods as it goes, keeps per-thread CPU timers
//! in step with the process's threads, and at the end writes the profile. The target application
//! never waits for it.

use crate::events::{self, Kind, Recorder};
use crate::options::{Engine, Mode, Options};
use crate::sampler::ring::{NO_JNI_ENV, Ring};
use crate::sampler::signal::{self, SignalSampler};
use crate::sampler::threads::ThreadTable;
use crate::stream::{Handshake, Stream, StreamOptions, ThreadSnapshot};
use crate::symbols::{Symbols, class_name};
use jvmprof_jvmti::asgct::{self, CallFrame};
use jvmprof_jvmti::os::{self, ThreadCpuTimer};
use jvmprof_jvmti::{Capabilities, Env, Event, Jni, MethodId, ThreadStack, Vm, thread_state};
use jvmprof_profile::{
    ExportOptions, Format, Frame, FrameKind, Meta, Metric, Profile, ProfileBuilder, Thread,
    ThreadState,
};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Slots in the CPU sample ring. At 1 ms on every core of a 2-core machine the writer, draining
/// every 10 ms, finds about 20 samples; 1024 leaves room for bursts and many cores.
const RING_CAPACITY: usize = 1024;
/// How often the writer drains the ring.
const DRAIN_EVERY: Duration = Duration::from_millis(10);
/// How often thread timers are reconciled with /proc/self/task and the status file is written.
const HOUSEKEEPING_EVERY: Duration = Duration::from_secs(1);
/// Most sampled objects tracked for liveness at once (bounds memory in long runs).
const MAX_TRACKED: usize = 1_000_000;

/// What the process-wide agent state hands a session.
#[derive(Clone, Copy)]
pub struct Context {
    pub vm: Vm,
    pub env: Env,
    pub threads: &'static ThreadTable,
    pub names: &'static Mutex<HashMap<u32, String>>,
    pub caps: Capabilities,
    pub attached: bool,
}

/// The JVMTI events of the alloc and lock modes.
const ALLOC_EVENTS: [Event; 1] = [Event::SampledObjectAlloc];
const LOCK_EVENTS: [Event; 4] = [
    Event::MonitorContendedEnter,
    Event::MonitorContendedEntered,
    Event::MonitorWait,
    Event::MonitorWaited,
];

/// The engine actually used.
#[derive(Clone, Copy)]
enum Walker {
    Asgct(&'static SignalSampler),
    Safepoint,
    /// No stack sampling (alloc or lock mode alone).
    None,
}

/// State shared by the writer thread and the JVMTI thread callbacks.
struct Shared {
    options: Options,
    walker: Walker,
    timers: Mutex<HashMap<u32, ThreadCpuTimer>>,
    own_tids: Mutex<HashSet<u32>>,
    stop: Mutex<bool>,
    wake: Condvar,
    samples: AtomicU64,
    recorder: Option<Arc<Recorder>>,
}

impl Shared {
    /// Arms a CPU timer for `tid` (CPU sampling with AsyncGetCallTrace only).
    fn arm(&self, tid: u32) {
        if !matches!(self.walker, Walker::Asgct(_)) || self.own_tids.lock().unwrap().contains(&tid)
        {
            return;
        }
        let mut timers = self.timers.lock().unwrap();
        if let std::collections::hash_map::Entry::Vacant(e) = timers.entry(tid)
            && let Ok(t) = ThreadCpuTimer::start(tid, self.options.interval.as_nanos() as u64)
        {
            e.insert(t);
        }
    }

    /// Arms timers for threads we have not seen start and drops those of threads that are gone.
    fn reconcile_timers(&self) {
        if !matches!(self.walker, Walker::Asgct(_)) {
            return;
        }
        let live: HashSet<u32> = os::process_thread_ids().into_iter().collect();
        for tid in &live {
            self.arm(*tid);
        }
        let own = self.own_tids.lock().unwrap().clone();
        self.timers
            .lock()
            .unwrap()
            .retain(|tid, _| live.contains(tid) && !own.contains(tid));
    }
}

pub struct Session {
    shared: Arc<Shared>,
    writer: Option<std::thread::JoinHandle<()>>,
    done: mpsc::Receiver<Result<String, String>>,
}

impl Session {
    /// Starts sampling. Errors are messages for the user; nothing is left running on error.
    pub fn start(ctx: Context, options: Options) -> Result<Session, String> {
        if options.exact.is_some() && !crate::exact::enabled() {
            return Err(
                "exact mode needs the agent at launch (record -- java ...); it cannot attach"
                    .into(),
            );
        }
        let walker = choose_walker(&ctx, &options)?;
        if options.alloc.is_some() && !ctx.caps.sampled_alloc {
            return Err("allocation sampling needs SampledObjectAlloc (JDK 11+)".into());
        }
        if options.alloc.is_some_and(|a| a.live) && !ctx.caps.tag_objects {
            return Err("live-object tracking needs object tags, which this JVM lacks".into());
        }
        if options.lock.is_some() && !ctx.caps.monitor_events {
            return Err("lock profiling needs monitor events, which this JVM lacks".into());
        }
        let recorder = (options.alloc.is_some() || options.lock.is_some())
            .then(|| Arc::new(Recorder::new(options.alloc, options.lock, options.depth)));
        let shared = Arc::new(Shared {
            options,
            walker,
            timers: Mutex::new(HashMap::new()),
            own_tids: Mutex::new(HashSet::new()),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            samples: AtomicU64::new(0),
            recorder,
        });
        let (done_tx, done) = mpsc::channel();
        let (ready_tx, ready) = mpsc::channel();
        let thread_shared = shared.clone();
        let writer = std::thread::Builder::new()
            .name("jvmprof writer".into())
            .spawn(move || writer_main(ctx, thread_shared, ready_tx, done_tx))
            .map_err(|e| format!("cannot start the writer thread: {e}"))?;
        match ready.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = writer.join();
                return Err(e);
            }
            Err(_) => return Err("the writer thread died while starting".into()),
        }
        if let Walker::Asgct(sampler) = walker {
            signal::activate(sampler)
                .map_err(|e| format!("cannot install SIGPROF handler: {e}"))?;
            shared.reconcile_timers();
        }
        if let Some(r) = &shared.recorder {
            enable_event_modes(&ctx.env, r)?;
        }
        Ok(Session {
            shared,
            writer: Some(writer),
            done,
        })
    }

    /// A Java thread started (called on that thread).
    pub fn thread_started(&self, tid: u32) {
        self.shared.arm(tid);
    }

    /// A Java thread ended (called on that thread).
    pub fn thread_ended(&self, tid: u32) {
        self.shared.timers.lock().unwrap().remove(&tid);
    }

    /// Whether the writer finished on its own (the attach duration elapsed).
    pub fn finished(&self) -> bool {
        self.writer.as_ref().is_none_or(|w| w.is_finished())
    }

    /// Stops sampling, waits (bounded) for the profile to be written and returns what happened.
    pub fn stop(mut self) -> Result<String, String> {
        *self.shared.stop.lock().unwrap() = true;
        self.shared.wake.notify_all();
        let result = self
            .done
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| Err("the profile writer did not finish within 60 s".into()));
        if let Some(w) = self.writer.take()
            && w.is_finished()
        {
            let _ = w.join();
        }
        result
    }
}

/// Turns on the JVMTI events of the alloc and lock modes and routes them to `r`.
fn enable_event_modes(env: &Env, r: &Arc<Recorder>) -> Result<(), String> {
    events::install(Some(r.clone()));
    if let Some(a) = r.alloc {
        env.set_heap_sampling_interval(a.interval_bytes as i32)
            .map_err(|e| e.to_string())?;
        env.enable_events(&ALLOC_EVENTS)
            .map_err(|e| e.to_string())?;
        if a.live {
            env.enable_events(&[Event::ObjectFree])
                .map_err(|e| e.to_string())?;
        }
    }
    if r.lock.is_some() {
        env.enable_events(&LOCK_EVENTS).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn disable_event_modes(env: &Env) {
    let _ = env.disable_events(&ALLOC_EVENTS);
    let _ = env.disable_events(&LOCK_EVENTS);
    let _ = env.disable_events(&[Event::ObjectFree]);
    events::install(None);
}

fn choose_walker(ctx: &Context, options: &Options) -> Result<Walker, String> {
    let Some(mode) = options.sampling else {
        return Ok(Walker::None);
    };
    let want_asgct = mode == Mode::Cpu && options.engine != Engine::Safepoint;
    if want_asgct && let Some(f) = asgct::lookup() {
        let sampler: &'static SignalSampler = Box::leak(Box::new(SignalSampler {
            ring: Ring::new(RING_CAPACITY, options.depth),
            threads: ctx.threads,
            asgct: f,
            vm: ctx.vm,
            active: AtomicBool::new(false),
        }));
        return Ok(Walker::Asgct(sampler));
    }
    if options.engine == Engine::Asgct {
        return Err("engine=asgct: this JVM has no AsyncGetCallTrace".into());
    }
    if mode == Mode::Cpu && !ctx.caps.thread_cpu_time {
        return Err("the safepoint CPU engine needs thread CPU time, which this JVM lacks".into());
    }
    Ok(Walker::Safepoint)
}

fn writer_main(
    ctx: Context,
    shared: Arc<Shared>,
    ready: mpsc::Sender<Result<(), String>>,
    done: mpsc::Sender<Result<String, String>>,
) {
    os::block_sampling_signal_in_current_thread();
    shared.own_tids.lock().unwrap().insert(os::gettid());
    let jni = match ctx.vm.attach_current_thread_as_daemon(c"jvmprof writer") {
        Ok(j) => j,
        Err(e) => {
            let _ = ready.send(Err(e.to_string()));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    let mut w = Writer::new(ctx, shared.clone());
    // Lock mode also times java.util.concurrent parks (LockSupport rewritten until the end).
    let juc = (shared.options.lock).map(|l| crate::parks::start(&ctx.env, &jni, l.threshold));
    if let Some(r) = &juc {
        let text = r.clone().unwrap_or_else(|e| format!("off: {e}"));
        if let Err(e) = r {
            eprintln!("jvmprof: java.util.concurrent locks are not timed: {e}");
        }
        w.builder.meta_mut().extra.insert("lock_juc".into(), text);
    }
    let started = Instant::now();
    let mut last_housekeeping = Instant::now();
    let mut last_snapshot = Instant::now();
    let mut last_flush = Instant::now();
    let mut flush_failed = false;
    let tick = match shared.walker {
        Walker::Asgct(_) | Walker::None => DRAIN_EVERY,
        Walker::Safepoint => shared.options.interval,
    };
    let mut next = Instant::now() + tick;
    loop {
        {
            let mut stop = shared.stop.lock().unwrap();
            while !*stop && Instant::now() < next {
                let wait = next.saturating_duration_since(Instant::now());
                stop = shared.wake.wait_timeout(stop, wait).unwrap().0;
            }
            if *stop {
                break;
            }
        }
        next += tick;
        if next < Instant::now() {
            next = Instant::now() + tick; // fell behind (e.g. a long safepoint): skip, don't burst
        }
        jni.with_local_frame(64, || w.tick(&jni));
        if last_housekeeping.elapsed() >= HOUSEKEEPING_EVERY {
            last_housekeeping = Instant::now();
            if let Some(tid) = w.stream.as_ref().and_then(|s| s.io_tid()) {
                // The stream's I/O thread is ours: no CPU timer (its SIGPROF is blocked anyway).
                shared.own_tids.lock().unwrap().insert(tid);
            }
            shared.reconcile_timers();
            w.write_status(started.elapsed());
            if w.stream.is_some() {
                // Exact mode's trees are merged periodically only when someone reads them live.
                jni.with_local_frame(64, || w.merge_exact(&jni, false));
            }
            if let Some(stream) = &mut w.stream {
                stream.samples(w.builder.profile());
            }
        }
        if let (Some(every), Some(file)) = (shared.options.flush, &shared.options.file)
            && last_flush.elapsed() >= every
        {
            last_flush = Instant::now();
            jni.with_local_frame(64, || w.merge_exact(&jni, false));
            if let Err(e) = write_profile(w.builder.profile(), file, &shared.options)
                && !std::mem::replace(&mut flush_failed, true)
            {
                eprintln!("jvmprof: {e} (flush); profiling continues");
            }
        }
        if w.stream.is_some() && last_snapshot.elapsed() >= shared.options.refresh {
            last_snapshot = Instant::now();
            jni.with_local_frame(64, || w.stream_snapshot(&jni));
        }
        if shared
            .options
            .duration
            .is_some_and(|d| started.elapsed() >= d)
        {
            break;
        }
    }
    if let Walker::Asgct(sampler) = shared.walker {
        signal::deactivate(sampler);
    }
    shared.timers.lock().unwrap().clear();
    if matches!(juc, Some(Ok(_))) {
        crate::parks::stop(&ctx.env, &jni);
    }
    if shared.recorder.is_some() {
        disable_event_modes(&ctx.env);
    }
    jni.with_local_frame(64, || w.drain_ring(&jni));
    jni.with_local_frame(64, || w.drain_events(&jni));
    jni.with_local_frame(64, || w.resolve_live(&jni));
    jni.with_local_frame(64, || w.merge_exact(&jni, true));
    let result = w.finish(started.elapsed());
    if let Err(e) = &result {
        eprintln!("jvmprof: {e}");
    }
    let _ = done.send(result);
    ctx.vm.detach_current_thread();
}

/// The writer thread's working state.
struct Writer {
    ctx: Context,
    shared: Arc<Shared>,
    builder: ProfileBuilder,
    symbols: Symbols,
    /// tid → builder thread index and, for JVM-internal threads, their kind (CPU engine).
    thread_ids: HashMap<u32, (u32, Option<&'static str>)>,
    /// Java thread id → last CPU time seen and the remainder below one interval (safepoint CPU).
    cpu_seen: HashMap<i64, (i64, u64)>,
    interval_ns: u64,
    walk_failures: HashMap<&'static str, u64>,
    non_java_samples: u64,
    /// The collector connection, with `server=`.
    stream: Option<Stream>,
    /// Tag → (thread, stack, estimated bytes, estimated objects) of sampled objects tracked for
    /// liveness (`live`); pruned as ObjectFree events arrive, bounded by MAX_TRACKED.
    tracked: HashMap<i64, (u32, u32, f64, f64)>,
    /// (tid, allocated type) → the fractions of estimated bytes and objects not yet added.
    fractions: HashMap<(u32, String), (f64, f64)>,
    /// Java thread id → the order in which snapshots first saw the thread.
    thread_order: HashMap<i64, u64>,
    /// Exact mode's reader of the runtime's calling-context trees.
    exact: Option<crate::exact::Collector>,
}

impl Writer {
    fn new(ctx: Context, shared: Arc<Shared>) -> Writer {
        let o = &shared.options;
        let engine = match shared.walker {
            Walker::Asgct(_) => "asgct",
            Walker::Safepoint => "safepoint",
            Walker::None if o.exact.is_some() => "instrumentation",
            Walker::None => "events",
        };
        let mut meta = Meta {
            modes: o.modes().iter().map(|m| m.to_string()).collect(),
            metrics: metrics_of(o),
            interval_ns: o.interval.as_nanos() as u64,
            engine: engine.to_string(),
            jvm_name: ctx.env.system_property("java.vm.name").unwrap_or_default(),
            jvm_version: ctx
                .env
                .system_property("java.runtime.version")
                .or_else(|| ctx.env.system_property("java.vm.version"))
                .unwrap_or_default(),
            pid: std::process::id(),
            command: std::fs::read("/proc/self/cmdline")
                .map(|b| {
                    b.split(|c| *c == 0)
                        .filter(|s| !s.is_empty())
                        .map(|s| String::from_utf8_lossy(s).into_owned())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default(),
            start_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            ..Meta::default()
        };
        meta.extra
            .insert("agent_version".into(), env!("CARGO_PKG_VERSION").into());
        meta.extra
            .insert("attached".into(), ctx.attached.to_string());
        meta.extra.insert("max_depth".into(), o.depth.to_string());
        if let Some(a) = o.alloc {
            let extra = &mut meta.extra;
            extra.insert("alloc_interval_bytes".into(), a.interval_bytes.to_string());
            extra.insert("live".into(), a.live.to_string());
        }
        if let Some(l) = o.lock {
            let ns = l.threshold.as_nanos().to_string();
            meta.extra.insert("lock_threshold_ns".into(), ns);
        }
        let interval_ns = meta.interval_ns;
        let exact = o.exact.is_some().then(crate::exact::Collector::default);
        let stream = o.server.as_ref().map(|server| {
            let handshake = Handshake {
                pid: meta.pid,
                command: meta.command.clone(),
                jvm: format!("{} {}", meta.jvm_name, meta.jvm_version),
                os: format!(
                    "{} {}",
                    ctx.env.system_property("os.name").unwrap_or_default(),
                    ctx.env.system_property("os.version").unwrap_or_default()
                ),
                host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|h| h.trim().to_string())
                    .unwrap_or_default(),
                agent_version: env!("CARGO_PKG_VERSION").to_string(),
                start_unix_ms: meta.start_unix_ms,
            };
            Stream::start(
                StreamOptions {
                    server: server.clone(),
                    token: o.token.clone(),
                    refresh: o.refresh,
                },
                handshake,
            )
        });
        Writer {
            ctx,
            shared,
            builder: ProfileBuilder::new(meta),
            symbols: Symbols::default(),
            thread_ids: HashMap::new(),
            cpu_seen: HashMap::new(),
            interval_ns,
            walk_failures: HashMap::new(),
            non_java_samples: 0,
            stream,
            thread_order: HashMap::new(),
            tracked: HashMap::new(),
            fractions: HashMap::new(),
            exact,
        }
    }

    /// Sends every thread's name, group, state, start order and stack to the collector.
    fn stream_snapshot(&mut self, jni: &Jni) {
        let Ok(stacks) = self
            .ctx
            .env
            .all_stack_traces(self.shared.options.depth as i32)
        else {
            return;
        };
        let mut snapshot = Vec::with_capacity(stacks.len());
        for ts in &stacks {
            let Some(details) = self.ctx.env.thread_details(jni, ts.thread) else {
                continue;
            };
            if details.name == "jvmprof writer" {
                continue;
            }
            let id = jni.java_thread_id(ts.thread).unwrap_or(-1);
            let next = self.thread_order.len() as u64;
            let order = *self.thread_order.entry(id).or_insert(next);
            let frames = ts
                .frames
                .iter()
                .map(|&(method, bci)| {
                    let fid =
                        self.symbols
                            .java_frame(&self.ctx.env, jni, &mut self.builder, method, bci);
                    self.builder.profile().frames[fid as usize].clone()
                })
                .collect();
            snapshot.push(ThreadSnapshot {
                id,
                name: details.name,
                group: details.group,
                daemon: details.daemon,
                state: map_state(ts.state),
                order,
                frames,
            });
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        if let Some(stream) = &mut self.stream {
            stream.threads(now, snapshot);
        }
    }

    fn tick(&mut self, jni: &Jni) {
        match self.shared.walker {
            Walker::Asgct(_) => self.drain_ring(jni),
            Walker::Safepoint => self.take_all_stacks(jni),
            Walker::None => {}
        }
        self.drain_events(jni);
    }

    /// A value vector with `pairs` set and every other metric 0.
    fn values(&self, pairs: &[(Metric, u64)]) -> Vec<u64> {
        let metrics = &self.builder.profile().meta.metrics;
        let mut v = vec![0; metrics.len()];
        for (m, x) in pairs {
            if let Some(i) = metrics.iter().position(|k| k == m) {
                v[i] = *x;
            }
        }
        v
    }

    /// The root-first stack of a top-first JVMTI stack, with a leaf frame (type or lock class).
    fn event_stack(&mut self, jni: &Jni, stack: &[(MethodId, i64)], leaf: Frame) -> u32 {
        let mut ids = Vec::with_capacity(stack.len() + 2);
        if stack.len() >= self.shared.options.depth {
            ids.push(
                self.symbols
                    .synthetic_frame(&mut self.builder, "[truncated]"),
            );
        }
        for &(method, bci) in stack.iter().rev() {
            let env = &self.ctx.env;
            ids.push(
                self.symbols
                    .java_frame(env, jni, &mut self.builder, method, bci),
            );
        }
        ids.push(self.builder.frame(leaf));
        self.builder.stack(&ids)
    }

    /// Moves recorded allocation and lock events into the profile.
    fn drain_events(&mut self, jni: &Jni) {
        let Some(recorder) = self.shared.recorder.clone() else {
            return;
        };
        let (events, freed) = recorder.drain();
        if recorder.lock.is_some() {
            let skipped = recorder.class_init_skipped.load(Ordering::Relaxed);
            let extra = &mut self.builder.meta_mut().extra;
            extra.insert("lock_class_init_skipped".into(), skipped.to_string());
        }
        for tag in freed {
            self.tracked.remove(&tag);
        }
        let interval = recorder.alloc.map_or(0, |a| a.interval_bytes);
        for e in events {
            let (thread, _) = self.cpu_thread(e.tid);
            let (leaf, state, v, tag) = match e.kind {
                Kind::Alloc { class, size, tag } => {
                    let name = events::type_name(&class);
                    let w = events::sample_weight(size, interval);
                    // Estimates are fractional; carry the remainder per thread and type so that
                    // e.g. a weight of 1.16 per sample adds up instead of rounding to 1 each time.
                    let carry = self.fractions.entry((e.tid, class.clone())).or_default();
                    carry.0 += size as f64 * w;
                    carry.1 += w;
                    let (bytes, objects) = (carry.0.floor(), carry.1.floor());
                    carry.0 -= bytes;
                    carry.1 -= objects;
                    let (bytes, objects) = (bytes as u64, objects as u64);
                    let v = self.values(&[(Metric::Bytes, bytes), (Metric::Objects, objects)]);
                    let leaf = Frame::synthetic(FrameKind::AllocatedType, &name);
                    (
                        leaf,
                        ThreadState::Running,
                        v,
                        Some((tag, size as f64 * w, w)),
                    )
                }
                Kind::Contended { class, ns } => {
                    let v = self.values(&[(Metric::LockNs, ns), (Metric::LockCount, 1)]);
                    let leaf = Frame::synthetic(FrameKind::LockClass, &class_name(&class));
                    (leaf, ThreadState::Blocked, v, None)
                }
                Kind::Wait { class, ns } => {
                    let v = self.values(&[(Metric::WaitNs, ns), (Metric::WaitCount, 1)]);
                    let leaf = Frame::synthetic(FrameKind::LockClass, &class_name(&class));
                    (leaf, ThreadState::Waiting, v, None)
                }
            };
            let stack = self.event_stack(jni, &e.stack, leaf);
            self.builder.add(thread, stack, state, &v);
            if let Some((tag, bytes, objects)) = tag
                && tag != 0
                && self.tracked.len() < MAX_TRACKED
            {
                self.tracked.insert(tag, (thread, stack, bytes, objects));
            }
        }
    }

    /// Exact mode: adds what the threads' calling-context trees gained since the last merge
    /// (`last`: the final one).
    fn merge_exact(&mut self, jni: &Jni, last: bool) {
        let Some(mut c) = self.exact.take() else {
            return;
        };
        c.merge(jni, &mut self.builder, last);
        let extra = &mut self.builder.meta_mut().extra;
        crate::exact::meta(extra);
        extra.insert("exact_nodes".into(), c.stats.0.to_string());
        extra.insert("exact_max_nodes".into(), c.stats.1.to_string());
        extra.insert("exact_dropped_calls".into(), c.stats.2.to_string());
        self.exact = Some(c);
    }

    /// With `live`: after a full GC, credits every sampled object still alive to its site.
    fn resolve_live(&mut self, jni: &Jni) {
        if !self.shared.options.alloc.is_some_and(|a| a.live) {
            return;
        }
        self.ctx.env.force_garbage_collection();
        let tags: Vec<i64> = self.tracked.keys().copied().collect();
        let mut live = 0u64;
        // Sum the unrounded estimates per site, then round once per site.
        let mut sites: HashMap<(u32, u32), (f64, f64)> = HashMap::new();
        for chunk in tags.chunks(10_000) {
            for tag in self.ctx.env.live_tags(jni, chunk) {
                if let Some(&(thread, stack, bytes, objects)) = self.tracked.get(&tag) {
                    let site = sites.entry((thread, stack)).or_default();
                    site.0 += bytes;
                    site.1 += objects;
                    live += 1;
                }
            }
        }
        let mut sites: Vec<_> = sites.into_iter().collect();
        sites.sort_by_key(|(k, _)| *k);
        for ((thread, stack), (bytes, objects)) in sites {
            let v = self.values(&[
                (Metric::LiveBytes, bytes.round() as u64),
                (Metric::LiveObjects, objects.round() as u64),
            ]);
            self.builder.add(thread, stack, ThreadState::Running, &v);
        }
        let extra = &mut self.builder.meta_mut().extra;
        extra.insert("live_sampled_objects".into(), live.to_string());
    }

    /// Moves every sample the signal handler recorded into the profile.
    fn drain_ring(&mut self, jni: &Jni) {
        let Walker::Asgct(sampler) = self.shared.walker else {
            return;
        };
        let depth = sampler.ring.depth();
        let mut stack: Vec<u32> = Vec::with_capacity(depth + 1);
        let sample_values = self.values(&[(Metric::Samples, 1), (Metric::Ns, self.interval_ns)]);
        let n = sampler.ring.drain(|header, frames: &[CallFrame]| {
            stack.clear();
            let (thread, internal) = self.cpu_thread(header.tid);
            if header.num_frames > 0 {
                if header.num_frames as usize >= depth {
                    stack.push(
                        self.symbols
                            .synthetic_frame(&mut self.builder, "[truncated]"),
                    );
                }
                for f in frames.iter().rev() {
                    let frame = if f.method_id.is_null() {
                        self.symbols
                            .synthetic_frame(&mut self.builder, "[unknown method]")
                    } else {
                        self.symbols.java_frame(
                            &self.ctx.env,
                            jni,
                            &mut self.builder,
                            jvmprof_jvmti::MethodId(f.method_id as usize),
                            f.lineno as i64,
                        )
                    };
                    stack.push(frame);
                }
            } else if let Some(kind) = internal {
                // A JVM-internal thread (JIT compiler, GC, VM thread): no Java stack to walk.
                self.non_java_samples += 1;
                stack.push(self.symbols.synthetic_frame(&mut self.builder, kind));
            } else if header.num_frames == NO_JNI_ENV {
                self.non_java_samples += 1;
                stack.push(
                    self.symbols
                        .synthetic_frame(&mut self.builder, "[JVM internal]"),
                );
            } else {
                let reason = asgct::failure_reason(header.num_frames);
                *self.walk_failures.entry(reason).or_default() += 1;
                let name = format!("[unknown: {reason}]");
                stack.push(self.symbols.synthetic_frame(&mut self.builder, &name));
            }
            let stack_id = self.builder.stack(&stack);
            self.builder
                .add(thread, stack_id, ThreadState::Running, &sample_values);
        });
        self.shared.samples.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn cpu_thread(&mut self, tid: u32) -> (u32, Option<&'static str>) {
        if let Some(t) = self.thread_ids.get(&tid) {
            return *t;
        }
        let java_name = self.ctx.names.lock().unwrap().get(&tid).cloned();
        let comm = os::thread_comm(tid);
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
        self.thread_ids.insert(tid, (id, internal));
        (id, internal)
    }

    /// Safepoint engine: wall mode samples every thread; CPU mode credits each thread with the CPU
    /// time it used since the last tick, in whole intervals.
    fn take_all_stacks(&mut self, jni: &Jni) {
        let Ok(stacks) = self
            .ctx
            .env
            .all_stack_traces(self.shared.options.depth as i32)
        else {
            *self
                .walk_failures
                .entry("safepoint_walk_failed")
                .or_default() += 1;
            return;
        };
        let cpu = self.shared.options.sampling == Some(Mode::Cpu);
        let mut taken = 0;
        for ts in &stacks {
            if ts.frames.is_empty() {
                continue; // JVM-internal or agent thread: no Java code to show
            }
            let (count, state) = if cpu {
                let n = self.cpu_intervals(jni, ts);
                if n == 0 {
                    continue;
                }
                (n, ThreadState::Running)
            } else {
                (1, map_state(ts.state))
            };
            let name = self
                .ctx
                .env
                .thread_name(jni, ts.thread)
                .unwrap_or_else(|| "unnamed".into());
            if name == "jvmprof writer" {
                continue;
            }
            let thread = self.builder.thread(Thread { tid: 0, name });
            let mut stack: Vec<u32> = Vec::with_capacity(ts.frames.len() + 1);
            if ts.frames.len() >= self.shared.options.depth {
                stack.push(
                    self.symbols
                        .synthetic_frame(&mut self.builder, "[truncated]"),
                );
            }
            for &(method, bci) in ts.frames.iter().rev() {
                stack.push(self.symbols.java_frame(
                    &self.ctx.env,
                    jni,
                    &mut self.builder,
                    method,
                    bci,
                ));
            }
            let stack_id = self.builder.stack(&stack);
            let v = self.values(&[
                (Metric::Samples, count),
                (Metric::Ns, count * self.interval_ns),
            ]);
            self.builder.add(thread, stack_id, state, &v);
            taken += count;
        }
        self.shared.samples.fetch_add(taken, Ordering::Relaxed);
    }

    fn cpu_intervals(&mut self, jni: &Jni, ts: &ThreadStack) -> u64 {
        let (Some(id), Some(now)) = (
            jni.java_thread_id(ts.thread),
            self.ctx.env.thread_cpu_time(ts.thread),
        ) else {
            return 0;
        };
        let interval = self.interval_ns.max(1);
        let entry = self.cpu_seen.entry(id).or_insert((now, 0));
        let used = (now - entry.0).max(0) as u64 + entry.1;
        entry.0 = now;
        entry.1 = used % interval;
        used / interval
    }

    fn write_status(&self, elapsed: Duration) {
        if let Some(path) = &self.shared.options.status {
            let text = format!(
                "{} {}\n",
                elapsed.as_millis(),
                self.shared.samples.load(Ordering::Relaxed)
            );
            let _ = write_atomically(path, text.as_bytes());
        }
    }

    /// Builds the profile and writes it in the format the options ask for.
    fn finish(mut self, elapsed: Duration) -> Result<String, String> {
        let dropped = match self.shared.walker {
            Walker::Asgct(s) => s.ring.dropped(),
            Walker::Safepoint | Walker::None => 0,
        } + self
            .shared
            .recorder
            .as_ref()
            .map_or(0, |r| r.dropped.load(Ordering::Relaxed));
        let non_java = self.non_java_samples;
        let meta = self.builder.meta_mut();
        meta.duration_ms = elapsed.as_millis() as u64;
        meta.dropped_samples = dropped;
        meta.walk_failures = self
            .walk_failures
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        meta.extra
            .insert("non_java_samples".into(), non_java.to_string());
        self.write_status(elapsed);
        let stream = self.stream.take();
        let profile = self.builder.finish();
        if let Some(stream) = stream {
            stream.finish(&profile);
        }
        match &self.shared.options.file {
            Some(file) => {
                write_profile(&profile, file, &self.shared.options)?;
                Ok(format!(
                    "{} samples written to {}",
                    profile.total(0),
                    file.display()
                ))
            }
            None => Ok(format!("{} samples streamed", profile.total(0))),
        }
    }
}

/// The kind of a HotSpot-internal thread, by its kernel name (HotSpot names its threads; the
/// compiler threads are JavaThreads hidden from JVMTI, so AsyncGetCallTrace cannot walk them).
fn internal_thread_kind(comm: &str) -> Option<&'static str> {
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

/// The metrics a session's samples carry: stack sampling's, then alloc's, then lock's.
fn metrics_of(o: &Options) -> Vec<Metric> {
    let mut m = Vec::new();
    if o.sampling.is_some() {
        m.extend([Metric::Samples, Metric::Ns]);
    }
    if let Some(a) = o.alloc {
        m.extend([Metric::Bytes, Metric::Objects]);
        if a.live {
            m.extend([Metric::LiveBytes, Metric::LiveObjects]);
        }
    }
    if o.lock.is_some() {
        m.extend([
            Metric::LockNs,
            Metric::LockCount,
            Metric::WaitNs,
            Metric::WaitCount,
        ]);
    }
    if o.exact.is_some() {
        m.extend([Metric::Calls, Metric::Bytecodes]);
    }
    m
}

fn map_state(state: i32) -> ThreadState {
    use thread_state::*;
    if state & SLEEPING != 0 {
        ThreadState::Sleeping
    } else if state & PARKED != 0 {
        ThreadState::Parked
    } else if state & BLOCKED_ON_MONITOR_ENTER != 0 {
        ThreadState::Blocked
    } else if state & WAITING_WITH_TIMEOUT != 0 {
        ThreadState::TimedWaiting
    } else if state & (WAITING_INDEFINITELY | IN_OBJECT_WAIT) != 0 {
        ThreadState::Waiting
    } else if state & IN_NATIVE != 0 {
        ThreadState::Native
    } else if state & RUNNABLE != 0 {
        ThreadState::Running
    } else {
        ThreadState::Unknown
    }
}

fn write_profile(profile: &Profile, file: &Path, o: &Options) -> Result<(), String> {
    let format = match &o.format {
        Some(f) => Format::parse(f),
        None => Format::from_path(file),
    }
    .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    let metric = match &o.value {
        Some(v) => Some(
            Metric::parse(v).ok_or_else(|| format!("unknown value '{v}' for the output format"))?,
        ),
        None => None,
    };
    let options = ExportOptions {
        metric,
        threads: o.threads,
    };
    let mut bytes = Vec::new();
    jvmprof_profile::write(profile, format, &options, &mut bytes)
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    write_atomically(file, &bytes).map_err(|e| format!("cannot write {}: {e}", file.display()))
}

/// Writes to `path.tmp` and renames, so a reader never sees half a file.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
