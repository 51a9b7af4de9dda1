//! Root mode's CPU timer on virtual threads (`--root … --timer cpu`): a virtual thread is
//! charged only the CPU it used while mounted.
//!
//! `Roots.cpuNow()` reads the OS thread's CPU clock: on a virtual thread that is its carrier's,
//! so a call that parks or sleeps was charged with whatever other virtual threads ran on that
//! carrier meanwhile (a task that sleeps 5 ms was charged seconds). With this engine the mount
//! events keep, per virtual thread, the CPU it used while mounted (the carrier's clock from
//! each mount to the next unmount), and `cpuNow()` on a carrier returns that account plus the
//! CPU since the current mount ([`super::vthreads::thread_cpu`]). Platform threads are as before.

use super::api::{Engine, EngineCtx};
use super::vthreads;
use jvmprof_jvmti::Jni;
use std::sync::atomic::{AtomicBool, Ordering};

pub struct VirtualCpuTime {
    ctx: EngineCtx,
    /// The registry and the mount events are ours to release.
    on: AtomicBool,
}

impl VirtualCpuTime {
    pub fn new(ctx: EngineCtx) -> VirtualCpuTime {
        VirtualCpuTime {
            ctx,
            on: AtomicBool::new(false),
        }
    }
}

impl Engine for VirtualCpuTime {
    fn name(&self) -> &'static str {
        "instrumentation"
    }

    fn start(&self, jni: &Jni) -> Result<(), String> {
        let env = &self.ctx.env;
        if !vthreads::start(env, jni) {
            return Ok(()); // no virtual threads in this JVM
        }
        if !vthreads::track_mounts(env, self.ctx.threads, true) {
            vthreads::stop(env, jni);
            return Ok(());
        }
        jvmprof_jvmti::hierarchy::set_cpu_now_hook(Some(vthreads::thread_cpu));
        self.on.store(true, Ordering::Release);
        Ok(())
    }

    fn poll(&self, jni: &Jni, _sink: &mut crate::sink::Sink) {
        if self.on.load(Ordering::Acquire) {
            vthreads::reap(jni);
        }
    }

    fn stop(&self, jni: &Jni) {
        if self.on.swap(false, Ordering::AcqRel) {
            jvmprof_jvmti::hierarchy::set_cpu_now_hook(None);
            vthreads::untrack_mounts(&self.ctx.env, true);
            vthreads::stop(&self.ctx.env, jni);
        }
    }
}
