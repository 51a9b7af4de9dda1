//! POSIX calls for the sampler: a SIGPROF handler, per-thread CPU-time timers, thread ids.
//!
//! A per-thread CPU-time timer ticks only while its thread runs on a CPU, so sampling with one
//! timer per thread is thread-aware: a sleeping or blocked thread gets no sample. Timers are made
//! for any thread of the process from its Linux tid (the kernel's thread CPU clock id), and deliver
//! their signal to exactly that thread (`SIGEV_THREAD_ID`).

use std::ffi::c_void;
use std::io;

/// The signal the CPU sampler uses.
pub const SAMPLING_SIGNAL: i32 = libc::SIGPROF;

/// The kernel's `siginfo_t`.
pub type SigInfo = libc::siginfo_t;

/// Signature of an `SA_SIGINFO` handler.
pub type SigHandler = extern "C" fn(i32, *mut SigInfo, *mut c_void);

/// The calling thread's Linux thread id. Async-signal-safe (a raw syscall).
pub fn gettid() -> u32 {
    // SAFETY: gettid takes no arguments, cannot fail and touches no memory.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Installs `handler` for [`SAMPLING_SIGNAL`] with `SA_RESTART | SA_SIGINFO`, so interrupted
/// system calls of the application resume.
pub fn install_handler(handler: SigHandler) -> io::Result<()> {
    // SAFETY: the sigaction struct is zero-initialised (a valid "no flags, empty mask" value) and
    // then filled; sigaction only reads it. The handler is an `extern "C"` function with the
    // SA_SIGINFO signature.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as usize;
        action.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(SAMPLING_SIGNAL, &action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Blocks [`SAMPLING_SIGNAL`] in the calling thread (the agent's own threads are never sampled).
pub fn block_sampling_signal_in_current_thread() {
    // SAFETY: the set is initialised by sigemptyset before use; pthread_sigmask only changes the
    // calling thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, SAMPLING_SIGNAL);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Reads errno; used by the signal handler to leave errno as it found it.
pub fn errno() -> i32 {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

/// Restores errno (see [`errno`]).
pub fn set_errno(value: i32) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = value }
}

/// A POSIX timer on one thread's CPU clock that sends [`SAMPLING_SIGNAL`] to that thread.
#[derive(Debug)]
pub struct ThreadCpuTimer {
    id: libc::timer_t,
    tid: u32,
}

// SAFETY: a timer_t is a kernel handle (an integer id in glibc); it may be used and deleted from
// any thread of the process.
unsafe impl Send for ThreadCpuTimer {}

impl ThreadCpuTimer {
    /// Creates and arms a timer that fires every `interval_ns` of CPU time consumed by thread `tid`.
    pub fn start(tid: u32, interval_ns: u64) -> io::Result<ThreadCpuTimer> {
        // The kernel's per-thread CPU clock id: MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED), i.e.
        // (~tid << 3) | CPUCLOCK_PERTHREAD_MASK (4) | CPUCLOCK_SCHED (2).
        let clock: libc::clockid_t = ((!(tid as libc::clockid_t)) << 3) | 6;
        // SAFETY: the sigevent is zero-initialised and then filled with a thread-id notification
        // for a thread of this process; timer_create writes the new id into `id`. timer_settime
        // reads a fully initialised itimerspec.
        unsafe {
            let mut sev: libc::sigevent = std::mem::zeroed();
            sev.sigev_notify = libc::SIGEV_THREAD_ID;
            sev.sigev_signo = SAMPLING_SIGNAL;
            sev.sigev_notify_thread_id = tid as libc::c_int;
            let mut id: libc::timer_t = std::mem::zeroed();
            if libc::timer_create(clock, &mut sev, &mut id) != 0 {
                return Err(io::Error::last_os_error());
            }
            let ts = libc::timespec {
                tv_sec: (interval_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (interval_ns % 1_000_000_000) as libc::c_long,
            };
            let spec = libc::itimerspec {
                it_interval: ts,
                it_value: ts,
            };
            if libc::timer_settime(id, 0, &spec, std::ptr::null_mut()) != 0 {
                let err = io::Error::last_os_error();
                libc::timer_delete(id);
                return Err(err);
            }
            Ok(ThreadCpuTimer { id, tid })
        }
    }

    pub fn tid(&self) -> u32 {
        self.tid
    }
}

impl Drop for ThreadCpuTimer {
    fn drop(&mut self) {
        // SAFETY: `id` was returned by timer_create and is deleted exactly once, here.
        unsafe {
            libc::timer_delete(self.id);
        }
    }
}

/// The tids of all threads of this process, from /proc/self/task.
pub fn process_thread_ids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// The kernel's name of a thread of this process (`comm`, at most 15 bytes; HotSpot sets it to the
/// Java thread name, truncated).
pub fn thread_comm(tid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).ok()?;
    Some(s.trim_end_matches('\n').to_string())
}

/// CLOCK_MONOTONIC in nanoseconds. Async-signal-safe (clock_gettime is on POSIX's list).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
