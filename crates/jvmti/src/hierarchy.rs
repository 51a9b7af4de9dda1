//! What root-method profiling asks of the JVM: the loaded classes with their supertypes (the
//! class hierarchy virtual calls are resolved in), a class's declared methods, the method a
//! `java.lang.reflect.Method` stands for, the bytecodes a method runs now (to check that probes
//! are gone), and the native methods of the root runtime (`reveal`, `reflected`, `cpuNow`).

use crate::classes::GlobalRef;
use crate::env::{Env, Error, JClass, JObject, Jni};
use jvmti_bindings::sys::jni;
use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;

/// A loaded class: internal name, direct supertypes (superclass first) and a global reference.
pub struct LoadedClass {
    pub name: String,
    pub supers: Vec<String>,
    pub class: GlobalRef,
    /// Whether RetransformClasses may change it.
    pub modifiable: bool,
}

/// A declared method: name, descriptor, whether it has bytecode (not abstract or native).
pub type DeclaredMethod = (String, String, bool);

const ACC_NATIVE: i32 = 0x0100;
const ACC_ABSTRACT: i32 = 0x0400;

fn jvmti_err(call: &'static str) -> impl Fn(jvmti_bindings::sys::jvmti::jvmtiError) -> Error {
    move |e| Error {
        call,
        detail: e.to_string(),
    }
}

/// `Ljava/lang/String;` → `java/lang/String`; arrays and primitives → None.
fn internal(signature: &str) -> Option<String> {
    signature
        .strip_prefix('L')
        .and_then(|s| s.strip_suffix(';'))
        .map(str::to_string)
}

impl Env {
    /// Every loaded class (not arrays or primitives) with its supertypes, each held by a new
    /// global reference (release them with [`Jni::delete_global`]).
    pub fn loaded_class_hierarchy(&self, jni: &Jni) -> Vec<LoadedClass> {
        let jvmti = self.jvmti();
        let classes = jvmti.get_loaded_classes().unwrap_or_default();
        let mut out = Vec::with_capacity(classes.len());
        for &c in &classes {
            jni.with_local_frame(16, || {
                let Some(name) = self.class_signature(JClass(c)).and_then(|s| internal(&s)) else {
                    return;
                };
                out.push(LoadedClass {
                    supers: self.supertypes(jni, JClass(c)),
                    modifiable: self.is_modifiable_class(JClass(c)),
                    class: jni.new_global(JClass(c)),
                    name,
                });
            });
            jni.delete_local_ref(c);
        }
        out
    }

    /// The direct supertypes of a class: its superclass, then its interfaces (internal names).
    pub fn supertypes(&self, jni: &Jni, class: JClass) -> Vec<String> {
        let mut out = Vec::new();
        let env = jni.env();
        // SAFETY: `class` is a live local reference (JClass contract); the superclass comes
        // back as a local reference, deleted below.
        if let Some(s) = unsafe { env.get_superclass(class.0) } {
            if let Some(n) = self.class_signature(JClass(s)).and_then(|s| internal(&s)) {
                out.push(n);
            }
            jni.delete_local_ref(s);
        }
        // SAFETY: as above; the interfaces are local references, deleted below.
        for i in unsafe { self.jvmti().get_implemented_interfaces(class.0) }.unwrap_or_default() {
            if let Some(n) = self.class_signature(JClass(i)).and_then(|s| internal(&s)) {
                out.push(n);
            }
            jni.delete_local_ref(i);
        }
        out
    }

    /// The methods a class declares.
    pub fn declared_methods(&self, class: GlobalRef) -> Vec<DeclaredMethod> {
        let jvmti = self.jvmti();
        // SAFETY: `class` is a live global class reference.
        let ids = unsafe { jvmti.get_class_methods(class.raw()) }.unwrap_or_default();
        ids.into_iter()
            .filter_map(|m| {
                // SAFETY: `m` was just returned for a live class.
                let (name, descriptor, _) = unsafe { jvmti.get_method_name(m) }.ok()?;
                // SAFETY: as above.
                let modifiers = unsafe { jvmti.get_method_modifiers(m) }.unwrap_or(0);
                Some((
                    name,
                    descriptor,
                    modifiers & (ACC_NATIVE | ACC_ABSTRACT) == 0,
                ))
            })
            .collect()
    }

    /// The length of the bytecode each declared method runs now (`None` for methods without
    /// bytecode or when the JVM will not say): instrumented code is longer than the original.
    /// Needs `can_get_bytecodes` ([`Env::add_bytecodes_capability`]).
    pub fn current_code_lengths(&self, class: GlobalRef) -> Vec<(String, String, Option<usize>)> {
        let jvmti = self.jvmti();
        // SAFETY: `class` is a live global class reference.
        let ids = unsafe { jvmti.get_class_methods(class.raw()) }.unwrap_or_default();
        ids.into_iter()
            .filter_map(|m| {
                // SAFETY: `m` was just returned for a live class.
                let (name, descriptor, _) = unsafe { jvmti.get_method_name(m) }.ok()?;
                // SAFETY: as above.
                let code = unsafe { jvmti.get_bytecodes(m) }.ok().map(|b| b.len());
                Some((name, descriptor, code))
            })
            .collect()
    }

    /// Adds `can_get_bytecodes` (granted in the live phase by HotSpot).
    pub fn add_bytecodes_capability(&self) -> Result<(), Error> {
        let mut caps = jvmti_bindings::sys::jvmti::jvmtiCapabilities::default();
        caps.set_can_get_bytecodes(true);
        self.jvmti()
            .add_capabilities(&caps)
            .map_err(jvmti_err("AddCapabilities(can_get_bytecodes)"))
    }

    /// (class internal name, method name, descriptor, jmethodID) of a `java.lang.reflect.Method`
    /// or `Constructor` (a live local reference of the calling thread).
    pub fn reflected_method(
        &self,
        jni: &Jni,
        method: JObject,
    ) -> Option<(String, String, String, usize)> {
        if method.is_null() {
            return None;
        }
        let env = jni.env();
        // SAFETY: `method` is a live local reference to a Method or Constructor (the runtime's
        // `reflected` only passes those).
        let id = unsafe { env.from_reflected_method(method.0) };
        if env.exception_check() {
            env.exception_clear();
            return None;
        }
        if id.is_null() {
            return None;
        }
        let jvmti = self.jvmti();
        // SAFETY: `id` is a valid jmethodID just returned by the JVM.
        let (name, descriptor, _) = unsafe { jvmti.get_method_name(id) }.ok()?;
        // SAFETY: as above; the class is a local reference, deleted below.
        let class = unsafe { jvmti.get_method_declaring_class(id) }.ok()?;
        let sig = self.class_signature(JClass(class));
        jni.delete_local_ref(class);
        Some((internal(&sig?)?, name, descriptor, id as usize))
    }
}

impl Env {
    /// Whether a class was defined by the boot loader or by `platform` (the platform loader):
    /// a JDK class.
    pub fn defined_by_jdk(&self, jni: &Jni, class: GlobalRef, platform: Option<GlobalRef>) -> bool {
        // SAFETY: `class` is a live global class reference; the loader comes back as a local
        // reference (or null), deleted below.
        match unsafe { self.jvmti().get_class_loader(class.raw()) } {
            Ok(l) if l.is_null() => true,
            Ok(l) => {
                let same = platform.is_some_and(|p| jni.is_same_object(JObject(l), p));
                jni.delete_local_ref(l);
                same
            }
            Err(_) => false,
        }
    }
}

impl Jni {
    /// A new Java string (a local reference of the calling thread).
    pub fn new_string(&self, text: &str) -> Option<JObject> {
        let env = self.env();
        let s = env.new_string_utf(text);
        if env.exception_check() {
            env.exception_clear();
            return None;
        }
        s.map(JObject)
    }

    /// Calls a static `(I...)[Ljava/lang/String;` method with int arguments; each element
    /// `None` where the array holds null.
    pub fn call_static_string_array(
        &self,
        class: GlobalRef,
        name: &str,
        sig: &str,
        args: &[i32],
    ) -> Option<Vec<Option<String>>> {
        let array = self.call_static_object(class, name, sig, ")[Ljava/lang/String;", args)?;
        let env = self.env();
        // SAFETY: `array` is the live String[] local reference just returned.
        let len = unsafe { env.get_array_length(array) }.max(0);
        let mut out = Vec::with_capacity(len as usize);
        for i in 0..len {
            // SAFETY: `i` is within the array; the element is a local reference (or null),
            // deleted after it is read.
            let e = unsafe { env.get_object_array_element(array, i) };
            if env.exception_check() {
                env.exception_clear();
                out.push(None);
                continue;
            }
            if e.is_null() {
                out.push(None);
            } else {
                // SAFETY: `e` is a live String local reference.
                out.push(unsafe { env.get_string_utf(e) });
                self.delete_local_ref(e);
            }
        }
        self.delete_local_ref(array);
        Some(out)
    }

    /// Calls a static `()J` method; `None` if it threw or is missing.
    pub fn call_static_long(&self, class: GlobalRef, name: &str, sig: &str) -> Option<i64> {
        let env = self.env();
        // SAFETY: `class` is a live global class reference.
        let m = unsafe { env.get_static_method_id(class.raw(), name, sig) };
        if env.exception_check() {
            env.exception_clear();
            return None;
        }
        // SAFETY: the caller names a static method without parameters returning a long.
        let v = unsafe { env.call_static_long_method(class.raw(), m?, &[]) };
        if env.exception_check() {
            env.exception_clear();
            return None;
        }
        Some(v)
    }

    /// A new global reference to a class.
    pub fn new_global(&self, class: JClass) -> GlobalRef {
        // SAFETY: `class` is a live local reference (JClass contract).
        let g = unsafe { self.env().new_global_ref(class.0) };
        GlobalRef::from_raw(g).unwrap_or(GlobalRef::null())
    }

    /// Releases a global reference made by this crate; it must not be used afterwards.
    pub fn delete_global(&self, r: GlobalRef) {
        if !r.is_null() {
            // SAFETY: `r` is a live global reference that the caller gives up.
            unsafe { self.env().delete_global_ref(r.raw()) };
        }
    }

    /// Calls a static `()V`/`(Z)V`-like method with the given JNI arguments; false if it threw.
    pub fn call_static_void(
        &self,
        class: GlobalRef,
        name: &str,
        sig: &str,
        args: &[JValue],
    ) -> bool {
        let env = self.env();
        // SAFETY: `class` is a live global class reference.
        let Some(m) = (unsafe { env.get_static_method_id(class.raw(), name, sig) }) else {
            if env.exception_check() {
                env.exception_clear();
            }
            return false;
        };
        let args: Vec<jni::jvalue> = args.iter().map(JValue::raw).collect();
        // SAFETY: the caller's `sig` describes `args` (one JValue per parameter, of its type)
        // and a void result; GetStaticMethodID checked that the method exists.
        unsafe { env.call_static_void_method(class.raw(), m, &args) };
        if env.exception_check() {
            env.exception_describe();
            env.exception_clear();
            return false;
        }
        true
    }
}

/// A JNI argument.
#[derive(Clone, Copy, Debug)]
pub enum JValue {
    Bool(bool),
    Int(i32),
    Long(i64),
    /// A live local reference.
    Object(JObject),
}

impl JValue {
    fn raw(&self) -> jni::jvalue {
        match *self {
            JValue::Bool(b) => jni::jvalue {
                z: b as jni::jboolean,
            },
            JValue::Int(i) => jni::jvalue { i },
            JValue::Long(j) => jni::jvalue { j },
            JValue::Object(o) => jni::jvalue { l: o.0 },
        }
    }
}

/// What the root runtime's native methods hand the agent (on the application thread that runs
/// the probe): `reveal(jni, method id)` the first time a method runs below a root,
/// `reflected(jni, method)` before a reflective call below a root.
pub struct RootNatives {
    pub reveal: fn(&Jni, i32),
    pub reflected: fn(&Jni, JObject),
    /// The calling thread's trace-context cell (given its `Thread.getId()`), if it has one.
    pub context: fn(&Jni, i64) -> Option<&'static AtomicU64>,
}

static ROOT_NATIVES: OnceLock<RootNatives> = OnceLock::new();

extern "system" fn reveal_native(env: *mut jni::JNIEnv, _class: jni::jclass, id: jni::jint) {
    let Some(n) = ROOT_NATIVES.get() else { return };
    if env.is_null() {
        return;
    }
    let jni = Jni::from_raw(env);
    // No panic may unwind into the JVM.
    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| (n.reveal)(&jni, id)));
}

extern "system" fn reflected_native(env: *mut jni::JNIEnv, _class: jni::jclass, m: jni::jobject) {
    let Some(n) = ROOT_NATIVES.get() else { return };
    if env.is_null() {
        return;
    }
    let jni = Jni::from_raw(env);
    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| (n.reflected)(&jni, JObject(m))));
}

/// `contextCell(J)Ljava/nio/ByteBuffer;`: the calling thread's trace-context cell as a direct
/// buffer of 8 bytes (null when it has none), which the runtime writes the thread's current
/// call tree id into and the samplers read.
extern "system" fn context_cell_native(
    env: *mut jni::JNIEnv,
    _class: jni::jclass,
    java_id: jni::jlong,
) -> jni::jobject {
    let Some(n) = ROOT_NATIVES.get() else {
        return std::ptr::null_mut();
    };
    if env.is_null() {
        return std::ptr::null_mut();
    }
    let jni = Jni::from_raw(env);
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        let cell = (n.context)(&jni, java_id)?;
        // SAFETY: the cell is 'static (it lives in the agent's thread table for the life of
        // the process), 8 bytes long and 8-byte aligned, so every access through the buffer
        // (putLong at 0) stays valid however long the buffer lives.
        unsafe {
            jni.env()
                .new_direct_byte_buffer(cell.as_ptr().cast(), std::mem::size_of::<u64>() as _)
        }
    }))
    .ok()
    .flatten()
    .unwrap_or(std::ptr::null_mut())
}

/// What turns the OS thread's CPU time into the calling Java thread's (a virtual thread's own,
/// on a carrier); null: the OS thread's as is. Set by [`set_cpu_now_hook`].
static CPU_NOW_HOOK: std::sync::atomic::AtomicPtr<()> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// Lets `hook(raw)` adjust what `Roots.cpuNow()` returns (`raw`: the OS thread's CPU time in
/// ns). The hook runs on application threads at every timed call: it must be lock-free and
/// must not panic.
pub fn set_cpu_now_hook(hook: Option<fn(i64) -> i64>) {
    let p = hook.map_or(std::ptr::null_mut(), |h| h as *mut ());
    CPU_NOW_HOOK.store(p, std::sync::atomic::Ordering::Release);
}

/// The calling thread's CPU time in ns (CLOCK_THREAD_CPUTIME_ID, through the hook if any).
extern "system" fn cpu_now_native(_env: *mut jni::JNIEnv, _class: jni::jclass) -> jni::jlong {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; the clock id is a constant Linux knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    let raw = ts
        .tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec);
    let hook = CPU_NOW_HOOK.load(std::sync::atomic::Ordering::Acquire);
    if hook.is_null() {
        return raw;
    }
    // SAFETY: only `set_cpu_now_hook` stores here, and only `fn(i64) -> i64` pointers.
    let hook = unsafe { std::mem::transmute::<*mut (), fn(i64) -> i64>(hook) };
    // No panic may cross into the JVM (the hook is written not to panic).
    std::panic::catch_unwind(|| hook(raw)).unwrap_or(raw)
}

impl Jni {
    /// Registers the root runtime's natives on `class` (`reveal(I)V`,
    /// `reflected(Ljava/lang/Object;)V`, `cpuNow()J`, `contextCell(J)Ljava/nio/ByteBuffer;`). The callbacks are set once per process.
    pub fn register_root_natives(
        &self,
        class: GlobalRef,
        natives: RootNatives,
    ) -> Result<(), Error> {
        let _ = ROOT_NATIVES.set(natives);
        let methods = [
            jni::JNINativeMethod {
                name: c"reveal".as_ptr(),
                signature: c"(I)V".as_ptr(),
                fnPtr: reveal_native as *mut std::ffi::c_void,
            },
            jni::JNINativeMethod {
                name: c"reflected".as_ptr(),
                signature: c"(Ljava/lang/Object;)V".as_ptr(),
                fnPtr: reflected_native as *mut std::ffi::c_void,
            },
            jni::JNINativeMethod {
                name: c"cpuNow".as_ptr(),
                signature: c"()J".as_ptr(),
                fnPtr: cpu_now_native as *mut std::ffi::c_void,
            },
            jni::JNINativeMethod {
                name: c"contextCell".as_ptr(),
                signature: c"(J)Ljava/nio/ByteBuffer;".as_ptr(),
                fnPtr: context_cell_native as *mut std::ffi::c_void,
            },
        ];
        let env = self.env();
        // SAFETY: `class` is a live global class reference; the entries' strings are 'static
        // and each function's Rust signature matches its JNI signature.
        let result = unsafe { env.register_natives(class.raw(), &methods) };
        if env.exception_check() {
            env.exception_clear();
        }
        result.map_err(|code| Error {
            call: "RegisterNatives",
            detail: jni::describe_result(code),
        })
    }
}
