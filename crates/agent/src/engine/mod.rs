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
//! - **trace** ([`trace`]): an engine of its own on the root engine's probes, on every method of
//!   the traced classes, each call's entry and exit logged in per-thread rings that `poll`
//!   drains into a trace file.
//!
//! Exact, root and trace mode read the Java runtime's trees with the one reader in [`trees`].
//! The trait and what engines get are in [`api`]; this file chooses a session's engines.
//!
//! The sink symbolises each sample once and appends it to the profile; the session's writer
//! thread hands that profile to the outputs (the native file, the collector link).

pub mod api;
pub mod cpu_signal;
pub mod events;
pub mod exact;
pub mod parks;
pub mod safepoint;
pub mod subgraph;
pub mod trace;
pub mod trees;
pub mod vcpu;
pub mod vthreads;
pub mod vtime;

pub use api::{DEFAULT_PERIOD, Engine, EngineCtx, note};

use crate::options::{Engine as EngineChoice, Mode, Options};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

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
    subgraph::runtime::set_threads(ctx.threads);
    if let Some(t) = &options.trace {
        let file = match options.file.as_ref().or(options.owner_file.as_ref()) {
            Some(f) => {
                let mut p = f.as_os_str().to_owned();
                p.push(".trace-part");
                std::path::PathBuf::from(p)
            }
            None => std::env::temp_dir().join(format!("jvmprof-{}.trace-part", std::process::id())),
        };
        engines.push(Box::new(trace::TraceEngine::new(
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
    // Root mode's CPU timer charges a virtual thread only what it used while mounted.
    if let Some(x) = options.exact.as_ref().filter(|x| !x.roots.is_empty())
        && x.timer == crate::options::Timer::Cpu
    {
        engines.push(Box::new(vtime::VirtualCpuTime::new(ctx)));
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
