//! The event engine (`alloc` and `lock` modes): allocation and lock events recorded in JVMTI
//! callbacks on the application's own threads ([`Recorder`]), moved into the sink by the writer
//! thread ([`Events`]).
//!
//! A callback does the least it can: take the current stack (JVMTI GetStackTrace), name the class,
//! and append to a bounded buffer under a short lock. Symbolization and aggregation happen on the
//! writer thread. When the buffer is full (the writer is behind) events are dropped and counted.

use super::api::{Engine, EngineCtx};
use crate::options::{AllocOptions, LockOptions, Options};
use crate::sink::Sink;
use crate::symbols::class_name;
use crate::sync::lock;
use jvmprof_jvmti::{Env, Event as JvmtiEvent, JClass, JObject, Jni, MethodId, os};
use jvmprof_profile::{Frame, FrameKind, Metric, ThreadState};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Most sampled objects tracked for liveness at once (bounds memory in long runs).
const MAX_TRACKED: usize = 1_000_000;
/// The JVMTI events of the alloc and lock modes.
const ALLOC_EVENTS: [JvmtiEvent; 1] = [JvmtiEvent::SampledObjectAlloc];
const LOCK_EVENTS: [JvmtiEvent; 4] = [
    JvmtiEvent::MonitorContendedEnter,
    JvmtiEvent::MonitorContendedEntered,
    JvmtiEvent::MonitorWait,
    JvmtiEvent::MonitorWaited,
];

/// Most events held between two drains of the writer (about 10 ms).
const MAX_PENDING: usize = 100_000;

#[derive(Debug)]
pub enum Kind {
    /// A sampled allocation of `size` bytes; `tag` is non-zero when the object is tracked for
    /// liveness.
    Alloc { class: String, size: u64, tag: i64 },
    /// A contended monitor entry, or a park on a java.util.concurrent synchronizer, that
    /// blocked for `ns`.
    Contended { class: String, ns: u64 },
    /// An `Object.wait`, or a park on anything else (e.g. Condition.await), that lasted `ns`.
    Wait { class: String, ns: u64 },
}

#[derive(Debug)]
pub struct Event {
    pub tid: u32,
    /// Top frame first.
    pub stack: Vec<(MethodId, i64)>,
    pub kind: Kind,
}

pub struct Recorder {
    pub alloc: Option<AllocOptions>,
    pub lock: Option<LockOptions>,
    depth: i32,
    pending: Mutex<Vec<Event>>,
    freed: Mutex<Vec<i64>>,
    next_tag: AtomicI64,
    pub dropped: AtomicU64,
    /// Contended entries and waits on class-initialisation locks, left out of the profile.
    pub class_init_skipped: AtomicU64,
}

thread_local! {
    /// When this thread started blocking on a monitor (or waiting), in monotonic ns.
    static BLOCKED_SINCE: Cell<u64> = const { Cell::new(0) };
    static WAITING_SINCE: Cell<u64> = const { Cell::new(0) };
}

impl Recorder {
    pub fn new(alloc: Option<AllocOptions>, lock: Option<LockOptions>, depth: usize) -> Recorder {
        Recorder {
            alloc,
            lock,
            depth: depth as i32,
            pending: Mutex::new(Vec::new()),
            freed: Mutex::new(Vec::new()),
            next_tag: AtomicI64::new(1),
            dropped: AtomicU64::new(0),
            class_init_skipped: AtomicU64::new(0),
        }
    }

    fn push(&self, event: Event) {
        let mut p = lock(&self.pending);
        if p.len() < MAX_PENDING {
            p.push(event);
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// SampledObjectAlloc, on the allocating thread.
    pub fn on_alloc(&self, env: &Env, object: JObject, class: JClass, size: i64) {
        let Some(alloc) = self.alloc else { return };
        let tag = if alloc.live {
            let t = self.next_tag.fetch_add(1, Ordering::Relaxed);
            if env.set_tag(object, t) { t } else { 0 }
        } else {
            0
        };
        let class = env.class_signature(class).unwrap_or_default();
        self.push(Event {
            tid: os::gettid(),
            stack: env.current_stack(self.depth),
            kind: Kind::Alloc {
                class,
                size: size.max(0) as u64,
                tag,
            },
        });
    }

    /// ObjectFree: a tracked object was collected. No JNI or JVMTI calls are allowed here.
    pub fn on_free(&self, tag: i64) {
        lock(&self.freed).push(tag);
    }

    pub fn on_contended_enter(&self) {
        BLOCKED_SINCE.with(|c| c.set(os::monotonic_ns()));
    }

    pub fn on_contended_entered(&self, env: &Env, jni: &Jni, monitor: JObject) {
        let since = BLOCKED_SINCE.with(|c| c.replace(0));
        self.record_lock(env, jni, monitor, since, |class, ns| Kind::Contended {
            class,
            ns,
        });
    }

    pub fn on_wait(&self) {
        WAITING_SINCE.with(|c| c.set(os::monotonic_ns()));
    }

    pub fn on_waited(&self, env: &Env, jni: &Jni, monitor: JObject) {
        let since = WAITING_SINCE.with(|c| c.replace(0));
        self.record_lock(env, jni, monitor, since, |class, ns| Kind::Wait {
            class,
            ns,
        });
    }

    /// Records a contended entry or a wait that started at `since` (0: not seen starting), if it
    /// lasted at least the lock threshold.
    fn record_lock(
        &self,
        env: &Env,
        jni: &Jni,
        monitor: JObject,
        since: u64,
        kind: impl FnOnce(String, u64) -> Kind,
    ) {
        let Some(lock) = self.lock else { return };
        let ns = os::monotonic_ns().saturating_sub(since);
        if since == 0 || ns < lock.threshold.as_nanos() as u64 {
            return;
        }
        if env.is_class_init_lock(jni, monitor) {
            // A wait for another thread to finish a class's static initialiser (JDK 17 and 25
            // lock an int[0] per class for it): the JVM's, not the application's, contention.
            self.class_init_skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let class = env.object_class_signature(jni, monitor).unwrap_or_default();
        self.push(Event {
            tid: os::gettid(),
            stack: env.current_stack(self.depth),
            kind: kind(class, ns),
        });
    }

    /// A `java.util.concurrent` park that lasted `ns` (lock mode's LockSupport probe), on the
    /// parked thread: contention on a synchronizer, or a wait (`wait`). `probe_frames` are the
    /// methods between the probe and the caller of `park`, dropped from the top of the stack.
    pub fn on_park(
        &self,
        env: &Env,
        jni: &Jni,
        blocker: JObject,
        ns: u64,
        wait: bool,
        probe_frames: &[MethodId],
    ) {
        let Some(lock) = self.lock else { return };
        if ns < lock.threshold.as_nanos() as u64 || blocker.is_null() {
            return;
        }
        let class = env.object_class_signature(jni, blocker).unwrap_or_default();
        // At most three frames above the caller: Parks.record, Parks.parked, LockSupport.park*.
        let extra = 3;
        let mut stack = env.current_stack(self.depth.saturating_add(extra));
        let probes = stack
            .iter()
            .take_while(|(m, _)| probe_frames.contains(m))
            .count();
        stack.drain(..probes);
        stack.truncate(self.depth.max(0) as usize);
        let kind = if wait {
            Kind::Wait { class, ns }
        } else {
            Kind::Contended { class, ns }
        };
        self.push(Event {
            tid: os::gettid(),
            stack,
            kind,
        });
    }

    /// Everything recorded since the last call, and the tags of tracked objects freed since.
    pub fn drain(&self) -> (Vec<Event>, Vec<i64>) {
        let events = std::mem::take(&mut *lock(&self.pending));
        let freed = std::mem::take(&mut *lock(&self.freed));
        (events, freed)
    }
}

/// The running session's recorder, where the JVMTI callbacks and lock mode's park probe (a
/// native) find it: set when an alloc or lock session starts.
static RECORDER: Mutex<Option<Arc<Recorder>>> = Mutex::new(None);

/// The recorder of the running session, if it records events.
pub fn recorder() -> Option<Arc<Recorder>> {
    lock(&RECORDER).clone()
}

/// The writer side: drains the recorder into the sink, and at the end resolves live objects.
pub struct Events {
    ctx: EngineCtx,
    recorder: Arc<Recorder>,
    state: Mutex<Drained>,
}

#[derive(Default)]
struct Drained {
    /// Tag → (thread, stack, estimated bytes, estimated objects) of sampled objects tracked for
    /// liveness (`live`); pruned as ObjectFree events arrive, bounded by MAX_TRACKED.
    tracked: HashMap<i64, (u32, u32, f64, f64)>,
    /// (tid, allocated type) → the fractions of estimated bytes and objects not yet added.
    fractions: HashMap<(u32, String), (f64, f64)>,
}

impl Events {
    pub fn new(ctx: EngineCtx, options: &Options) -> Result<Events, String> {
        if options.alloc.is_some() && !ctx.caps.sampled_alloc {
            return Err("allocation sampling needs SampledObjectAlloc (JDK 11+)".into());
        }
        if options.alloc.is_some_and(|a| a.live) && !ctx.caps.tag_objects {
            return Err("live-object tracking needs object tags, which this JVM lacks".into());
        }
        if options.lock.is_some() && !ctx.caps.monitor_events {
            return Err("lock profiling needs monitor events, which this JVM lacks".into());
        }
        Ok(Events {
            ctx,
            recorder: Arc::new(Recorder::new(options.alloc, options.lock, options.depth)),
            state: Mutex::new(Drained::default()),
        })
    }

    /// With `live`: after a full GC, credits every sampled object still alive to its site.
    fn resolve_live(&self, jni: &Jni, sink: &mut Sink) {
        if !self.recorder.alloc.is_some_and(|a| a.live) {
            return;
        }
        self.ctx.env.force_garbage_collection();
        let state = lock(&self.state);
        let tags: Vec<i64> = state.tracked.keys().copied().collect();
        let mut live = 0u64;
        // Sum the unrounded estimates per site, then round once per site.
        let mut sites: HashMap<(u32, u32), (f64, f64)> = HashMap::new();
        for chunk in tags.chunks(10_000) {
            for tag in self.ctx.env.live_tags(jni, chunk) {
                if let Some(&(thread, stack, bytes, objects)) = state.tracked.get(&tag) {
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
            let v = sink.values(&[
                (Metric::LiveBytes, bytes.round() as u64),
                (Metric::LiveObjects, objects.round() as u64),
            ]);
            sink.add(thread, stack, ThreadState::Running, &v);
        }
        let extra = &mut sink.meta_mut().extra;
        extra.insert("live_sampled_objects".into(), live.to_string());
    }
}

impl Engine for Events {
    fn name(&self) -> &'static str {
        "events"
    }

    fn start(&self, _jni: &Jni) -> Result<(), String> {
        let env = &self.ctx.env;
        *lock(&RECORDER) = Some(self.recorder.clone());
        if let Some(a) = self.recorder.alloc {
            env.set_heap_sampling_interval(a.interval_bytes as i32)
                .map_err(|e| e.to_string())?;
            env.enable_events(&ALLOC_EVENTS)
                .map_err(|e| e.to_string())?;
            if a.live {
                env.enable_events(&[JvmtiEvent::ObjectFree])
                    .map_err(|e| e.to_string())?;
            }
        }
        if self.recorder.lock.is_some() {
            env.enable_events(&LOCK_EVENTS).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Moves recorded allocation and lock events into the sink.
    fn poll(&self, jni: &Jni, sink: &mut Sink) {
        let recorder = &self.recorder;
        let (events, freed) = recorder.drain();
        let mut state = lock(&self.state);
        let Drained { tracked, fractions } = &mut *state;
        for tag in freed {
            tracked.remove(&tag);
        }
        let interval = recorder.alloc.map_or(0, |a| a.interval_bytes);
        for e in events {
            let (thread, _) = sink.thread_of_tid(e.tid);
            let (leaf, state, v, tag) = match e.kind {
                Kind::Alloc { class, size, tag } => {
                    let name = crate::symbols::type_name(&class);
                    let w = sample_weight(size, interval);
                    // Estimates are fractional; carry the remainder per thread and type so that
                    // e.g. a weight of 1.16 per sample adds up instead of rounding to 1 each time.
                    let carry = fractions.entry((e.tid, class.clone())).or_default();
                    carry.0 += size as f64 * w;
                    carry.1 += w;
                    let (bytes, objects) = (carry.0.floor(), carry.1.floor());
                    carry.0 -= bytes;
                    carry.1 -= objects;
                    let (bytes, objects) = (bytes as u64, objects as u64);
                    let v = sink.values(&[(Metric::Bytes, bytes), (Metric::Objects, objects)]);
                    let leaf = Frame::synthetic(FrameKind::AllocatedType, &name);
                    let tracked = (tag, size as f64 * w, w);
                    (leaf, ThreadState::Running, v, Some(tracked))
                }
                Kind::Contended { class, ns } => {
                    let v = sink.values(&[(Metric::LockNs, ns), (Metric::LockCount, 1)]);
                    let leaf = Frame::synthetic(FrameKind::LockClass, &class_name(&class));
                    (leaf, ThreadState::Blocked, v, None)
                }
                Kind::Wait { class, ns } => {
                    let v = sink.values(&[(Metric::WaitNs, ns), (Metric::WaitCount, 1)]);
                    let leaf = Frame::synthetic(FrameKind::LockClass, &class_name(&class));
                    (leaf, ThreadState::Waiting, v, None)
                }
            };
            let stack = sink.jvmti_stack(jni, &e.stack, Some(leaf));
            sink.add(thread, stack, state, &v);
            if let Some((tag, bytes, objects)) = tag
                && tag != 0
                && tracked.len() < MAX_TRACKED
            {
                tracked.insert(tag, (thread, stack, bytes, objects));
            }
        }
    }

    fn stop(&self, _jni: &Jni) {
        let env = &self.ctx.env;
        let _ = env.disable_events(&ALLOC_EVENTS);
        let _ = env.disable_events(&LOCK_EVENTS);
        let _ = env.disable_events(&[JvmtiEvent::ObjectFree]);
        *lock(&RECORDER) = None;
    }

    fn finish(&self, jni: &Jni, sink: &mut Sink) {
        self.resolve_live(jni, sink);
        if self.recorder.lock.is_some() {
            let skipped = self.recorder.class_init_skipped.load(Ordering::Relaxed);
            let extra = &mut sink.meta_mut().extra;
            extra.insert("lock_class_init_skipped".into(), skipped.to_string());
        }
    }

    fn dropped(&self) -> u64 {
        self.recorder.dropped.load(Ordering::Relaxed)
    }
}

/// The expected number of objects one sample stands for when allocations are sampled every
/// `interval` bytes on average (Poisson sampling, as JFR and async-profiler estimate it):
/// an object of `size` bytes is sampled with probability 1 - e^(-size/interval).
pub fn sample_weight(size: u64, interval: u64) -> f64 {
    if interval == 0 || size == 0 {
        return 1.0;
    }
    let p = 1.0 - (-(size as f64) / interval as f64).exp();
    if p <= 0.0 { 1.0 } else { 1.0 / p }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights() {
        // An object far larger than the interval is always sampled: weight 1.
        assert!((sample_weight(64 << 20, 512 << 10) - 1.0).abs() < 1e-9);
        // A 512-byte object at a 512 KiB interval stands for ~1024.5 objects.
        let w = sample_weight(512, 512 << 10);
        assert!((w - 1024.5).abs() < 0.5, "{w}");
        assert_eq!(sample_weight(100, 0), 1.0);
    }
}
