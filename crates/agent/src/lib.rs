//! The jvmprof JVMTI agent (`libjvmprof_agent.so`): options, JVMTI event wiring, samplers and the
//! profile sink. It records; formatting beyond writing the requested file at the end, and all
//! analysis, happen outside the target JVM.
//!
//! Loaded at start-up with `-agentpath:libjvmprof_agent.so=mode=cpu,interval=10ms,file=out.jvmprof`
//! or into a running JVM by dynamic attach (`Agent_OnAttach`; a second attach with `stop` ends the
//! session and writes the profile). A bad option prints one message on stderr and leaves the agent
//! inert; the application always keeps running.
//!
//! This file holds the JVM's entry points only (each behind the bindings' catch_unwind). The
//! rest, in the order a sample travels:
//! - [`state`]: the one agent state (JVMTI env, thread tables, the session);
//! - [`names`]: Java thread names by tid, kept until the thread's last samples are named;
//! - [`session`]: a session's start, status and stop; `running`: the running session's handle
//!   and what its writer thread shares;
//! - [`engine`]: every source of samples behind one trait — where each kind of sample is born;
//! - [`sink`]: the one sink the engines feed, which symbolises each sample once;
//! - `writer`: the writer thread that polls the engines and hands what the profile gained to the
//!   outputs ([`recordfile`], the native file as records appended once a second; a requested
//!   file of another format; and [`stream`], the collector link);
//! - [`sync`] and [`say`]: the one lock helper, and the agent's messages to the user.
//!
//! Modules use only those below them: `session` → `writer` → `running` → `engine` → `sink`,
//! and `state` → `running`; no engine uses `state`, `session` or the writer.

#![deny(unsafe_code)]

pub mod dump;
pub mod engine;
mod heapdump;
pub mod names;
/// The options type, shared with the CLI.
pub use jvmprof_options as options;
pub mod recordfile;
mod running;
pub mod sampler;
pub mod say;
mod session;
pub mod sink;
pub mod state;
pub mod stream;
pub mod symbols;
pub mod sync;
mod writer;

use engine::{events, exact, parks, subgraph};
use jvmprof_jvmti::bindings::agent::AgentLoadContext;
use jvmprof_jvmti::bindings::callbacks::{
    CallbackContext, ClassEvent, ClassFileLoadHookEvent, MonitorEvent, MonitorWaitEvent,
    MonitorWaitedEvent, ObjectAllocationEvent, ObjectFreeEvent, ResourceExhaustedEvent,
    ThreadEvent,
};
use jvmprof_jvmti::bindings::{Agent, jni};
use jvmprof_jvmti::{Env, Jni, Vm, event_class, event_object, event_thread, os};
use options::{Command, Options};
use say::say;
use state::AgentState;
use sync::lock;

/// The return code of Agent_OnAttach: an error only while the library may still be unloaded.
fn attach_result(ok: bool) -> jni::jint {
    if ok || state::callbacks_set() {
        jni::JNI_OK
    } else {
        jni::JNI_ERR
    }
}

/// Reports a failed start: on stderr, and in the status file the CLI watches (not through
/// `say`, whose log file belongs to the session that may be running).
fn report_start_failure(options_status: Option<&std::path::Path>, e: &str) {
    eprintln!("jvmprof: {e}; profiling is off, the application continues");
    if let Some(path) = options_status {
        let _ = std::fs::write(path, format!("error: {e}\n"));
    }
}

fn start_session(s: &'static AgentState, options: Options) {
    let status = options.status.clone();
    if let Err(e) = session::start(s, options) {
        report_start_failure(status.as_deref(), &e);
    }
}

fn register_current_thread(context: &CallbackContext<'_>, thread: jni::jthread) {
    let Some(s) = state::get() else { return };
    let tid = os::gettid();
    let Some(jni) = Jni::from_context(context) else {
        return;
    };
    let stack = os::current_thread_stack().unwrap_or((0, 0));
    s.threads.insert_with_stack(tid, jni.as_ptr(), stack);
    let env = Env::from_context(context);
    if let Some(name) = jni.with_local_frame(4, || env.thread_name(&jni, event_thread(thread))) {
        lock(&s.names).started(tid, name);
    }
    if let Some(session) = lock(&s.session).as_ref() {
        session.thread_started(tid);
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

impl JvmprofAgent {
    fn load(&self, context: AgentLoadContext<'_>) -> jni::jint {
        let text = context.options_lossy().unwrap_or_default();
        let options = match options::parse(&text) {
            Ok(Command::Start(o)) => *o,
            Ok(Command::Stop(_) | Command::Status(_) | Command::Dump(_) | Command::Heap(_)) => {
                say(
                    "`stop`, `query`, `dump` and `heap` only make sense when attaching; the agent is inert",
                );
                return jni::JNI_OK;
            }
            Err(e) => {
                say(&format!("{e}; profiling is off, the application continues"));
                return jni::JNI_OK;
            }
        };
        match state::init(Vm::from_ref(context.vm()), false) {
            Ok(g) => {
                if options.lock.is_some() {
                    parks::on_load(&g.env);
                }
                // Exact mode's capabilities and boot class path entry are OnLoad matters (root
                // sessions define their runtime when they start, at launch or attach).
                if let Some(x) = &options.exact
                    && !x.roots.is_empty()
                {
                    let _ = g.env.add_retransform_capability();
                } else if let Some(x) = &options.exact
                    && let Err(e) = exact::on_load(&g.env, x)
                {
                    say(&format!("{e}; profiling is off, the application continues"));
                    return jni::JNI_OK;
                }
                *lock(&g.pending) = Some(options)
            }
            Err(e) => say(&format!("{e}; profiling is off, the application continues")),
        }
        jni::JNI_OK
    }

    fn attach(&self, context: AgentLoadContext<'_>) -> jni::jint {
        let text = context.options_lossy().unwrap_or_default();
        let options = match options::parse(&text) {
            Ok(Command::Stop(reply)) => {
                let outcome = state::get()
                    .and_then(session::stop)
                    .unwrap_or_else(|| Err("no profiling session runs in this JVM".into()));
                if let Some(path) = reply {
                    let text = match outcome {
                        Ok(done) => format!("ok: {done}\n"),
                        Err(e) => format!("error: {e}\n"),
                    };
                    let _ = std::fs::write(path, text);
                }
                return jni::JNI_OK;
            }
            Ok(Command::Status(path)) => {
                let _ = std::fs::write(path, session::status(state::get()).to_string());
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
        let g = match state::init(vm, true) {
            Ok(g) => g,
            Err(e) => {
                report_start_failure(status.as_deref(), &e);
                return attach_result(false);
            }
        };
        // Classes loaded before the attach need jmethodIDs for AsyncGetCallTrace.
        if let Ok(jni) = vm.attach_current_thread_as_daemon(c"Attach Listener") {
            g.env.prepare_all_loaded_classes(&jni);
            heapdump::arm(g, &jni, &options);
        }
        match session::start(g, options) {
            Ok(()) => attach_result(true),
            Err(e) => {
                report_start_failure(status.as_deref(), &e);
                attach_result(false)
            }
        }
    }
}

/// Runs an entry point's body; a panic in it is reported once and becomes `fallback`.
fn contained(what: &str, fallback: jni::jint, body: impl FnOnce() -> jni::jint) -> jni::jint {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or_else(|_| {
        eprintln!("jvmprof: internal error in {what}; contained, the application continues");
        fallback
    })
}

impl Agent for JvmprofAgent {
    fn on_load(&self, context: AgentLoadContext<'_>) -> jni::jint {
        // JNI_ERR from Agent_OnLoad aborts the JVM: a panic here must leave the agent inert and
        // the application running, like a bad option does.
        contained("Agent_OnLoad", jni::JNI_OK, || self.load(context))
    }

    fn on_attach(&self, context: AgentLoadContext<'_>) -> jni::jint {
        // After callbacks are registered an error return would unload the library under them.
        contained("Agent_OnAttach", attach_result(false), || {
            self.attach(context)
        })
    }
    fn vm_init(&self, context: CallbackContext<'_>, event: ThreadEvent) {
        register_current_thread(&context, event.thread());
        let Some(g) = state::get() else { return };
        if let Some(jni) = Jni::from_context(&context) {
            g.env.prepare_all_loaded_classes(&jni);
            exact::vm_init(&g.env, &jni);
        }
        let pending = lock(&g.pending).take();
        if let Some(options) = pending {
            if let Some(jni) = Jni::from_context(&context) {
                heapdump::arm(g, &jni, &options);
            }
            start_session(g, options);
        }
    }

    fn vm_death(&self, context: CallbackContext<'_>) {
        if let Some(Err(e)) = state::get().and_then(session::stop) {
            say(&e);
        }
        if let (Some(g), Some(jni)) = (state::get(), Jni::from_context(&context)) {
            heapdump::on_exit(g, &jni);
        }
    }

    fn resource_exhausted(
        &self,
        _context: CallbackContext<'_>,
        _event: ResourceExhaustedEvent<'_>,
    ) {
        // Only a flag and a wake-up here: the thread is short of memory.
        if let Some(s) = state::get()
            && let Some(running) = lock(&s.session).as_ref()
        {
            running.flush_now();
        }
    }

    fn thread_start(&self, context: CallbackContext<'_>, event: ThreadEvent) {
        register_current_thread(&context, event.thread());
    }

    fn thread_end(&self, _context: CallbackContext<'_>, _event: ThreadEvent) {
        let Some(s) = state::get() else { return };
        let tid = os::gettid();
        let session = lock(&s.session);
        if let Some(session) = session.as_ref() {
            session.thread_ended(tid);
        }
        // A running session's writer names this thread's last samples, then forgets it.
        let keep = session.as_ref().is_some_and(|s| !s.finished());
        drop(session);
        lock(&s.names).ended(tid, keep);
        s.threads.remove(tid);
    }

    fn virtual_thread_start(&self, context: CallbackContext<'_>, event: ThreadEvent) {
        if let Some(jni) = Jni::from_context(&context) {
            let env = Env::from_context(&context);
            engine::vthreads::on_start(&env, &jni, event_thread(event.thread()));
        }
    }

    fn virtual_thread_end(&self, context: CallbackContext<'_>, _event: ThreadEvent) {
        engine::vthreads::on_end(&Env::from_context(&context));
    }

    fn class_prepare(&self, context: CallbackContext<'_>, event: ClassEvent) {
        let env = Env::from_context(&context);
        env.prepare_class_methods(event_class(event.class()));
        exact::class_prepared(&env, event_class(event.class()));
        let jni = Jni::from_context(&context);
        subgraph::class_prepared(&env, jni.as_ref(), event_class(event.class()));
    }

    fn class_file_load_hook<'c>(
        &self,
        context: CallbackContext<'c>,
        mut event: ClassFileLoadHookEvent<'c>,
    ) {
        let jni = Jni::from_context(&context);
        let name = event.name_str().ok().flatten();
        let loader = event_object(event.loader());
        let exact = exact::transform(jni.as_ref(), name.as_deref(), loader, event.class_data())
            .or_else(|| {
                subgraph::transform(jni.as_ref(), name.as_deref(), loader, event.class_data())
            });
        // Lock mode times LockSupport's parks, on top of whatever exact mode made of it.
        let data = exact.as_deref().unwrap_or(event.class_data());
        let parks = parks::transform(name.as_deref(), loader.is_null(), data);
        if let Some(bytes) = parks.or(exact) {
            let _ = event.set_transformed_class(&context, &bytes);
        }
    }

    fn sampled_object_alloc(&self, context: CallbackContext<'_>, event: ObjectAllocationEvent) {
        if let (Some(r), Some(object)) = (events::recorder(), event.object_opt()) {
            let env = Env::from_context(&context);
            let class = event_class(event.class());
            r.on_alloc(&env, event_object(object), class, event.size());
        }
    }

    fn object_free(&self, _context: CallbackContext<'_>, event: ObjectFreeEvent) {
        if let Some(r) = events::recorder() {
            r.on_free(event.tag());
        }
    }

    fn monitor_contended_enter(&self, _context: CallbackContext<'_>, _event: MonitorEvent) {
        if let Some(r) = events::recorder() {
            r.on_contended_enter();
        }
    }

    fn monitor_contended_entered(&self, context: CallbackContext<'_>, event: MonitorEvent) {
        if let (Some(r), Some(jni)) = (events::recorder(), Jni::from_context(&context)) {
            let env = Env::from_context(&context);
            r.on_contended_entered(&env, &jni, event_object(event.object()));
        }
    }

    fn monitor_wait(&self, _context: CallbackContext<'_>, _event: MonitorWaitEvent) {
        if let Some(r) = events::recorder() {
            r.on_wait();
        }
    }

    fn monitor_waited(&self, context: CallbackContext<'_>, event: MonitorWaitedEvent) {
        if let (Some(r), Some(jni)) = (events::recorder(), Jni::from_context(&context)) {
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
