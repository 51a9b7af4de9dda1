//! The one agent state of the process: the JVMTI environment and capabilities, the thread tables
//! the samplers read, and the running session.
//!
//! It is made once, when the agent is first loaded or attached, and lives as long as the process
//! (JVMTI callbacks and signal handlers may run at any time). The only other process-wide
//! statics are those a signal handler, a JVMTI callback or a Java-called native must reach
//! without it, each in the engine it belongs to (the signal sampler, the event recorder, exact
//! mode's, root mode's and lock mode's runtime hooks) or in [`crate::say`] (the log file).
//! This module uses no engine and not the session's lifecycle: those use it.

use crate::names::ThreadNames;
use crate::options::Options;
use crate::running::Session;
use crate::sampler::threads::ThreadTable;
use jvmprof_jvmti::{Capabilities, Env, Event, Vm};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

pub struct AgentState {
    pub vm: Vm,
    pub env: Env,
    pub caps: Capabilities,
    /// Loaded by dynamic attach rather than at JVM start.
    pub attached: bool,
    /// tid → JNIEnv of every Java thread seen starting; read by the signal handler.
    pub threads: ThreadTable,
    /// tid → Java thread name, for naming samples (live threads, and those whose samples the
    /// writer has not named yet).
    pub names: Mutex<ThreadNames>,
    /// The running (or finished, not yet collected) session.
    pub session: Mutex<Option<Session>>,
    /// Options given at start-up, used at VMInit.
    pub pending: Mutex<Option<Options>>,
    /// Where to write a heap dump when the JVM exits (`hprof_on_exit=`).
    pub exit_dump: Mutex<Option<PathBuf>>,
}

static STATE: OnceLock<AgentState> = OnceLock::new();
/// Set once JVMTI event callbacks point into this library. From then on Agent_OnAttach must
/// return JNI_OK whatever happens: on an error HotSpot unloads the library, and the next event
/// would jump into unmapped memory and crash the JVM. Failures are reported through files.
static CALLBACKS_SET: AtomicBool = AtomicBool::new(false);

/// The agent state, once made.
pub fn get() -> Option<&'static AgentState> {
    STATE.get()
}

/// Whether JVMTI callbacks into this library are registered (see `CALLBACKS_SET`).
pub fn callbacks_set() -> bool {
    CALLBACKS_SET.load(Ordering::Acquire)
}

/// Creates the JVMTI environment, capabilities and event wiring (once per process).
pub fn init(vm: Vm, attached: bool) -> Result<&'static AgentState, String> {
    if let Some(s) = STATE.get() {
        return Ok(s);
    }
    let env = vm.jvmti().map_err(|e| e.to_string())?;
    let caps = env
        .add_capabilities(Capabilities {
            line_numbers: true,
            source_file_name: true,
            thread_cpu_time: true,
            sampled_alloc: true,
            tag_objects: true,
            monitor_events: true,
            heap_exhaustion: true,
        })
        .map_err(|e| e.to_string())?;
    env.set_default_callbacks().map_err(|e| e.to_string())?;
    CALLBACKS_SET.store(true, Ordering::Release);
    // ClassLoad must be enabled for AsyncGetCallTrace to work; ClassPrepare creates jmethodIDs.
    env.enable_events(&[
        Event::VmInit,
        Event::VmDeath,
        Event::ThreadStart,
        Event::ThreadEnd,
        Event::ClassLoad,
        Event::ClassPrepare,
    ])
    .map_err(|e| e.to_string())?;
    if caps.heap_exhaustion {
        // On an OutOfMemoryError the profile so far is written at once: a JVM dying of it may
        // exit without VMDeath (JDK 25 does when the uncaught-exception handler fails too).
        env.enable_events(&[Event::ResourceExhausted])
            .map_err(|e| e.to_string())?;
    }
    Ok(STATE.get_or_init(|| AgentState {
        vm,
        env,
        caps,
        attached,
        threads: ThreadTable::new(8192),
        names: Mutex::new(ThreadNames::default()),
        session: Mutex::new(None),
        pending: Mutex::new(None),
        exit_dump: Mutex::new(None),
    }))
}
