//! Timeline (`.trace.json`): the Chrome trace event format, which Perfetto
//! (<https://ui.perfetto.dev>), `chrome://tracing` and speedscope open. One track per thread
//! (named after it, in thread order), holding the thread's samples over real time as nested
//! slices, root frame outermost: consecutive samples that share a prefix of their stacks extend
//! the same slices, so a method that ran for 200 ms is one 200 ms slice. In a profile with
//! thread states (wall mode) the outermost slice of each track is the state (running,
//! sleeping, blocked, waiting, parked, …) and the stacks nest inside it.
//!
//! Time comes from [`Profile::timeline`]: a CPU sample at `t` covers the periods that ended
//! there, `[t - weight × interval, t)`, and a wall sample (which sees the thread at `t`)
//! `[t, t + interval)`; a thread with no sample for longer than half an interval past that
//! shows a gap (it was off CPU in cpu mode, or the session could not see it). A profile without a timeline (exact
//! mode, collapsed or pprof input, an old file) has no time to show: that is an error naming
//! why, not an empty file.

use crate::error::{Error, Result};
use crate::model::{Profile, ThreadState};
use crate::stacks::clean_name;
use serde::Serialize;
use std::collections::HashMap;
use std::io::Write;

#[derive(Serialize)]
struct File {
    #[serde(rename = "traceEvents")]
    trace_events: Vec<Event>,
    #[serde(rename = "displayTimeUnit")]
    display_time_unit: &'static str,
    #[serde(rename = "otherData")]
    other_data: OtherData,
}

#[derive(Serialize)]
struct OtherData {
    exporter: String,
    modes: String,
    command: String,
    start_unix_ms: u64,
    /// The monotonic clock (System.nanoTime) at offset 0, where the agent recorded it.
    #[serde(skip_serializing_if = "Option::is_none")]
    start_monotonic_ns: Option<u64>,
    interval_ns: u64,
}

#[derive(Serialize, Debug, PartialEq)]
struct Event {
    ph: &'static str,
    name: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    cat: &'static str,
    pid: u32,
    tid: u64,
    /// Microseconds since the start of the profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<serde_json::Value>,
}

/// One open slice on a track: a frame (or a state) and when it began, in ns.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slice {
    State(ThreadState),
    /// A frame, by its name's index in the names list (lines do not split a slice).
    Frame(u32),
}

/// The interval a sample stands for: the profile's, else the median gap between a thread's
/// consecutive samples (JFR recordings), else 10 ms.
fn interval_ns(profile: &Profile) -> u64 {
    if profile.meta.interval_ns > 0 {
        return profile.meta.interval_ns;
    }
    let mut last = vec![None; profile.threads.len()];
    let mut gaps = Vec::new();
    for t in &profile.timeline {
        let thread = profile.samples[t.sample as usize].thread as usize;
        if let Some(prev) = last[thread].replace(t.offset_ns)
            && t.offset_ns > prev
        {
            gaps.push(t.offset_ns - prev);
        }
    }
    gaps.sort_unstable();
    gaps.get(gaps.len() / 2).copied().unwrap_or(10_000_000)
}

/// Whether the profile records thread states worth a track level of their own (wall mode).
fn has_states(profile: &Profile) -> bool {
    profile.meta.modes.iter().any(|m| m == "wall")
        || profile
            .samples
            .iter()
            .any(|s| !matches!(s.state, ThreadState::Running | ThreadState::Unknown))
}

/// Writes `profile`'s timeline as Chrome trace JSON.
pub fn write(profile: &Profile, out: impl Write) -> Result<()> {
    let events = events(profile)?;
    let meta = &profile.meta;
    let file = File {
        trace_events: events,
        display_time_unit: "ms",
        other_data: OtherData {
            exporter: format!("jvmprof {}", env!("CARGO_PKG_VERSION")),
            modes: meta.modes.join(","),
            command: meta.command.clone(),
            start_unix_ms: meta.start_unix_ms,
            start_monotonic_ns: meta
                .extra
                .get("start_monotonic_ns")
                .and_then(|v| v.parse().ok()),
            interval_ns: interval_ns(profile),
        },
    };
    let mut out = std::io::BufWriter::new(out);
    serde_json::to_writer(&mut out, &file).map_err(std::io::Error::from)?;
    out.flush()?;
    Ok(())
}

fn events(profile: &Profile) -> Result<Vec<Event>> {
    if profile.timeline.is_empty() {
        return Err(Error::Export(
            "the profile has no timeline (only cpu and wall sampling and JFR recordings record \
             when each sample was taken; exact mode, collapsed and pprof files do not)"
                .to_string(),
        ));
    }
    let pid = profile.meta.pid;
    let interval = interval_ns(profile);
    let states = has_states(profile);
    let us = |ns: u64| (ns / 1000) as f64 + (ns % 1000) as f64 / 1000.0;
    let track = |thread: usize| -> u64 {
        // Tracks are keyed by the thread's OS id where it has one, else by its position; ids
        // above the OS range keep the two apart.
        match profile.threads[thread].tid {
            0 => (1 << 40) + thread as u64,
            tid => tid,
        }
    };
    let mut out = vec![Event {
        ph: "M",
        name: "process_name".into(),
        cat: "",
        pid,
        tid: 0,
        ts: None,
        dur: None,
        args: Some(serde_json::json!({ "name": process_name(profile) })),
    }];
    for (i, t) in profile.threads.iter().enumerate() {
        for (name, value) in [
            ("thread_name", serde_json::json!({ "name": t.name })),
            ("thread_sort_index", serde_json::json!({ "sort_index": i })),
        ] {
            out.push(Event {
                ph: "M",
                name: name.into(),
                cat: "",
                pid,
                tid: track(i),
                ts: None,
                dur: None,
                args: Some(value),
            });
        }
    }
    let mut names: Vec<String> = Vec::new();
    let mut name_ids: HashMap<String, u32> = HashMap::new();
    let frame_name: Vec<u32> = profile
        .frames
        .iter()
        .map(|f| {
            *name_ids
                .entry(clean_name(&f.name()))
                .or_insert_with_key(|n| {
                    names.push(n.clone());
                    names.len() as u32 - 1
                })
        })
        .collect();
    // Each thread's open slices (outermost first, with their start) and where its last sample
    // ended.
    let mut open: Vec<Vec<(Slice, u64)>> = vec![Vec::new(); profile.threads.len()];
    let mut last_end: Vec<u64> = vec![0; profile.threads.len()];
    let close = |out: &mut Vec<Event>, thread: usize, slices: &[(Slice, u64)], end: u64| {
        // Outermost first: viewers sort slices by start and then by length, and keep the file's
        // order between slices of the same start and length, taking the first for the parent.
        for &(slice, start) in slices {
            let (name, cat) = match slice {
                Slice::State(s) => (s.as_str().to_string(), "state"),
                Slice::Frame(n) => (names[n as usize].clone(), "frame"),
            };
            out.push(Event {
                ph: "X",
                name,
                cat,
                pid,
                tid: track(thread),
                ts: Some(us(start)),
                dur: Some(us(end - start)),
                args: None,
            });
        }
    };
    let mut order: Vec<usize> = (0..profile.timeline.len()).collect();
    order.sort_by_key(|&i| profile.timeline[i].offset_ns);
    let mut wanted: Vec<Slice> = Vec::new();
    for i in order {
        let t = profile.timeline[i];
        let sample = &profile.samples[t.sample as usize];
        let thread = sample.thread as usize;
        wanted.clear();
        if states {
            wanted.push(Slice::State(sample.state));
        }
        wanted.extend(
            profile
                .stacks
                .frames(sample.stack)
                .into_iter()
                .map(|f| Slice::Frame(frame_name[f as usize])),
        );
        // A CPU-clock sample is taken when the thread has used its periods, so they end at its
        // time; a wall sample sees the thread at its time, and stands for the period after it.
        let span = u64::from(t.weight.max(1)) * interval;
        let (start, end) = if states {
            (t.offset_ns, t.offset_ns + span)
        } else {
            (t.offset_ns.saturating_sub(span), t.offset_ns)
        };
        let slices = &mut open[thread];
        // A gap of more than half an interval after the last sample ends every slice there.
        let gap = !slices.is_empty() && start > last_end[thread] + interval / 2;
        let keep = if gap {
            0
        } else {
            slices
                .iter()
                .zip(&wanted)
                .take_while(|((a, _), b)| a == *b)
                .count()
        };
        let closed = slices.split_off(keep);
        close(
            &mut out,
            thread,
            &closed,
            if gap { last_end[thread] } else { start },
        );
        let slices = &mut open[thread];
        for &w in &wanted[keep..] {
            slices.push((w, start));
        }
        last_end[thread] = end;
    }
    for (thread, slices) in open.iter().enumerate() {
        close(&mut out, thread, slices, last_end[thread]);
    }
    Ok(out)
}

fn process_name(profile: &Profile) -> String {
    let meta = &profile.meta;
    let what = if meta.command.is_empty() {
        "java".to_string()
    } else {
        meta.command.clone()
    };
    if meta.pid > 0 {
        format!("{what} (pid {})", meta.pid)
    } else {
        what
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Meta, Metric, ProfileBuilder, Thread};
    use crate::testdata::{sample_profile, timed_profile};
    use crate::{Frame, TimedSample};

    /// The complete slices of one track as (name, start ms, duration ms), in start order, then
    /// longest first, then in file order (as viewers nest them).
    fn track(events: &[Event], tid: u64) -> Vec<(String, f64, f64)> {
        let mut v: Vec<(String, f64, f64)> = events
            .iter()
            .filter(|e| e.ph == "X" && e.tid == tid)
            .map(|e| (e.name.clone(), e.ts.unwrap() / 1e3, e.dur.unwrap() / 1e3))
            .collect();
        v.sort_by(|a, b| a.1.total_cmp(&b.1).then(b.2.total_cmp(&a.2)));
        v
    }

    fn slices(v: &[(&str, f64, f64)]) -> Vec<(String, f64, f64)> {
        v.iter().map(|(n, s, d)| (n.to_string(), *s, *d)).collect()
    }

    #[test]
    fn slices_follow_the_samples_of_each_thread() {
        let events = events(&timed_profile()).unwrap();
        // A cpu sample covers the period that ended at its time. main: work(10);put at
        // 0,10,20, work(12);put at 30,40, work(10) at 50. Lines do not split a slice, so work
        // is one slice over all six samples and put one over five.
        assert_eq!(
            track(&events, 101),
            slices(&[
                ("com.example.App.main", 0.0, 50.0),
                ("com.example.App.work", 0.0, 50.0),
                ("java.util.HashMap.put", 0.0, 40.0),
            ])
        );
        // worker: write at 5, 15, 25 (two periods, from 5); then nothing until 105, a gap.
        assert_eq!(
            track(&events, 102),
            slices(&[
                ("java.lang.Thread.run", 0.0, 25.0),
                ("Outer$Inner.run", 0.0, 25.0),
                ("write", 0.0, 25.0),
                ("com.example.App.main", 95.0, 10.0),
                ("com.example.App.work", 95.0, 10.0),
            ])
        );
        let names: Vec<(&str, u64)> = events
            .iter()
            .filter(|e| e.name == "thread_name")
            .map(|e| (e.args.as_ref().unwrap()["name"].as_str().unwrap(), e.tid))
            .collect();
        assert_eq!(names, [("main", 101), ("worker-1", 102)]);
    }

    #[test]
    fn wall_profiles_put_the_thread_state_outermost() {
        let meta = Meta {
            modes: vec!["wall".into()],
            metrics: vec![Metric::Samples],
            interval_ns: 1_000_000,
            ..Meta::default()
        };
        let mut b = ProfileBuilder::new(meta);
        let t = b.thread(Thread {
            tid: 7,
            name: "w".into(),
        });
        let run = b.frame(Frame::java("W", "run", "", 0));
        let sleep = b.frame(Frame::java("java.lang.Thread", "sleep", "", 0));
        let s_run = b.stack(&[run]);
        let s_sleep = b.stack(&[run, sleep]);
        let ms = 1_000_000;
        for (at, stack, state) in [
            (0, s_run, ThreadState::Running),
            (1, s_run, ThreadState::Running),
            (2, s_sleep, ThreadState::Sleeping),
            (3, s_sleep, ThreadState::Sleeping),
            (4, s_sleep, ThreadState::Sleeping),
            (5, s_run, ThreadState::Running),
        ] {
            let i = b.add(t, stack, state, &[1]);
            b.add_time(i, at * ms, 1);
        }
        let events = events(&b.finish()).unwrap();
        assert_eq!(
            track(&events, 7),
            slices(&[
                ("running", 0.0, 2.0),
                ("W.run", 0.0, 2.0),
                ("sleeping", 2.0, 3.0),
                ("W.run", 2.0, 3.0),
                ("java.lang.Thread.sleep", 2.0, 3.0),
                ("running", 5.0, 1.0),
                ("W.run", 5.0, 1.0),
            ])
        );
    }

    #[test]
    fn a_profile_without_time_is_refused_with_the_reason() {
        let e = events(&sample_profile()).unwrap_err().to_string();
        assert!(e.contains("no timeline"), "{e}");
    }

    #[test]
    fn the_file_is_chrome_trace_json() {
        let mut out = Vec::new();
        write(&timed_profile(), &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        assert!(events.iter().all(|e| e["ph"] == "X" || e["ph"] == "M"));
        assert_eq!(v["otherData"]["interval_ns"], 10_000_000);
        // Out-of-order timeline entries (a flush before `finish` sorted them) give the same.
        let mut p = timed_profile();
        p.timeline.reverse();
        let _: &[TimedSample] = &p.timeline;
        let mut again = Vec::new();
        write(&p, &mut again).unwrap();
        assert_eq!(out, again);
    }
}
