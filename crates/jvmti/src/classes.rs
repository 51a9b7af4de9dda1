//! Class-file hooks for instrumentation (exact mode): the ClassFileLoadHook capabilities,
//! the boot class path, retransformation, and the JNI calls that read the Java runtime's data.

use crate::env::{Env, Error, JClass, JObject, Jni};
use jvmti_bindings::sys::jni;

/// A JNI global reference: valid on every thread until the VM dies (never deleted here).
#[derive(Clone, Copy, Debug)]
pub struct GlobalRef(jni::jobject);

// SAFETY: a global reference may be used from any thread attached to the VM.
unsafe impl Send for GlobalRef {}
// SAFETY: as above.
unsafe impl Sync for GlobalRef {}

impl GlobalRef {
    pub fn is_null(&self) -> bool {
        self.0.is_null()
    }

    pub(crate) fn raw(&self) -> jni::jobject {
        self.0
    }

    /// A reference to nothing (what a failed NewGlobalRef gives).
    pub(crate) fn null() -> GlobalRef {
        GlobalRef(std::ptr::null_mut())
    }

    /// Wraps a new global reference; `None` for null.
    pub(crate) fn from_raw(global: jni::jobject) -> Option<GlobalRef> {
        (!global.is_null()).then_some(GlobalRef(global))
    }
}

fn jvmti_err(call: &'static str) -> impl Fn(jvmti_bindings::sys::jvmti::jvmtiError) -> Error {
    move |e| Error {
        call,
        detail: e.to_string(),
    }
}

impl Env {
    /// Adds `can_generate_all_class_hook_events` and `can_retransform_classes` (call at OnLoad:
    /// HotSpot grants them later too, but classes loaded before would miss the hook).
    pub fn add_class_hook_capabilities(&self) -> Result<(), Error> {
        let jvmti = self.jvmti();
        let mut caps = jvmti_bindings::sys::jvmti::jvmtiCapabilities::default();
        caps.set_can_generate_all_class_hook_events(true);
        caps.set_can_retransform_classes(true);
        jvmti
            .add_capabilities(&caps)
            .map_err(jvmti_err("AddCapabilities(class hooks)"))
    }

    /// Appends a directory (OnLoad phase) or jar to the boot class path.
    pub fn add_to_bootstrap_class_loader_search(&self, path: &str) -> Result<(), Error> {
        self.jvmti()
            .add_to_bootstrap_class_loader_search(path)
            .map_err(jvmti_err("AddToBootstrapClassLoaderSearch"))
    }

    /// Every loaded class, as local references of the calling thread.
    pub fn loaded_classes(&self) -> Vec<JClass> {
        self.jvmti()
            .get_loaded_classes()
            .map(|v| v.into_iter().map(JClass).collect())
            .unwrap_or_default()
    }

    /// Whether RetransformClasses may change this class (false for arrays, primitives, hidden
    /// classes).
    pub fn is_modifiable_class(&self, class: JClass) -> bool {
        // SAFETY: `class` is a live local reference (JClass contract).
        unsafe { self.jvmti().is_modifiable_class(class.0) }.unwrap_or(false)
    }

    /// Whether the class was defined by the boot loader.
    pub fn is_boot_class(&self, class: JClass) -> bool {
        // SAFETY: `class` is a live local reference (JClass contract); the loader comes back as
        // a local reference (or null), released with the caller's local frame.
        unsafe { self.jvmti().get_class_loader(class.0) }.is_ok_and(|l| l.is_null())
    }

    /// Retransforms classes: the ClassFileLoadHook runs again for each, with its original bytes.
    pub fn retransform_classes(&self, classes: &[JClass]) -> Result<(), Error> {
        let raw: Vec<jni::jclass> = classes.iter().map(|c| c.0).collect();
        // SAFETY: every element is a live local reference (JClass contract).
        unsafe { self.jvmti().retransform_classes(&raw) }.map_err(jvmti_err("RetransformClasses"))
    }
}

impl Jni {
    /// Loads a class by its internal name (`a/b/C`) and returns a global reference to it.
    pub fn find_class_global(&self, name: &str) -> Option<GlobalRef> {
        let env = self.env();
        let local = env.find_class(name);
        if env.exception_check() {
            env.exception_clear();
        }
        let local = local?;
        // SAFETY: `local` is the live local reference just returned.
        let global = unsafe { env.new_global_ref(local) };
        self.delete_local_ref(local);
        (!global.is_null()).then_some(GlobalRef(global))
    }

    /// `ClassLoader.getPlatformClassLoader()` as a global reference.
    pub fn platform_class_loader(&self) -> Option<GlobalRef> {
        let class = self.find_class_global("java/lang/ClassLoader")?;
        let env = self.env();
        // SAFETY: `class` is a live global class reference; the method id matches the call.
        let loader = unsafe {
            let m = env.get_static_method_id(
                class.0,
                "getPlatformClassLoader",
                "()Ljava/lang/ClassLoader;",
            )?;
            env.call_static_object_method(class.0, m, &[])
        };
        if env.exception_check() {
            env.exception_clear();
            return None;
        }
        if loader.is_null() {
            return None;
        }
        // SAFETY: `loader` is the live local reference just returned.
        let global = unsafe { env.new_global_ref(loader) };
        self.delete_local_ref(loader);
        (!global.is_null()).then_some(GlobalRef(global))
    }

    /// Whether a (local) object reference and a global reference name the same object.
    pub fn is_same_object(&self, a: JObject, b: GlobalRef) -> bool {
        // SAFETY: `a` is a live local reference (JObject contract), `b` a live global one.
        unsafe { self.env().is_same_object(a.0, b.0) }
    }

    fn static_method(&self, class: GlobalRef, name: &str, sig: &str) -> Option<jni::jmethodID> {
        let env = self.env();
        // SAFETY: `class` is a live global class reference.
        let m = unsafe { env.get_static_method_id(class.0, name, sig) };
        if env.exception_check() {
            env.exception_clear();
            return None;
        }
        m
    }

    /// Calls a static `(I...)I` method with int arguments; `None` if it threw or is missing.
    pub fn call_static_int(
        &self,
        class: GlobalRef,
        name: &str,
        sig: &str,
        args: &[i32],
    ) -> Option<i32> {
        let m = self.static_method(class, name, sig)?;
        let args: Vec<jni::jvalue> = args.iter().map(|&i| jni::jvalue { i }).collect();
        let env = self.env();
        // SAFETY: the caller names a static method whose parameters are all ints and whose
        // result is an int (`sig`); a mismatch is reported by GetStaticMethodID above.
        let v = unsafe { env.call_static_int_method(class.0, m, &args) };
        if env.exception_check() {
            env.exception_clear();
            return None;
        }
        Some(v)
    }

    /// Calls a static `(I...)[J` method with int arguments and copies the array out.
    pub fn call_static_long_array(
        &self,
        class: GlobalRef,
        name: &str,
        sig: &str,
        args: &[i32],
    ) -> Option<Vec<i64>> {
        let array = self.call_static_object(class, name, sig, ")[J", args)?;
        let env = self.env();
        // SAFETY: `array` is the live long[] local reference just returned.
        let len = unsafe { env.get_array_length(array) }.max(0);
        let mut out = vec![0i64; len as usize];
        // SAFETY: as above; `out` has exactly `len` elements.
        unsafe { env.get_long_array_region(array, 0, len, &mut out) };
        self.delete_local_ref(array);
        Some(out)
    }

    /// Calls a static `(I...)Ljava/lang/String;` method with int arguments.
    pub fn call_static_string(
        &self,
        class: GlobalRef,
        name: &str,
        sig: &str,
        args: &[i32],
    ) -> Option<String> {
        let s = self.call_static_object(class, name, sig, ")Ljava/lang/String;", args)?;
        // SAFETY: `s` is the live String local reference just returned.
        let text = unsafe { self.env().get_string_utf(s) };
        self.delete_local_ref(s);
        text
    }

    /// Calls a static method with int arguments whose signature ends in `returns` (an object
    /// type); the non-null local reference it returned, or None (wrong signature, exception,
    /// null).
    pub(crate) fn call_static_object(
        &self,
        class: GlobalRef,
        name: &str,
        sig: &str,
        returns: &str,
        args: &[i32],
    ) -> Option<jni::jobject> {
        if !sig.ends_with(returns) {
            return None;
        }
        let m = self.static_method(class, name, sig)?;
        let args: Vec<jni::jvalue> = args.iter().map(|&i| jni::jvalue { i }).collect();
        let env = self.env();
        // SAFETY: as in call_static_int; the result is an object of the type `returns` names
        // (checked above against `sig`, which GetStaticMethodID checked against the method).
        let object = unsafe { env.call_static_object_method(class.0, m, &args) };
        if env.exception_check() {
            env.exception_clear();
            return None;
        }
        (!object.is_null()).then_some(object)
    }
}
