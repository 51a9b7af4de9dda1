//! POSIX calls for the sampler: a SIGPROF handler, per-thread CPU-time timers, thread ids, and
//! the writer's wake-up.
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
    /// Creates and arms a timer that fires after `first_ns` of CPU time consumed by thread
    /// `tid`, then every `interval_ns`.
    pub fn start(tid: u32, first_ns: u64, interval_ns: u64) -> io::Result<ThreadCpuTimer> {
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
            let spec = libc::itimerspec {
                it_interval: timespec(interval_ns),
                it_value: timespec(first_ns.clamp(1, interval_ns.max(1))),
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

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

/// `si_code` of a signal sent by a POSIX timer.
const SI_TIMER: i32 = -2;

/// What sent a sampling signal, from its siginfo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalSource {
    /// A POSIX timer; `overrun` expirations were missed before this one was delivered.
    Timer {
        overrun: u32,
    },
    /// Signal-driven I/O on a file descriptor (a perf event's overflow).
    Fd(i32),
    Other,
}

/// Reads a sampling signal's source from the siginfo the kernel passed to an `SA_SIGINFO`
/// handler. Async-signal-safe (plain reads).
///
/// # Safety
/// `info` is null or the siginfo the kernel passed to the running handler.
pub unsafe fn signal_source(info: *const SigInfo) -> SignalSource {
    if info.is_null() {
        return SignalSource::Other;
    }
    // SAFETY: `info` is the kernel's siginfo for the signal being handled (the caller's
    // contract; non-null checked).
    // On Linux x86-64 and aarch64 the union after si_signo/si_errno/si_code starts at byte 16;
    // a timer's si_overrun is the int at byte 20 (after si_tid), an I/O signal's si_fd the int
    // at byte 24 (after the long si_band). The struct is 128 bytes, so both reads are in bounds.
    unsafe {
        let code = (*info).si_code;
        let base = info as *const u8;
        if code == SI_TIMER {
            let overrun = std::ptr::read_unaligned(base.add(20) as *const i32);
            SignalSource::Timer {
                overrun: overrun.max(0) as u32,
            }
        } else if code > 0 && (*info).si_signo == SAMPLING_SIGNAL && code <= 6 {
            // POLL_IN..POLL_HUP: the codes F_SETSIG-driven I/O signals carry.
            SignalSource::Fd(std::ptr::read_unaligned(base.add(24) as *const i32))
        } else {
            SignalSource::Other
        }
    }
}

/// The calling thread's CPU time in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// This process's CPU time (all threads, user + system) in nanoseconds.
pub fn process_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The calling thread's stack: (lowest, highest address). Not async-signal-safe (it reads
/// /proc/self/maps for the main thread); call it when a thread starts.
pub fn current_thread_stack() -> Option<(usize, usize)> {
    // SAFETY: pthread_getattr_np fills the attr we own for the calling thread; getstack reads
    // it; destroy frees what getattr allocated.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        (ok && !addr.is_null() && size > 0).then(|| (addr as usize, addr as usize + size))
    }
}

/// Whether an error says the thread is gone (it ended before its timer or event was made).
pub fn is_gone(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ESRCH)
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

/// A wake-up that one thread sends to another waiting with a relative timeout: an eventfd,
/// polled. Unlike a condition variable's or a futex's wait, whose deadline is an absolute time
/// read from the process's clock, it is not moved by a faked clock (libfaketime set an hour
/// ahead left such a wait asleep).
pub struct Waker(std::os::fd::OwnedFd);

impl Waker {
    pub fn new() -> io::Result<Waker> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Ok(Waker(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) }))
    }

    /// Wakes the waiter (now, or at its next wait).
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes the 8 bytes of `one` to our eventfd; a full counter (EAGAIN) already
        // means "woken".
        let _ = unsafe {
            libc::write(
                std::os::fd::AsRawFd::as_raw_fd(&self.0),
                (&one as *const u64).cast(),
                8,
            )
        };
    }

    /// Waits until woken or `timeout` (rounded up to a millisecond) has passed. A wake-up is
    /// consumed by the wait that sees it.
    pub fn wait(&self, timeout: std::time::Duration) {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.0);
        let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd on this stack; poll's timeout is relative.
        let ready = unsafe { libc::poll(&mut p, 1, ms) };
        if ready > 0 {
            let mut count: u64 = 0;
            // SAFETY: reads 8 bytes into `count` from our non-blocking eventfd (resets it to 0).
            let _ = unsafe { libc::read(fd, (&mut count as *mut u64).cast(), 8) };
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds. Async-signal-safe (clock_gettime is on POSIX's list).
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}
