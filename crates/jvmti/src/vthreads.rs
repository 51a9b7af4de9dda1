//! Virtual threads (JDK 21+; JDK 19–20 as a preview): the `can_support_virtual_threads`
//! capability and the VirtualThreadStart/End events, JVMTI thread-local storage on the current
//! thread, global references to threads that the agent deletes itself, the stacks and states of a
//! list of threads in one call, and the carrier a virtual thread is mounted on.
//!
//! JVMTI's GetAllStackTraces lists platform threads only: a carrier shows its own frames below
//! `Continuation.run`, never the virtual thread's. GetThreadListStackTraces on virtual threads
//! gives each one's own stack and state, mounted (the frames above the carrier's) or not (the
//! frames kept in its continuation).

use crate::env::{Env, Error, JThread, Jni, MethodId, ThreadStack};
use jvmti_bindings::sys::{jni, jvmti};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// A JNI global reference to a `java.lang.Thread`, valid on any thread until
/// [`Jni::delete_thread_ref`] deletes it (the owner must not use it after that).
#[derive(Debug, PartialEq, Eq)]
pub struct ThreadRef(usize);

impl ThreadRef {
    /// The reference as a thread argument for this crate's calls; valid until it is deleted.
    pub fn thread(&self) -> JThread {
        JThread(self.0 as jni::jthread)
    }
}

/// `java.lang.VirtualThread.carrierThread`'s field id, found once (0: not yet, 1: absent).
static CARRIER_FIELD: AtomicUsize = AtomicUsize::new(0);
/// `java.lang.Thread.eetop`'s field id (0: not yet, 1: absent).
static EETOP_FIELD: AtomicUsize = AtomicUsize::new(0);
/// The JNIEnv's offset inside HotSpot's JavaThread (0: not measured yet).
static ENV_OFFSET: AtomicUsize = AtomicUsize::new(0);

/// What the mount/unmount trampolines call: `(env, mounted)`, on the carrier with the virtual
/// thread current. Null: none.
static MOUNT_HANDLER: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

/// HotSpot's extension events, posted on the carrier around each mount and unmount (they need
/// `can_support_virtual_threads`).
const MOUNT_EVENT: &str = "com.sun.hotspot.events.VirtualThreadMount";
const UNMOUNT_EVENT: &str = "com.sun.hotspot.events.VirtualThreadUnmount";

fn dispatch_mount(env: *mut jvmti::jvmtiEnv, mounted: bool) {
    let handler = MOUNT_HANDLER.load(Ordering::Acquire);
    if handler.is_null() || env.is_null() {
        return;
    }
    // SAFETY: only `set_mount_handler` stores here, and only `fn(&Env, bool)` pointers.
    let handler: fn(&Env, bool) =
        unsafe { std::mem::transmute::<*mut (), fn(&Env, bool)>(handler) };
    // No panic may cross into the JVM.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&Env(env), mounted)));
}

/// The mount extension event's callback: HotSpot calls it as `(jvmtiEnv*, JNIEnv*, jthread)`.
unsafe extern "C" fn on_mount(
    env: *mut jvmti::jvmtiEnv,
    _jni: *mut jni::JNIEnv,
    _thread: jni::jthread,
) {
    dispatch_mount(env, true);
}

/// The unmount extension event's callback, likewise.
unsafe extern "C" fn on_unmount(
    env: *mut jvmti::jvmtiEnv,
    _jni: *mut jni::JNIEnv,
    _thread: jni::jthread,
) {
    dispatch_mount(env, false);
}

impl Env {
    /// Calls `handler(env, mounted)` on the carrier, with the virtual thread current, each time a
    /// virtual thread mounts or unmounts (HotSpot's VirtualThreadMount/Unmount extension
    /// events); `None` turns that off. False when this JVM has no such events.
    pub fn set_mount_handler(&self, handler: Option<fn(&Env, bool)>) -> bool {
        let jvmti = self.jvmti();
        let Ok(events) = jvmti.get_extension_events() else {
            return false;
        };
        let index = |id: &str| {
            events
                .iter()
                .find(|e| e.id.as_deref() == Some(id))
                .map(|e| e.extension_event_index)
        };
        let (Some(mount), Some(unmount)) = (index(MOUNT_EVENT), index(UNMOUNT_EVENT)) else {
            return false;
        };
        type Trampoline =
            unsafe extern "C" fn(*mut jvmti::jvmtiEnv, *mut jni::JNIEnv, jni::jthread);
        let callback = |f: Trampoline| -> jvmti::jvmtiExtensionEventCallback {
            // SAFETY: HotSpot calls an extension event's callback through the variadic
            // `jvmtiExtensionEvent` type with exactly (jvmtiEnv*, JNIEnv*, jthread) for these two
            // events; on x86-64 and aarch64 a call through a variadic pointer to a function with
            // those fixed parameters passes them in the same registers.
            Some(unsafe { std::mem::transmute::<Trampoline, jvmti::jvmtiExtensionEvent>(f) })
        };
        match handler {
            Some(h) => {
                MOUNT_HANDLER.store(h as *mut (), Ordering::Release);
                // HotSpot posts an extension event only when it has a callback and is enabled.
                jvmti
                    .set_extension_event_callback(mount, callback(on_mount))
                    .and_then(|()| {
                        jvmti.set_extension_event_callback(unmount, callback(on_unmount))
                    })
                    .and_then(|()| {
                        jvmti.enable_events_global(&[mount as jvmti::jvmtiEvent, unmount as _])
                    })
                    .is_ok()
            }
            None => {
                let _ = jvmti.disable_events_global(&[mount as jvmti::jvmtiEvent, unmount as _]);
                let _ = jvmti.set_extension_event_callback(mount, None);
                let _ = jvmti.set_extension_event_callback(unmount, None);
                MOUNT_HANDLER.store(std::ptr::null_mut(), Ordering::Release);
                true
            }
        }
    }

    /// Adds `can_support_virtual_threads` (JDK 21+, also in the live phase); false when this JVM
    /// has no virtual threads or does not grant it.
    pub fn add_virtual_thread_capability(&self) -> bool {
        let jvmti = self.jvmti();
        let Ok(potential) = jvmti.get_potential_capabilities() else {
            return false;
        };
        if !potential.can_support_virtual_threads() {
            return false;
        }
        let mut caps = jvmti::jvmtiCapabilities::default();
        caps.set_can_support_virtual_threads(true);
        jvmti.add_capabilities(&caps).is_ok()
    }

    /// Gives `can_support_virtual_threads` back (at the end of a session that added it).
    pub fn relinquish_virtual_thread_capability(&self) {
        let mut caps = jvmti::jvmtiCapabilities::default();
        caps.set_can_support_virtual_threads(true);
        let _ = self.jvmti().relinquish_capabilities(&caps);
    }

    /// Turns the VirtualThreadStart and VirtualThreadEnd events on or off.
    pub fn virtual_thread_events(&self, on: bool) -> Result<(), Error> {
        let events = [
            jvmti::JVMTI_EVENT_VIRTUAL_THREAD_START,
            jvmti::JVMTI_EVENT_VIRTUAL_THREAD_END,
        ];
        let jvmti = self.jvmti();
        let result = if on {
            jvmti.enable_events_global(&events)
        } else {
            jvmti.disable_events_global(&events)
        };
        result.map_err(|e| Error {
            call: "SetEventNotificationMode(VirtualThreadStart/End)",
            detail: e.to_string(),
        })
    }

    /// Stores `value` in the current thread's JVMTI thread-local storage (a virtual thread has
    /// its own). Only on a thread attached to the VM, e.g. inside a thread event.
    pub fn set_current_thread_local(&self, value: usize) -> bool {
        // SAFETY: a null thread is the current thread, which is attached (caller contract);
        // the value is an integer JVMTI stores and never dereferences.
        unsafe {
            self.jvmti()
                .set_thread_local_storage(std::ptr::null_mut(), value as *const _)
        }
        .is_ok()
    }

    /// Stores `value` in the JVMTI thread-local storage of `thread` (any live thread, virtual
    /// ones included); false when the JVM refuses.
    pub fn set_thread_local(&self, thread: JThread, value: usize) -> bool {
        // SAFETY: `thread` is a live reference (JThread contract); the value is an integer
        // JVMTI stores and never dereferences.
        unsafe {
            self.jvmti()
                .set_thread_local_storage(thread.0, value as *const _)
        }
        .is_ok()
    }

    /// The value stored in `thread`'s JVMTI thread-local storage (0: none).
    pub fn thread_local(&self, thread: JThread) -> usize {
        // SAFETY: `thread` is a live reference (JThread contract).
        unsafe { self.jvmti().get_thread_local_storage(thread.0) }.map_or(0, |p| p as usize)
    }

    /// `GetThreadState` of `thread` (0 when it fails).
    pub fn thread_state(&self, thread: JThread) -> i32 {
        // SAFETY: `thread` is a live reference (JThread contract).
        unsafe { self.jvmti().get_thread_state(thread.0) }.unwrap_or(0)
    }

    /// The value [`Env::set_current_thread_local`] stored on the current thread (0: none).
    pub fn current_thread_local(&self) -> usize {
        // SAFETY: as above.
        unsafe { self.jvmti().get_thread_local_storage(std::ptr::null_mut()) }
            .map_or(0, |p| p as usize)
    }

    /// The stacks and states of `threads` (platform or virtual) in one call, top frame first, in
    /// the order given. A thread that has terminated comes back with no frames and a state
    /// without the ALIVE bit.
    pub fn thread_list_stack_traces(
        &self,
        threads: &[JThread],
        max_depth: i32,
    ) -> Result<Vec<ThreadStack>, Error> {
        if threads.is_empty() {
            return Ok(Vec::new());
        }
        let raw: Vec<jni::jthread> = threads.iter().map(|t| t.0).collect();
        // SAFETY: every element is a live local or global reference to a Thread (JThread and
        // ThreadRef contracts); JVMTI copies what it returns into memory the wrapper frees.
        let infos =
            unsafe { self.jvmti().get_thread_list_stack_traces(&raw, max_depth) }.map_err(|e| {
                Error {
                    call: "GetThreadListStackTraces",
                    detail: e.to_string(),
                }
            })?;
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
}

impl Jni {
    /// A global reference to `thread`, or None when the JVM is out of memory for it.
    pub fn new_thread_ref(&self, thread: JThread) -> Option<ThreadRef> {
        // SAFETY: `thread` is a live reference (JThread contract); NewGlobalRef returns null
        // on failure.
        let global = unsafe { self.env().new_global_ref(thread.0) };
        if self.env().exception_check() {
            self.env().exception_clear();
        }
        (!global.is_null()).then_some(ThreadRef(global as usize))
    }

    /// Deletes a reference made by [`Jni::new_thread_ref`] (on any attached thread).
    pub fn delete_thread_ref(&self, reference: ThreadRef) {
        // SAFETY: a global reference made by new_thread_ref and, the value being consumed, not
        // deleted before.
        unsafe { self.env().delete_global_ref(reference.0 as jni::jobject) };
    }

    /// Whether `thread` is a virtual thread (false on a JVM without them).
    pub fn is_virtual_thread(&self, thread: JThread) -> bool {
        // SAFETY: `thread` is a live reference (JThread contract); the call only reads its class.
        unsafe { self.env().is_virtual_thread(thread.0) }.unwrap_or(false)
    }

    /// The platform thread a virtual thread is mounted on at this moment (a local reference),
    /// None when it is not mounted, or `thread` is not a virtual thread. The read is racy by
    /// nature: the answer may be out of date the moment it is returned.
    pub fn virtual_thread_carrier(&self, thread: JThread) -> Option<JThread> {
        let env = self.env();
        let mut field = CARRIER_FIELD.load(Ordering::Relaxed);
        if field == 0 {
            field = 1;
            if let Some(class) = env.find_class("java/lang/VirtualThread") {
                // SAFETY: `class` is the live local reference just returned; the field id is
                // valid for the life of the class (a boot class, never unloaded).
                let id = unsafe { env.get_field_id(class, "carrierThread", "Ljava/lang/Thread;") };
                self.delete_local_ref(class);
                field = id.map_or(1, |f| f as usize);
            }
            if env.exception_check() {
                env.exception_clear();
            }
            CARRIER_FIELD.store(field, Ordering::Relaxed);
        }
        if field == 1 || !self.is_virtual_thread(thread) {
            return None;
        }
        // SAFETY: `thread` is a live reference to a java.lang.VirtualThread (checked above) and
        // `field` is that class's `carrierThread` field of type Thread.
        let carrier = unsafe { env.get_object_field(thread.0, field as jni::jfieldID) };
        (!carrier.is_null()).then_some(JThread(carrier))
    }

    /// The JNIEnv address of a live platform thread (what ThreadStart saw as its JNIEnv), from
    /// its `Thread.eetop` (HotSpot's JavaThread address) and the JNIEnv's offset inside a
    /// JavaThread measured on the calling thread. None when either is unknown.
    pub fn thread_env(&self, thread: JThread) -> Option<usize> {
        let env = self.env();
        let mut field = EETOP_FIELD.load(Ordering::Relaxed);
        if field == 0 {
            field = 1;
            if let Some(class) = env.find_class("java/lang/Thread") {
                // SAFETY: `class` is the live local reference just returned.
                let id = unsafe { env.get_field_id(class, "eetop", "J") };
                self.delete_local_ref(class);
                field = id.map_or(1, |f| f as usize);
            }
            if env.exception_check() {
                env.exception_clear();
            }
            EETOP_FIELD.store(field, Ordering::Relaxed);
        }
        if field == 1 {
            return None;
        }
        let mut offset = ENV_OFFSET.load(Ordering::Relaxed);
        if offset == 0 {
            let me = crate::vmstructs::current_java_thread(self)?;
            offset = (self.as_ptr() as usize).checked_sub(me)?;
            if offset == 0 || offset >= 64 << 10 {
                return None; // the JNIEnv is a field a few KiB into the JavaThread
            }
            ENV_OFFSET.store(offset, Ordering::Relaxed);
        }
        // SAFETY: `thread` is a live java.lang.Thread reference and `field` its `eetop` (long).
        let eetop = unsafe { env.get_long_field(thread.0, field as jni::jfieldID) } as usize;
        (eetop != 0).then(|| eetop + offset)
    }

    /// Calls `f` with each virtual thread that the JDK's thread containers know, at most `max`
    /// (JDK 21+: the root container tracks every virtual thread started directly unless
    /// `jdk.trackAllThreads=false`; executors and task scopes have containers of their own).
    /// Each reference is valid during its call only. Returns how many were passed; 0 on a JDK
    /// without thread containers. JNI reaches `jdk.internal.vm`, which the module system does not
    /// export, as it reaches any class.
    pub fn for_each_virtual_thread(&self, max: usize, mut f: impl FnMut(JThread)) -> usize {
        let env = self.env();
        let failed = || {
            let e = env.exception_check();
            if e {
                env.exception_clear();
            }
            e
        };
        self.with_local_frame(64, || {
            let holder = env.find_class("jdk/internal/vm/ThreadContainers");
            let container = env.find_class("jdk/internal/vm/ThreadContainer");
            let stream = env.find_class("java/util/stream/Stream");
            if failed() {
                return 0;
            }
            let (Some(holder), Some(container), Some(stream)) = (holder, container, stream) else {
                return 0;
            };
            // SAFETY: live class references; the ids name methods of these classes.
            let ids = unsafe {
                (
                    env.get_static_method_id(holder, "root", "()Ljdk/internal/vm/ThreadContainer;"),
                    env.get_method_id(container, "threads", "()Ljava/util/stream/Stream;"),
                    env.get_method_id(container, "children", "()Ljava/util/stream/Stream;"),
                    env.get_method_id(stream, "toArray", "()[Ljava/lang/Object;"),
                )
            };
            if failed() {
                return 0;
            }
            let (Some(root), Some(threads), Some(children), Some(to_array)) = ids else {
                return 0;
            };
            // The objects of `container.method()`'s stream, as an array (a local reference).
            let array_of = |c: jni::jobject, method: jni::jmethodID| -> jni::jobject {
                // SAFETY: `c` is a live ThreadContainer and `method` returns a Stream, whose
                // toArray() returns Object[].
                unsafe {
                    let s = env.call_object_method(c, method, &[]);
                    if failed() || s.is_null() {
                        return std::ptr::null_mut();
                    }
                    let a = env.call_object_method(s, to_array, &[]);
                    self.delete_local_ref(s);
                    if failed() {
                        return std::ptr::null_mut();
                    }
                    a
                }
            };
            // SAFETY: static ThreadContainer root().
            let root = unsafe { env.call_static_object_method(holder, root, &[]) };
            if failed() || root.is_null() {
                return 0;
            }
            let (mut pending, mut found, mut visited) = (vec![root], 0usize, 0usize);
            while let Some(c) = pending.pop() {
                visited += 1;
                for (method, is_threads) in [(threads, true), (children, false)] {
                    let array = array_of(c, method);
                    if array.is_null() {
                        continue;
                    }
                    // SAFETY: `array` is a live Object[]; indices are within its length.
                    let n = unsafe { env.get_array_length(array) };
                    for i in 0..n {
                        // SAFETY: as above.
                        let o = unsafe { env.get_object_array_element(array, i) };
                        if o.is_null() {
                            continue;
                        }
                        if !is_threads {
                            if visited + pending.len() < 10_000 {
                                pending.push(o); // a child container, visited later
                            } else {
                                self.delete_local_ref(o);
                            }
                            continue;
                        }
                        if found < max && self.is_virtual_thread(JThread(o)) {
                            found += 1;
                            f(JThread(o));
                        }
                        self.delete_local_ref(o);
                    }
                    self.delete_local_ref(array);
                }
                self.delete_local_ref(c);
            }
            for c in pending {
                self.delete_local_ref(c);
            }
            found
        })
    }

    /// Deletes a local reference this crate handed out (a carrier from
    /// [`Jni::virtual_thread_carrier`], ...), before the local frame ends.
    pub fn delete_thread_local_ref(&self, thread: JThread) {
        self.delete_local_ref(thread.0);
    }
}
