//! Samples linked to traces: trace mode beside cpu or wall sampling tags each sample with the
//! call tree its thread was in, across executor hand-offs, and `jvmprof convert FILE --trace-id
//! ID` cuts one request's samples out of the profile.
//!
//! Ground truth from tests/fixtures/TraceLink.java: requests of three kinds, each burning CPU only
//! in methods of its own kind (spinK on the caller, taskK through a pool's submit, execK through
//! its execute, asyncK through CompletableFuture), two callers at once sharing the pool. A
//! request's cut must hold frames of its kind only, and all four parts of its work.

mod common;
use common::*;

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

const CALLERS: usize = 2;
const REQUESTS: usize = 6;
const PARTS: [&str; 4] = ["spin", "task", "exec", "async"];

/// The kind-specific frames of a collapsed line: (part, kind) pairs.
fn kinds_of(stack: &str) -> BTreeSet<(&'static str, u32)> {
    let mut out = BTreeSet::new();
    for frame in stack.split(';') {
        let Some(m) = frame.strip_prefix("TraceLink.") else {
            continue;
        };
        for part in PARTS {
            if let Some(k) = m.strip_prefix(part).and_then(|k| k.parse::<u32>().ok()) {
                out.insert((part, k));
            }
        }
    }
    out
}

/// (stack, value) lines of a collapsed file.
fn collapsed(path: &Path) -> Vec<(String, u64)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let (s, v) = l.rsplit_once(' ').unwrap();
            (s.to_string(), v.parse().unwrap())
        })
        .collect()
}

fn check(home: Option<&Path>, mode: &str) {
    let what = format!("{mode} on JDK {}", jdk_version(home));
    let dir = scratch(&format!("trace-link-{mode}-{}", jdk_version(home)));
    let file = dir.join("link.jvmprof");
    let out = record(
        home,
        &[
            "--mode",
            &format!("{mode},trace"),
            "--interval",
            "5ms",
            "--include",
            "TraceLink",
            "-o",
            file.to_str().unwrap(),
        ],
        &[
            "TraceLink",
            &CALLERS.to_string(),
            &REQUESTS.to_string(),
            "30",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("request ")).count(),
        CALLERS * REQUESTS,
        "{what}: {stdout}"
    );

    // The sampled ns stay the sampling's own (trace mode's tree adds exact calls, no times).
    let p = jvmprof_profile::read_any(&file).unwrap();
    let col = |m| p.metric_index(m).unwrap();
    let sum = |i: usize| p.samples.iter().map(|s| s.values[i]).sum::<u64>();
    let (samples, ns, calls) = (
        col(jvmprof_profile::Metric::Samples),
        col(jvmprof_profile::Metric::Ns),
        col(jvmprof_profile::Metric::Calls),
    );
    assert_eq!(p.meta.metrics.len(), 3, "{what}: {:?}", p.meta.metrics);
    assert_eq!(
        sum(ns),
        sum(samples) * 5_000_000,
        "{what}: ns of the samples"
    );
    assert!(sum(calls) > 0, "{what}: no exact calls in the profile");

    // The joined trace: each request a tree with its id, and the work it handed over in trees
    // of other threads with the same id.
    let json = dir.join("link.json");
    run_ok(Command::new(jvmprof()).args([
        "trace".as_ref(),
        file.as_os_str(),
        "-o".as_ref(),
        json.as_os_str(),
    ]));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let mut requests: BTreeMap<String, u32> = BTreeMap::new();
    let mut handed: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for root in v["roots"].as_array().unwrap() {
        let method = root["method"].as_str().unwrap();
        let thread = root["thread"].as_str().unwrap();
        let id = root["trace_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: root without a trace_id: {root}"))
            .to_string();
        if let Some(k) = method.strip_prefix("TraceLink.request") {
            assert!(thread.starts_with("link-caller-"), "{what}: {thread}");
            let k: u32 = k.parse().unwrap();
            assert!(
                requests.insert(id.clone(), k).is_none(),
                "{what}: two requests with trace id {id}"
            );
        } else if method != "TraceLink.main" {
            handed
                .entry(id)
                .or_default()
                .push((method.to_string(), thread.to_string()));
        }
    }
    assert_eq!(requests.len(), CALLERS * REQUESTS, "{what}: {requests:?}");
    for (id, k) in &requests {
        let mut got: Vec<String> = handed
            .get(id)
            .unwrap_or_else(|| panic!("{what}: request {id} handed nothing over"))
            .iter()
            .map(|(m, t)| {
                assert!(!t.starts_with("link-caller-"), "{what}: {m} on {t}");
                m.clone()
            })
            .collect();
        got.sort();
        let want: Vec<String> = ["async", "exec", "task"]
            .iter()
            .map(|p| format!("TraceLink.{p}{k}"))
            .collect();
        assert_eq!(got, want, "{what}: the trees of request {id} (kind {k})");
    }

    // Each request's cut: frames of its kind only, and every part of its work.
    let full = dir.join("all.collapsed");
    run_ok(Command::new(jvmprof()).args([
        "convert".as_ref(),
        file.as_os_str(),
        "-o".as_ref(),
        full.as_os_str(),
    ]));
    let kind_samples = |lines: &[(String, u64)]| -> u64 {
        lines
            .iter()
            .filter(|(s, _)| !kinds_of(s).is_empty())
            .map(|(_, v)| v)
            .sum()
    };
    let mut in_cuts = 0;
    for (id, k) in &requests {
        let cut = dir.join(format!("cut-{id}.collapsed"));
        run_ok(Command::new(jvmprof()).args([
            "convert".as_ref(),
            file.as_os_str(),
            "--trace-id".as_ref(),
            id.as_ref(),
            "-o".as_ref(),
            cut.as_os_str(),
        ]));
        let lines = collapsed(&cut);
        let mut parts = BTreeSet::new();
        for (stack, _) in &lines {
            for (part, kind) in kinds_of(stack) {
                assert_eq!(
                    kind, *k,
                    "{what}: request {id} of kind {k} has a sample of kind {kind}: {stack}"
                );
                parts.insert(part);
            }
        }
        assert_eq!(
            parts,
            PARTS.into_iter().collect::<BTreeSet<_>>(),
            "{what}: parts of request {id} (kind {k}) with samples"
        );
        in_cuts += kind_samples(&lines);
    }
    if mode == "cpu" {
        // The signal handler reads the thread's tree as it samples: every sample of a
        // request's work is in that request's cut. (A wall sample is tagged only when its
        // thread's tree was the same just before and after the safepoint walk, so a thread
        // between two requests may leave one untagged.)
        assert_eq!(
            in_cuts,
            kind_samples(&collapsed(&full)),
            "{what}: samples of the requests' work outside every request's cut"
        );
    }

    // Bad ids are refused by name.
    let o = Command::new(jvmprof())
        .args(["convert".as_ref(), file.as_os_str(), "--trace-id".as_ref()])
        .args(["12345", "-o", dir.join("none.collapsed").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!o.status.success(), "{what}: an unknown trace id was cut");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no sample carries trace id 12345"),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn cpu_samples_carry_their_request_across_executors() {
    let _g = serial();
    for home in jdk_homes() {
        check(home.as_deref(), "cpu");
    }
}

#[test]
fn wall_samples_carry_their_request_across_executors() {
    let _g = serial();
    check(None, "wall");
}
