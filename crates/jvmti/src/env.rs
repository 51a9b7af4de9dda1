//! Safe wrappers over the JVMTI and JNI calls the agent uses.
//!
//! `Env` and `Vm` are plain copies of JVM-owned pointers that stay valid for the life of the VM
//! (a JVMTI environment may be used from any thread attached to the VM). JNI local references
//! (`JThread`, `JClass`) are only valid inside the JNI local frame of the thread that received them:
//! long-lived agent threads wrap their work in [`Jni::with_local_frame`].

use jvmti_bindings::agent::JavaVmRef;
use jvmti_bindings::callbacks::CallbackContext;
use jvmti_bindings::env::{JniEnv, Jvmti};
use jvmti_bindings::sys::{jni, jvmti};
use std::ffi::{CStr, c_void};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A failed JVMTI or JNI call: which call, and the JVM's error name.
#[derive(Debug, Clone)]
pub struct Error {
    pub call: &'static str,
    pub detail: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.call, self.detail)
    }
}

impl std::error::Error for Error {}

fn jvmti_err(call: &'static str) -> impl Fn(jvmti::jvmtiError) -> Error {
    move |e| Error {
        call,
        detail: e.to_string(),
    }
}

/// A jmethodID as an integer: stable for the life of the VM, usable as a map key and sendable
/// between threads. Only this crate turns it back into a pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MethodId(pub usize);

impl MethodId {
    fn raw(self) -> jni::jmethodID {
        self.0 as jni::jmethodID
    }
}

/// A JNI local reference to a `java.lang.Thread`, valid in the current local frame only.
#[derive(Clone, Copy, Debug)]
pub struct JThread(pub(crate) jni::jthread);

impl JThread {
    pub fn is_null(&self) -> bool {
        self.0.is_null()
    }
}

/// A JNI local reference to a `java.lang.Class`, valid in the current local frame only.
#[derive(Clone, Copy, Debug)]
pub struct JClass(pub(crate) jni::jclass);

/// A JNI local reference to any object, valid in the current local frame only.
#[derive(Clone, Copy, Debug)]
pub struct JObject(pub(crate) jni::jobject);

impl JObject {
    pub fn is_null(&self) -> bool {
        self.0.is_null()
    }
}

/// Events the agent enables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    VmInit,
    VmDeath,
    ThreadStart,
    ThreadEnd,
    ClassLoad,
    ClassPrepare,
    SampledObjectAlloc,
    ObjectFree,
    MonitorContendedEnter,
    MonitorContendedEntered,
    MonitorWait,
    MonitorWaited,
    /// Class bytes about to be defined or retransformed (exact mode rewrites them).
    ClassFileLoadHook,
    /// The VM ran out of a resource (Java heap: an OutOfMemoryError is being thrown).
    ResourceExhausted,
}

impl Event {
    fn raw(self) -> jvmti::jvmtiEvent {
        match self {
            Event::VmInit => jvmti::JVMTI_EVENT_VM_INIT,
            Event::VmDeath => jvmti::JVMTI_EVENT_VM_DEATH,
            Event::ThreadStart => jvmti::JVMTI_EVENT_THREAD_START,
            Event::ThreadEnd => jvmti::JVMTI_EVENT_THREAD_END,
            Event::ClassLoad => jvmti::JVMTI_EVENT_CLASS_LOAD,
            Event::ClassPrepare => jvmti::JVMTI_EVENT_CLASS_PREPARE,
            Event::SampledObjectAlloc => jvmti::JVMTI_EVENT_SAMPLED_OBJECT_ALLOC,
            Event::ObjectFree => jvmti::JVMTI_EVENT_OBJECT_FREE,
            Event::ResourceExhausted => jvmti::JVMTI_EVENT_RESOURCE_EXHAUSTED,
            Event::MonitorContendedEnter => jvmti::JVMTI_EVENT_MONITOR_CONTENDED_ENTER,
            Event::MonitorContendedEntered => jvmti::JVMTI_EVENT_MONITOR_CONTENDED_ENTERED,
            Event::MonitorWait => jvmti::JVMTI_EVENT_MONITOR_WAIT,
            Event::MonitorWaited => jvmti::JVMTI_EVENT_MONITOR_WAITED,
            Event::ClassFileLoadHook => jvmti::JVMTI_EVENT_CLASS_FILE_LOAD_HOOK,
        }
    }
}

/// Bits of the JVMTI thread state (`GetThreadState`, `jvmtiStackInfo.state`).
pub mod thread_state {
    pub const ALIVE: i32 = 0x0001;
    pub const RUNNABLE: i32 = 0x0004;
    pub const WAITING_INDEFINITELY: i32 = 0x0010;
    pub const WAITING_WITH_TIMEOUT: i32 = 0x0020;
    pub const SLEEPING: i32 = 0x0040;
    pub const IN_OBJECT_WAIT: i32 = 0x0100;
    pub const PARKED: i32 = 0x0200;
    pub const BLOCKED_ON_MONITOR_ENTER: i32 = 0x0400;
    pub const IN_NATIVE: i32 = 0x0040_0000;
}

/// A method's symbolic information, as the JVM describes it.
#[derive(Clone, Debug, Default)]
pub struct MethodInfo {
    /// Class signature, e.g. `Ljava/util/HashMap;`.
    pub class_signature: String,
    pub name: String,
    /// Method descriptor, e.g. `(Ljava/lang/Object;)I`.
    pub descriptor: String,
    /// (start bytecode index, line) pairs, sorted by start; empty without debug info.
    pub lines: Vec<(i64, i32)>,
}

impl MethodInfo {
    /// The source line of a bytecode index, 0 when unknown.
    pub fn line_of(&self, bci: i64) -> u32 {
        let mut line = 0;
        for &(start, l) in &self.lines {
            if start > bci {
                break;
            }
            line = l.max(0) as u32;
        }
        line
    }
}

/// What `GetThreadInfo` says of a thread.
#[derive(Clone, Debug, Default)]
pub struct ThreadDetails {
    pub name: String,
    pub daemon: bool,
    /// Name of the thread's group (`main`, `system`, ...); empty once the thread has terminated.
    pub group: String,
}

/// One thread's stack from `GetAllStackTraces`, top frame first.
#[derive(Debug)]
pub struct ThreadStack {
    pub thread: JThread,
    pub state: i32,
    /// (method, bytecode index; -1 for a native method), top first.
    pub frames: Vec<(MethodId, i64)>,
}

/// The JavaVM invocation interface, valid for the life of the process.
#[derive(Clone, Copy, Debug)]
pub struct Vm(*mut jni::JavaVM);

// SAFETY: the JavaVM pointer is process-global and its invocation functions are thread-safe.
unsafe impl Send for Vm {}
// SAFETY: as above.
unsafe impl Sync for Vm {}

impl Vm {
    pub fn from_ref(vm: &JavaVmRef<'_>) -> Vm {
        Vm(vm.raw())
    }

    /// Creates a JVMTI environment.
    pub fn jvmti(&self) -> Result<Env, Error> {
        // SAFETY: self.0 came from a JavaVmRef handed to Agent_OnLoad/OnAttach and lives as long
        // as the VM.
        let jvmti = unsafe { Jvmti::from_java_vm_raw(self.0) }.map_err(|code| Error {
            call: "GetEnv(JVMTI)",
            detail: jni::describe_result(code),
        })?;
        Ok(Env(jvmti.raw()))
    }

    /// Attaches the calling native thread to the VM as a daemon thread with the given name.
    pub fn attach_current_thread_as_daemon(&self, name: &CStr) -> Result<Jni, Error> {
        #[repr(C)]
        struct AttachArgs {
            version: jni::jint,
            name: *const std::ffi::c_char,
            group: jni::jobject,
        }
        let mut args = AttachArgs {
            version: jni::JNI_VERSION_1_6,
            name: name.as_ptr(),
            group: std::ptr::null_mut(),
        };
        let mut env: *mut c_void = std::ptr::null_mut();
        // SAFETY: the invocation table of a live VM; `args` matches JavaVMAttachArgs and outlives
        // the call; `env` receives the new JNIEnv*.
        let rc = unsafe {
            ((**self.0).AttachCurrentThreadAsDaemon)(
                self.0,
                &mut env,
                (&mut args as *mut AttachArgs).cast(),
            )
        };
        if rc != jni::JNI_OK || env.is_null() {
            return Err(Error {
                call: "AttachCurrentThreadAsDaemon",
                detail: jni::describe_result(rc),
            });
        }
        Ok(Jni(env.cast()))
    }

    /// Detaches the calling thread (which must have been attached with
    /// [`Vm::attach_current_thread_as_daemon`]).
    pub fn detach_current_thread(&self) {
        // SAFETY: invocation table of a live VM; detaching an attached native thread.
        unsafe {
            ((**self.0).DetachCurrentThread)(self.0);
        }
    }

    /// The calling thread's JNIEnv, or null when the thread is not attached to the VM.
    ///
    /// Async-signal-safe on HotSpot: `jni_GetEnv` for a JNI version only reads the current
    /// `Thread*` from thread-local storage (as HotSpot's own signal handlers do) and takes no lock.
    /// The sampler uses it only for threads that were running before the agent attached, whose
    /// JNIEnv could not be recorded at ThreadStart.
    pub fn current_jni_env(&self) -> *mut c_void {
        let mut env: *mut c_void = std::ptr::null_mut();
        // SAFETY: invocation table of a live VM; GetEnv writes one pointer into `env`.
        let rc = unsafe { ((**self.0).GetEnv)(self.0, &mut env, jni::JNI_VERSION_1_6) };
        if rc == jni::JNI_OK {
            env
        } else {
            std::ptr::null_mut()
        }
    }
}

/// Which optional capabilities to request.
#[derive(Clone, Copy, Debug, Default)]
pub struct Capabilities {
    pub line_numbers: bool,
    pub source_file_name: bool,
    pub thread_cpu_time: bool,
    /// SampledObjectAlloc (allocation profiling).
    pub sampled_alloc: bool,
    /// Object tags and ObjectFree (live-object tracking, heap histogram).
    pub tag_objects: bool,
    /// Monitor contention and wait events (lock profiling).
    pub monitor_events: bool,
    /// ResourceExhausted events for the Java heap (the profile is written when one arrives).
    pub heap_exhaustion: bool,
}

/// A JVMTI environment.
#[derive(Clone, Copy, Debug)]
pub struct Env(pub(crate) *mut jvmti::jvmtiEnv);

// SAFETY: a jvmtiEnv may be used from any thread attached to the VM; it lives until the VM dies
// or the environment is disposed (we never dispose it).
unsafe impl Send for Env {}
// SAFETY: as above; JVMTI functions are thread-safe.
unsafe impl Sync for Env {}

impl Env {
    pub fn from_context(context: &CallbackContext<'_>) -> Env {
        Env(context.jvmti().raw())
    }

    pub(crate) fn jvmti(&self) -> Jvmti {
        // SAFETY: self.0 is a live jvmtiEnv obtained from the VM (see the Send/Sync impls).
        unsafe { Jvmti::from_raw(self.0) }
    }

    /// Adds the requested capabilities that this VM can offer; returns what was granted.
    pub fn add_capabilities(&self, want: Capabilities) -> Result<Capabilities, Error> {
        let jvmti = self.jvmti();
        let potential = jvmti
            .get_potential_capabilities()
            .map_err(jvmti_err("GetPotentialCapabilities"))?;
        let p = &potential;
        let granted = Capabilities {
            line_numbers: want.line_numbers && p.can_get_line_numbers(),
            source_file_name: want.source_file_name && p.can_get_source_file_name(),
            thread_cpu_time: want.thread_cpu_time && p.can_get_thread_cpu_time(),
            sampled_alloc: want.sampled_alloc && p.can_generate_sampled_object_alloc_events(),
            tag_objects: want.tag_objects
                && p.can_tag_objects()
                && p.can_generate_object_free_events(),
            monitor_events: want.monitor_events && p.can_generate_monitor_events(),
            heap_exhaustion: want.heap_exhaustion
                && p.can_generate_resource_exhaustion_heap_events(),
        };
        let mut caps = jvmti::jvmtiCapabilities::default();
        caps.set_can_get_line_numbers(granted.line_numbers);
        caps.set_can_get_source_file_name(granted.source_file_name);
        caps.set_can_get_thread_cpu_time(granted.thread_cpu_time);
        caps.set_can_generate_sampled_object_alloc_events(granted.sampled_alloc);
        caps.set_can_tag_objects(granted.tag_objects);
        caps.set_can_generate_object_free_events(granted.tag_objects);
        caps.set_can_generate_monitor_events(granted.monitor_events);
        caps.set_can_generate_resource_exhaustion_heap_events(granted.heap_exhaustion);
        jvmti
            .add_capabilities(&caps)
            .map_err(jvmti_err("AddCapabilities"))?;
        Ok(granted)
    }

    /// Routes JVMTI events to the exported agent's trait methods.
    pub fn set_default_callbacks(&self) -> Result<(), Error> {
        self.jvmti()
            .set_default_agent_callbacks()
            .map_err(jvmti_err("SetEventCallbacks"))
    }

    pub fn enable_events(&self, events: &[Event]) -> Result<(), Error> {
        let raw: Vec<_> = events.iter().map(|e| e.raw()).collect();
        self.jvmti()
            .enable_events_global(&raw)
            .map_err(jvmti_err("SetEventNotificationMode(enable)"))
    }

    pub fn disable_events(&self, events: &[Event]) -> Result<(), Error> {
        let raw: Vec<_> = events.iter().map(|e| e.raw()).collect();
        self.jvmti()
            .disable_events_global(&raw)
            .map_err(jvmti_err("SetEventNotificationMode(disable)"))
    }

    /// Creates the jmethodIDs of all methods of a class, so that AsyncGetCallTrace can name them.
    pub fn prepare_class_methods(&self, class: JClass) {
        // SAFETY: `class` is a live local reference of the calling thread (JClass contract). The
        // returned ids are plain values; the array itself is freed by the wrapper.
        let _ = unsafe { self.jvmti().get_class_methods(class.0) };
    }

    /// Creates the jmethodIDs of every loaded class (for attach and VM start), in a local frame.
    pub fn prepare_all_loaded_classes(&self, jni: &Jni) -> usize {
        jni.with_local_frame(16, || {
            let classes = self.jvmti().get_loaded_classes().unwrap_or_default();
            for class in &classes {
                self.prepare_class_methods(JClass(*class));
                jni.delete_local_ref(*class);
            }
            classes.len()
        })
    }

    /// The class signature, name, descriptor and line table of a method; `None` if the method is
    /// gone (its class was unloaded) or the id is invalid.
    pub fn method_info(&self, jni: &Jni, method: MethodId) -> Option<MethodInfo> {
        let jvmti = self.jvmti();
        // SAFETY: jmethodIDs are never freed by HotSpot; for an unloaded class the call returns
        // INVALID_METHODID instead of touching freed memory.
        let (name, descriptor, _) = unsafe { jvmti.get_method_name(method.raw()) }.ok()?;
        // SAFETY: as above; the declaring class comes back as a local ref we delete below.
        let class = unsafe { jvmti.get_method_declaring_class(method.raw()) }.ok()?;
        // SAFETY: `class` is the live local reference just returned.
        let class_signature = unsafe { jvmti.get_class_signature(class) }
            .map(|(s, _)| s)
            .unwrap_or_default();
        jni.delete_local_ref(class);
        // SAFETY: as for get_method_name; fails harmlessly for native/abstract methods or
        // without the can_get_line_numbers capability.
        let lines = unsafe { jvmti.get_line_number_table(method.raw()) }
            .map(|t| {
                let mut v: Vec<(i64, i32)> = t
                    .iter()
                    .map(|e| (e.start_location, e.line_number))
                    .collect();
                v.sort_unstable();
                v
            })
            .unwrap_or_default();
        Some(MethodInfo {
            class_signature,
            name,
            descriptor,
            lines,
        })
    }

    /// Stacks of all live threads (a safepoint operation), top frame first. The returned thread
    /// references are local references of the calling thread.
    pub fn all_stack_traces(&self, max_depth: i32) -> Result<Vec<ThreadStack>, Error> {
        let infos = self
            .jvmti()
            .get_all_stack_traces(max_depth)
            .map_err(jvmti_err("GetAllStackTraces"))?;
        Ok(infos
            .into_iter()
            .map(|info| ThreadStack {
                thread: JThread(info.thread),
                state: info.state,
                frames: info
                    .frames
                    .iter()
                    .map(|f| (MethodId(f.method as usize), f.location))
                    .collect(),
            })
            .collect())
    }

    /// The calling thread's stack, top frame first (used inside JVMTI callbacks).
    pub fn current_stack(&self, max_depth: i32) -> Vec<(MethodId, i64)> {
        // SAFETY: a null thread means the current thread, which is attached (we are in a callback).
        unsafe {
            self.jvmti()
                .get_stack_trace(std::ptr::null_mut(), 0, max_depth)
        }
        .map(|frames| {
            frames
                .iter()
                .map(|f| (MethodId(f.method as usize), f.location))
                .collect()
        })
        .unwrap_or_default()
    }

    /// A class's signature (`Ljava/lang/String;`, `[B`).
    pub fn class_signature(&self, class: JClass) -> Option<String> {
        // SAFETY: `class` is a live local reference (JClass contract).
        unsafe { self.jvmti().get_class_signature(class.0) }
            .ok()
            .map(|(s, _)| s)
    }

    /// A thread's name (the ThreadInfo's extra local references are released).
    pub fn thread_name(&self, jni: &Jni, thread: JThread) -> Option<String> {
        // SAFETY: `thread` is a live local reference (JThread contract).
        let info = unsafe { self.jvmti().get_thread_info(thread.0) }.ok()?;
        jni.delete_local_ref(info.thread_group);
        jni.delete_local_ref(info.context_class_loader);
        info.name
    }

    /// A thread's name, daemon flag and thread-group name.
    pub fn thread_details(&self, jni: &Jni, thread: JThread) -> Option<ThreadDetails> {
        let jvmti = self.jvmti();
        // SAFETY: `thread` is a live local reference (JThread contract).
        let info = unsafe { jvmti.get_thread_info(thread.0) }.ok()?;
        let group = if info.thread_group.is_null() {
            String::new()
        } else {
            // SAFETY: the group is the live local reference just returned.
            let g = unsafe { jvmti.get_thread_group_info(info.thread_group) };
            let name = g
                .as_ref()
                .ok()
                .and_then(|g| g.name.clone())
                .unwrap_or_default();
            if let Ok(g) = g {
                jni.delete_local_ref(g.parent);
            }
            name
        };
        jni.delete_local_ref(info.thread_group);
        jni.delete_local_ref(info.context_class_loader);
        Some(ThreadDetails {
            name: info.name.unwrap_or_default(),
            daemon: info.is_daemon,
            group,
        })
    }

    /// CPU time consumed by a thread, in ns (needs the thread_cpu_time capability).
    pub fn thread_cpu_time(&self, thread: JThread) -> Option<i64> {
        // SAFETY: `thread` is a live local reference (JThread contract).
        unsafe { self.jvmti().get_thread_cpu_time(thread.0) }.ok()
    }

    pub fn system_property(&self, name: &str) -> Option<String> {
        self.jvmti().get_system_property(name).ok()
    }
}

/// A thread's JNI environment. Not `Send`: it belongs to the thread that obtained it.
#[derive(Debug)]
pub struct Jni(*mut jni::JNIEnv);

static THREAD_GET_ID: AtomicUsize = AtomicUsize::new(0);

impl Jni {
    pub fn from_context(context: &CallbackContext<'_>) -> Option<Jni> {
        context.jni().map(|j| Jni(j.raw()))
    }

    /// The JNIEnv a native method or callback received (non-null, the calling thread's).
    pub(crate) fn from_raw(env: *mut jni::JNIEnv) -> Jni {
        Jni(env)
    }

    /// The raw JNIEnv pointer, for AsyncGetCallTrace's `env` field.
    pub fn as_ptr(&self) -> *mut c_void {
        self.0.cast()
    }

    pub(crate) fn env(&self) -> JniEnv {
        // SAFETY: self.0 is the calling thread's live JNIEnv (Jni is not Send).
        unsafe { JniEnv::from_raw(self.0) }
    }

    /// Runs `f` inside a fresh JNI local frame, releasing every local reference it created.
    pub fn with_local_frame<R>(&self, capacity: i32, f: impl FnOnce() -> R) -> R {
        let env = self.env();
        let frame = env.push_local_frame(capacity);
        let result = f();
        drop(frame);
        result
    }

    pub(crate) fn delete_local_ref(&self, obj: jni::jobject) {
        if !obj.is_null() {
            // SAFETY: obj is a local reference created on this thread and not yet deleted.
            unsafe { self.env().delete_local_ref(obj) };
        }
    }

    /// `Thread.getId()` of a thread (stable for the thread's life, unlike its name).
    pub fn java_thread_id(&self, thread: JThread) -> Option<i64> {
        let env = self.env();
        let mut mid = THREAD_GET_ID.load(Ordering::Relaxed);
        if mid == 0 {
            let class = env.find_class("java/lang/Thread")?;
            // SAFETY: `class` is the live local ref just returned; the method id is global.
            let id = unsafe { env.get_method_id(class, "getId", "()J") };
            self.delete_local_ref(class);
            mid = id? as usize;
            THREAD_GET_ID.store(mid, Ordering::Relaxed);
        }
        // SAFETY: `thread` is a live java.lang.Thread local ref and `mid` is Thread.getId()J.
        let value = unsafe { env.call_long_method(thread.0, mid as jni::jmethodID, &[]) };
        if env.exception_check() {
            env.exception_clear();
            return None;
        }
        Some(value)
    }
}

/// Accessors for callback payloads, as this crate's local-reference types.
pub fn event_thread(thread: jni::jthread) -> JThread {
    JThread(thread)
}

pub fn event_class(class: jni::jclass) -> JClass {
    JClass(class)
}

pub fn event_object(object: jni::jobject) -> JObject {
    JObject(object)
}
