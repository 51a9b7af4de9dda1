//! Timelines (`.trace.json`) of a real four-thread program against its own clock: each thread
//! its own track, wall mode's states where the threads really were, and cpu mode's slices over
//! the bursts the program timed with System.nanoTime (the agent's clock too).

mod common;

use common::*;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// The four worker threads of the Timeline4 fixture.
const THREADS: [&str; 4] = ["bursty", "sleeper", "waiter", "parker"];

/// A trace read back: slices per track name as (category, name, start ns, end ns), in offsets
/// from the profile's start, and the monotonic clock at that start.
struct Trace {
    slices: HashMap<String, Vec<(String, String, f64, f64)>>,
    start_monotonic_ns: f64,
}

/// Reads a trace in which each of `threads` must have exactly one track.
fn read_trace(path: &Path, threads: &[&str]) -> Trace {
    let v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let mut names: HashMap<u64, String> = HashMap::new();
    for e in events {
        if e["ph"] == "M" && e["name"] == "thread_name" {
            let tid = e["tid"].as_u64().unwrap();
            let name = e["args"]["name"].as_str().unwrap().to_string();
            assert!(
                names.insert(tid, name.clone()).is_none(),
                "two names for {tid}"
            );
        }
    }
    let mut slices: HashMap<String, Vec<(String, String, f64, f64)>> = HashMap::new();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let track = &names[&e["tid"].as_u64().unwrap()];
        let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
        assert!(dur >= 0.0, "{e}");
        slices.entry(track.clone()).or_default().push((
            e["cat"].as_str().unwrap().to_string(),
            e["name"].as_str().unwrap().to_string(),
            ts * 1e3,
            (ts + dur) * 1e3,
        ));
    }
    for t in threads {
        assert_eq!(
            names.values().filter(|n| *n == t).count(),
            1,
            "thread {t} must have exactly one track: {names:?}"
        );
    }
    Trace {
        slices,
        start_monotonic_ns: v["otherData"]["start_monotonic_ns"].as_f64().unwrap(),
    }
}

/// The program's bursts, `burst <start> <end>` in System.nanoTime, as offsets from `origin`.
fn bursts(stdout: &[u8], origin: f64) -> Vec<(f64, f64)> {
    let v: Vec<(f64, f64)> = String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| {
            let mut it = l.strip_prefix("burst ")?.split(' ');
            let s: f64 = it.next()?.parse().ok()?;
            let e: f64 = it.next()?.parse().ok()?;
            Some((s - origin, e - origin))
        })
        .collect();
    assert_eq!(v.len(), 5, "{}", String::from_utf8_lossy(stdout));
    v
}

/// How much of [from, to) the slices cover (slices of one level do not overlap).
fn covered(slices: &[&(String, String, f64, f64)], from: f64, to: f64) -> f64 {
    slices
        .iter()
        .map(|s| (s.3.min(to) - s.2.max(from)).max(0.0))
        .sum()
}

#[test]
fn every_thread_has_a_track_with_its_states_and_bursts_where_the_program_timed_them() {
    let _guard = serial();
    for home in jdk_homes() {
        let jdk = home
            .as_deref()
            .map_or("17".into(), |h| h.display().to_string());
        let dir = scratch(&format!("timeline-{}", jdk.replace('/', "_")));

        // Wall mode, written straight as a timeline.
        let wall = dir.join("wall.trace.json");
        let out = record(
            home.as_deref(),
            &[
                "--mode",
                "wall",
                "--interval",
                "10ms",
                "-o",
                wall.to_str().unwrap(),
            ],
            &["Timeline4", "5"],
        );
        let trace = read_trace(&wall, &THREADS);
        let bursts_wall = bursts(&out.stdout, trace.start_monotonic_ns);
        let states = |t: &str| -> Vec<&(String, String, f64, f64)> {
            trace.slices[t].iter().filter(|s| s.0 == "state").collect()
        };
        let share = |t: &str, names: &[&str]| -> f64 {
            let all = states(t);
            let total: f64 = all.iter().map(|s| s.3 - s.2).sum();
            let some: f64 = all
                .iter()
                .filter(|s| names.contains(&s.1.as_str()))
                .map(|s| s.3 - s.2)
                .sum();
            some / total
        };
        assert!(share("sleeper", &["sleeping"]) > 0.9, "{jdk}: sleeper");
        assert!(
            share("waiter", &["waiting", "timed_waiting"]) > 0.9,
            "{jdk}: waiter"
        );
        assert!(share("parker", &["parked"]) > 0.9, "{jdk}: parker");
        // bursty: running in its bursts, sleeping between them.
        let running: Vec<_> = states("bursty")
            .into_iter()
            .filter(|s| s.1 == "running")
            .collect();
        let sleeping: Vec<_> = states("bursty")
            .into_iter()
            .filter(|s| s.1 == "sleeping")
            .collect();
        for (i, &(s, e)) in bursts_wall.iter().enumerate() {
            let r = covered(&running, s, e) / (e - s);
            eprintln!("{jdk}: wall burst {i}: {r:.3} running");
            assert!(r > 0.8, "{jdk}: burst {i} is {r:.2} running in wall mode");
            if let Some(&(next, _)) = bursts_wall.get(i + 1) {
                let z = covered(&sleeping, e, next) / (next - e);
                assert!(z > 0.8, "{jdk}: gap {i} is {z:.2} sleeping in wall mode");
            }
        }
        // Stack frames nest inside the states: burn() is there, inside running.
        assert!(
            trace.slices["bursty"]
                .iter()
                .any(|s| s.0 == "frame" && s.1 == "Timeline4.burn"),
            "{jdk}: no burn frame"
        );

        // Cpu mode, recorded natively and converted: slices only where the thread used CPU.
        let native = dir.join("cpu.jvmprof");
        let out = record(
            home.as_deref(),
            &[
                "--mode",
                "cpu",
                "--interval",
                "5ms",
                "-o",
                native.to_str().unwrap(),
            ],
            &["Timeline4", "5"],
        );
        let cpu = dir.join("cpu.trace.json");
        run_ok(
            Command::new(jvmprof())
                .arg("convert")
                .arg(&native)
                .arg("-o")
                .arg(&cpu),
        );
        // Only threads that used CPU have samples, so a track: the waiter and the parker never
        // run long enough for a 5 ms period.
        let trace = read_trace(&cpu, &["bursty"]);
        let bursts_cpu = bursts(&out.stdout, trace.start_monotonic_ns);
        // The outermost frame slices of bursty (Thread.run) show when it ran.
        let outer: Vec<_> = trace.slices["bursty"]
            .iter()
            .filter(|s| s.0 == "frame" && s.1 == "java.lang.Thread.run")
            .collect();
        let mut gaps = 0.0;
        let mut in_gaps = 0.0;
        for (i, &(s, e)) in bursts_cpu.iter().enumerate() {
            let r = covered(&outer, s, e) / (e - s);
            eprintln!("{jdk}: cpu burst {i}: {r:.3} covered");
            assert!(r > 0.8, "{jdk}: burst {i} is {r:.2} covered in cpu mode");
            if let Some(&(next, _)) = bursts_cpu.get(i + 1) {
                gaps += next - e;
                in_gaps += covered(&outer, e, next);
            }
        }
        eprintln!("{jdk}: cpu gaps: {:.3} covered", in_gaps / gaps);
        assert!(
            in_gaps / gaps < 0.15,
            "{jdk}: {:.2} of the sleeps between bursts shows as running",
            in_gaps / gaps
        );
    }
}

#[test]
fn a_timeline_of_a_profile_without_times_is_refused_before_the_run() {
    let _guard = serial();
    let dir = scratch("timeline-refused");
    let out = Command::new(jvmprof())
        .args(["record", "--mode", "lock", "-o"])
        .arg(dir.join("x.trace.json"))
        .args(["--", "java", "-version"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("which cpu and wall sampling record"), "{err}");
    assert!(
        !err.contains("openjdk version"),
        "the JVM must not run: {err}"
    );
}
