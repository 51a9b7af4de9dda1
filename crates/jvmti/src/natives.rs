//! The agent's own Java classes in the boot loader and their native methods: defining a class
//! from bytes (JNI DefineClass with the boot loader, which also works in the live phase where
//! AddToBootstrapClassLoaderSearch only takes jar files), RegisterNatives for lock mode's park
//! probe, static calls with a long argument, and retransforming classes held by global
//! references.

use crate::classes::GlobalRef;
use crate::env::{Env, Error, JObject, Jni, MethodId};
use jvmti_bindings::sys::jni;
use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;

/// What the park probe's native method hands the agent: the calling thread's JNI environment,
/// the blocker (a local reference valid for the call), the park's duration in ns, and whether
/// it was a wait (true) or contention on a lock (false).
pub type ParkRecorder = fn(&Jni, JObject, i64, bool);

static PARK_RECORDER: OnceLock<ParkRecorder> = OnceLock::new();

/// The native method `static void record(Object blocker, long ns, boolean isWait)`.
extern "system" fn park_native(
    env: *mut jni::JNIEnv,
    _class: jni::jclass,
    blocker: jni::jobject,
    ns: jni::jlong,
    is_wait: jni::jboolean,
) {
    let Some(recorder) = PARK_RECORDER.get() else {
        return;
    };
    if env.is_null() {
        return;
    }
    let jni = Jni::from_raw(env);
    // No panic may unwind into the JVM: a failed recording is simply lost.
    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
        recorder(&jni, JObject(blocker), ns, is_wait != 0)
    }));
}

fn jvmti_err(call: &'static str) -> impl Fn(jvmti_bindings::sys::jvmti::jvmtiError) -> Error {
    move |e| Error {
        call,
        detail: e.to_string(),
    }
}

impl Env {
    /// Adds `can_retransform_classes` alone (HotSpot grants it in the live phase too, e.g. at
    /// attach).
    pub fn add_retransform_capability(&self) -> Result<(), Error> {
        let jvmti = self.jvmti();
        let potential = jvmti
            .get_potential_capabilities()
            .map_err(jvmti_err("GetPotentialCapabilities"))?;
        if !potential.can_retransform_classes() {
            return Err(Error {
                call: "AddCapabilities(can_retransform_classes)",
                detail: "not available in this phase of this JVM".into(),
            });
        }
        let mut caps = jvmti_bindings::sys::jvmti::jvmtiCapabilities::default();
        caps.set_can_retransform_classes(true);
        jvmti
            .add_capabilities(&caps)
            .map_err(jvmti_err("AddCapabilities(can_retransform_classes)"))
    }

    /// Retransforms classes held by global references: the ClassFileLoadHook runs again for
    /// each, starting from the class's original bytes.
    pub fn retransform_global(&self, classes: &[GlobalRef]) -> Result<(), Error> {
        let raw: Vec<jni::jclass> = classes.iter().map(|c| c.raw()).collect();
        // SAFETY: every element is a live global reference to a class (GlobalRef contract;
        // callers only pass references obtained from `find_class_global`/`define_boot_class`).
        unsafe { self.jvmti().retransform_classes(&raw) }.map_err(jvmti_err("RetransformClasses"))
    }
}

impl Jni {
    /// The class named `name` (`a/b/C`) as the boot loader sees it: found if already there
    /// (e.g. on the boot class path), otherwise defined in the boot loader from `bytes`.
    pub fn define_boot_class(&self, name: &str, bytes: &[u8]) -> Result<GlobalRef, Error> {
        if let Some(c) = self.find_class_global(name) {
            return Ok(c);
        }
        let env = self.env();
        // SAFETY: a null loader is the boot loader (JNI DefineClass); `bytes` outlives the call.
        let local = unsafe { env.define_class(name, std::ptr::null_mut(), bytes) };
        let described = if env.exception_check() {
            env.exception_describe();
            env.exception_clear();
            " (exception above)"
        } else {
            ""
        };
        let Some(local) = local else {
            return Err(Error {
                call: "DefineClass",
                detail: format!("{name} was not defined{described}"),
            });
        };
        // SAFETY: `local` is the live local reference just returned.
        let global = unsafe { env.new_global_ref(local) };
        self.delete_local_ref(local);
        GlobalRef::from_raw(global).ok_or(Error {
            call: "NewGlobalRef",
            detail: name.to_string(),
        })
    }

    /// Registers [`ParkRecorder`] as the native method `name` with signature
    /// `(Ljava/lang/Object;JZ)V` of `class`. The recorder is set once per process; later
    /// registrations (a second session) keep the first.
    pub fn register_park_native(
        &self,
        class: GlobalRef,
        name: &std::ffi::CStr,
        recorder: ParkRecorder,
    ) -> Result<(), Error> {
        let _ = PARK_RECORDER.set(recorder);
        let method = jni::JNINativeMethod {
            name: name.as_ptr(),
            signature: c"(Ljava/lang/Object;JZ)V".as_ptr(),
            fnPtr: park_native as *mut std::ffi::c_void,
        };
        let env = self.env();
        // SAFETY: `class` is a live global class reference; the entry's strings are 'static and
        // `park_native`'s Rust signature matches the JNI signature given.
        let result = unsafe { env.register_natives(class.raw(), std::slice::from_ref(&method)) };
        if env.exception_check() {
            env.exception_clear();
        }
        result.map_err(|code| Error {
            call: "RegisterNatives",
            detail: jni::describe_result(code),
        })
    }

    /// The jmethodID of a static method, if the class has it.
    pub fn static_method_id(&self, class: GlobalRef, name: &str, sig: &str) -> Option<MethodId> {
        let env = self.env();
        // SAFETY: `class` is a live global class reference.
        let m = unsafe { env.get_static_method_id(class.raw(), name, sig) };
        if env.exception_check() {
            env.exception_clear();
            return None;
        }
        m.map(|m| MethodId(m as usize))
    }

    /// Calls a static `(J)I` method; `None` if it threw or is missing.
    pub fn call_static_int_with_long(&self, class: GlobalRef, name: &str, arg: i64) -> Option<i32> {
        let env = self.env();
        // SAFETY: `class` is a live global class reference.
        let m = unsafe { env.get_static_method_id(class.raw(), name, "(J)I") };
        if env.exception_check() {
            env.exception_clear();
            return None;
        }
        let args = [jni::jvalue { j: arg }];
        // SAFETY: the method id was looked up with exactly this signature: one long, int result.
        let v = unsafe { env.call_static_int_method(class.raw(), m?, &args) };
        if env.exception_check() {
            env.exception_clear();
            return None;
        }
        Some(v)
    }
}
