//! speedscope (`.speedscope.json`), the file format of <https://www.speedscope.app>: frames
//! shared by name, and one `sampled` profile per thread (in thread order) whose samples are the
//! thread's rendered stacks (root first) with their values as weights. Where the profile has a
//! timeline covering every sample (cpu and wall sampling, JFR input), the samples are in time
//! order, each sample's value spread over its times in proportion to their periods, so
//! speedscope's time-order view follows real time (without the gaps: see `.trace.json` for
//! those); otherwise each thread's distinct stacks are listed once, aggregated and sorted, and
//! the time-order view is an ordered summary. The left-heavy and sandwich views are exact
//! either way. Threads with no value in the metric are left out.

use crate::error::Result;
use crate::export::{ExportOptions, resolve_metric};
use crate::model::{Metric, Profile};
use crate::stacks::clean_name;
use serde::Serialize;
use std::collections::HashMap;
use std::io::Write;

pub const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

#[derive(Serialize)]
struct File<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    shared: Shared,
    profiles: Vec<SampledProfile<'a>>,
    name: String,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    exporter: String,
}

#[derive(Serialize)]
struct Shared {
    frames: Vec<FrameEntry>,
}

#[derive(Serialize)]
struct FrameEntry {
    name: String,
}

#[derive(Serialize)]
struct SampledProfile<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: u64,
    #[serde(rename = "endValue")]
    end_value: u64,
    samples: Vec<Vec<u32>>,
    weights: Vec<u64>,
}

/// The speedscope unit of a metric (`none` for counts).
fn unit(metric: Metric) -> &'static str {
    match metric.unit() {
        "count" => "none",
        unit => unit,
    }
}

/// Writes `profile` as speedscope JSON carrying one metric (`options.metric` or the default).
/// `options.threads` is not needed: every thread is its own profile.
pub fn write(profile: &Profile, options: &ExportOptions, out: impl Write) -> Result<()> {
    let metric = resolve_metric(profile, options.metric)?;
    let mut frames: Vec<FrameEntry> = Vec::new();
    let mut frame_ids: HashMap<String, u32> = HashMap::new();
    let name_ids: Vec<u32> = profile
        .frames
        .iter()
        .map(|f| {
            let name = clean_name(&f.name());
            *frame_ids.entry(name).or_insert_with_key(|name| {
                frames.push(FrameEntry { name: name.clone() });
                (frames.len() - 1) as u32
            })
        })
        .collect();
    let key = |stack: u32| -> Vec<u32> {
        let stack = profile.stacks.frames(stack);
        stack.iter().map(|f| name_ids[*f as usize]).collect()
    };
    let per_thread = match in_time_order(profile, metric, &key) {
        Some(p) => p,
        None => aggregated(profile, metric, &key, &frames),
    };
    let unit = unit(profile.meta.metrics[metric]);
    let mut profiles = Vec::new();
    for (thread, stacks) in profile.threads.iter().zip(per_thread) {
        if stacks.is_empty() {
            continue;
        }
        let (samples, weights): (Vec<Vec<u32>>, Vec<u64>) = stacks.into_iter().unzip();
        let end_value = weights.iter().fold(0u64, |a, w| a.saturating_add(*w));
        profiles.push(SampledProfile {
            kind: "sampled",
            name: &thread.name,
            unit,
            start_value: 0,
            end_value,
            samples,
            weights,
        });
    }
    let metric_name = profile.meta.metrics[metric].as_str();
    let file = File {
        schema: SCHEMA,
        shared: Shared { frames },
        profiles,
        name: if profile.meta.modes.is_empty() {
            format!("jvmprof {metric_name}")
        } else {
            format!("jvmprof {} ({metric_name})", profile.meta.modes.join(","))
        },
        active_profile_index: 0,
        exporter: format!("jvmprof {}", env!("CARGO_PKG_VERSION")),
    };
    let mut out = std::io::BufWriter::new(out);
    serde_json::to_writer(&mut out, &file).map_err(std::io::Error::from)?;
    out.flush()?;
    Ok(())
}

/// Per thread (by index): its stacks (frame ids, root first) with their values, in output order.
type PerThread = Vec<Vec<(Vec<u32>, u64)>>;

/// Each thread's (stack, value) in time order, from the timeline, or `None` if the timeline
/// does not account for every sample's periods (no timeline, a capped one, or no `samples`
/// metric to check it against). Runs of one stack are merged.
fn in_time_order(
    profile: &Profile,
    metric: usize,
    key: &dyn Fn(u32) -> Vec<u32>,
) -> Option<PerThread> {
    let periods_metric = profile.metric_index(Metric::Samples)?;
    if profile.timeline.is_empty() {
        return None;
    }
    // Periods the timeline gives each sample; they must be all of its periods.
    let mut left: Vec<(u64, u64)> = profile
        .samples
        .iter()
        .map(|s| (s.values[periods_metric], s.values[metric]))
        .collect();
    let mut seen = vec![0u64; profile.samples.len()];
    for t in &profile.timeline {
        seen[t.sample as usize] += u64::from(t.weight.max(1));
    }
    if seen
        .iter()
        .zip(&left)
        .any(|(seen, (periods, _))| seen != periods)
    {
        return None;
    }
    let mut order: Vec<usize> = (0..profile.timeline.len()).collect();
    order.sort_by_key(|&i| profile.timeline[i].offset_ns);
    let mut keys: Vec<Option<Vec<u32>>> = vec![None; profile.samples.len()];
    let mut per_thread: PerThread = vec![Vec::new(); profile.threads.len()];
    for i in order {
        let t = profile.timeline[i];
        let s = &profile.samples[t.sample as usize];
        let (periods, value) = &mut left[t.sample as usize];
        let w = u64::from(t.weight.max(1));
        // This entry's share of the value; the last one takes what rounding left.
        let share = if w >= *periods {
            *value
        } else {
            (u128::from(*value) * u128::from(w) / u128::from(*periods)) as u64
        };
        *periods -= w.min(*periods);
        *value -= share;
        let k = keys[t.sample as usize].get_or_insert_with(|| key(s.stack));
        if share == 0 || k.is_empty() {
            continue;
        }
        let run = &mut per_thread[s.thread as usize];
        match run.last_mut() {
            Some((last, v)) if last == k => *v = v.saturating_add(share),
            _ => run.push((k.clone(), share)),
        }
    }
    Some(per_thread)
}

/// Each thread's distinct stacks with their summed values, sorted by frame names.
fn aggregated(
    profile: &Profile,
    metric: usize,
    key: &dyn Fn(u32) -> Vec<u32>,
    frames: &[FrameEntry],
) -> PerThread {
    let mut per_thread: Vec<HashMap<Vec<u32>, u64>> = vec![HashMap::new(); profile.threads.len()];
    for s in &profile.samples {
        let v = s.values[metric];
        let k = key(s.stack);
        if v == 0 || k.is_empty() {
            continue;
        }
        let acc = per_thread[s.thread as usize].entry(k).or_insert(0);
        *acc = acc.saturating_add(v);
    }
    per_thread
        .into_iter()
        .map(|stacks| {
            let mut stacks: Vec<(Vec<u32>, u64)> = stacks.into_iter().collect();
            stacks.sort_by(|(a, _), (b, _)| {
                let a = a.iter().map(|i| frames[*i as usize].name.as_str());
                let b = b.iter().map(|i| frames[*i as usize].name.as_str());
                a.cmp(b)
            });
            stacks
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{alloc_profile, sample_profile, timed_profile};
    use serde_json::{Value, json};

    fn export(p: &Profile, metric: Option<Metric>) -> Value {
        let mut buf = Vec::new();
        let options = ExportOptions {
            metric,
            threads: false,
        };
        write(p, &options, &mut buf).unwrap();
        serde_json::from_slice(&buf).unwrap()
    }

    #[test]
    fn exact_frames_profiles_and_weights() {
        let v = export(&sample_profile(), None);
        assert_eq!(v["$schema"], SCHEMA);
        assert_eq!(v["name"], "jvmprof cpu (samples)");
        assert_eq!(v["activeProfileIndex"], 0);
        assert_eq!(
            v["exporter"],
            format!("jvmprof {}", env!("CARGO_PKG_VERSION"))
        );
        // App.work at lines 10 and 12 is one frame.
        assert_eq!(
            v["shared"]["frames"],
            json!([
                {"name": "com.example.App.main"},
                {"name": "com.example.App.work"},
                {"name": "java.util.HashMap.put"},
                {"name": "java.lang.Thread.run"},
                {"name": "Outer$Inner.run"},
                {"name": "write"},
            ])
        );
        assert_eq!(
            v["profiles"],
            json!([
                {
                    "type": "sampled", "name": "main", "unit": "none",
                    "startValue": 0, "endValue": 6,
                    "samples": [[0, 1], [0, 1, 2]], "weights": [1, 5],
                },
                {
                    "type": "sampled", "name": "worker-1", "unit": "none",
                    "startValue": 0, "endValue": 5,
                    "samples": [[0, 1], [3, 4, 5]], "weights": [1, 4],
                },
            ])
        );
    }

    #[test]
    fn a_timeline_puts_the_samples_in_time_order() {
        // timed_profile: main runs put (0-20 ms, 30-40 ms: lines differ, names do not), then
        // work alone at 50 ms; the worker writes at 5-25 ms (4 periods) and runs work at 105.
        let v = export(&timed_profile(), Some(Metric::Ns));
        let ms = 10_000_000u64;
        assert_eq!(v["profiles"][0]["samples"], json!([[0, 1, 2], [0, 1]]));
        assert_eq!(v["profiles"][0]["weights"], json!([5 * ms, ms]));
        assert_eq!(v["profiles"][1]["samples"], json!([[3, 4, 5], [0, 1]]));
        assert_eq!(v["profiles"][1]["weights"], json!([4 * ms, ms]));
        // A timeline that misses periods (capped by the agent) falls back to the summary.
        let mut p = timed_profile();
        p.timeline.pop();
        let v = export(&p, Some(Metric::Ns));
        assert_eq!(v["profiles"][1]["samples"], json!([[0, 1], [3, 4, 5]]));
    }

    #[test]
    fn units_follow_the_metric() {
        let v = export(&sample_profile(), Some(Metric::Ns));
        assert_eq!(v["profiles"][0]["unit"], "nanoseconds");
        assert_eq!(v["profiles"][0]["endValue"], 60_000_000);
        let v = export(&alloc_profile(), None);
        assert_eq!(v["profiles"][0]["unit"], "bytes");
        assert_eq!(v["profiles"][0]["weights"], json!([1_048_576, 4_800]));
        assert_eq!(v["shared"]["frames"][1]["name"], "byte[]");
    }
}
