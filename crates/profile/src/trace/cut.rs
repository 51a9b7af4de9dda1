//! One traced request's samples: the part of a sampled profile taken while its threads were in
//! one traced call tree (`jvmprof convert FILE --trace-id ID`).
//!
//! Trace mode beside cpu or wall sampling tags each timeline entry with the tree the thread was
//! in ([`TimedSample::trace`]), work handed to an executor included. The cut keeps the timeline
//! entries of one tree and rebuilds each sample's values from them: an entry stands for
//! `weight` of its sample's periods, and a sampled metric (samples, ns) grows by the same amount
//! per period, so a sample keeps the share of its values its kept entries' weights make of all
//! its entries' weights. Samples without a timeline (allocation, lock, exact counts) have no
//! time and so no tree: they are left out.

use crate::model::{Profile, Sample, TimedSample};

/// How many timeline entries carry each trace id (0, no tree, included), most first.
pub fn trace_ids(profile: &Profile) -> Vec<(u64, u64)> {
    let mut counts = std::collections::HashMap::new();
    for t in &profile.timeline {
        *counts.entry(t.trace).or_insert(0u64) += t.weight as u64;
    }
    let mut v: Vec<(u64, u64)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

/// The profile with only what was sampled inside trace `id` (see the module doc), or an error
/// saying why there is nothing to cut.
pub fn cut(profile: &Profile, id: u64) -> Result<Profile, String> {
    if profile.timeline.is_empty() {
        return Err(
            "the profile has no timeline, so its samples carry no trace ids (record with \
             --mode cpu,trace or wall,trace)"
                .into(),
        );
    }
    if !profile.timeline.iter().any(|t| t.trace != 0) {
        return Err(
            "no sample of this profile was taken inside a traced call (record with --mode \
             cpu,trace or wall,trace)"
                .into(),
        );
    }
    let n = profile.samples.len();
    let mut all = vec![0u64; n];
    let mut kept = vec![0u64; n];
    for t in &profile.timeline {
        let s = t.sample as usize;
        all[s] += t.weight as u64;
        if t.trace == id {
            kept[s] += t.weight as u64;
        }
    }
    if kept.iter().all(|&k| k == 0) {
        return Err(format!("no sample carries trace id {id}"));
    }
    let mut new_index = vec![u32::MAX; n];
    let mut samples = Vec::new();
    for (i, s) in profile.samples.iter().enumerate() {
        if kept[i] == 0 {
            continue;
        }
        new_index[i] = samples.len() as u32;
        let values = s
            .values
            .iter()
            .map(|&v| {
                if kept[i] == all[i] {
                    v
                } else {
                    (v as u128 * kept[i] as u128 / all[i] as u128) as u64
                }
            })
            .collect();
        samples.push(Sample {
            values,
            ..s.clone()
        });
    }
    let timeline = profile
        .timeline
        .iter()
        .filter(|t| t.trace == id)
        .map(|t| TimedSample {
            sample: new_index[t.sample as usize],
            ..*t
        })
        .collect();
    let mut meta = profile.meta.clone();
    meta.extra.insert("trace_id".into(), id.to_string());
    Ok(Profile {
        meta,
        frames: profile.frames.clone(),
        stacks: profile.stacks.clone(),
        threads: profile.threads.clone(),
        samples,
        timeline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::timed_profile;

    #[test]
    fn a_cut_keeps_the_periods_of_one_trace() {
        let p = timed_profile();
        // Trace 7: sample 3 at 5 ms (1) and 25 ms (2), sample 0 at 10 ms (1).
        let q = cut(&p, 7).unwrap();
        q.validate().unwrap();
        assert_eq!(q.samples.len(), 2);
        assert_eq!(q.timeline.len(), 3);
        assert!(q.timeline.iter().all(|t| t.trace == 7));
        let by_stack = |q: &Profile, stack: u32| {
            q.samples
                .iter()
                .find(|s| s.stack == stack)
                .map(|s| s.values.clone())
        };
        // Sample 0 had three entries of weight 1 in the timeline (0, 10, 20 ms): one is kept.
        let s0 = &p.samples[0];
        let all0: u64 = p
            .timeline
            .iter()
            .filter(|t| t.sample == 0)
            .map(|t| t.weight as u64)
            .sum();
        assert_eq!(all0, 3);
        let want: Vec<u64> = s0.values.iter().map(|v| v / 3).collect();
        assert_eq!(by_stack(&q, s0.stack), Some(want));
        // Sample 3: entries at 5 (1, trace 7), 15 (1, trace 9), 25 (2, trace 7): 3 of 4.
        let s3 = &p.samples[3];
        let want: Vec<u64> = s3.values.iter().map(|v| v * 3 / 4).collect();
        assert_eq!(by_stack(&q, s3.stack), Some(want));
        assert_eq!(q.meta.extra.get("trace_id").map(String::as_str), Some("7"));
    }

    #[test]
    fn nothing_to_cut_is_said() {
        let p = timed_profile();
        assert_eq!(cut(&p, 8).unwrap_err(), "no sample carries trace id 8");
        let mut untraced = timed_profile();
        for t in &mut untraced.timeline {
            t.trace = 0;
        }
        assert!(cut(&untraced, 7).unwrap_err().contains("--mode cpu,trace"));
        let mut none = timed_profile();
        none.timeline.clear();
        assert!(cut(&none, 7).unwrap_err().contains("no timeline"));
    }

    #[test]
    fn ids_are_counted_by_weight() {
        let p = timed_profile();
        assert_eq!(trace_ids(&p), [(0, 5), (7, 4), (9, 2)]);
    }
}
