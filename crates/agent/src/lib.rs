//! The jvmprof JVMTI agent (`libjvmprof_agent.so`): options, JVMTI event wiring, samplers and the
//! profile sink. It records; formatting beyond writing the requested file at the end, and all
//! analysis, happen outside the target JVM.
//!
//! Loaded at start-up with `-agentpath:libjvmprof_agent.so=mode=cpu,interval=10ms,file=out.jvmprof`
//! or into a running JVM by dynamic attach (`Agent_OnAttach`; a second attach with `stop` ends the
//! session and writes the profile). A bad option prints one message on stderr and leaves the agent
//! inert; the application always keeps running.

#![deny(unsafe_code)]

pub mod dump;
pub mod events;
pub mod exact;
pub mod options;
pub mod parks;
pub mod sampler;
mod session;
pub mod stream;
pub mod symbols;

use jvmprof_jvmti::bindings::agent::AgentLoadContext;
use jvmprof_jvmti::bindings::callbacks::{
    CallbackContext, ClassEvent, ClassFileLoadHookEvent, MonitorEvent, MonitorWaitEvent,
    MonitorWaitedEvent, ObjectAllocationEvent, ObjectFreeEvent, ThreadEvent,
};
use jvmprof_jvmti::bindings::{Agent, jni};
use jvmprof_jvmti::{
    Capabilities, Env, Event, Jni, Vm, event_class, event_object, event_thread, os,
};
use options::{Command, Options};
use sampler::threads::ThreadTable;
use session::{Context, Session};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, OnceLock};

/// Process-wide agent state, set once when the agent is first loaded or attached.
struct Globals {
    vm: Vm,
    env: Env,
    caps: Capabilities,
    attached: bool,
}

static GLOBALS: OnceLock<Globals> = OnceLock::new();
/// Set once JVMTI event callbacks point into this library. From then on Agent_OnAttach must
/// return JNI_OK whatever happens: on an error HotSpot unloads the library, and the next event
/// would jump into unmapped memory and crash the JVM. Failures are reported through files.
static CALLBACKS_SET: AtomicBool = AtomicBool::new(false);

/// The return code of Agent_OnAttach: an error only while the library may still be unloaded.
fn attach_result(ok: bool) -> jni::jint {
    if ok || CALLBACKS_SET.load(Ordering::Acquire) {
        jni::JNI_OK
    } else {
        jni::JNI_ERR
    }
}
/// tid → JNIEnv of every Java thread seen starting; read by the signal handler.
static THREADS: LazyLock<ThreadTable> = LazyLock::new(|| ThreadTable::new(8192));
/// tid → Java thread name, for naming CPU samples.
static NAMES: LazyLock<Mutex<HashMap<u32, String>>> = LazyLock::new(Default::default);
static SESSION: Mutex<Option<Session>> = Mutex::new(None);
/// Options given at start-up, used at VMInit.
static PENDING: Mutex<Option<Options>> = Mutex::new(None);

fn say(msg: &str) {
    eprintln!("jvmprof: {msg}");
}

fn context(g: &Globals) -> Context {
    Context {
        vm: g.vm,
        env: g.env,
        threads: &THREADS,
        names: &NAMES,
        caps: g.caps,
        attached: g.attached,
    }
}

/// Creates the JVMTI environment, capabilities and event wiring (once per process).
fn init_globals(vm: Vm, attached: bool) -> Result<&'static Globals, String> {
    if let Some(g) = GLOBALS.get() {
        return Ok(g);
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
    LazyLock::force(&THREADS);
    Ok(GLOBALS.get_or_init(|| Globals {
        vm,
        env,
        caps,
        attached,
    }))
}

fn start_session(g: &Globals, options: Options) -> Result<(), String> {
    // The lock is not held while the session starts: attaching the writer thread to the VM fires
    // ThreadStart on it, and that callback takes the lock.
    let previous = {
        let mut slot = SESSION.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_some_and(|s| !s.finished()) {
            return Err("a profiling session is already running; send `stop` first".into());
        }
        slot.take()
    };
    if let Some(old) = previous {
        let _ = old.stop();
    }
    match Session::start(context(g), options) {
        Ok(s) => {
            let mut slot = SESSION.lock().unwrap_or_else(|e| e.into_inner());
            if slot.is_some() {
                drop(slot);
                let _ = s.stop();
                return Err("another session started at the same time".into());
            }
            *slot = Some(s);
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Reports a failed start: on stderr, and in the status file the CLI watches.
fn report_start_failure(options_status: Option<&std::path::Path>, e: &str) {
    say(&format!("{e}; profiling is off, the application continues"));
    if let Some(path) = options_status {
        let _ = std::fs::write(path, format!("error: {e}\n"));
    }
}

fn stop_session() {
    let session = SESSION.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(s) = session
        && let Err(e) = s.stop()
    {
        say(&e);
    }
}

fn register_current_thread(context: &CallbackContext<'_>, thread: jni::jthread) {
    let tid = os::gettid();
    let Some(jni) = Jni::from_context(context) else {
        return;
    };
    THREADS.insert(tid, jni.as_ptr());
    let env = Env::from_context(context);
    if let Some(name) = jni.with_local_frame(4, || env.thread_name(&jni, event_thread(thread))) {
        NAMES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(tid, name);
    }
    if let Some(s) = SESSION.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        s.thread_started(tid);
    }
}

/// `dump=FILE` / `heap=FILE`: writes a thread dump or class histogram as JSON, on the attach
/// listener's thread, and returns.
fn attach_command(context: &AgentLoadContext<'_>, path: &std::path::Path, heap: bool) -> jni::jint {
    let vm = Vm::from_ref(context.vm());
    let result = (|| -> Result<(), String> {
        let jni = vm
            .attach_current_thread_as_daemon(c"Attach Listener")
            .map_err(|e| e.to_string())?;
        let json = if heap {
            serde_json::to_vec(&dump::class_histogram(&vm, &jni)?)
        } else {
            serde_json::to_vec(&dump::thread_dump(&jni)?)
        }
        .map_err(|e| e.to_string())?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        std::fs::write(&tmp, json).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        std::fs::rename(&tmp, path).map_err(|e| format!("cannot write {}: {e}", path.display()))
    })();
    match result {
        Ok(()) => attach_result(true),
        Err(e) => {
            say(&e);
            let json = serde_json::json!({ "error": e }).to_string();
            let _ = std::fs::write(path, json);
            attach_result(false)
        }
    }
}

#[derive(Default)]
struct JvmprofAgent;

impl Agent for JvmprofAgent {
    fn on_load(&self, context: AgentLoadContext<'_>) -> jni::jint {
        let text = context.options_lossy().unwrap_or_default();
        let options = match options::parse(&text) {
            Ok(Command::Start(o)) => *o,
            Ok(Command::Stop | Command::Dump(_) | Command::Heap(_)) => {
                say("`stop`, `dump` and `heap` only make sense when attaching; the agent is inert");
                return jni::JNI_OK;
            }
            Err(e) => {
                say(&format!("{e}; profiling is off, the application continues"));
                return jni::JNI_OK;
            }
        };
        match init_globals(Vm::from_ref(context.vm()), false) {
            Ok(g) => {
                if options.lock.is_some() {
                    parks::on_load(&g.env);
                }
                // Exact mode's capabilities and boot class path entry are OnLoad matters.
                if let Some(x) = &options.exact
                    && let Err(e) = exact::on_load(&g.env, x)
                {
                    say(&format!("{e}; profiling is off, the application continues"));
                    return jni::JNI_OK;
                }
                *PENDING.lock().unwrap_or_else(|e| e.into_inner()) = Some(options)
            }
            Err(e) => say(&format!("{e}; profiling is off, the application continues")),
        }
        jni::JNI_OK
    }

    fn on_attach(&self, context: AgentLoadContext<'_>) -> jni::jint {
        let text = context.options_lossy().unwrap_or_default();
        let options = match options::parse(&text) {
            Ok(Command::Stop) => {
                stop_session();
                return jni::JNI_OK;
            }
            Ok(Command::Dump(path)) => return attach_command(&context, &path, false),
            Ok(Command::Heap(path)) => return attach_command(&context, &path, true),
            Ok(Command::Start(o)) => *o,
            Err(e) => {
                say(&format!("{e}; profiling is off, the application continues"));
                return attach_result(false);
            }
        };
        let status = options.status.clone();
        let vm = Vm::from_ref(context.vm());
        let g = match init_globals(vm, true) {
            Ok(g) => g,
            Err(e) => {
                report_start_failure(status.as_deref(), &e);
                return attach_result(false);
            }
        };
        // Classes loaded before the attach need jmethodIDs for AsyncGetCallTrace.
        if let Ok(jni) = vm.attach_current_thread_as_daemon(c"Attach Listener") {
            g.env.prepare_all_loaded_classes(&jni);
        }
        match start_session(g, options) {
            Ok(()) => attach_result(true),
            Err(e) => {
                report_start_failure(status.as_deref(), &e);
                attach_result(false)
            }
        }
    }

    fn vm_init(&self, context: CallbackContext<'_>, event: ThreadEvent) {
        register_current_thread(&context, event.thread());
        let Some(g) = GLOBALS.get() else { return };
        if let Some(jni) = Jni::from_context(&context) {
            g.env.prepare_all_loaded_classes(&jni);
            exact::vm_init(&g.env, &jni);
        }
        let pending = PENDING.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(options) = pending {
            let status = options.status.clone();
            if let Err(e) = start_session(g, options) {
                report_start_failure(status.as_deref(), &e);
            }
        }
    }

    fn vm_death(&self, _context: CallbackContext<'_>) {
        stop_session();
    }

    fn thread_start(&self, context: CallbackContext<'_>, event: ThreadEvent) {
        register_current_thread(&context, event.thread());
    }

    fn thread_end(&self, _context: CallbackContext<'_>, _event: ThreadEvent) {
        let tid = os::gettid();
        if let Some(s) = SESSION.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            s.thread_ended(tid);
        }
        THREADS.remove(tid);
    }

    fn class_prepare(&self, context: CallbackContext<'_>, event: ClassEvent) {
        let env = Env::from_context(&context);
        env.prepare_class_methods(event_class(event.class()));
        exact::class_prepared(&env, event_class(event.class()));
    }

    fn class_file_load_hook<'c>(
        &self,
        context: CallbackContext<'c>,
        mut event: ClassFileLoadHookEvent<'c>,
    ) {
        let jni = Jni::from_context(&context);
        let name = event.name_str().ok().flatten();
        let loader = event_object(event.loader());
        let exact = exact::transform(jni.as_ref(), name.as_deref(), loader, event.class_data());
        // Lock mode times LockSupport's parks, on top of whatever exact mode made of it.
        let data = exact.as_deref().unwrap_or(event.class_data());
        let parks = parks::transform(name.as_deref(), loader.is_null(), data);
        if let Some(bytes) = parks.or(exact) {
            let _ = event.set_transformed_class(&context, &bytes);
        }
    }

    fn sampled_object_alloc(&self, context: CallbackContext<'_>, event: ObjectAllocationEvent) {
        if let (Some(r), Some(object)) = (events::current(), event.object_opt()) {
            let env = Env::from_context(&context);
            let class = event_class(event.class());
            r.on_alloc(&env, event_object(object), class, event.size());
        }
    }

    fn object_free(&self, _context: CallbackContext<'_>, event: ObjectFreeEvent) {
        if let Some(r) = events::current() {
            r.on_free(event.tag());
        }
    }

    fn monitor_contended_enter(&self, _context: CallbackContext<'_>, _event: MonitorEvent) {
        if let Some(r) = events::current() {
            r.on_contended_enter();
        }
    }

    fn monitor_contended_entered(&self, context: CallbackContext<'_>, event: MonitorEvent) {
        if let (Some(r), Some(jni)) = (events::current(), Jni::from_context(&context)) {
            let env = Env::from_context(&context);
            r.on_contended_entered(&env, &jni, event_object(event.object()));
        }
    }

    fn monitor_wait(&self, _context: CallbackContext<'_>, _event: MonitorWaitEvent) {
        if let Some(r) = events::current() {
            r.on_wait();
        }
    }

    fn monitor_waited(&self, context: CallbackContext<'_>, event: MonitorWaitedEvent) {
        if let (Some(r), Some(jni)) = (events::current(), Jni::from_context(&context)) {
            let env = Env::from_context(&context);
            r.on_waited(&env, &jni, event_object(event.object()));
        }
    }

    fn callback_panicked(&self, event: &'static str) {
        say(&format!(
            "internal error in the {event} callback; contained"
        ));
    }
}

jvmprof_jvmti::bindings::export_agent!(JvmprofAgent);
