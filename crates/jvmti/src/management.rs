//! The JDK's own thread dump, `ThreadMXBean.dumpAllThreads(true, true)`, read through JNI: the
//! data `jstack -l` shows (states, stacks with lines, locked monitors with their frames, the lock
//! each thread waits for and its owner, locked ownable synchronizers). It needs no JVMTI
//! capability, so it works after a dynamic attach, where HotSpot no longer grants the monitor
//! capabilities (they are OnLoad-only).

use crate::env::{Error, Jni};
use jvmti_bindings::env::JniEnv;
use jvmti_bindings::sys::jni;

/// A lock as `java.lang.management.LockInfo` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    /// Binary class name (`java.lang.Object`, `java.util.concurrent.locks.ReentrantLock$NonfairSync`).
    pub class: String,
    pub identity_hash: i32,
}

/// One thread of the dump.
#[derive(Clone, Debug)]
pub struct JavaThreadInfo {
    pub name: String,
    pub id: i64,
    /// `Thread.State` name: NEW, RUNNABLE, BLOCKED, WAITING, TIMED_WAITING, TERMINATED.
    pub state: String,
    pub daemon: bool,
    /// (class, method, line) top first; line < 0 when unknown or native.
    pub stack: Vec<(String, String, i32)>,
    /// Monitors held, with the stack depth of the frame that locked each.
    pub locked_monitors: Vec<(LockInfo, i32)>,
    /// The lock this thread is blocked on or waiting for.
    pub lock: Option<LockInfo>,
    /// The owner of `lock`, -1 when none.
    pub lock_owner_id: i64,
    pub locked_synchronizers: Vec<LockInfo>,
}

fn err(call: &'static str) -> Error {
    Error {
        call,
        detail: "JNI call failed (class or method missing, or an exception)".into(),
    }
}

/// Small typed helpers over the raw JNI calls; every object they return is a local reference of
/// the calling thread.
struct Calls<'a> {
    env: &'a JniEnv,
}

impl Calls<'_> {
    fn check(&self, call: &'static str) -> Result<(), Error> {
        if self.env.exception_check() {
            self.env.exception_clear();
            return Err(err(call));
        }
        Ok(())
    }

    fn method(&self, class: &str, name: &str, sig: &str) -> Result<jni::jmethodID, Error> {
        let c = self.env.find_class(class).ok_or_else(|| err("FindClass"))?;
        // SAFETY: `c` is the live local reference just returned.
        let m = unsafe { self.env.get_method_id(c, name, sig) };
        self.check("GetMethodID")?;
        m.ok_or_else(|| err("GetMethodID"))
    }

    fn object(&self, obj: jni::jobject, m: jni::jmethodID) -> Result<jni::jobject, Error> {
        // SAFETY: `obj` is a live reference of a class that declares `m`, which takes no argument.
        let r = unsafe { self.env.call_object_method(obj, m, &[]) };
        self.check("CallObjectMethod")?;
        Ok(r)
    }

    fn string(&self, obj: jni::jobject, m: jni::jmethodID) -> Result<String, Error> {
        let s = self.object(obj, m)?;
        if s.is_null() {
            return Ok(String::new());
        }
        // SAFETY: `s` is a live java.lang.String reference.
        Ok(unsafe { self.env.get_string(s) }.unwrap_or_default())
    }

    fn long(&self, obj: jni::jobject, m: jni::jmethodID) -> Result<i64, Error> {
        // SAFETY: as in `object`, for a method returning long.
        let r = unsafe { self.env.call_long_method(obj, m, &[]) };
        self.check("CallLongMethod")?;
        Ok(r)
    }

    fn int(&self, obj: jni::jobject, m: jni::jmethodID) -> Result<i32, Error> {
        // SAFETY: as in `object`, for a method returning int.
        let r = unsafe { self.env.call_int_method(obj, m, &[]) };
        self.check("CallIntMethod")?;
        Ok(r)
    }

    fn boolean(&self, obj: jni::jobject, m: jni::jmethodID) -> Result<bool, Error> {
        // SAFETY: as in `object`, for a method returning boolean.
        let r = unsafe { self.env.call_boolean_method(obj, m, &[]) };
        self.check("CallBooleanMethod")?;
        Ok(r)
    }

    fn array(&self, array: jni::jobject) -> Vec<jni::jobject> {
        if array.is_null() {
            return Vec::new();
        }
        // SAFETY: `array` is a live object-array reference; indices are within its length.
        unsafe {
            let n = self.env.get_array_length(array);
            (0..n)
                .map(|i| self.env.get_object_array_element(array, i))
                .collect()
        }
    }
}

struct LockMethods {
    class: jni::jmethodID,
    hash: jni::jmethodID,
}

impl LockMethods {
    fn read(&self, c: &Calls<'_>, lock: jni::jobject) -> Result<LockInfo, Error> {
        Ok(LockInfo {
            class: c.string(lock, self.class)?,
            identity_hash: c.int(lock, self.hash)?,
        })
    }
}

impl Jni {
    /// `ManagementFactory.getThreadMXBean().dumpAllThreads(true, true)`, read into plain values.
    pub fn dump_all_threads(&self) -> Result<Vec<JavaThreadInfo>, Error> {
        let env = self.env();
        let c = Calls { env: &env };
        self.with_local_frame(64, || {
            let mf = env
                .find_class("java/lang/management/ManagementFactory")
                .ok_or_else(|| err("FindClass(ManagementFactory)"))?;
            // SAFETY: `mf` is a live class reference; the id names a static no-arg method.
            let get_bean = unsafe {
                env.get_static_method_id(
                    mf,
                    "getThreadMXBean",
                    "()Ljava/lang/management/ThreadMXBean;",
                )
            }
            .ok_or_else(|| err("GetStaticMethodID(getThreadMXBean)"))?;
            // SAFETY: static ThreadMXBean getThreadMXBean().
            let bean = unsafe { env.call_static_object_method(mf, get_bean, &[]) };
            c.check("getThreadMXBean")?;
            let dump_all = c.method(
                "java/lang/management/ThreadMXBean",
                "dumpAllThreads",
                "(ZZ)[Ljava/lang/management/ThreadInfo;",
            )?;
            let yes = jni::jvalue { z: jni::JNI_TRUE };
            // SAFETY: ThreadInfo[] dumpAllThreads(boolean, boolean) on the bean.
            let infos = unsafe { env.call_object_method(bean, dump_all, &[yes, yes]) };
            c.check("dumpAllThreads")?;

            let ti = "java/lang/management/ThreadInfo";
            let name = c.method(ti, "getThreadName", "()Ljava/lang/String;")?;
            let id = c.method(ti, "getThreadId", "()J")?;
            let state = c.method(ti, "getThreadState", "()Ljava/lang/Thread$State;")?;
            let daemon = c.method(ti, "isDaemon", "()Z")?;
            let stack = c.method(ti, "getStackTrace", "()[Ljava/lang/StackTraceElement;")?;
            let monitors = c.method(
                ti,
                "getLockedMonitors",
                "()[Ljava/lang/management/MonitorInfo;",
            )?;
            let lock_info = c.method(ti, "getLockInfo", "()Ljava/lang/management/LockInfo;")?;
            let owner = c.method(ti, "getLockOwnerId", "()J")?;
            let syncs = c.method(
                ti,
                "getLockedSynchronizers",
                "()[Ljava/lang/management/LockInfo;",
            )?;
            let enum_name = c.method("java/lang/Enum", "name", "()Ljava/lang/String;")?;
            let ste = "java/lang/StackTraceElement";
            let ste_class = c.method(ste, "getClassName", "()Ljava/lang/String;")?;
            let ste_method = c.method(ste, "getMethodName", "()Ljava/lang/String;")?;
            let ste_line = c.method(ste, "getLineNumber", "()I")?;
            let li = "java/lang/management/LockInfo";
            let lock = LockMethods {
                class: c.method(li, "getClassName", "()Ljava/lang/String;")?,
                hash: c.method(li, "getIdentityHashCode", "()I")?,
            };
            let depth = c.method(
                "java/lang/management/MonitorInfo",
                "getLockedStackDepth",
                "()I",
            )?;

            let mut out = Vec::new();
            for info in c.array(infos) {
                if info.is_null() {
                    continue; // a thread that ended during the dump
                }
                let t = self.with_local_frame(64, || -> Result<JavaThreadInfo, Error> {
                    let st = c.object(info, state)?;
                    let frames = c
                        .array(c.object(info, stack)?)
                        .into_iter()
                        .map(|f| {
                            Ok((
                                c.string(f, ste_class)?,
                                c.string(f, ste_method)?,
                                c.int(f, ste_line)?,
                            ))
                        })
                        .collect::<Result<Vec<_>, Error>>()?;
                    let held = c
                        .array(c.object(info, monitors)?)
                        .into_iter()
                        .map(|m| Ok((lock.read(&c, m)?, c.int(m, depth)?)))
                        .collect::<Result<Vec<_>, Error>>()?;
                    let waits = c.object(info, lock_info)?;
                    let synchronizers = c
                        .array(c.object(info, syncs)?)
                        .into_iter()
                        .map(|s| lock.read(&c, s))
                        .collect::<Result<Vec<_>, Error>>()?;
                    Ok(JavaThreadInfo {
                        name: c.string(info, name)?,
                        id: c.long(info, id)?,
                        state: if st.is_null() {
                            String::new()
                        } else {
                            c.string(st, enum_name)?
                        },
                        daemon: c.boolean(info, daemon)?,
                        stack: frames,
                        locked_monitors: held,
                        lock: if waits.is_null() {
                            None
                        } else {
                            Some(lock.read(&c, waits)?)
                        },
                        lock_owner_id: c.long(info, owner)?,
                        locked_synchronizers: synchronizers,
                    })
                })?;
                out.push(t);
            }
            Ok(out)
        })
    }
}

impl Jni {
    /// The platform `com.sun.management.HotSpotDiagnosticMXBean` (a local reference).
    fn hotspot_diagnostic(&self, c: &Calls<'_>) -> Result<jni::jobject, Error> {
        let env = c.env;
        let mf = env
            .find_class("java/lang/management/ManagementFactory")
            .ok_or_else(|| err("FindClass(ManagementFactory)"))?;
        let bean_class = env
            .find_class("com/sun/management/HotSpotDiagnosticMXBean")
            .ok_or_else(|| err("FindClass(HotSpotDiagnosticMXBean)"))?;
        // SAFETY: `mf` is a live class reference; the id names a static method taking a Class.
        let get = unsafe {
            env.get_static_method_id(
                mf,
                "getPlatformMXBean",
                "(Ljava/lang/Class;)Ljava/lang/management/PlatformManagedObject;",
            )
        }
        .ok_or_else(|| err("GetStaticMethodID(getPlatformMXBean)"))?;
        let arg = jni::jvalue { l: bean_class };
        // SAFETY: static PlatformManagedObject getPlatformMXBean(Class) with a live Class.
        let bean = unsafe { env.call_static_object_method(mf, get, &[arg]) };
        c.check("getPlatformMXBean")?;
        if bean.is_null() {
            return Err(err("getPlatformMXBean(HotSpotDiagnosticMXBean)"));
        }
        Ok(bean)
    }

    /// `HotSpotDiagnosticMXBean.setVMOption(name, value)`: sets a manageable VM flag such as
    /// `HeapDumpOnOutOfMemoryError` or `HeapDumpPath`.
    pub fn set_vm_option(&self, name: &str, value: &str) -> Result<(), Error> {
        let env = self.env();
        let c = Calls { env: &env };
        self.with_local_frame(16, || {
            let bean = self.hotspot_diagnostic(&c)?;
            let set = c.method(
                "com/sun/management/HotSpotDiagnosticMXBean",
                "setVMOption",
                "(Ljava/lang/String;Ljava/lang/String;)V",
            )?;
            let n = env
                .new_string_utf(name)
                .ok_or_else(|| err("NewStringUTF"))?;
            let v = env
                .new_string_utf(value)
                .ok_or_else(|| err("NewStringUTF"))?;
            // SAFETY: void setVMOption(String, String) on the bean, with two live strings.
            unsafe {
                env.call_void_method(bean, set, &[jni::jvalue { l: n }, jni::jvalue { l: v }])
            };
            c.check("setVMOption")
        })
    }

    /// `HotSpotDiagnosticMXBean.dumpThreads(file, JSON)` (JDK 21+): every thread, virtual ones
    /// included, grouped by thread container, as `jcmd Thread.dump_to_file -format=json` writes
    /// it. The file must not exist. An error on a JDK without it.
    pub fn dump_threads_json(&self, file: &str) -> Result<(), Error> {
        let env = self.env();
        let c = Calls { env: &env };
        self.with_local_frame(16, || {
            let bean = self.hotspot_diagnostic(&c)?;
            let format_class = "com/sun/management/HotSpotDiagnosticMXBean$ThreadDumpFormat";
            let dump = c.method(
                "com/sun/management/HotSpotDiagnosticMXBean",
                "dumpThreads",
                "(Ljava/lang/String;Lcom/sun/management/HotSpotDiagnosticMXBean$ThreadDumpFormat;)V",
            )?;
            let class = env.find_class(format_class);
            c.check("FindClass(ThreadDumpFormat)")?;
            let class = class.ok_or_else(|| err("FindClass(ThreadDumpFormat)"))?;
            // SAFETY: `class` is a live class reference.
            let field = unsafe {
                env.get_static_field_id(
                    class,
                    "JSON",
                    "Lcom/sun/management/HotSpotDiagnosticMXBean$ThreadDumpFormat;",
                )
            };
            c.check("GetStaticFieldID(ThreadDumpFormat.JSON)")?;
            let field = field.ok_or_else(|| err("GetStaticFieldID(ThreadDumpFormat.JSON)"))?;
            // SAFETY: `field` is ThreadDumpFormat.JSON, a static field of `class`'s own type.
            let json = unsafe { env.get_static_object_field(class, field) };
            c.check("ThreadDumpFormat.JSON")?;
            let f = env
                .new_string_utf(file)
                .ok_or_else(|| err("NewStringUTF"))?;
            // SAFETY: void dumpThreads(String, ThreadDumpFormat) on the bean, with live arguments.
            unsafe {
                env.call_void_method(bean, dump, &[jni::jvalue { l: f }, jni::jvalue { l: json }])
            };
            c.check("dumpThreads")
        })
    }

    /// `HotSpotDiagnosticMXBean.dumpHeap(file, live)`: an HPROF dump written by the JVM.
    pub fn dump_heap(&self, file: &str, live: bool) -> Result<(), Error> {
        let env = self.env();
        let c = Calls { env: &env };
        self.with_local_frame(16, || {
            let bean = self.hotspot_diagnostic(&c)?;
            let dump = c.method(
                "com/sun/management/HotSpotDiagnosticMXBean",
                "dumpHeap",
                "(Ljava/lang/String;Z)V",
            )?;
            let f = env
                .new_string_utf(file)
                .ok_or_else(|| err("NewStringUTF"))?;
            let z = jni::jvalue {
                z: if live { jni::JNI_TRUE } else { jni::JNI_FALSE },
            };
            // SAFETY: void dumpHeap(String, boolean) on the bean, with a live string.
            unsafe { env.call_void_method(bean, dump, &[jni::jvalue { l: f }, z]) };
            c.check("dumpHeap")
        })
    }
}
