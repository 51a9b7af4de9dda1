//! Stack filters, as asprof's `-I`/`-X`: keep only the samples whose stack has a frame matching
//! one of the include patterns (when there are any), and drop those with a frame matching an
//! exclude pattern. A pattern is a substring of the frame's name (`pkg.Class.method`), or with
//! `*` a glob over the whole name (`java.util.*`, `*.HashMap.get`).

use crate::model::Profile;
use std::collections::HashMap;

/// A pattern of a stack filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Matches a name that contains it.
    Substring(String),
    /// The parts between `*`s: matches a whole name that holds them in order.
    Glob(Vec<String>),
}

impl Pattern {
    pub fn parse(s: &str) -> Pattern {
        if s.contains('*') {
            Pattern::Glob(s.split('*').map(str::to_string).collect())
        } else {
            Pattern::Substring(s.to_string())
        }
    }

    pub fn matches(&self, name: &str) -> bool {
        match self {
            Pattern::Substring(s) => name.contains(s.as_str()),
            Pattern::Glob(parts) => {
                let (first, last) = (&parts[0], &parts[parts.len() - 1]);
                if !name.starts_with(first.as_str()) {
                    return false;
                }
                let mut rest = &name[first.len()..];
                for mid in &parts[1..parts.len() - 1] {
                    match rest.find(mid.as_str()) {
                        Some(at) => rest = &rest[at + mid.len()..],
                        None => return false,
                    }
                }
                rest.len() >= last.len() && rest.ends_with(last.as_str())
            }
        }
    }
}

/// Include and exclude patterns; empty keeps everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackFilter {
    pub include: Vec<Pattern>,
    pub exclude: Vec<Pattern>,
}

impl StackFilter {
    pub fn new(include: &[String], exclude: &[String]) -> StackFilter {
        StackFilter {
            include: include.iter().map(|p| Pattern::parse(p)).collect(),
            exclude: exclude.iter().map(|p| Pattern::parse(p)).collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.include.is_empty() && self.exclude.is_empty()
    }

    /// Whether a stack of frames with these names is kept.
    fn keeps<'a>(&self, names: impl Iterator<Item = &'a str> + Clone) -> bool {
        let any =
            |patterns: &[Pattern]| names.clone().any(|n| patterns.iter().any(|p| p.matches(n)));
        (self.include.is_empty() || any(&self.include)) && !any(&self.exclude)
    }

    /// The profile with only the samples whose stacks pass (the timeline follows them; frames
    /// and stacks stay, unused ones too).
    pub fn apply(&self, profile: &Profile) -> Profile {
        if self.is_empty() {
            return profile.clone();
        }
        let names: Vec<String> = profile.frames.iter().map(|f| f.name()).collect();
        let mut verdict: HashMap<u32, bool> = HashMap::new();
        let mut new_index: Vec<Option<u32>> = Vec::with_capacity(profile.samples.len());
        let mut out = Profile {
            meta: profile.meta.clone(),
            frames: profile.frames.clone(),
            stacks: profile.stacks.clone(),
            threads: profile.threads.clone(),
            samples: Vec::new(),
            timeline: Vec::new(),
        };
        for s in &profile.samples {
            let keep = *verdict.entry(s.stack).or_insert_with(|| {
                let frames = profile.stacks.frames(s.stack);
                self.keeps(frames.iter().map(|f| names[*f as usize].as_str()))
            });
            if keep {
                new_index.push(Some(out.samples.len() as u32));
                out.samples.push(s.clone());
            } else {
                new_index.push(None);
            }
        }
        out.timeline = profile
            .timeline
            .iter()
            .filter_map(|t| {
                let sample = new_index[t.sample as usize]?;
                Some(crate::model::TimedSample { sample, ..*t })
            })
            .collect();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{sample_profile, timed_profile};

    /// (thread, leaf, samples) of every sample, sorted.
    fn kept(p: &Profile) -> Vec<(String, String, u64)> {
        let mut v: Vec<(String, String, u64)> = p
            .samples
            .iter()
            .map(|s| {
                let leaf = p.stack_frames(s.stack).last().unwrap().name();
                (p.threads[s.thread as usize].name.clone(), leaf, s.values[0])
            })
            .collect();
        v.sort();
        v
    }

    fn owned(v: &[(&str, &str, u64)]) -> Vec<(String, String, u64)> {
        v.iter()
            .map(|(a, b, c)| (a.to_string(), b.to_string(), *c))
            .collect()
    }

    #[test]
    fn patterns() {
        let m = |p: &str, n: &str| Pattern::parse(p).matches(n);
        assert!(m("HashMap", "java.util.HashMap.put"));
        assert!(!m("Hashmap", "java.util.HashMap.put"));
        assert!(m("java.util.*", "java.util.HashMap.put"));
        assert!(!m("java.util.*", "xjava.util.HashMap.put"));
        assert!(m("*.put", "java.util.HashMap.put"));
        assert!(!m("*.put", "java.util.HashMap.putAll"));
        assert!(m("java.*Map.*", "java.util.HashMap.get"));
        assert!(!m("java.*Set.*", "java.util.HashMap.get"));
        assert!(m("*", "anything"));
        assert!(m("a*a", "aa") && !m("a*a", "a"));
    }

    #[test]
    fn include_and_exclude_keep_exact_samples() {
        let p = sample_profile();
        // Stacks with HashMap.put: main's 3 + 2.
        let f = StackFilter::new(&["HashMap.put".into()], &[]);
        assert_eq!(
            kept(&f.apply(&p)),
            owned(&[
                ("main", "java.util.HashMap.put", 2),
                ("main", "java.util.HashMap.put", 3)
            ])
        );
        // Everything but stacks through Thread.run: main's three and the worker's App.work.
        let f = StackFilter::new(&[], &["java.lang.Thread.*".into()]);
        assert_eq!(
            kept(&f.apply(&p)),
            owned(&[
                ("main", "com.example.App.work", 1),
                ("main", "java.util.HashMap.put", 2),
                ("main", "java.util.HashMap.put", 3),
                ("worker-1", "com.example.App.work", 1)
            ])
        );
        // Include App.work, exclude put: the two stacks that end in work.
        let f = StackFilter::new(&["*.work".into()], &["put".into()]);
        assert_eq!(
            kept(&f.apply(&p)),
            owned(&[
                ("main", "com.example.App.work", 1),
                ("worker-1", "com.example.App.work", 1)
            ])
        );
        assert_eq!(StackFilter::default().apply(&p), p);
    }

    #[test]
    fn the_timeline_follows_the_kept_samples() {
        let p = timed_profile();
        let f = StackFilter::new(&["write".into()], &[]);
        let q = f.apply(&p);
        assert_eq!(q.samples.len(), 1);
        let times: Vec<(u64, u32, u32)> = q
            .timeline
            .iter()
            .map(|t| (t.offset_ns / 1_000_000, t.sample, t.weight))
            .collect();
        assert_eq!(times, [(5, 0, 1), (15, 0, 1), (25, 0, 2)]);
        q.validate().unwrap();
    }
}
