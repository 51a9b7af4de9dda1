//! CPU samples of virtual threads: which virtual thread ran, and its whole stack.
//!
//! AsyncGetCallTrace walks the carrier: a mounted virtual thread's frames sit above
//! `Continuation.enterSpecial`, the carrier's below it. Two things are missing from that walk:
//! - **Identity.** HotSpot's VirtualThreadMount/Unmount extension events run on the carrier
//!   around each mount; they write the mounted thread's token (from [`super::vthreads`]' registry)
//!   into the carrier's cell of the thread table, which the signal handler copies into the sample.
//! - **Frames below a lazy thaw.** A virtual thread that resumes after a park, sleep or yield gets
//!   only its top frames copied back from its continuation (HotSpot thaws the rest lazily, behind
//!   a return barrier), so the walk goes from those frames straight to `enterSpecial`: a task's
//!   own method below the resumed frames is lost (measured: 80 % of a yielding CPU-bound task's
//!   samples). Such a sample is completed with the frames below the same method in the thread's
//!   stack as JVMTI gives it (GetThreadListStackTraces, one call per poll for the threads that
//!   need it): right while the thread has not returned from that method since the sample, which
//!   a poll every few milliseconds makes the rule; when the method is no longer on its stack the
//!   sample keeps what the walk saw, above a `[virtual thread frames not thawed]` frame.
//!
//! A virtual thread's sample is named `virtual #id name` with the carrier's tid, and its stack
//! starts at `Continuation.enter`, as in wall mode (the carrier's frames are left out).

use super::vthreads;
use crate::sampler::ring::Header;
use crate::sampler::threads::ThreadTable;
use crate::sink::Sink;
use crate::sync::lock;
use jvmprof_jvmti::{Env, JThread, Jni, MethodId};
use jvmprof_profile::{Metric, ThreadState};
use std::collections::HashMap;
use std::sync::Mutex;

/// A drained sample of a virtual thread, waiting for its poll's batch.
pub struct Pending {
    pub header: Header,
    /// (method id, bytecode index), top first, as the walk gave them.
    pub frames: Vec<(u64, i64)>,
    /// The walk filled the whole buffer (its bottom is missing).
    pub truncated: bool,
}

/// A sample's virtual-thread frames (top first) above `enterSpecial`, whether they reach its
/// bottom (`Continuation.enter`), and the thread.
type Cut = (Vec<(u64, i64)>, bool, Option<vthreads::Identity>);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    EnterSpecial,
    Enter,
    Other,
}

#[derive(Default)]
struct Stats {
    samples: u64,
    completed: u64,
    not_completed: u64,
    kinds: HashMap<u64, Kind>,
}

pub struct VirtualCpu {
    env: Env,
    stats: Mutex<Stats>,
}

impl VirtualCpu {
    /// Starts tracking virtual threads and their mounts (the writer thread); None on a JVM
    /// without virtual threads or without the mount events.
    pub fn start(env: Env, jni: &Jni, threads: &'static ThreadTable) -> Option<VirtualCpu> {
        if !vthreads::start(&env, jni) {
            return None;
        }
        if !vthreads::track_mounts(&env, threads, false) {
            vthreads::stop(&env, jni);
            return None;
        }
        Some(VirtualCpu {
            env,
            stats: Mutex::new(Stats::default()),
        })
    }

    pub fn stop(&self, jni: &Jni) {
        vthreads::untrack_mounts(&self.env, false);
        vthreads::stop(&self.env, jni);
    }

    /// (samples, completed below a lazy thaw, left as walked), for the profile's metadata.
    pub fn counts(&self) -> (u64, u64, u64) {
        let s = lock(&self.stats);
        (s.samples, s.completed, s.not_completed)
    }

    fn kind(&self, jni: &Jni, stats: &mut Stats, method: u64) -> Kind {
        if let Some(k) = stats.kinds.get(&method) {
            return *k;
        }
        let kind = match self.env.method_info(jni, MethodId(method as usize)) {
            Some(m) if m.class_signature == "Ljdk/internal/vm/Continuation;" => {
                match m.name.as_str() {
                    "enterSpecial" => Kind::EnterSpecial,
                    "enter" => Kind::Enter,
                    _ => Kind::Other,
                }
            }
            _ => Kind::Other,
        };
        if stats.kinds.len() < 1 << 16 {
            stats.kinds.insert(method, kind);
        }
        kind
    }

    /// Adds a poll's virtual-thread samples, completed where their walk stopped at a lazy thaw,
    /// then reaps the threads that ended (their samples are named now).
    pub fn add(
        &self,
        jni: &Jni,
        sink: &mut Sink,
        pending: Vec<Pending>,
        interval_ns: u64,
        depth: usize,
    ) {
        let mut stats = lock(&self.stats);
        let mut cut: Vec<Cut> = Vec::new();
        let mut need: Vec<JThread> = Vec::new();
        let mut need_token: HashMap<u64, usize> = HashMap::new();
        for p in &pending {
            let special = (!p.truncated)
                .then(|| {
                    p.frames
                        .iter()
                        .position(|f| self.kind(jni, &mut stats, f.0) == Kind::EnterSpecial)
                })
                .flatten();
            let identity = vthreads::identity(p.header.vthread);
            let (frames, whole) = match special {
                Some(i) => {
                    let above = p.frames[..i].to_vec();
                    let whole = above
                        .last()
                        .is_some_and(|f| self.kind(jni, &mut stats, f.0) == Kind::Enter);
                    (above, whole)
                }
                None => (p.frames.clone(), true), // truncated or odd: as walked
            };
            if !whole
                && let Some(id) = &identity
                && !need_token.contains_key(&p.header.vthread)
            {
                need_token.insert(p.header.vthread, need.len());
                need.push(id.thread);
            }
            cut.push((frames, whole, identity));
        }
        let stacks = self
            .env
            .thread_list_stack_traces(&need, depth.min(i32::MAX as usize) as i32)
            .unwrap_or_default();
        for (p, (mut frames, whole, identity)) in pending.into_iter().zip(cut) {
            stats.samples += 1;
            let mut lost = false;
            if !whole {
                let full = need_token
                    .get(&p.header.vthread)
                    .and_then(|&i| stacks.get(i));
                let below = full.and_then(|full| {
                    let bottom = frames.last()?.0;
                    let j = full.frames.iter().position(|f| f.0.0 as u64 == bottom)?;
                    Some(&full.frames[j + 1..])
                });
                match below {
                    Some(below) => {
                        stats.completed += 1;
                        frames.extend(below.iter().map(|&(m, bci)| (m.0 as u64, bci)));
                    }
                    None => {
                        stats.not_completed += 1;
                        lost = true;
                    }
                }
            }
            let mut ids = Vec::with_capacity(frames.len() + 2);
            if p.truncated {
                ids.push(sink.synthetic("[truncated]"));
            }
            if lost {
                ids.push(sink.synthetic("[virtual thread frames not thawed]"));
            }
            for &(method, bci) in frames.iter().rev() {
                ids.push(match method {
                    0 => sink.synthetic("[unknown method]"),
                    m => sink.java_frame(jni, MethodId(m as usize), bci),
                });
            }
            let stack = sink.stack(&ids);
            let label = identity.map_or_else(|| "virtual (ended)".to_string(), |i| i.label);
            let thread = sink.thread_on(p.header.tid, label);
            let weight = p.header.weight.max(1) as u64;
            let values = sink.values(&[
                (Metric::Samples, weight),
                (Metric::Ns, weight * interval_ns),
            ]);
            sink.add_at(
                thread,
                stack,
                ThreadState::Running,
                &values,
                p.header.time_ns,
                weight.min(u32::MAX as u64) as u32,
                p.header.context,
            );
        }
        drop(stats);
        vthreads::reap(jni);
    }
}
