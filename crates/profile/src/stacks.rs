//! Stacks rendered by frame name, the shape shared by collapsed, flame graph, speedscope and diff:
//! frames that render to the same name (e.g. different lines of one method) are the same node,
//! and samples with the same rendered stack are added up.

use crate::model::{FrameKind, Profile};
use std::collections::HashMap;

/// Hasher of the maps keyed by whole stacks (millions in an exact-mode profile).
type Fast = foldhash::fast::RandomState;

/// Rendered stacks of one metric.
#[derive(Debug, Default)]
pub(crate) struct NamedStacks {
    /// Distinct rendered frame names, in order of first appearance.
    pub names: Vec<String>,
    /// The kind of each name (the first frame that rendered to it decides).
    pub kinds: Vec<FrameKind>,
    /// (name indices root first, value), zero values left out; in no particular order until
    /// [`NamedStacks::sorted`].
    pub stacks: Vec<(Vec<u32>, u64)>,
}

impl NamedStacks {
    /// The same, stacks sorted by rendered text (for outputs that list them).
    pub fn sorted(mut self) -> NamedStacks {
        let rank = name_ranks(&self.names);
        self.stacks
            .sort_unstable_by(|(a, _), (b, _)| by_rank(&rank, a, b));
        self
    }
}

/// A frame name made safe for the collapsed format: no `;` (the separator) and no line breaks
/// or other control characters.
pub(crate) fn clean_name(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            ';' => ':',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect()
}

/// Renders every sample's stack (with a leading `[thread name]` frame when `threads`) and adds up
/// the values of `metric` per rendered stack. Empty stacks are left out. The profile must be valid ([`Profile::validate`]).
pub(crate) fn named_stacks(profile: &Profile, metric: usize, threads: bool) -> NamedStacks {
    let mut out = NamedStacks::default();
    let mut name_ids: HashMap<String, u32> = HashMap::new();
    let mut intern = |out: &mut NamedStacks, name: String, kind: FrameKind| -> u32 {
        *name_ids.entry(name).or_insert_with_key(|name| {
            out.names.push(name.clone());
            out.kinds.push(kind);
            (out.names.len() - 1) as u32
        })
    };
    let frame_ids: Vec<u32> = profile
        .frames
        .iter()
        .map(|f| intern(&mut out, clean_name(&f.name()), f.kind))
        .collect();
    let thread_ids: Vec<u32> = if threads {
        profile
            .threads
            .iter()
            .map(|t| {
                let name = format!("[{}]", clean_name(&t.name));
                intern(&mut out, name, FrameKind::Synthetic)
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut values: HashMap<Vec<u32>, u64, Fast> = HashMap::default();
    for s in &profile.samples {
        let v = s.values[metric];
        let frames = profile.stacks.frames(s.stack);
        if v == 0 || frames.is_empty() {
            continue;
        }
        let mut key = Vec::with_capacity(frames.len() + 1);
        if threads {
            key.push(thread_ids[s.thread as usize]);
        }
        key.extend(frames.iter().map(|f| frame_ids[*f as usize]));
        let acc = values.entry(key).or_insert(0);
        *acc = acc.saturating_add(v);
    }
    out.stacks = values.into_iter().collect();
    out
}

/// Each name's place in the sorted list of `names` (which are distinct): comparing stacks by
/// ranks orders them as comparing their names would, with integer comparisons (comparing the
/// strings was most of the time to render javac's 4M-stack exact profile).
fn name_ranks(names: &[String]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..names.len() as u32).collect();
    order.sort_unstable_by(|a, b| names[*a as usize].cmp(&names[*b as usize]));
    let mut rank = vec![0u32; names.len()];
    for (r, id) in order.into_iter().enumerate() {
        rank[id as usize] = r as u32;
    }
    rank
}

/// Stacks of name ids in the order of their names, root first (a prefix first).
fn by_rank(rank: &[u32], a: &[u32], b: &[u32]) -> std::cmp::Ordering {
    a.iter()
        .map(|i| rank[*i as usize])
        .cmp(b.iter().map(|i| rank[*i as usize]))
}

/// Rendered stacks of two profiles in one name table, for differential views.
#[cfg(feature = "analysis")]
#[derive(Debug, Default)]
pub(crate) struct PairedStacks {
    pub names: Vec<String>,
    pub kinds: Vec<FrameKind>,
    /// (name indices root first, base value, new value), sorted by rendered text; stacks that
    /// are 0 in both are left out.
    pub stacks: Vec<(Vec<u32>, u64, u64)>,
}

/// Renders both profiles' stacks (see [`named_stacks`]) into one name table and pairs their
/// values per rendered stack, sorted by rendered text.
#[cfg(feature = "analysis")]
pub(crate) fn paired_stacks(
    base: &Profile,
    base_metric: usize,
    new: &Profile,
    new_metric: usize,
    threads: bool,
) -> PairedStacks {
    let b = named_stacks(base, base_metric, threads);
    let n = named_stacks(new, new_metric, threads);
    let mut names = n.names;
    let mut kinds = n.kinds;
    let mut ids: HashMap<String, u32> = names
        .iter()
        .enumerate()
        .map(|(i, s)| (s.clone(), i as u32))
        .collect();
    let remap: Vec<u32> = b
        .names
        .into_iter()
        .zip(b.kinds)
        .map(|(name, kind)| {
            *ids.entry(name).or_insert_with_key(|name| {
                names.push(name.clone());
                kinds.push(kind);
                (names.len() - 1) as u32
            })
        })
        .collect();
    let mut values: HashMap<Vec<u32>, (u64, u64), Fast> = HashMap::default();
    for (stack, v) in n.stacks {
        values.entry(stack).or_default().1 = v;
    }
    for (stack, v) in b.stacks {
        let stack: Vec<u32> = stack.iter().map(|i| remap[*i as usize]).collect();
        values.entry(stack).or_default().0 = v;
    }
    let mut stacks: Vec<(Vec<u32>, u64, u64)> =
        values.into_iter().map(|(s, (b, n))| (s, b, n)).collect();
    let rank = name_ranks(&names);
    stacks.sort_unstable_by(|(a, _, _), (b, _, _)| by_rank(&rank, a, b));
    PairedStacks {
        names,
        kinds,
        stacks,
    }
}
