//! Building one profile out of many: the merge every store does when it reads (batches of a VM,
//! the VMs of a service), matching frames by value and metrics by name.

use jvmprof_profile::{Meta, Profile, ProfileBuilder};

/// An empty profile with `meta`'s modes, metrics and interval, to merge samples into.
pub(crate) fn builder_like(meta: &Meta) -> ProfileBuilder {
    ProfileBuilder::new(Meta {
        modes: meta.modes.clone(),
        metrics: meta.metrics.clone(),
        interval_ns: meta.interval_ns,
        ..Meta::default()
    })
}

/// Merges whole profiles (of different VMs: frames matched by value, metrics by name) into one.
pub fn merge_profiles(profiles: Vec<Profile>) -> Option<ProfileBuilder> {
    let mut merged: Option<ProfileBuilder> = None;
    for mut p in profiles {
        let b = merged.get_or_insert_with(|| builder_like(&p.meta));
        let ids: Vec<u32> = p.frames.iter().map(|f| b.frame(f.clone())).collect();
        if p.stacks.map_frames(|f| anyhow::Ok(ids[f as usize])).is_ok() {
            merge_stacks(b, &p);
        }
    }
    merged
}

/// Adds `p`'s samples to `b`, matching metrics by name (missing ones count 0); `p`'s stacks
/// already hold `b`'s frame ids.
pub(crate) fn merge_stacks(b: &mut ProfileBuilder, p: &Profile) {
    let metrics = b.profile().meta.metrics.clone();
    let index: Vec<Option<usize>> = metrics.iter().map(|m| p.metric_index(*m)).collect();
    let stacks = b.stacks_from(&p.stacks);
    let threads: Vec<u32> = p.threads.iter().map(|t| b.thread(t.clone())).collect();
    let mut values = vec![0u64; metrics.len()];
    for s in &p.samples {
        for (v, i) in values.iter_mut().zip(&index) {
            *v = i.and_then(|i| s.values.get(i).copied()).unwrap_or(0);
        }
        b.add(
            threads[s.thread as usize],
            stacks[s.stack as usize],
            s.state,
            &values,
        );
    }
}
