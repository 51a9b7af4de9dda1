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
//!   samples are named after the virtual thread that ran, with its carrier's tid;
//! - root mode's CPU timer (`--root VThreads.task --timer cpu`) charges each virtual thread only
//!   the CPU it used while mounted: burn()'s CPU per kind within 15 % of the program's clocks
//!   (the probes' calibrated cost comes off), and the sleepers' 10,000 sleeps cost under 50 µs
//!   each (the carrier's clock charged a sleeper with all that ran on its carrier meanwhile);
//! - a wall session attached to a running JVM sees the virtual threads that were alive before
//!   it (adopted from the thread containers): all 8 of `VThreadsIdle`'s, with their frames;
//! - `jvmprof dump` lists the virtual threads of a running JVM (fixture `VThreadsIdle`) by
//!   container, exactly those it started, each with its own frames and state, in JSON and text.

use jvmprof_profile::{Metric, Profile, ThreadState};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

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
    run_fixture_with(home, args, file, "10000")
}

fn run_fixture_with(
    home: &Path,
    args: &[&str],
    file: &Path,
    threads: &str,
) -> std::process::Output {
    let cp = format!("{}:{}", classes21().display(), classes().display());
    let mut cmd = std::process::Command::new(jvmprof());
    cmd.arg("record").args(args).arg("-o").arg(file).arg("--");
    cmd.arg(jdk_tool(Some(home), "java"))
        .args(["--add-opens", "java.base/java.lang=ALL-UNNAMED", "-cp", &cp])
        .args(["VThreads", threads, "3"]);
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

struct Target(Child);

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_idle(home: &Path) -> Target {
    let cp = format!("{}:{}", classes21().display(), classes().display());
    let mut child = Command::new(jdk_tool(Some(home), "java"))
        .args(["-cp", &cp, "VThreadsIdle", "5", "3"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    Target(child)
}

fn check_attach(home: &Path) {
    let jdk = jdk_version(Some(home));
    let target = start_idle(home);
    let pid = target.0.id().to_string();
    let file = scratch(&format!("vthreads-{jdk}")).join("attach.jvmprof");
    run_ok(
        Command::new(jvmprof())
            .args(["record", "--pid", &pid, "--mode", "wall"])
            .args(["--duration", "2s", "-o", file.to_str().unwrap()]),
    );
    let p = jvmprof_profile::read_any(&file).unwrap();
    assert_eq!(
        p.meta.extra["virtual_threads_adopted"], "8",
        "JDK {jdk}: {:?}",
        p.meta.extra
    );
    let mut seen: HashMap<String, bool> = HashMap::new();
    for s in &p.samples {
        let name = &p.threads[s.thread as usize].name;
        if !name.starts_with("virtual #") {
            continue;
        }
        let f = frames(&p, s.stack);
        let own = f
            .iter()
            .any(|x| x == "VThreadsIdle.sleepForever" || x == "VThreadsIdle.waitForLock");
        *seen.entry(name.clone()).or_default() |= own;
    }
    eprintln!("JDK {jdk}: attached wall session saw {seen:?}");
    assert_eq!(seen.len(), 8, "JDK {jdk}: {seen:?}");
    assert!(seen.values().all(|own| *own), "JDK {jdk}: {seen:?}");
    for i in 0..5 {
        assert!(
            seen.keys().any(|n| n.ends_with(&format!(" idle-root-{i}"))),
            "JDK {jdk}: idle-root-{i} not in {seen:?}"
        );
    }
    drop(target);
}

#[test]
fn an_attached_wall_session_sees_virtual_threads_started_before_it() {
    let _g = serial();
    for home in vthread_homes() {
        check_attach(&home);
    }
}

fn check_dump(home: &Path) {
    let jdk = jdk_version(Some(home));
    let target = start_idle(home);
    let pid = target.0.id().to_string();
    let out = run_ok(Command::new(jvmprof()).args(["dump", &pid, "--format", "json"]));
    let dump: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let containers = dump["containers"].as_array().unwrap();
    let names = |c: &serde_json::Value| -> Vec<String> {
        let mut v: Vec<String> = c["threads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    let root = containers
        .iter()
        .find(|c| c["name"] == "<root>")
        .unwrap_or_else(|| panic!("JDK {jdk}: no root container in {dump}"));
    assert_eq!(
        names(root),
        (0..5).map(|i| format!("idle-root-{i}")).collect::<Vec<_>>(),
        "JDK {jdk}"
    );
    for t in root["threads"].as_array().unwrap() {
        let frames: Vec<&str> = t["stack"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["frame"].as_str().unwrap())
            .collect();
        assert!(
            frames.contains(&"VThreadsIdle.sleepForever"),
            "JDK {jdk}: {t}"
        );
        assert_eq!(t["state"], "TIMED_WAITING", "JDK {jdk}: {t}");
    }
    let exec = containers
        .iter()
        .find(|c| {
            c["name"]
                .as_str()
                .unwrap()
                .contains("ThreadPerTaskExecutor")
        })
        .unwrap_or_else(|| panic!("JDK {jdk}: no executor container in {dump}"));
    assert_eq!(exec["parent"], "<root>");
    assert_eq!(exec["threads"].as_array().unwrap().len(), 3, "JDK {jdk}");
    for t in exec["threads"].as_array().unwrap() {
        assert_eq!(t["state"], "WAITING", "JDK {jdk}: {t}");
        let stack = t["stack"].to_string();
        assert!(stack.contains("VThreadsIdle.waitForLock"), "JDK {jdk}: {t}");
        assert!(stack.contains("ReentrantLock.lock"), "JDK {jdk}: {t}");
    }
    // Exactly the program's virtual threads: 8 in all, and none of them among the platform ones.
    assert_eq!(dump["virtual_threads"], 8, "JDK {jdk}");
    let platform: Vec<&str> = dump["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(platform.contains(&"main") && !platform.iter().any(|n| n.starts_with("idle-")));

    let text = run_ok(Command::new(jvmprof()).args(["dump", &pid]));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("Container <root> (5 virtual threads)"),
        "JDK {jdk}: {text}"
    );
    assert!(text.contains("\"idle-root-3\" #"), "JDK {jdk}: {text}");
    assert!(text.contains(" virtual TIMED_WAITING"), "JDK {jdk}: {text}");
    assert!(
        text.contains("\tat VThreadsIdle.waitForLock(line "),
        "JDK {jdk}: {text}"
    );
}

#[test]
fn dump_lists_virtual_threads_by_container() {
    let _g = serial();
    for home in vthread_homes() {
        check_dump(&home);
    }
}

fn check_root_cpu(home: &Path) {
    let jdk = jdk_version(Some(home));
    let file = scratch(&format!("vthreads-{jdk}")).join("root.jvmprof");
    let out = run_fixture_with(
        home,
        &[
            "--mode",
            "exact",
            "--root",
            "VThreads.task",
            "--timer",
            "cpu",
        ],
        &file,
        "10000",
    );
    let cpu = truth(&out.stdout, "cpu");
    let sleepers = truth(&out.stdout, "threads")["sleeper"];
    let p = jvmprof_profile::read_any(&file).unwrap();
    let ns = p.metric_index(Metric::CpuNs).unwrap();
    let mut burn: HashMap<&str, f64> = HashMap::new();
    let mut sleeper = 0.0;
    for s in &p.samples {
        let f = frames(&p, s.stack);
        let v = s.values[ns] as f64;
        match kind_of(&f) {
            Some(k) if f.iter().any(|x| x == "VThreads.burn") => {
                *burn.entry(k).or_default() += v;
            }
            Some("sleeper") => sleeper += v,
            _ => {}
        }
    }
    let per_sleep_us = sleeper / (10.0 * sleepers) / 1e3;
    eprintln!(
        "JDK {jdk}: root --timer cpu: burn() under spinA {:.0} ms (program {:.0} ms), spinB {:.0} \
         ms ({:.0} ms); sleepers {:.1} ms in all, {per_sleep_us:.1} µs per sleep",
        burn.get("spinA").copied().unwrap_or(0.0) / 1e6,
        cpu["spinA"] / 1e6,
        burn.get("spinB").copied().unwrap_or(0.0) / 1e6,
        cpu["spinB"] / 1e6,
        sleeper / 1e6
    );
    for k in ["spinA", "spinB"] {
        let (got, real) = (burn.get(k).copied().unwrap_or(0.0), cpu[k]);
        assert!(
            (got / real - 1.0).abs() <= 0.15,
            "JDK {jdk}: root mode charged burn() under {k} {:.0} ms of CPU, the program measured \
             {:.0} ms",
            got / 1e6,
            real / 1e6
        );
    }
    assert!(
        per_sleep_us < 50.0,
        "JDK {jdk}: sleepers charged {:.0} ms of CPU, {per_sleep_us:.0} µs per sleep",
        sleeper / 1e6
    );
}

#[test]
fn root_cpu_timer_charges_virtual_threads_their_mounted_cpu() {
    let _g = serial();
    for home in vthread_homes() {
        check_root_cpu(&home);
    }
}
