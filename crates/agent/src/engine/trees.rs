//! The one reader of the Java runtime's calling-context trees, shared by exact mode
//! ([`super::exact`], the `Probes` runtime) and the root and trace engines ([`super::subgraph`],
//! the `Roots` runtime). Both runtimes keep one tree per thread and answer the same three static
//! calls: `threads()`, `threadName(i)` and `tree(i)` (a `long[]` of fixed-size records per
//! context). This module reads them through JNI, remembers what each context had at the last
//! merge so that a merge adds only what the context gained since, and interns each method id's
//! frame once; what a record's fields mean is each engine's own.

use crate::sink::Sink;
use jvmprof_jvmti::Jni;
use jvmprof_jvmti::classes::GlobalRef;
use jvmprof_profile::Frame;
use std::collections::HashMap;

/// Calls `each(index, thread name, tree)` for every thread of the runtime class `runtime`
/// (each in a JNI local frame), skipping the thread named `skip`; None if the runtime could not
/// say how many threads it has.
pub fn each_tree(
    jni: &Jni,
    runtime: GlobalRef,
    skip: Option<&str>,
    mut each: impl FnMut(usize, String, Vec<i64>),
) -> Option<()> {
    let n = jni.call_static_int(runtime, "threads", "()I", &[])?;
    for i in 0..n.max(0) {
        jni.with_local_frame(16, || {
            let name = jni
                .call_static_string(runtime, "threadName", "(I)Ljava/lang/String;", &[i])
                .unwrap_or_else(|| format!("thread {i}"));
            if skip == Some(name.as_str()) {
                return;
            }
            let Some(tree) = jni.call_static_long_array(runtime, "tree", "(I)[J", &[i]) else {
                return;
            };
            each(i as usize, name, tree);
        });
    }
    Some(())
}

/// What the merges of one session's trees remember: `N` counters per context, keyed by (runtime
/// thread index, context), and the frame of each method id. One entry per context, so millions
/// for javac, hence foldhash.
pub struct TreeReader<const N: usize> {
    seen: HashMap<(usize, usize), [u64; N], foldhash::fast::RandomState>,
    frames: HashMap<i64, u32, foldhash::fast::RandomState>,
}

impl<const N: usize> Default for TreeReader<N> {
    fn default() -> Self {
        TreeReader {
            seen: HashMap::default(),
            frames: HashMap::default(),
        }
    }
}

impl<const N: usize> TreeReader<N> {
    /// Whether this merge must remember what it adds: unless it is the last and no merge came
    /// before (flush, streaming), in which case every context adds all it has.
    pub fn remember(&self, last: bool) -> bool {
        !(last && self.seen.is_empty())
    }

    /// Room for `more` contexts at once (growing a table of millions step by step is slow).
    pub fn reserve(&mut self, more: usize) {
        self.seen.reserve(more);
    }

    /// What the context `key` gained since the last merge that remembered it, given what it has
    /// `now`; remembered when `remember` (see [`TreeReader::remember`]).
    pub fn gain(&mut self, remember: bool, key: (usize, usize), now: [u64; N]) -> [u64; N] {
        if !remember {
            return now;
        }
        let seen = self.seen.entry(key).or_insert([0; N]);
        let mut gain = [0; N];
        for k in 0..N {
            gain[k] = now[k].saturating_sub(seen[k]);
            seen[k] = seen[k].max(now[k]);
        }
        gain
    }

    /// The sink's frame for a method id, made by `make` the first time.
    pub fn frame(&mut self, sink: &mut Sink, method: i64, make: impl FnOnce() -> Frame) -> u32 {
        *self
            .frames
            .entry(method)
            .or_insert_with(|| sink.frame(make()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gains_are_what_grew_since_the_last_merge() {
        let mut r = TreeReader::<2>::default();
        assert!(!r.remember(true));
        assert_eq!(r.gain(false, (0, 1), [5, 7]), [5, 7]);
        assert!(r.remember(false));
        assert_eq!(r.gain(true, (0, 1), [5, 7]), [5, 7]);
        assert_eq!(r.gain(true, (0, 1), [8, 7]), [3, 0]);
        assert_eq!(r.gain(true, (0, 1), [6, 9]), [0, 2]);
        assert!(r.remember(true));
        assert_eq!(r.gain(true, (1, 1), [1, 1]), [1, 1]);
    }
}
