//! Recovering the stack walks AsyncGetCallTrace gives up on, with what HotSpot publishes about
//! its own structures (the `gHotSpotVMStructs` table libjvm exports for the serviceability agent).
//!
//! Two cases cover most failed walks on real workloads:
//! - The thread is in the VM or in native code (`unknown_not_java`, `not_walkable_not_java`): it
//!   left Java through a call that recorded the last Java frame's stack pointer but not yet its
//!   pc (HotSpot makes such an anchor walkable lazily, from the return address just below that
//!   stack pointer). [`Anchors::walk_from_anchor`] does what HotSpot would do — sets the anchor's
//!   pc to that return address for the duration of one walk, and puts the old value back.
//! - The thread is in Java code whose frame is not complete (`unknown_java`, `not_walkable_java`):
//!   the pc is in a compiled method's prologue or epilogue, or in a stub that keeps no frame,
//!   where the return address is on top of the stack. [`caller_context`] gives a copy of the
//!   signal context as if that call had just returned (pc = the word at sp, sp one word up), so a
//!   second walk starts in the caller; the sample loses only its innermost frame. Code that keeps
//!   a frame pointer (stubs such as arraycopy, which push one) is popped through that instead
//!   ([`frame_pointer_caller`]), when it lies on the thread's own stack.
//!
//! Everything here may run in a signal handler: no allocation, no lock, and every read of JVM
//! memory goes through a pointer derived from the interrupted thread's own JavaThread or its own
//! stack. x86-64 only; elsewhere nothing is recovered.

use crate::env::Jni;
use std::ffi::{CStr, c_char, c_void};

/// The kernel's signal context (`ucontext_t`).
pub type UContext = libc::ucontext_t;

/// Offsets found in the VMStructs table, and the JNIEnv's place inside a JavaThread.
#[derive(Clone, Copy, Debug)]
pub struct Anchors {
    /// JNIEnv address minus JavaThread address.
    env_offset: usize,
    /// JavaThread::_anchor.
    anchor: usize,
    /// JavaFrameAnchor::_last_Java_sp / _last_Java_pc.
    sp: usize,
    pc: usize,
}

/// Reads an exported `uint64_t`/pointer-sized global of libjvm by name.
fn global_u64(name: &CStr) -> Option<u64> {
    // SAFETY: dlsym only reads the loaded symbol tables; a non-null result is the address of
    // the named global, which HotSpot defines as a 64-bit integer (or pointer) that is set at
    // start-up and never changed.
    unsafe {
        let sym = libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
        (!sym.is_null()).then(|| *(sym as *const u64))
    }
}

/// The offset of `type_name::field` in the VMStructs table.
fn field_offset(type_name: &str, field: &str) -> Option<usize> {
    let base = global_u64(c"gHotSpotVMStructs")? as usize;
    let stride = global_u64(c"gHotSpotVMStructEntryArrayStride")? as usize;
    let type_off = global_u64(c"gHotSpotVMStructEntryTypeNameOffset")? as usize;
    let field_off = global_u64(c"gHotSpotVMStructEntryFieldNameOffset")? as usize;
    let offset_off = global_u64(c"gHotSpotVMStructEntryOffsetOffset")? as usize;
    if base == 0 || stride == 0 {
        return None;
    }
    // The table ends with an entry whose type name is null; 100,000 entries is far beyond any
    // JDK's (about 2,000), a guard against a table that is not what we think.
    for i in 0..100_000usize {
        let entry = base + i * stride;
        // SAFETY: `entry` is inside HotSpot's static VMStructs array (checked to end at the null
        // type name before we step past it); its name fields are pointers to static C strings.
        unsafe {
            let tname = *((entry + type_off) as *const *const c_char);
            if tname.is_null() {
                return None;
            }
            let fname = *((entry + field_off) as *const *const c_char);
            if fname.is_null() {
                continue;
            }
            if CStr::from_ptr(tname).to_bytes() == type_name.as_bytes()
                && CStr::from_ptr(fname).to_bytes() == field.as_bytes()
            {
                return Some(*((entry + offset_off) as *const u64) as usize);
            }
        }
    }
    None
}

impl Anchors {
    /// Finds the offsets, on a thread attached to the VM (`jni`); None on a JVM that does not
    /// publish them (not HotSpot, or a layout we do not know).
    pub fn find(jni: &Jni) -> Option<Anchors> {
        if !cfg!(target_arch = "x86_64") {
            return None;
        }
        let anchor = field_offset("JavaThread", "_anchor")?;
        let sp = field_offset("JavaFrameAnchor", "_last_Java_sp")?;
        let pc = field_offset("JavaFrameAnchor", "_last_Java_pc")?;
        let thread = current_java_thread(jni)?;
        let env = jni.as_ptr() as usize;
        let env_offset = env.checked_sub(thread)?;
        // The JNIEnv is a field of the JavaThread: a few KiB in at most.
        (env_offset < 64 << 10).then_some(Anchors {
            env_offset,
            anchor,
            sp,
            pc,
        })
    }

    /// Runs `walk` with the interrupted thread's last-Java-frame anchor made walkable (its pc set
    /// from the return address below its sp) when it has an sp but no pc, and restores the
    /// anchor; None when there was nothing to recover.
    ///
    /// # Safety
    /// Only in a signal handler on the thread that owns `env` (its JNIEnv, from the thread
    /// table): the thread is stopped in the handler, so its anchor does not change under us.
    pub unsafe fn walk_from_anchor(
        &self,
        env: *mut c_void,
        walk: impl FnOnce() -> i32,
    ) -> Option<i32> {
        let thread = (env as usize).checked_sub(self.env_offset)?;
        let anchor = thread + self.anchor;
        // SAFETY: `thread` is the JavaThread that embeds this thread's JNIEnv (the offset was
        // measured on a live JavaThread of the same JVM); the anchor's fields are words inside it.
        unsafe {
            let sp_slot = (anchor + self.sp) as *const usize;
            let pc_slot = (anchor + self.pc) as *mut usize;
            let sp = std::ptr::read_volatile(sp_slot);
            if sp == 0 || !sp.is_multiple_of(8) || std::ptr::read_volatile(pc_slot) != 0 {
                return None;
            }
            // The return address into the last Java frame sits just below its sp, on this
            // thread's own stack, which is mapped while the thread runs.
            let ret = std::ptr::read_volatile((sp - 8) as *const usize);
            if ret == 0 {
                return None;
            }
            std::ptr::write_volatile(pc_slot, ret);
            let result = walk();
            std::ptr::write_volatile(pc_slot, 0);
            Some(result)
        }
    }
}

/// The current thread's JavaThread address, from `Thread.currentThread().eetop`.
pub(crate) fn current_java_thread(jni: &Jni) -> Option<usize> {
    let env = jni.env();
    let class = env.find_class("java/lang/Thread")?;
    // SAFETY: `class` is a live local reference to java.lang.Thread; the method and field ids
    // match the calls made with them.
    let thread = unsafe {
        let current = env.get_static_method_id(class, "currentThread", "()Ljava/lang/Thread;")?;
        let eetop = env.get_field_id(class, "eetop", "J")?;
        let t = env.call_static_object_method(class, current, &[]);
        if env.exception_check() || t.is_null() {
            env.exception_clear();
            None
        } else {
            let v = env.get_long_field(t, eetop);
            jni.delete_local_ref(t);
            Some(v as usize)
        }
    };
    jni.delete_local_ref(class);
    thread.filter(|t| *t != 0)
}

/// Fills `out` with a copy of the signal context `uc` as if the function at its pc had just
/// returned, for code that keeps a frame pointer (interpreter, stubs that `enter`): pc = the
/// word above the saved frame pointer, sp just above that, fp the saved one. Only when the frame
/// pointer lies on the thread's stack, `stack` (lowest, highest address). False when that is not
/// possible.
///
/// # Safety
/// `uc` is the ucontext the kernel passed to the running signal handler, on a thread whose stack
/// is `stack`.
pub unsafe fn frame_pointer_caller(
    uc: *const c_void,
    stack: (usize, usize),
    out: &mut libc::ucontext_t,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `uc` is the kernel's ucontext_t for this handler; fp is read from only after it is
    // checked to lie between sp and the top of the thread's own (mapped) stack.
    unsafe {
        if uc.is_null() {
            return false;
        }
        std::ptr::copy_nonoverlapping(uc as *const libc::ucontext_t, out, 1);
        let regs = &mut out.uc_mcontext.gregs;
        let sp = regs[libc::REG_RSP as usize] as usize;
        let fp = regs[libc::REG_RBP as usize] as usize;
        let (lo, hi) = stack;
        if sp < lo || fp < sp || !fp.is_multiple_of(8) || fp.saturating_add(16) > hi {
            return false;
        }
        let saved_fp = std::ptr::read_volatile(fp as *const usize);
        let ret = std::ptr::read_volatile((fp + 8) as *const usize);
        if ret == 0 {
            return false;
        }
        regs[libc::REG_RIP as usize] = ret as i64;
        regs[libc::REG_RSP as usize] = (fp + 16) as i64;
        regs[libc::REG_RBP as usize] = saved_fp as i64;
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (uc, stack, out);
        false
    }
}

/// Fills `out` with a copy of the signal context `uc` as if the function at its pc had just
/// returned: pc = the word at sp, sp one word higher. False when that is not possible.
///
/// # Safety
/// `uc` is the ucontext the kernel passed to the running signal handler.
pub unsafe fn caller_context(uc: *const c_void, out: &mut libc::ucontext_t) -> bool {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `uc` is the kernel's ucontext_t for this handler (caller's contract); its sp is
    // the interrupted thread's stack pointer, so the word at sp is mapped (the kernel just wrote
    // the signal frame below it on the same stack).
    unsafe {
        if uc.is_null() {
            return false;
        }
        std::ptr::copy_nonoverlapping(uc as *const libc::ucontext_t, out, 1);
        let regs = &mut out.uc_mcontext.gregs;
        let sp = regs[libc::REG_RSP as usize] as usize;
        if sp == 0 || !sp.is_multiple_of(8) {
            return false;
        }
        let ret = std::ptr::read_volatile(sp as *const usize);
        if ret == 0 {
            return false;
        }
        regs[libc::REG_RIP as usize] = ret as i64;
        regs[libc::REG_RSP as usize] = (sp + 8) as i64;
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (uc, out);
        false
    }
}
