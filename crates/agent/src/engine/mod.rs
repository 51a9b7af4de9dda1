//! The engine layer: every source of samples is an [`Engine`], and all of them feed the one
//! [`Sink`](crate::sink::Sink) on the writer thread.
//!
//! Where a sample is born, and every path it takes:
//! - **cpu** ([`cpu_signal`]): a per-thread CPU clock (a perf event or a POSIX timer) sends SIGPROF
//!   to the thread that used the CPU; the handler walks that thread's stack with
//!   AsyncGetCallTrace straight into a slot of the lock-free ring (no allocation, no lock);
//!   `poll` drains the ring into the sink.
//! - **wall**, and cpu without AsyncGetCallTrace ([`safepoint`]): `poll` takes every thread's
//!   stack at a safepoint (JVMTI GetAllStackTraces) each interval.
//! - **alloc**, **lock** ([`events`]): JVMTI callbacks on the application's threads take the
//!   current stack into a bounded buffer; `poll` moves them into the sink. Lock mode's
//!   java.util.concurrent parks ([`parks`]) arrive through the same buffer from a rewritten
//!   `LockSupport`.
//! - **exact** ([`exact`]): rewritten classes count calls and bytecodes into per-thread
//!   calling-context trees in Java; `flush` and `finish` merge what the trees gained.
//! - **exact with roots** ([`subgraph`]): the same trees, timed, for the call subgraph of root
//!   methods only, instrumented lazily at launch or attach and removed at stop.
//! - **trace** ([`trace`]): the root engine on every method of the traced classes, each call's
//!   entry and exit logged in per-thread rings that `poll` drains into a trace file.
//!
//! The sink symbolises each sample once and appends it to the profile; the session's writer
//! thread hands that profile to the outputs (the native file, the collector link).

pub mod cpu_signal;
pub mod events;
pub mod exact;
pub mod parks;
pub mod safepoint;
pub mod subgraph;
pub mod trace;

use crate::options::{Engine as EngineChoice, Mode, Options};
use crate::sampler::threads::ThreadTable;
use crate::sink::Sink;
use jvmprof_jvmti::{Capabilities, Env, Jni, Vm};
use std::collections::BTreeMap;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What an engine may use of the JVM and of the agent.
#[derive(Clone, Copy)]
pub struct EngineCtx {
    pub vm: Vm,
    pub env: Env,
    pub caps: Capabilities,
    /// tid → JNIEnv of every Java thread seen starting (read by the signal handler).
    pub threads: &'static ThreadTable,
}

/// How often the writer polls an engine that does not say otherwise.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(10);

/// One source of samples. Every method but the thread hooks runs on the session's writer
/// thread, attached to the VM; the thread hooks run on the thread that starts or ends.
pub trait Engine: Send + Sync {
    /// The engine's name in the profile's metadata (`asgct`, `safepoint`, `events`, ...).
    fn name(&self) -> &'static str;
    /// Turns recording on. An error is for the user; the session does not start.
    fn start(&self, _jni: &Jni) -> Result<(), String> {
        Ok(())
    }
    /// The longest the writer may wait between two polls.
    fn period(&self) -> Duration {
        DEFAULT_PERIOD
    }
    /// Moves what was recorded since the last poll into the sink.
    fn poll(&self, _jni: &Jni, _sink: &mut Sink) {}
    /// About once a second: keep up with the process (new threads, ...).
    fn housekeeping(&self) {}
    /// Makes everything recorded so far visible in the sink before a flush or a stream update
    /// (exact mode's trees live in Java until merged).
    fn flush(&self, _jni: &Jni, _sink: &mut Sink) {}
    /// Turns recording off; one last poll and `finish` follow.
    fn stop(&self, _jni: &Jni) {}
    /// After the last poll: results that exist only at the end (live objects, exact trees) and
    /// the engine's metadata.
    fn finish(&self, _jni: &Jni, _sink: &mut Sink) {}
    /// Samples lost inside the engine (full buffers), for the profile's metadata.
    fn dropped(&self) -> u64 {
        0
    }
    /// Trace chunks for the collector link since the last call (trace mode with a server).
    fn stream_chunks(&self) -> Vec<Vec<u8>> {
        Vec::new()
    }
    /// A file whose bytes follow the profile in the native file (trace mode's traces).
    fn appendix(&self) -> Option<std::path::PathBuf> {
        None
    }
    /// What `jvmprof status` shows of this engine besides the session's common fields.
    fn status(&self) -> Vec<(&'static str, serde_json::Value)> {
        Vec::new()
    }
    /// A Java thread started (called on it).
    fn thread_started(&self, _tid: u32) {}
    /// A Java thread ended (called on it).
    fn thread_ended(&self, _tid: u32) {}
}

/// The engines a session's options ask for, in poll order: stack sampling first, then exact
/// mode, then the event engines (the first one names the profile's engine). Nothing is turned on yet.
pub fn choose(
    ctx: EngineCtx,
    options: &Options,
    own_tids: Arc<Mutex<HashSet<u32>>>,
) -> Result<Vec<Box<dyn Engine>>, String> {
    let mut engines: Vec<Box<dyn Engine>> = Vec::new();
    if let Some(mode) = options.sampling {
        let want_signal = mode == Mode::Cpu && options.engine != EngineChoice::Safepoint;
        let signal = match want_signal {
            true => cpu_signal::CpuSignal::new(ctx, options, own_tids)?,
            false => None,
        };
        match signal {
            Some(e) => engines.push(Box::new(e)),
            None => {
                if options.engine == EngineChoice::Asgct {
                    return Err("engine=asgct: this JVM has no AsyncGetCallTrace".into());
                }
                if mode == Mode::Cpu && !ctx.caps.thread_cpu_time {
                    return Err(
                        "the safepoint CPU engine needs thread CPU time, which this JVM lacks"
                            .into(),
                    );
                }
                engines.push(Box::new(safepoint::Safepoint::new(ctx, options)));
            }
        }
    }
    // Root and trace sessions' threads publish their call tree through a native.
    trace::set_threads(ctx.threads);
    if let Some(t) = &options.trace {
        let file = match options.file.as_ref().or(options.owner_file.as_ref()) {
            Some(f) => {
                let mut p = f.as_os_str().to_owned();
                p.push(".trace-part");
                std::path::PathBuf::from(p)
            }
            None => std::env::temp_dir().join(format!("jvmprof-{}.trace-part", std::process::id())),
        };
        engines.push(Box::new(subgraph::SubgraphEngine::tracing(
            ctx.env,
            t,
            file,
            options.server.is_some(),
            options.sampling.is_some().then_some(ctx.threads),
        )));
    }
    if let Some(x) = options.exact.as_ref().filter(|x| !x.roots.is_empty()) {
        engines.push(Box::new(subgraph::SubgraphEngine::new(ctx.env, x)));
    } else if options.exact.is_some() {
        if !exact::enabled() {
            return Err(
                "exact mode needs the agent at launch (record -- java ...); it cannot attach"
                    .into(),
            );
        }
        engines.push(Box::new(exact::ExactEngine::default()));
    }
    if options.alloc.is_some() || options.lock.is_some() {
        engines.push(Box::new(events::Events::new(ctx, options)?));
    }
    if let Some(lock) = options.lock {
        engines.push(Box::new(parks::ParksEngine::new(ctx.env, lock.threshold)));
    }
    Ok(engines)
}

/// The profile's `engine` field: the stack-sampling engine, else what the other engines are.
pub fn describe(engines: &[Box<dyn Engine>]) -> String {
    engines
        .first()
        .map(|e| e.name())
        .unwrap_or("none")
        .to_string()
}

/// Adds `(key, value)` pairs to the profile's free-form metadata.
pub fn note(sink: &mut Sink, pairs: &[(&str, String)]) {
    let extra: &mut BTreeMap<String, String> = &mut sink.meta_mut().extra;
    for (k, v) in pairs {
        extra.insert((*k).to_string(), v.clone());
    }
}
