//! Virtual threads against the program's own clocks (fixture `tests/fixtures21/VThreads.java`:
//! 10,000 virtual threads, all started at once, of four kinds: two CPU-bound ones that yield
//! between chunks, one that sleeps, one parked on a shared ReentrantLock), on JDK 21 and 25:
//! - wall mode sees every kind, mounted or not: each kind's share of the virtual threads' wall
//!   samples is within 3 points of its share of the time the threads measured (start to end of
//!   each task), every virtual thread started in the session is registered (none untracked), and
//!   each sample is named `[virtual #id name]` after the very thread whose task it shows; a
//!   mounted thread carries its carrier's tid, an unmounted one none;
//! - cpu mode (through the carriers) splits the CPU of burn() between the two CPU-bound kinds
//!   within 3 points of the split the carriers' own CPU clocks measured around each call; most
//!   chunks resume after a yield, whose stack the walk sees only down to the lazily thawed
//!   frames: the agent completes them from the thread's JVMTI stack (without that, only a
//!   thread's first chunk kept its kind: spinA's share read 47 % for a true 33 %); and the
//!   samples are named after the virtual thread that ran, with its carrier's tid.

use jvmprof_profile::{Metric, Profile, ThreadState};
use std::collections::{HashMap, HashSet};
use std::path::Path;

mod common;
use common::*;

const KINDS: [&str; 4] = ["spinA", "spinB", "sleeper", "locker"];

/// `wall|cpu|threads <kind> <n>` lines of the fixture.
fn truth(stdout: &[u8], what: &str) -> HashMap<String, f64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            (it.next()? == what).then_some(())?;
            Some((it.next()?.to_string(), it.next()?.parse().ok()?))
        })
        .collect()
}

/// The kind whose task method is on a stack (root first), if any.
fn kind_of(frames: &[String]) -> Option<&'static str> {
    KINDS
        .iter()
        .find(|k| frames.iter().any(|f| *f == format!("VThreads.{k}")))
        .copied()
}

fn run_fixture(home: &Path, args: &[&str], file: &Path) -> std::process::Output {
    let cp = format!("{}:{}", classes21().display(), classes().display());
    let mut cmd = std::process::Command::new(jvmprof());
    cmd.arg("record").args(args).arg("-o").arg(file).arg("--");
    cmd.arg(jdk_tool(Some(home), "java"))
        .args(["--add-opens", "java.base/java.lang=ALL-UNNAMED", "-cp", &cp])
        .args(["VThreads", "10000", "3"]);
    run_ok(&mut cmd)
}

/// Shares in points of `values` by key.
fn shares(values: &HashMap<String, f64>) -> HashMap<String, f64> {
    let total: f64 = values.values().sum();
    values
        .iter()
        .map(|(k, v)| (k.clone(), 100.0 * v / total.max(1.0)))
        .collect()
}

fn frames(p: &Profile, stack: u32) -> Vec<String> {
    p.stack_frames(stack).map(|f| f.name()).collect()
}

fn check_wall(home: &Path) {
    let jdk = jdk_version(Some(home));
    let file = scratch(&format!("vthreads-{jdk}")).join("wall.jvmprof");
    let out = run_fixture(home, &["--mode", "wall", "--interval", "10ms"], &file);
    let real = shares(&truth(&out.stdout, "wall"));
    let started: f64 = truth(&out.stdout, "threads").values().sum();
    assert_eq!(started, 10_000.0, "JDK {jdk}: the fixture ran its threads");
    let p = jvmprof_profile::read_any(&file).unwrap();
    let samples = p.metric_index(Metric::Samples).unwrap();

    let mut by_kind: HashMap<String, f64> = HashMap::new();
    let (mut other, mut mounted) = (0.0, 0u64);
    // Samples of threads waiting (sleeping, parked), and those of them that named a carrier.
    let (mut waiting, mut waiting_with_carrier) = (0u64, 0u64);
    let mut carriers = HashSet::new();
    for s in &p.samples {
        let thread = &p.threads[s.thread as usize];
        let Some(label) = thread.name.strip_prefix("virtual #") else {
            continue;
        };
        let f = frames(&p, s.stack);
        let v = s.values[samples] as f64;
        let Some(kind) = kind_of(&f) else {
            other += v;
            continue;
        };
        // `virtual #<id> vt-<kind>-<i>`: the thread named is the one whose task the stack shows.
        let (id, name) = label.split_once(' ').unwrap_or((label, ""));
        assert!(
            id.parse::<u64>().is_ok(),
            "JDK {jdk}: thread {:?}",
            thread.name
        );
        assert!(
            name.starts_with(&format!("vt-{kind}-")),
            "JDK {jdk}: {kind} stack on thread {:?}",
            thread.name
        );
        *by_kind.entry(kind.to_string()).or_default() += v;
        if thread.tid != 0 {
            carriers.insert(thread.tid);
        }
        if s.state == ThreadState::Running && f.iter().any(|x| x == "VThreads.burn") {
            mounted += 1;
        }
        if matches!(s.state, ThreadState::Sleeping | ThreadState::Parked) {
            waiting += 1;
            waiting_with_carrier += (thread.tid != 0) as u64;
        }
    }
    let got = shares(&by_kind);
    let total: f64 = by_kind.values().sum::<f64>() + other;
    eprintln!(
        "JDK {jdk}: wall shares (profile / program): {}; other {:.2} %; {} carriers seen, \
         {mounted} mounted samples in burn(), {waiting_with_carrier} of {waiting} waiting ones \
         with a carrier",
        KINDS
            .iter()
            .map(|k| format!(
                "{k} {:.1} / {:.1}",
                got.get(*k).copied().unwrap_or(0.0),
                real[*k]
            ))
            .collect::<Vec<_>>()
            .join(", "),
        100.0 * other / total.max(1.0),
        carriers.len()
    );
    for k in KINDS {
        let (g, r) = (got.get(k).copied().unwrap_or(0.0), real[k]);
        assert!(
            (g - r).abs() <= 3.0,
            "JDK {jdk}: {k} has {g:.1} % of the virtual threads' wall samples, {r:.1} % of \
             their real time"
        );
    }
    assert!(
        other / total < 0.01,
        "JDK {jdk}: {other} of {total} outside the tasks"
    );
    assert!(
        mounted > 0,
        "JDK {jdk}: no mounted virtual thread in burn()"
    );
    // The carrier is read just after the stack: a thread woken meanwhile may name one.
    assert!(
        waiting > 0,
        "JDK {jdk}: no sleeping or parked virtual thread"
    );
    assert!(
        waiting_with_carrier * 20 <= waiting,
        "JDK {jdk}: {waiting_with_carrier} of {waiting} samples of waiting threads name a carrier"
    );
    assert!(
        !carriers.is_empty() && carriers.len() <= 64,
        "JDK {jdk}: {} carrier tids",
        carriers.len()
    );
    let meta = &p.meta.extra;
    assert_eq!(meta["virtual_threads_seen"], "10000", "JDK {jdk}: {meta:?}");
    assert_eq!(
        meta["virtual_threads_untracked"], "0",
        "JDK {jdk}: {meta:?}"
    );
}

fn check_cpu(home: &Path) {
    let jdk = jdk_version(Some(home));
    let file = scratch(&format!("vthreads-{jdk}")).join("cpu.jvmprof");
    let out = run_fixture(home, &["--mode", "cpu", "--interval", "1ms"], &file);
    let cpu = truth(&out.stdout, "cpu");
    let real = 100.0 * cpu["spinA"] / (cpu["spinA"] + cpu["spinB"]);
    let p = jvmprof_profile::read_any(&file).unwrap();
    eprintln!(
        "JDK {jdk}: {:?}",
        p.meta
            .extra
            .iter()
            .filter(|(k, _)| k.starts_with("virtual_"))
            .collect::<Vec<_>>()
    );
    let ns = p.metric_index(Metric::Ns).unwrap();
    let mut by_kind: HashMap<&str, f64> = HashMap::new();
    let mut named_ns = 0.0;
    for s in &p.samples {
        // The fixture's clock reads bracket burn(): the CPU of the reads themselves and of the
        // yields between chunks is not in its truth (and is larger per chunk in a thread's first
        // chunks, of which spinA has twice the share).
        let f = frames(&p, s.stack);
        if let Some(k) = kind_of(&f)
            && f.last().is_some_and(|top| top == "VThreads.burn")
        {
            *by_kind.entry(k).or_default() += s.values[ns] as f64;
            // Named after the virtual thread that ran, on its carrier's tid.
            let thread = &p.threads[s.thread as usize];
            let named = thread.name.starts_with("virtual #")
                && thread.name.contains(&format!(" vt-{k}-"))
                && thread.tid != 0;
            named_ns += named as u64 as f64 * s.values[ns] as f64;
        }
    }
    let all: f64 = by_kind.values().sum();
    eprintln!(
        "JDK {jdk}: {:.1} % of burn()'s CPU samples name their virtual thread",
        100.0 * named_ns / all
    );
    assert!(
        named_ns >= 0.95 * all,
        "JDK {jdk}: {named_ns} of {all} ns of burn() named after its virtual thread"
    );
    let (a, b) = (
        by_kind.get("spinA").copied().unwrap_or(0.0),
        by_kind["spinB"],
    );
    let got = 100.0 * a / (a + b);
    eprintln!(
        "JDK {jdk}: cpu spinA share of spinA+spinB: {got:.1} % sampled, {real:.1} % by the \
         carriers' clocks ({:.0} ms sampled, {:.0} ms real)",
        (a + b) / 1e6,
        (cpu["spinA"] + cpu["spinB"]) / 1e6
    );
    assert!(
        (got - real).abs() <= 3.0,
        "JDK {jdk}: spinA has {got:.1} % of the two CPU-bound kinds' CPU samples, {real:.1} % \
         of their CPU time"
    );
}

#[test]
fn wall_mode_sees_every_virtual_thread_with_true_shares() {
    let _g = serial();
    for home in vthread_homes() {
        check_wall(&home);
    }
}

#[test]
fn cpu_mode_splits_virtual_threads_cpu_truly() {
    let _g = serial();
    for home in vthread_homes() {
        check_cpu(&home);
    }
}
