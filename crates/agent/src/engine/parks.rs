//! Lock mode for `java.util.concurrent`: ReentrantLock, ReentrantReadWriteLock, any lock built
//! on AbstractQueuedSynchronizer, and Condition.await. These block in `LockSupport.park`, which
//! JVMTI reports no event for, so while a lock session runs LockSupport's park methods are
//! rewritten (RetransformClasses; the class is loaded long before any agent runs).
//!
//! - Start: the runtime class `jvmprof/runtime/Parks` (java/agent, compiled by build.rs with
//!   exact mode's runtime) is defined in the boot loader unless already there, its native
//!   `record` is registered, its threshold set and its flag turned on; then LockSupport is
//!   retransformed with the class-file engine's timing pass (crates/classfile `timing`): each
//!   park method takes `System.nanoTime()` on entry and calls `Parks.parked(blocker, start)` on
//!   every exit. Parks filters in Java (flag, threshold, blocker) and calls `record` only for
//!   parks at least as long as the threshold.
//! - `record` (on the parked thread, after the park) takes the thread's stack, drops the
//!   probe's and LockSupport's own frames so that the caller (e.g. AQS.acquire) is on top,
//!   and records a lock event with the blocker's class as the leaf: a wait for a Condition or
//!   anything that is not a synchronizer, contention for a synchronizer.
//! - Stop: the flag goes off and LockSupport is retransformed again with the hook returning
//!   nothing for it, so the JVM runs the original code afterwards.

use super::api::Engine;
use crate::sink::Sink;
use crate::sync::lock;
use jvmprof_classfile::timing::{self, Hook};
use jvmprof_jvmti::classes::GlobalRef;
use jvmprof_jvmti::{Env, Event, JObject, Jni, MethodId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

const LOCK_SUPPORT: &str = "java/util/concurrent/locks/LockSupport";
const PARKS: &str = "jvmprof/runtime/Parks";
/// LockSupport's park methods, with and without a blocker argument.
const PARK_METHODS: [(&str, &str); 6] = [
    ("park", "()V"),
    ("park", "(Ljava/lang/Object;)V"),
    ("parkNanos", "(J)V"),
    ("parkNanos", "(Ljava/lang/Object;J)V"),
    ("parkUntil", "(J)V"),
    ("parkUntil", "(Ljava/lang/Object;J)V"),
];

/// Set up once per process, at the first lock session.
struct State {
    env: Env,
    parks: GlobalRef,
    lock_support: GlobalRef,
    /// Methods whose frames sit above the caller of `park` in a recorded stack: Parks.record,
    /// Parks.parked and LockSupport's park methods.
    probe_frames: Vec<MethodId>,
}

static STATE: OnceLock<State> = OnceLock::new();
/// Whether the class hook rewrites LockSupport (between start and stop).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// What the class hook did with LockSupport the last time it saw it.
static LAST_REWRITE: Mutex<Option<Result<usize, String>>> = Mutex::new(None);

/// OnLoad with lock mode: the retransform capability, so that HotSpot records the compiler
/// dependencies from the start and a retransform later deoptimizes only what depends on
/// LockSupport. Best effort: `start` adds it (live phase) if this fails.
pub fn on_load(env: &Env) {
    let _ = env.add_retransform_capability();
}

/// The ClassFileLoadHook's part for lock mode: LockSupport with timed park methods while a lock
/// session runs, otherwise `None` (which also restores the original at stop).
pub fn transform(name: Option<&str>, boot_loader: bool, data: &[u8]) -> Option<Vec<u8>> {
    if name != Some(LOCK_SUPPORT) || !boot_loader || !ACTIVE.load(Ordering::Acquire) {
        return None;
    }
    let hook = Hook {
        class: PARKS,
        method: "parked",
    };
    match timing::time_methods(data, &PARK_METHODS, hook) {
        Ok(t) => {
            *lock(&LAST_REWRITE) = Some(Ok(t.methods.len()));
            Some(t.bytes)
        }
        Err(e) => {
            *lock(&LAST_REWRITE) = Some(Err(e));
            None
        }
    }
}

/// The native `Parks.record`: one park that lasted at least the threshold.
fn record(jni: &Jni, blocker: JObject, ns: i64, wait: bool) {
    let (Some(s), Some(r)) = (STATE.get(), super::events::recorder()) else {
        return;
    };
    r.on_park(
        &s.env,
        jni,
        blocker,
        ns.max(0) as u64,
        wait,
        &s.probe_frames,
    );
}

fn init(env: &Env, jni: &Jni) -> Result<&'static State, String> {
    if let Some(s) = STATE.get() {
        return Ok(s);
    }
    let bytes = super::exact::RUNTIME_CLASSES
        .iter()
        .find(|(rel, _)| *rel == "jvmprof/runtime/Parks.class")
        .map(|(_, b)| *b)
        .ok_or("the agent was built without jvmprof/runtime/Parks")?;
    let parks = jni
        .define_boot_class(PARKS, bytes)
        .map_err(|e| e.to_string())?;
    jni.register_park_native(parks, c"record", record)
        .map_err(|e| e.to_string())?;
    let lock_support = jni
        .find_class_global(LOCK_SUPPORT)
        .ok_or("cannot find java.util.concurrent.locks.LockSupport")?;
    let mut probe_frames: Vec<MethodId> = [
        ("record", "(Ljava/lang/Object;JZ)V"),
        ("parked", "(Ljava/lang/Object;J)V"),
    ]
    .iter()
    .filter_map(|(n, d)| jni.static_method_id(parks, n, d))
    .collect();
    probe_frames.extend(
        PARK_METHODS
            .iter()
            .filter_map(|(n, d)| jni.static_method_id(lock_support, n, d)),
    );
    Ok(STATE.get_or_init(|| State {
        env: *env,
        parks,
        lock_support,
        probe_frames,
    }))
}

/// Retransforms LockSupport with the class hook on for the duration of the call (it stays on
/// when exact mode uses it).
fn retransform(env: &Env, s: &State) -> Result<(), String> {
    env.enable_events(&[Event::ClassFileLoadHook])
        .map_err(|e| e.to_string())?;
    let result = env
        .retransform_global(&[s.lock_support])
        .map_err(|e| e.to_string());
    if !super::exact::enabled() {
        let _ = env.disable_events(&[Event::ClassFileLoadHook]);
    }
    result
}

/// Starts timing j.u.c parks. Returns a line for the profile's metadata; an error leaves
/// LockSupport unchanged (monitor contention is still recorded).
pub fn start(env: &Env, jni: &Jni, threshold: Duration) -> Result<String, String> {
    env.add_retransform_capability()
        .map_err(|e| e.to_string())?;
    let s = jni.with_local_frame(16, || init(env, jni))?;
    let threshold = i64::try_from(threshold.as_nanos()).unwrap_or(i64::MAX);
    jni.call_static_int_with_long(s.parks, "enable", threshold)
        .ok_or("jvmprof/runtime/Parks.enable failed")?;
    *lock(&LAST_REWRITE) = None;
    ACTIVE.store(true, Ordering::Release);
    let outcome = retransform(env, s).and_then(|()| match lock(&LAST_REWRITE).take() {
        Some(Ok(n)) if n > 0 => Ok(format!("LockSupport: {n} park methods timed")),
        Some(Ok(_)) => Err("LockSupport has none of the expected park methods".to_string()),
        Some(Err(e)) => Err(format!("cannot rewrite LockSupport: {e}")),
        None => Err("the class hook did not see LockSupport".to_string()),
    });
    if outcome.is_err() {
        stop(env, jni);
    }
    outcome
}

/// Stops timing: the flag off, and LockSupport's original code back.
pub fn stop(env: &Env, jni: &Jni) {
    let Some(s) = STATE.get() else { return };
    ACTIVE.store(false, Ordering::Release);
    let _ = jni.call_static_int(s.parks, "disable", "()I", &[]);
    if let Err(e) = retransform(env, s) {
        eprintln!("jvmprof: restoring LockSupport failed: {e}");
    }
}

/// Lock mode's java.util.concurrent half as an engine: LockSupport timed from start to stop.
/// Its parks reach the event engine's recorder (started before it); a failure to rewrite
/// LockSupport is reported once and leaves monitor contention recorded.
pub struct ParksEngine {
    env: Env,
    threshold: Duration,
    outcome: Mutex<Option<Result<String, String>>>,
}

impl ParksEngine {
    pub fn new(env: Env, threshold: Duration) -> ParksEngine {
        ParksEngine {
            env,
            threshold,
            outcome: Mutex::new(None),
        }
    }
}

impl Engine for ParksEngine {
    fn name(&self) -> &'static str {
        "events"
    }

    fn start(&self, jni: &Jni) -> Result<(), String> {
        let outcome = start(&self.env, jni, self.threshold);
        if let Err(e) = &outcome {
            crate::say::say(&format!("java.util.concurrent locks are not timed: {e}"));
        }
        *lock(&self.outcome) = Some(outcome);
        Ok(())
    }

    fn stop(&self, jni: &Jni) {
        if matches!(*lock(&self.outcome), Some(Ok(_))) {
            stop(&self.env, jni);
        }
    }

    fn finish(&self, _jni: &Jni, sink: &mut Sink) {
        if let Some(r) = lock(&self.outcome).as_ref() {
            let text = r.clone().unwrap_or_else(|e| format!("off: {e}"));
            sink.meta_mut().extra.insert("lock_juc".into(), text);
        }
    }
}
