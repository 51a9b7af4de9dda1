//! The signal-safe part of the CPU sampler: the SIGPROF handler and the state it reads.
//!
//! The handler runs on whatever Java (or JVM-internal) thread a per-thread CPU timer interrupted.
//! It reads only pre-allocated, lock-free state: the sampler pointer, the tid → JNIEnv table and
//! the sample ring. It calls only async-signal-safe functions (gettid, clock_gettime,
//! AsyncGetCallTrace, and on HotSpot `GetEnv` for threads that predate an attach, and once per
//! thread an ioctl that gives a perf event its full period), restores errno, and cannot panic
//! (no unwrap, no unchecked index on data it did not make).
//!
//! A walk AsyncGetCallTrace gives up on is retried once the way HotSpot itself would see the
//! frame ([`vmstructs`]): from the last Java frame anchor made walkable, or from the caller of an
//! incomplete frame; such samples are marked `recovered`.
//!
//! Each sample carries a weight: a POSIX CPU timer is checked only at the scheduler tick, so
//! expirations it noticed late arrive as one signal with the missed ones in `si_overrun`, and
//! the sample stands for `1 + si_overrun` periods. A perf event fires on time (weight 1) and
//! stays armed.

#![allow(unsafe_code)]

use super::ring::{Header, NO_JNI_ENV, Ring};
use super::threads::ThreadTable;
use jvmprof_jvmti::Vm;
use jvmprof_jvmti::asgct::{AsgctFn, CallTrace};
use jvmprof_jvmti::os;
use jvmprof_jvmti::os::SignalSource;
use jvmprof_jvmti::perf;
use jvmprof_jvmti::vmstructs::{self, Anchors};
use std::ffi::c_void;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// Everything the handler needs. Leaked (`&'static`) once made: a handler may still be running on
/// some thread after the sampler is stopped, so it is never freed.
pub struct SignalSampler {
    pub ring: Ring,
    pub threads: &'static ThreadTable,
    pub asgct: AsgctFn,
    pub vm: Vm,
    pub active: AtomicBool,
    /// The running session's sampling period, set on a perf event after its first one.
    pub period_ns: AtomicU64,
    /// HotSpot's offsets for retrying failed walks, once found (on the writer thread).
    pub anchors: OnceLock<Anchors>,
    /// Whether failed walks are retried (the session's `recover_walks`).
    pub recover: AtomicBool,
}

static SAMPLER: AtomicPtr<SignalSampler> = AtomicPtr::new(std::ptr::null_mut());
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Makes `sampler` the one the handler uses, and installs the handler on first use.
pub fn activate(sampler: &'static SignalSampler) -> std::io::Result<()> {
    sampler.active.store(true, Ordering::Release);
    SAMPLER.store(
        sampler as *const SignalSampler as *mut SignalSampler,
        Ordering::Release,
    );
    if !INSTALLED.swap(true, Ordering::AcqRel)
        && let Err(e) = os::install_handler(on_signal)
    {
        INSTALLED.store(false, Ordering::Release);
        return Err(e);
    }
    Ok(())
}

/// Stops recording; signals still in flight find `active == false` and return at once.
pub fn deactivate(sampler: &SignalSampler) {
    sampler.active.store(false, Ordering::Release);
}

extern "C" fn on_signal(_signo: i32, info: *mut os::SigInfo, ucontext: *mut c_void) {
    let saved_errno = os::errno();
    let ptr = SAMPLER.load(Ordering::Acquire);
    if !ptr.is_null() {
        // SAFETY: SAMPLER only ever holds pointers to leaked, never-freed SignalSamplers.
        let sampler = unsafe { &*ptr };
        if sampler.active.load(Ordering::Acquire) {
            // SAFETY: `info` is the siginfo the kernel passed to this SA_SIGINFO handler.
            let source = unsafe { os::signal_source(info) };
            let weight = match source {
                SignalSource::Timer { overrun } => overrun.saturating_add(1),
                SignalSource::Fd(_) | SignalSource::Other => 1,
            };
            record(sampler, ucontext, weight);
            if let SignalSource::Fd(fd) = source {
                perf::after_overflow(fd, sampler.period_ns.load(Ordering::Relaxed));
            }
        }
    }
    os::set_errno(saved_errno);
}

fn record(sampler: &SignalSampler, ucontext: *mut c_void, weight: u32) {
    let tid = os::gettid();
    let mut env = sampler.threads.lookup(tid);
    if env.is_null() {
        // Threads that started before the agent (attach, or before VMInit): ask the VM.
        env = sampler.vm.current_jni_env();
    }
    let Some(slot) = sampler.ring.reserve() else {
        return; // full: counted by the ring
    };
    let mut recovered = false;
    let num_frames = if env.is_null() {
        NO_JNI_ENV
    } else {
        let frames = sampler.ring.frames_ptr(&slot);
        let depth = sampler.ring.depth() as i32;
        let walk = |uc: *mut c_void| {
            let mut trace = CallTrace {
                env,
                num_frames: 0,
                frames,
            };
            // SAFETY: AsyncGetCallTrace is designed to be called from a signal handler on the
            // interrupted thread with a ucontext of that thread; `trace.frames` points at the
            // reserved slot's `depth` frames, which only this handler writes until `publish`.
            unsafe { (sampler.asgct)(&mut trace, depth, uc) };
            trace.num_frames
        };
        let first = walk(ucontext);
        let recover = sampler.recover.load(Ordering::Relaxed);
        let retried = match first {
            _ if !recover => None,
            // In the VM or native code, last Java frame anchor not yet walkable.
            -3 | -4 => sampler.anchors.get().and_then(|a| {
                // SAFETY: this handler runs on the thread that owns `env`, stopped in it.
                unsafe { a.walk_from_anchor(env, || walk(ucontext)) }
            }),
            // In Java code whose frame is incomplete (prologue, epilogue, frameless stub).
            -5 | -6 => {
                let mut caller = std::mem::MaybeUninit::<vmstructs::UContext>::zeroed();
                // SAFETY: `ucontext` is the kernel's context for this handler; `caller` is a
                // zeroed (valid) ucontext_t on this handler's stack that the calls fill.
                let ok = unsafe { vmstructs::caller_context(ucontext, caller.assume_init_mut()) };
                let by_sp = ok.then(|| walk(caller.as_mut_ptr().cast()));
                match (by_sp, sampler.threads.stack(tid)) {
                    (Some(n), _) if n > 0 => Some(n),
                    (_, Some(stack)) => {
                        // SAFETY: as above; `stack` is this thread's, from ThreadStart.
                        let ok = unsafe {
                            vmstructs::frame_pointer_caller(
                                ucontext,
                                stack,
                                caller.assume_init_mut(),
                            )
                        };
                        ok.then(|| walk(caller.as_mut_ptr().cast())).or(by_sp)
                    }
                    (other, None) => other,
                }
            }
            _ => None,
        };
        match retried {
            Some(n) if n > 0 => {
                recovered = true;
                n
            }
            _ => first,
        }
    };
    sampler.ring.publish(
        slot,
        Header {
            tid,
            num_frames,
            time_ns: os::monotonic_ns(),
            weight,
            recovered,
            context: sampler.threads.context(tid),
            vthread: sampler.threads.mounted(tid),
        },
    );
}
