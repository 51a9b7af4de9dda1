//! AsyncGetCallTrace: HotSpot's unsupported but widely used async stack walker.
//!
//! Found with `dlsym(RTLD_DEFAULT, "AsyncGetCallTrace")`. It may be called from a signal handler on
//! the interrupted thread; it needs jmethodIDs to exist already (see `Env::prepare_class_methods`)
//! and the ClassLoad event enabled.

use std::ffi::c_void;

/// One frame as AsyncGetCallTrace fills it: `lineno` is the bytecode index for Java frames
/// (-3 for a native method), `method_id` a jmethodID.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CallFrame {
    pub lineno: i32,
    pub method_id: *mut c_void,
}

impl CallFrame {
    pub const EMPTY: CallFrame = CallFrame {
        lineno: 0,
        method_id: std::ptr::null_mut(),
    };
}

/// The call-trace header AsyncGetCallTrace fills. `num_frames` > 0 is the number of frames written;
/// 0 or a negative value is a failure code (see [`failure_reason`]).
#[repr(C)]
pub struct CallTrace {
    pub env: *mut c_void,
    pub num_frames: i32,
    pub frames: *mut CallFrame,
}

/// The function's C signature: `void AsyncGetCallTrace(ASGCT_CallTrace*, jint depth, void* ucontext)`.
pub type AsgctFn = unsafe extern "C" fn(trace: *mut CallTrace, depth: i32, ucontext: *mut c_void);

/// Looks the function up in the already-loaded libjvm.
pub fn lookup() -> Option<AsgctFn> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads the loaded symbol
    // tables. The symbol, when present, has exactly the C signature of `AsgctFn` (HotSpot's
    // forte.cpp), so transmuting the non-null address to that function-pointer type is sound.
    unsafe {
        let sym = libc::dlsym(libc::RTLD_DEFAULT, c"AsyncGetCallTrace".as_ptr());
        if sym.is_null() {
            None
        } else {
            Some(std::mem::transmute::<*mut c_void, AsgctFn>(sym))
        }
    }
}

/// Why a walk failed, by AsyncGetCallTrace's return code (HotSpot's forte.cpp `ticks_*`).
pub fn failure_reason(code: i32) -> &'static str {
    match code {
        0 => "no_java_frame",
        -1 => "no_class_load",
        -2 => "gc_active",
        -3 => "unknown_not_java",
        -4 => "not_walkable_not_java",
        -5 => "unknown_java",
        -6 => "not_walkable_java",
        -7 => "unknown_state",
        -8 => "thread_exit",
        -9 => "deopt",
        -10 => "safepoint",
        _ => "other",
    }
}
