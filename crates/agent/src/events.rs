//! Allocation and lock events (`alloc` and `lock` modes), recorded in JVMTI callbacks on the
//! application's own threads and handed to the writer thread.
//!
//! A callback does the least it can: take the current stack (JVMTI GetStackTrace), name the class,
//! and append to a bounded buffer under a short lock. Symbolization and aggregation happen on the
//! writer thread. When the buffer is full (the writer is behind) events are dropped and counted.

use crate::options::{AllocOptions, LockOptions};
use jvmprof_jvmti::{Env, JClass, JObject, Jni, MethodId, os};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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

static CURRENT: Mutex<Option<Arc<Recorder>>> = Mutex::new(None);

/// The recorder of the running session, if it records events.
pub fn current() -> Option<Arc<Recorder>> {
    CURRENT.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

pub fn install(r: Option<Arc<Recorder>>) {
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = r;
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
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
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
        self.freed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(tag);
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
        let events = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        let freed = std::mem::take(&mut *self.freed.lock().unwrap_or_else(|e| e.into_inner()));
        (events, freed)
    }
}

/// `[B` → `byte[]`, `Ljava/lang/String;` → `java.lang.String`, `[[Ljava/lang/Object;` →
/// `java.lang.Object[][]`.
pub fn type_name(signature: &str) -> String {
    let dims = signature.bytes().take_while(|b| *b == b'[').count();
    let elem = &signature[dims..];
    let base = match elem {
        "B" => "byte".to_string(),
        "C" => "char".to_string(),
        "D" => "double".to_string(),
        "F" => "float".to_string(),
        "I" => "int".to_string(),
        "J" => "long".to_string(),
        "S" => "short".to_string(),
        "Z" => "boolean".to_string(),
        _ => crate::symbols::class_name(elem),
    };
    format!("{base}{}", "[]".repeat(dims))
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
    fn type_names() {
        assert_eq!(type_name("[B"), "byte[]");
        assert_eq!(type_name("Ljava/lang/String;"), "java.lang.String");
        assert_eq!(type_name("[[Ljava/lang/Object;"), "java.lang.Object[][]");
        assert_eq!(type_name("[[I"), "int[][]");
    }

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
