//! speedscope (`.speedscope.json`), the file format of <https://www.speedscope.app>: frames
//! shared by name, and one `sampled` profile per thread (in thread order) whose samples are the
//! thread's distinct rendered stacks (root first) with their values as weights. The stacks are
//! aggregated, not in time order, so speedscope's time-order view is an ordered summary; its
//! left-heavy and sandwich views are exact. Threads with no value in the metric are left out.

use crate::error::Result;
use crate::format::{ExportOptions, resolve_metric};
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
    // Per thread: rendered stack -> value.
    let mut per_thread: Vec<HashMap<Vec<u32>, u64>> = vec![HashMap::new(); profile.threads.len()];
    for s in &profile.samples {
        let v = s.values[metric];
        let stack = profile.stacks.frames(s.stack);
        if v == 0 || stack.is_empty() {
            continue;
        }
        let key: Vec<u32> = stack.iter().map(|f| name_ids[*f as usize]).collect();
        let acc = per_thread[s.thread as usize].entry(key).or_insert(0);
        *acc = acc.saturating_add(v);
    }
    let unit = unit(profile.meta.metrics[metric]);
    let mut profiles = Vec::new();
    for (thread, stacks) in profile.threads.iter().zip(per_thread) {
        if stacks.is_empty() {
            continue;
        }
        let mut stacks: Vec<(Vec<u32>, u64)> = stacks.into_iter().collect();
        stacks.sort_by(|(a, _), (b, _)| {
            let a = a.iter().map(|i| frames[*i as usize].name.as_str());
            let b = b.iter().map(|i| frames[*i as usize].name.as_str());
            a.cmp(b)
        });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{alloc_profile, sample_profile};
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
