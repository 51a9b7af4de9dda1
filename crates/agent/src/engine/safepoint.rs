//! The safepoint engine: every interval, every thread's stack at a safepoint (JVMTI
//! GetAllStackTraces). Wall mode records each thread with its state; CPU mode (the fallback when
//! a JVM has no AsyncGetCallTrace, or `engine=safepoint`) credits each thread with the CPU time
//! it used since the previous tick, in whole intervals. In wall mode each tick also samples a
//! bounded number of virtual threads, weighted so that their wall shares stay true
//! ([`super::vthreads`]).

use super::api::{Engine, EngineCtx, note};
use super::vthreads;
use crate::options::{Mode, Options};
use crate::sink::Sink;
use crate::sync::lock;
use jvmprof_jvmti::{Jni, ThreadStack, thread_state};
use jvmprof_profile::{Metric, ThreadState};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub struct Safepoint {
    ctx: EngineCtx,
    cpu: bool,
    interval: Duration,
    depth: usize,
    state: Mutex<State>,
    /// Wall mode on a JVM with virtual threads: they are registered and sampled.
    vthreads: AtomicBool,
}

#[derive(Default)]
struct State {
    /// Java thread id → last CPU time seen and the remainder below one interval (CPU mode).
    cpu_seen: HashMap<i64, (i64, u64)>,
    failed_walks: u64,
    vthread_walks_failed: u64,
    /// Virtual thread samples taken, and the ticks that had live virtual threads.
    vthread_samples: u64,
    vthread_ticks: u64,
}

impl Safepoint {
    pub fn new(ctx: EngineCtx, options: &Options) -> Safepoint {
        Safepoint {
            ctx,
            cpu: options.sampling == Some(Mode::Cpu),
            interval: options.interval,
            depth: options.depth,
            state: Mutex::new(State::default()),
            vthreads: AtomicBool::new(false),
        }
    }

    fn interval_ns(&self) -> u64 {
        self.interval.as_nanos() as u64
    }

    /// Whole intervals of CPU a thread used since the last tick (the rest carries over).
    fn cpu_intervals(&self, state: &mut State, jni: &Jni, ts: &ThreadStack) -> u64 {
        let (Some(id), Some(now)) = (
            jni.java_thread_id(ts.thread),
            self.ctx.env.thread_cpu_time(ts.thread),
        ) else {
            return 0;
        };
        let interval = self.interval_ns().max(1);
        let entry = state.cpu_seen.entry(id).or_insert((now, 0));
        let used = (now - entry.0).max(0) as u64 + entry.1;
        entry.0 = now;
        entry.1 = used % interval;
        used / interval
    }
}

impl Safepoint {
    /// Samples up to [`vthreads::PER_TICK`] live virtual threads, each weighted by the number of
    /// live threads it stands for; named `virtual #id name`, with the carrier's tid when mounted.
    fn sample_virtual(&self, jni: &Jni, sink: &mut Sink, state: &mut State, now: u64) {
        let picks = vthreads::pick(jni, vthreads::PER_TICK);
        if picks.threads.is_empty() {
            return;
        }
        state.vthread_ticks += 1;
        let env = self.ctx.env;
        let Ok(stacks) = env.thread_list_stack_traces(&picks.threads, self.depth as i32) else {
            state.vthread_walks_failed += 1;
            return;
        };
        let mut carriers: Option<HashMap<usize, u32>> = None;
        let picked = stacks.iter().zip(&picks.weights).zip(picks.labels);
        for (((ts, &weight), label), &token) in picked.zip(&picks.tokens) {
            if ts.state & thread_state::ALIVE == 0 {
                vthreads::forget(token); // ended (before it was adopted, or since it was picked)
                continue;
            }
            if ts.frames.is_empty() || weight == 0 {
                continue;
            }
            let tid = match jni.virtual_thread_carrier(ts.thread) {
                Some(carrier) => {
                    let at = jni.thread_env(carrier);
                    jni.delete_thread_local_ref(carrier);
                    let map = carriers.get_or_insert_with(|| self.ctx.threads.tids_by_env());
                    at.and_then(|e| map.get(&e).copied()).unwrap_or(0)
                }
                None => 0,
            };
            let thread = sink.thread_on(tid, label);
            let stack = sink.jvmti_stack(jni, &ts.frames, None);
            let v = sink.values(&[
                (Metric::Samples, weight),
                (Metric::Ns, weight * self.interval_ns()),
            ]);
            let w = weight.min(u32::MAX as u64) as u32;
            sink.add_at(thread, stack, map_state(ts.state), &v, now, w, 0);
            state.vthread_samples += 1;
        }
    }
}

impl Engine for Safepoint {
    fn name(&self) -> &'static str {
        "safepoint"
    }

    fn period(&self) -> Duration {
        self.interval
    }

    fn start(&self, jni: &Jni) -> Result<(), String> {
        if !self.cpu && vthreads::start(&self.ctx.env, jni) {
            self.vthreads.store(true, Ordering::Release);
        }
        Ok(())
    }

    fn stop(&self, jni: &Jni) {
        if self.vthreads.load(Ordering::Acquire) {
            vthreads::stop(&self.ctx.env, jni);
        }
    }

    fn poll(&self, jni: &Jni, sink: &mut Sink) {
        let mut state = lock(&self.state);
        // Trace mode's call trees, read before and after the walk: a sample carries its
        // thread's tree only when the two agree (the thread did not move on meanwhile).
        let contexts_before = self.ctx.threads.contexts_by_java_id();
        let Ok(stacks) = self.ctx.env.all_stack_traces(self.depth as i32) else {
            state.failed_walks += 1;
            return;
        };
        let now = jvmprof_jvmti::os::monotonic_ns();
        let contexts = self.ctx.threads.contexts_by_java_id();
        for ts in &stacks {
            if ts.frames.is_empty() {
                continue; // JVM-internal or agent thread: no Java code to show
            }
            let (count, thread_state) = if self.cpu {
                let n = self.cpu_intervals(&mut state, jni, ts);
                if n == 0 {
                    continue;
                }
                (n, ThreadState::Running)
            } else {
                (1, map_state(ts.state))
            };
            let name = self
                .ctx
                .env
                .thread_name(jni, ts.thread)
                .unwrap_or_else(|| "unnamed".into());
            if name == "jvmprof writer" {
                continue;
            }
            let thread = sink.thread_named(name);
            let stack = sink.jvmti_stack(jni, &ts.frames, None);
            let v = sink.values(&[
                (Metric::Samples, count),
                (Metric::Ns, count * self.interval_ns()),
            ]);
            let weight = count.min(u32::MAX as u64) as u32;
            let trace = if contexts.is_empty() {
                0
            } else {
                jni.java_thread_id(ts.thread)
                    .map(|id| id as u64)
                    .and_then(|id| {
                        let c = contexts.get(&id)?;
                        (contexts_before.get(&id) == Some(c)).then_some(*c)
                    })
                    .unwrap_or(0)
            };
            sink.add_at(thread, stack, thread_state, &v, now, weight, trace);
        }
        if self.vthreads.load(Ordering::Acquire) {
            jni.with_local_frame(4 * vthreads::PER_TICK as i32 + 16, || {
                self.sample_virtual(jni, sink, &mut state, now)
            });
        }
    }

    fn finish(&self, _jni: &Jni, sink: &mut Sink) {
        if self.vthreads.load(Ordering::Acquire) {
            let (started, untracked) = vthreads::counts();
            let st = lock(&self.state);
            note(
                sink,
                &[
                    ("virtual_threads_seen", started.to_string()),
                    ("virtual_threads_adopted", vthreads::adopted().to_string()),
                    ("virtual_threads_untracked", untracked.to_string()),
                    ("virtual_thread_samples", st.vthread_samples.to_string()),
                    (
                        "virtual_thread_walks_failed",
                        st.vthread_walks_failed.to_string(),
                    ),
                    (
                        "virtual_thread_sampling",
                        format!(
                            "up to {} live virtual threads per tick at random, each weighted by \
                             live/picked",
                            vthreads::PER_TICK
                        ),
                    ),
                ],
            );
        }
        let failed = lock(&self.state).failed_walks;
        if failed > 0 {
            *sink
                .meta_mut()
                .walk_failures
                .entry("safepoint_walk_failed".into())
                .or_default() += failed;
        }
    }
}

/// A JVMTI thread state as the profile's thread state.
pub fn map_state(state: i32) -> ThreadState {
    use thread_state::*;
    if state & SLEEPING != 0 {
        ThreadState::Sleeping
    } else if state & PARKED != 0 {
        ThreadState::Parked
    } else if state & BLOCKED_ON_MONITOR_ENTER != 0 {
        ThreadState::Blocked
    } else if state & WAITING_WITH_TIMEOUT != 0 {
        ThreadState::TimedWaiting
    } else if state & (WAITING_INDEFINITELY | IN_OBJECT_WAIT) != 0 {
        ThreadState::Waiting
    } else if state & IN_NATIVE != 0 {
        ThreadState::Native
    } else if state & RUNNABLE != 0 {
        ThreadState::Running
    } else {
        ThreadState::Unknown
    }
}
