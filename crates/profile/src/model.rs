//! The in-memory profile: interned frames and stacks, threads, and aggregated samples.

use hashbrown::HashTable;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// The interning maps' hasher: foldhash (SipHash over millions of keys took most of the
/// writer's time at the end of an exact-mode run).
type Fast = foldhash::fast::RandomState;

/// Hash of the empty stack, the start of [`stack_hash`].
const STACK_SEED: u64 = 0x243f_6a88_85a3_08d3;

/// One step of the builder's stack hash: the hash of `parent + [frame]` from the hash of
/// `parent`, so that a stack built from its parent hashes in constant time (an exact-mode
/// profile of javac has millions of contexts dozens of frames deep).
fn stack_hash(parent: u64, frame: u32) -> u64 {
    // Multiply-xorshift (splitmix64's finalizer) over the running hash and the frame.
    let mut h = (parent ^ u64::from(frame)).wrapping_add(0x9e37_79b9_7f4a_7c15);
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// What a frame stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FrameKind {
    /// A Java method (interpreted, compiled or inlined).
    Java,
    /// A native method or native code the walker could not name further.
    Native,
    /// A synthetic frame the profiler adds, e.g. `[thread name]` or `[unknown: not walkable]`.
    Synthetic,
    /// The allocated type at the leaf of an allocation stack (`byte[]`, `java.lang.String`).
    AllocatedType,
    /// The monitor class at the leaf of a lock stack.
    LockClass,
}

/// One frame. `class` is the binary name with dots (`java.util.HashMap`, `Outer$Inner`); for
/// synthetic frames and leaf types `class` is empty and `method` holds the whole name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    pub kind: FrameKind,
    pub class: String,
    pub method: String,
    /// JVM method descriptor, e.g. `(I)V`; empty when unknown.
    pub descriptor: String,
    /// Source line; 0 when unknown.
    pub line: u32,
}

impl Frame {
    pub fn java(class: &str, method: &str, descriptor: &str, line: u32) -> Frame {
        Frame {
            kind: FrameKind::Java,
            class: class.to_string(),
            method: method.to_string(),
            descriptor: descriptor.to_string(),
            line,
        }
    }

    pub fn synthetic(kind: FrameKind, name: &str) -> Frame {
        Frame {
            kind,
            class: String::new(),
            method: name.to_string(),
            descriptor: String::new(),
            line: 0,
        }
    }

    /// The name used by collapsed stacks and flame graphs: `package.Class.method`, or the bare
    /// name for frames without a class.
    pub fn name(&self) -> String {
        if self.class.is_empty() {
            self.method.clone()
        } else {
            format!("{}.{}", self.class, self.method)
        }
    }
}

/// A sampled thread's state (wall mode records it; cpu mode samples are `Running`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub enum ThreadState {
    #[default]
    Unknown,
    Running,
    Sleeping,
    Blocked,
    Waiting,
    TimedWaiting,
    Parked,
    Native,
}

impl ThreadState {
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadState::Unknown => "unknown",
            ThreadState::Running => "running",
            ThreadState::Sleeping => "sleeping",
            ThreadState::Blocked => "blocked",
            ThreadState::Waiting => "waiting",
            ThreadState::TimedWaiting => "timed_waiting",
            ThreadState::Parked => "parked",
            ThreadState::Native => "native",
        }
    }
}

/// A metric a sample carries. `Profile::meta.metrics` gives the order of `Sample::values`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Metric {
    /// Number of samples.
    Samples,
    /// Nanoseconds (samples × interval, or measured time).
    Ns,
    /// Invocations of the calling context (exact mode).
    Calls,
    /// Thread CPU nanoseconds measured by instrumentation (exact mode with a root and the cpu
    /// timer).
    CpuNs,
    /// Bytecodes executed by the context itself, callees excluded (exact mode).
    Bytecodes,
    /// Bytes allocated (estimated from sampled allocations).
    Bytes,
    /// Objects allocated (estimated).
    Objects,
    /// Bytes of sampled objects still alive at the end of the run (estimated; `alloc` with `live`).
    LiveBytes,
    /// Objects still alive at the end of the run (estimated).
    LiveObjects,
    /// Nanoseconds spent blocked entering a contended monitor (`lock` mode).
    LockNs,
    /// Contended monitor entries (`lock` mode).
    LockCount,
    /// Nanoseconds spent in `Object.wait` (`lock` mode).
    WaitNs,
    /// `Object.wait` calls (`lock` mode).
    WaitCount,
}

impl Metric {
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Samples => "samples",
            Metric::Ns => "ns",
            Metric::Calls => "calls",
            Metric::CpuNs => "cpu_ns",
            Metric::Bytecodes => "bytecodes",
            Metric::Bytes => "bytes",
            Metric::Objects => "objects",
            Metric::LiveBytes => "live_bytes",
            Metric::LiveObjects => "live_objects",
            Metric::LockNs => "lock_ns",
            Metric::LockCount => "lock_count",
            Metric::WaitNs => "wait_ns",
            Metric::WaitCount => "wait_count",
        }
    }

    pub fn parse(s: &str) -> Option<Metric> {
        Some(match s {
            "samples" => Metric::Samples,
            "ns" => Metric::Ns,
            "calls" => Metric::Calls,
            "cpu_ns" => Metric::CpuNs,
            "bytecodes" => Metric::Bytecodes,
            "bytes" => Metric::Bytes,
            "objects" => Metric::Objects,
            "live_bytes" => Metric::LiveBytes,
            "live_objects" => Metric::LiveObjects,
            "lock_ns" => Metric::LockNs,
            "lock_count" => Metric::LockCount,
            "wait_ns" => Metric::WaitNs,
            "wait_count" => Metric::WaitCount,
            // `--value count` (lock mode's word for samples); resolved per profile.
            "count" => Metric::Samples,
            _ => return None,
        })
    }

    /// The unit string used by pprof and speedscope.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::Samples
            | Metric::Calls
            | Metric::Bytecodes
            | Metric::Objects
            | Metric::LiveObjects
            | Metric::LockCount
            | Metric::WaitCount => "count",
            Metric::Ns | Metric::CpuNs | Metric::LockNs | Metric::WaitNs => "nanoseconds",
            Metric::Bytes | Metric::LiveBytes => "bytes",
        }
    }
}

/// A profiled thread.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Thread {
    /// Native thread id (Linux tid) when known, else 0.
    pub tid: u64,
    pub name: String,
}

/// Everything about the run that is not a sample.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// Profiling modes of the run: `cpu`, `wall`, `alloc`, `lock`, `exact`.
    pub modes: Vec<String>,
    /// The metrics every sample carries, in order.
    pub metrics: Vec<Metric>,
    /// Sampling interval in nanoseconds (0 when not a sampling mode).
    pub interval_ns: u64,
    /// Stack-walking engine used: `asgct`, `safepoint`, `instrumentation`.
    pub engine: String,
    pub jvm_name: String,
    pub jvm_version: String,
    pub pid: u32,
    /// Command line of the JVM, when known.
    pub command: String,
    /// Unix time in milliseconds at which profiling started.
    pub start_unix_ms: u64,
    pub duration_ms: u64,
    /// Failed stack walks by reason (`not_walkable_java`, `gc_active`, …): counted, never dropped.
    pub walk_failures: BTreeMap<String, u64>,
    /// Samples lost because a buffer was full.
    pub dropped_samples: u64,
    /// Free-form extra facts (`agent_version`, `attach`, …).
    pub extra: BTreeMap<String, String>,
}

/// An aggregated sample: how much of each metric one stack collected in one thread and state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Index into `Profile::threads`.
    pub thread: u32,
    /// Index into `Profile::stacks`.
    pub stack: u32,
    pub state: ThreadState,
    /// One value per `Meta::metrics`, same order.
    pub values: Vec<u64>,
}

/// The stacks of a profile, as a tree of prefixes: stack `i` is its parent stack with one more
/// frame on top, so a stack costs two numbers however deep it is (an exact-mode profile of javac
/// has millions of contexts some 60 frames deep, which as frame lists took a gigabyte). A
/// parent always comes before its children. The empty stack is an entry with no parent and no
/// frame, and no stack's parent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stacks {
    /// Parent of each stack, [`Stacks::NONE`] for a stack of one frame (and the empty stack).
    parents: Vec<u32>,
    /// Top frame of each stack (an index into `Profile::frames`), [`Stacks::NONE`] for the
    /// empty stack.
    tops: Vec<u32>,
}

impl Stacks {
    /// No parent, or no frame.
    pub const NONE: u32 = u32::MAX;

    pub fn len(&self) -> usize {
        self.tops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tops.is_empty()
    }

    /// Adds `parent + [frame]` (or `[frame]` when `parent` is `None`) without looking for an
    /// equal stack; returns its id. `parent` must be an existing stack.
    pub fn push(&mut self, parent: Option<u32>, frame: u32) -> u32 {
        debug_assert!(parent.is_none_or(|p| (p as usize) < self.len()));
        self.parents.push(parent.unwrap_or(Self::NONE));
        self.tops.push(frame);
        (self.tops.len() - 1) as u32
    }

    /// Adds the empty stack; returns its id.
    pub fn push_empty(&mut self) -> u32 {
        self.parents.push(Self::NONE);
        self.tops.push(Self::NONE);
        (self.tops.len() - 1) as u32
    }

    /// Makes room for `n` more stacks.
    pub fn reserve(&mut self, n: usize) {
        self.parents.reserve(n);
        self.tops.reserve(n);
    }

    /// The stack below `stack`'s top frame, if it has more than one frame.
    pub fn parent(&self, stack: u32) -> Option<u32> {
        let p = self.parents[stack as usize];
        (p != Self::NONE).then_some(p)
    }

    /// The top frame of `stack`, `None` for the empty stack.
    pub fn top(&self, stack: u32) -> Option<u32> {
        let f = self.tops[stack as usize];
        (f != Self::NONE).then_some(f)
    }

    /// The frames of `stack`, root first.
    pub fn frames(&self, stack: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut s = Some(stack);
        while let Some(id) = s {
            out.extend(self.top(id));
            s = self.parent(id);
        }
        out.reverse();
        out
    }

    /// Every stack's frames, root first, in id order.
    pub fn iter(&self) -> impl Iterator<Item = Vec<u32>> + '_ {
        (0..self.len() as u32).map(|s| self.frames(s))
    }

    /// Replaces every frame index `f` by `map(f)` (for readers that renumber frames).
    pub fn map_frames<E>(&mut self, mut map: impl FnMut(u32) -> Result<u32, E>) -> Result<(), E> {
        for f in &mut self.tops {
            if *f != Self::NONE {
                *f = map(*f)?;
            }
        }
        Ok(())
    }

    /// Checks that every stack's parent comes before it (so walking down always ends) and every
    /// frame is below `nframes`.
    fn validate(&self, nframes: usize) -> Result<(), String> {
        if self.parents.len() != self.tops.len() {
            return Err(format!(
                "the stacks have {} parents but {} top frames",
                self.parents.len(),
                self.tops.len()
            ));
        }
        for (i, (&p, &f)) in self.parents.iter().zip(&self.tops).enumerate() {
            if p != Self::NONE && p as usize >= i {
                return Err(format!("stack {i} has parent {p}, not an earlier stack"));
            }
            if f == Self::NONE && p != Self::NONE {
                return Err(format!("stack {i} has a parent but no frame"));
            }
            if p != Self::NONE && self.tops[p as usize] == Self::NONE {
                return Err(format!("stack {i} has the empty stack {p} as its parent"));
            }
            if f != Self::NONE && f as usize >= nframes {
                return Err(format!(
                    "stack {i} refers to frame {f} but there are {nframes} frames"
                ));
            }
        }
        Ok(())
    }
}

/// A whole profile: samples refer to stacks, stacks to frames (see [`Stacks`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    pub meta: Meta,
    pub frames: Vec<Frame>,
    pub stacks: Stacks,
    pub threads: Vec<Thread>,
    pub samples: Vec<Sample>,
    /// When each sample was taken, in time order, where the source knows (cpu and wall
    /// sampling, JFR recordings; not exact mode, whose counts have no time). Each entry adds
    /// no value of its own: it says that `sample` gained one sampling period (`weight` of them)
    /// at `offset_ns`. Bounded by the agent ([`Meta::extra`] `timeline_dropped` counts what did
    /// not fit); timelines and the speedscope export's time order read it.
    pub timeline: Vec<TimedSample>,
}

/// One sample in time: see [`Profile::timeline`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimedSample {
    /// Nanoseconds since the profile's start ([`Meta::start_unix_ms`]).
    pub offset_ns: u64,
    /// Index into [`Profile::samples`].
    pub sample: u32,
    /// Sampling periods this one stands for (1, or more when a CPU timer overran).
    pub weight: u32,
    /// The traced call tree the thread was in when the sample was taken (trace mode beside
    /// cpu or wall sampling: the id `jvmprof trace` shows as a tree's `trace_id`), 0 for none.
    pub trace: u64,
}

impl Profile {
    /// Index of `metric` in the sample values, if the profile carries it. A lock-only profile
    /// answers `ns` and `samples` (`--value ns|count`) with its contention metrics.
    pub fn metric_index(&self, metric: Metric) -> Option<usize> {
        let find = |m: Metric| self.meta.metrics.iter().position(|x| *x == m);
        find(metric).or_else(|| match metric {
            Metric::Ns => find(Metric::LockNs),
            Metric::Samples => find(Metric::LockCount),
            _ => None,
        })
    }

    /// The frames of a stack, root first.
    pub fn stack_frames(&self, stack: u32) -> impl Iterator<Item = &Frame> {
        self.stacks
            .frames(stack)
            .into_iter()
            .map(|f| &self.frames[f as usize])
    }

    /// Sum of one metric over all samples (saturating, so garbage values cannot overflow).
    pub fn total(&self, metric_index: usize) -> u64 {
        self.samples
            .iter()
            .fold(0u64, |acc, s| acc.saturating_add(s.values[metric_index]))
    }

    /// Checks that every index is in range and every sample has one value per metric, so that
    /// code indexing into a profile read from a file cannot panic. Returns what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        self.stacks.validate(self.frames.len())?;
        let nmetrics = self.meta.metrics.len();
        for (i, s) in self.samples.iter().enumerate() {
            if s.thread as usize >= self.threads.len() {
                return Err(format!(
                    "sample {i} refers to thread {} but there are {} threads",
                    s.thread,
                    self.threads.len()
                ));
            }
            if s.stack as usize >= self.stacks.len() {
                return Err(format!(
                    "sample {i} refers to stack {} but there are {} stacks",
                    s.stack,
                    self.stacks.len()
                ));
            }
            if s.values.len() != nmetrics {
                return Err(format!(
                    "sample {i} has {} values but the profile has {nmetrics} metrics",
                    s.values.len()
                ));
            }
        }
        if let Some((i, t)) = self
            .timeline
            .iter()
            .enumerate()
            .find(|(_, t)| t.sample as usize >= self.samples.len())
        {
            return Err(format!(
                "timeline entry {i} refers to sample {} but there are {} samples",
                t.sample,
                self.samples.len()
            ));
        }
        Ok(())
    }
}

/// Builds a [`Profile`] by interning frames, stacks and threads and adding up samples with the same
/// (thread, stack, state).
#[derive(Debug)]
pub struct ProfileBuilder {
    profile: Profile,
    frame_ids: HashMap<Frame, u32, Fast>,
    /// Stack ids by (parent, top frame), hashed by [`stack_hash`] (kept per stack in
    /// `stack_hashes`, so a child's hash comes from its parent's in constant time).
    stack_ids: HashTable<u32>,
    stack_hashes: Vec<u64>,
    /// The empty stack's id, once interned.
    empty_stack: Option<u32>,
    thread_ids: HashMap<Thread, u32, Fast>,
    sample_ids: HashMap<(u32, u32, ThreadState), usize, Fast>,
}

impl ProfileBuilder {
    pub fn new(meta: Meta) -> ProfileBuilder {
        ProfileBuilder {
            profile: Profile {
                meta,
                ..Profile::default()
            },
            frame_ids: HashMap::default(),
            stack_ids: HashTable::new(),
            stack_hashes: Vec::new(),
            empty_stack: None,
            thread_ids: HashMap::default(),
            sample_ids: HashMap::default(),
        }
    }

    pub fn meta_mut(&mut self) -> &mut Meta {
        &mut self.profile.meta
    }

    /// The profile built so far. Frames, stacks, threads and samples only ever grow (indices are
    /// stable) and sample values only increase, so a reader can send what changed since its last
    /// look (streaming does).
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    pub fn frame(&mut self, frame: Frame) -> u32 {
        if let Some(id) = self.frame_ids.get(&frame) {
            return *id;
        }
        let id = self.profile.frames.len() as u32;
        self.profile.frames.push(frame.clone());
        self.frame_ids.insert(frame, id);
        id
    }

    /// Interns a stack given root first (each prefix in turn, see [`Self::child_stack`]).
    pub fn stack(&mut self, frames: &[u32]) -> u32 {
        match frames.split_first() {
            None => *self.empty_stack.get_or_insert_with(|| {
                // Not indexed (no one's parent); its hash only keeps stack_hashes by id.
                self.stack_hashes.push(STACK_SEED);
                self.profile.stacks.push_empty()
            }),
            Some((root, rest)) => {
                let mut id = self.child_stack(None, *root);
                for f in rest {
                    id = self.child_stack(Some(id), *f);
                }
                id
            }
        }
    }

    /// Interns `parent + [frame]` (the root frame alone when `parent` is `None`) in constant
    /// time: for callers that walk a tree of stacks.
    pub fn child_stack(&mut self, parent: Option<u32>, frame: u32) -> u32 {
        let hash = match parent {
            Some(p) => self.stack_hashes[p as usize],
            None => STACK_SEED,
        };
        let hash = stack_hash(hash, frame);
        let (stacks, hashes) = (&self.profile.stacks, &self.stack_hashes);
        let same = |&id: &u32| {
            hashes[id as usize] == hash
                && stacks.top(id) == Some(frame)
                && stacks.parent(id) == parent
        };
        if let Some(id) = self.stack_ids.find(hash, same) {
            return *id;
        }
        let id = self.profile.stacks.push(parent, frame);
        self.stack_hashes.push(hash);
        let hashes = &self.stack_hashes;
        self.stack_ids
            .insert_unique(hash, id, |&i| hashes[i as usize]);
        id
    }

    /// Makes room for `stacks` more stacks and samples, so that a caller that knows how many
    /// are coming (an exact-mode merge: millions) does not grow the tables step by step.
    pub fn reserve(&mut self, stacks: usize) {
        let hashes = &self.stack_hashes;
        self.stack_ids.reserve(stacks, |&i| hashes[i as usize]);
        self.stack_hashes.reserve(stacks);
        self.profile.stacks.reserve(stacks);
        self.profile.samples.reserve(stacks);
        self.sample_ids.reserve(stacks);
    }

    /// Interns every stack of `stacks` (whose frames are already this builder's frame ids);
    /// returns their ids here, by their index there.
    pub fn stacks_from(&mut self, stacks: &Stacks) -> Vec<u32> {
        let mut ids: Vec<u32> = Vec::with_capacity(stacks.len());
        for i in 0..stacks.len() as u32 {
            let id = match stacks.top(i) {
                // A parent comes before its children, so its id is known.
                Some(f) => self.child_stack(stacks.parent(i).map(|p| ids[p as usize]), f),
                None => self.stack(&[]),
            };
            ids.push(id);
        }
        ids
    }

    pub fn thread(&mut self, thread: Thread) -> u32 {
        if let Some(id) = self.thread_ids.get(&thread) {
            return *id;
        }
        let id = self.profile.threads.len() as u32;
        self.profile.threads.push(thread.clone());
        self.thread_ids.insert(thread, id);
        id
    }

    /// Adds `values` (one per metric) to the sample for (thread, stack, state), saturating at
    /// `u64::MAX` so that values read from a bad file cannot overflow.
    /// Adds `values` to the sample (thread, stack, state), made if new; returns its index.
    pub fn add(&mut self, thread: u32, stack: u32, state: ThreadState, values: &[u64]) -> usize {
        let n = self.profile.meta.metrics.len();
        let idx = *self
            .sample_ids
            .entry((thread, stack, state))
            .or_insert_with(|| {
                self.profile.samples.push(Sample {
                    thread,
                    stack,
                    state,
                    values: vec![0; n],
                });
                self.profile.samples.len() - 1
            });
        for (acc, v) in self.profile.samples[idx].values.iter_mut().zip(values) {
            *acc = acc.saturating_add(*v);
        }
        idx
    }

    /// Notes that sample `sample` (an index [`add`](Self::add) returned) gained `weight`
    /// periods at `offset_ns` since the start: see [`Profile::timeline`]. Entries may come in
    /// any order; [`finish`](Self::finish) sorts them.
    pub fn add_time(&mut self, sample: usize, offset_ns: u64, weight: u32) {
        self.add_time_in(sample, offset_ns, weight, 0);
    }

    /// [`add_time`](Self::add_time) for a sample taken inside the traced call tree `trace`.
    pub fn add_time_in(&mut self, sample: usize, offset_ns: u64, weight: u32, trace: u64) {
        self.profile.timeline.push(TimedSample {
            offset_ns,
            sample: sample as u32,
            weight,
            trace,
        });
    }

    /// Entries in the timeline so far.
    pub fn timeline_len(&self) -> usize {
        self.profile.timeline.len()
    }

    pub fn finish(mut self) -> Profile {
        self.profile.timeline.sort_by_key(|t| t.offset_ns);
        self.profile
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_stacks_and_whole_stacks_intern_to_the_same_ids() {
        let mut b = ProfileBuilder::new(Meta::default());
        let a = b.frame(Frame::java("C", "a", "", 0));
        let c = b.frame(Frame::java("C", "c", "", 0));
        let ab = b.stack(&[a, c]);
        let root = b.child_stack(None, a);
        assert_eq!(b.stack(&[a]), root);
        assert_eq!(b.child_stack(Some(root), c), ab);
        let aca = b.child_stack(Some(ab), a);
        assert_eq!(b.stack(&[a, c, a]), aca);
        // Same last frame, other prefix; same prefix, other frame: new stacks.
        let ca = b.stack(&[c, a]);
        assert!(![root, ab, aca].contains(&ca));
        let aa = b.child_stack(Some(root), a);
        assert!(![root, ab, aca, ca].contains(&aa));
        // Each stack is its parent plus a frame, so [a] came with [a, c].
        assert_eq!(
            b.profile().stacks.iter().collect::<Vec<_>>(),
            vec![
                vec![a],
                vec![a, c],
                vec![a, c, a],
                vec![c],
                vec![c, a],
                vec![a, a]
            ]
        );
        assert_eq!((root, ab, aca, ca, aa), (0, 1, 2, 4, 5));
        // The empty stack is a stack too, and not confused with any other.
        let empty = b.stack(&[]);
        assert_eq!(b.stack(&[]), empty);
        assert!(b.profile().stacks.frames(empty).is_empty());
        assert_ne!(b.child_stack(None, a), empty);
        // Many stacks, each interned once whichever way it comes.
        let mut parent = None;
        let mut ids = Vec::new();
        for i in 0..10_000u32 {
            let f = if i % 3 == 0 { a } else { c };
            let id = b.child_stack(parent, f);
            ids.push(id);
            parent = Some(id);
        }
        let mut path = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            path.push(if i % 3 == 0 { a } else { c });
            assert_eq!(b.stack(&path), *id);
            assert_eq!(b.profile().stacks.frames(*id), path);
        }
    }

    #[test]
    fn validation_rejects_stacks_that_do_not_end_or_lack_a_frame() {
        let p = |parents: Vec<u32>, tops: Vec<u32>| Profile {
            frames: vec![Frame::java("C", "a", "", 0)],
            stacks: Stacks { parents, tops },
            ..Profile::default()
        };
        const N: u32 = Stacks::NONE;
        assert_eq!(p(vec![N, 0, N], vec![0, 0, N]).validate(), Ok(()));
        // A parent that is the stack itself or after it could make a cycle.
        assert_eq!(
            p(vec![N, 1], vec![0, 0]).validate().unwrap_err(),
            "stack 1 has parent 1, not an earlier stack"
        );
        assert_eq!(
            p(vec![1, N], vec![0, 0]).validate().unwrap_err(),
            "stack 0 has parent 1, not an earlier stack"
        );
        assert_eq!(
            p(vec![N, 0], vec![0, N]).validate().unwrap_err(),
            "stack 1 has a parent but no frame"
        );
        assert_eq!(
            p(vec![N, 0], vec![N, 0]).validate().unwrap_err(),
            "stack 1 has the empty stack 0 as its parent"
        );
        assert_eq!(
            p(vec![N], vec![3]).validate().unwrap_err(),
            "stack 0 refers to frame 3 but there are 1 frames"
        );
        assert_eq!(
            p(vec![N, N], vec![0]).validate().unwrap_err(),
            "the stacks have 2 parents but 1 top frames"
        );
    }
}
