//! Per-thread CPU-clock perf events (`PERF_COUNT_SW_TASK_CLOCK`) that send the sampling signal to
//! their thread after each `period` of CPU time.
//!
//! Unlike a POSIX CPU timer, which the kernel checks only at the scheduler tick (4 ms at HZ=250),
//! the task clock is driven by an hrtimer: it fires at the asked period, 1 ms included, and a
//! short-lived or bursty thread is sampled in proportion to the CPU it used. The event stays
//! enabled and delivers one signal per overflow (no ring buffer is mapped, and no event limit is
//! set, so the kernel neither disables it nor needs an ioctl from the handler to go on); the
//! handler's only call into the kernel is one `PERF_EVENT_IOC_PERIOD` after a thread's random
//! first period ([`after_overflow`]). async-profiler instead disables the event at each overflow
//! and re-enables it from the handler with `PERF_EVENT_IOC_REFRESH 1`: two more syscalls per
//! sample, and the event's hrtimer started again from the handler.
//!
//! `perf_event_paranoid` 2 (Debian's default) allows user-space-only events on one's own threads;
//! [`PerfEvent::open`] first asks for kernel time too (allowed to root or with CAP_PERFMON) and
//! falls back to user time only.

use crate::os::SAMPLING_SIGNAL;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
/// `perf_event_attr` as of its first version (`PERF_ATTR_SIZE_VER0`): the fields we set.
const ATTR_SIZE_VER0: u32 = 64;
const FLAG_DISABLED: u64 = 1 << 0;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
const IOC_ENABLE: libc::c_ulong = 0x2400;
const IOC_RESET: libc::c_ulong = 0x2403;
/// `_IOW('$', 4, __u64)`.
const IOC_PERIOD: libc::c_ulong = 0x4008_2404;
const F_SETSIG: libc::c_int = 10;
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_TID: libc::c_int = 0;

#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

#[repr(C)]
struct FOwnerEx {
    kind: libc::c_int,
    pid: libc::pid_t,
}

/// Whether an event counts the thread's kernel time too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// User and kernel time (root, CAP_PERFMON, or perf_event_paranoid < 2).
    All,
    /// User time only (perf_event_paranoid 2).
    User,
}

/// Event fds whose first period was drawn at random (shorter than the interval): at their first
/// overflow the handler sets the full interval, once, and clears the fd's bit. One bit per fd
/// below [`MAX_FD`].
const MAX_FD: usize = 1 << 16;
static FIRST_PENDING: [AtomicU64; MAX_FD / 64] = [const { AtomicU64::new(0) }; MAX_FD / 64];

/// A perf event on one thread's task clock; closed on drop.
#[derive(Debug)]
pub struct PerfEvent {
    fd: libc::c_int,
    tid: u32,
    pub scope: Scope,
}

impl PerfEvent {
    /// Opens a disabled event on thread `tid` that, once [`enable`](Self::enable)d, sends
    /// [`SAMPLING_SIGNAL`] to that thread after each `period_ns` of its CPU time.
    /// A scope the kernel refuses falls back to user time only.
    pub fn open(tid: u32, period_ns: u64, scope: Scope) -> io::Result<PerfEvent> {
        match Self::open_scoped(tid, period_ns, scope) {
            Err(e) if scope == Scope::All && e.raw_os_error() == Some(libc::EACCES) => {
                Self::open_scoped(tid, period_ns, Scope::User)
            }
            r => r,
        }
    }

    fn open_scoped(tid: u32, period_ns: u64, scope: Scope) -> io::Result<PerfEvent> {
        let fd = open_task_clock(tid, period_ns.max(1), scope)?;
        let event = PerfEvent { fd, tid, scope };
        let owner = FOwnerEx {
            kind: F_OWNER_TID,
            pid: tid as libc::pid_t,
        };
        // SAFETY: fcntl on the fd we own: signal-driven I/O (O_ASYNC) with our signal, delivered
        // to thread `tid` (F_SETOWN_EX reads the f_owner_ex we pass).
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if libc::fcntl(fd, libc::F_SETFL, flags | libc::O_ASYNC) != 0
                || libc::fcntl(fd, F_SETSIG, SAMPLING_SIGNAL) != 0
                || libc::fcntl(fd, F_SETOWN_EX, &owner as *const FOwnerEx) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(event)
    }

    /// Starts counting: the first signal comes after `first_ns` of the thread's CPU time, the
    /// following ones every `period_ns` (once [`after_overflow`] has run for the first).
    pub fn enable(&self, first_ns: u64, period_ns: u64) -> io::Result<()> {
        let first: u64 = first_ns.clamp(1, period_ns.max(1));
        let fd = self.fd;
        // SAFETY: ioctls on the perf event fd we own, with an integer argument or a pointer to
        // a u64 we own (PERIOD).
        unsafe {
            if first < period_ns && (fd as usize) < MAX_FD {
                libc::ioctl(fd, IOC_PERIOD, &first as *const u64);
                FIRST_PENDING[fd as usize / 64].fetch_or(1 << (fd % 64), Ordering::AcqRel);
            }
            libc::ioctl(fd, IOC_RESET, 0);
            if libc::ioctl(fd, IOC_ENABLE, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    pub fn tid(&self) -> u32 {
        self.tid
    }
}

/// perf_event_open of a disabled task-clock event on `tid`; the fd, or the error.
fn open_task_clock(tid: u32, period_ns: u64, scope: Scope) -> io::Result<libc::c_int> {
    let mut attr = PerfEventAttr {
        kind: PERF_TYPE_SOFTWARE,
        size: ATTR_SIZE_VER0,
        config: PERF_COUNT_SW_TASK_CLOCK,
        sample_period: period_ns,
        wakeup_events: 1,
        flags: FLAG_DISABLED,
        ..PerfEventAttr::default()
    };
    if scope == Scope::User {
        attr.flags |= FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV;
    }
    // SAFETY: `attr` is a fully initialised perf_event_attr of the size it declares; the syscall
    // only reads it. pid = tid (a thread of this process), cpu = -1 (any), no group.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            tid as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    } as libc::c_int;
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}

impl Drop for PerfEvent {
    fn drop(&mut self) {
        if (self.fd as usize) < MAX_FD {
            FIRST_PENDING[self.fd as usize / 64]
                .fetch_and(!(1 << (self.fd % 64)), Ordering::AcqRel);
        }
        // SAFETY: `fd` was returned by perf_event_open and is closed exactly once, here.
        unsafe {
            libc::close(self.fd);
        }
    }
}

/// Called by the signal handler, on the thread event `fd` fired for, after each overflow: the
/// first overflow of an event whose first period was drawn at random sets the full
/// `period_ns`; every other overflow costs only an atomic load. Async-signal-safe.
pub fn after_overflow(fd: i32, period_ns: u64) {
    if fd < 0 || fd as usize >= MAX_FD {
        return;
    }
    let bit = 1u64 << (fd % 64);
    let word = &FIRST_PENDING[fd as usize / 64];
    if word.load(Ordering::Relaxed) & bit == 0 || word.fetch_and(!bit, Ordering::AcqRel) & bit == 0
    {
        return;
    }
    let period: u64 = period_ns.max(1);
    // SAFETY: an ioctl on a perf event fd with a pointer to a u64 we own; an fd that is not (or
    // no longer) a perf event makes it fail harmlessly.
    unsafe {
        libc::ioctl(fd, IOC_PERIOD, &period as *const u64);
    }
}

/// Whether perf events can be opened here at all, and with which scope (tried on the calling
/// thread; the event is closed at once).
pub fn available() -> Option<Scope> {
    let tid = crate::os::gettid();
    [Scope::All, Scope::User].into_iter().find(|&scope| {
        open_task_clock(tid, 1_000_000, scope)
            .map(|fd| {
                // SAFETY: closing the fd just opened.
                unsafe { libc::close(fd) };
            })
            .is_ok()
    })
}
