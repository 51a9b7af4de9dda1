//! End-to-end tests of `jvmprof record` on real JVMs running the fixture programs in
//! `tests/fixtures/`, whose ground truth is the JVM's own accounting (ThreadMXBean CPU time).
//!
//! The agent library must be built next to the `jvmprof` binary (`cargo build --release` before
//! `cargo test --release`, as README.md says). JVM tests run one at a time so that they do not
//! compete for the two cores of a CI machine.

use jvmprof_profile::{Profile, ThreadState};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

mod common;
use common::*;

/// Samples per thread name.
fn samples_by_thread(p: &Profile) -> HashMap<String, u64> {
    let mut m = HashMap::new();
    for s in &p.samples {
        *m.entry(p.threads[s.thread as usize].name.clone())
            .or_default() += s.values[0];
    }
    m
}

fn leaf_share(p: &Profile, thread: &str, method: &str) -> f64 {
    let (mut hit, mut all) = (0u64, 0u64);
    for s in &p.samples {
        if p.threads[s.thread as usize].name != thread {
            continue;
        }
        all += s.values[0];
        if p.stack_frames(s.stack)
            .last()
            .is_some_and(|f| f.name() == method)
        {
            hit += s.values[0];
        }
    }
    hit as f64 / all.max(1) as f64
}

/// [`check_cpu_split`], and true stacks: the busy threads' samples end in the method doing the
/// work (what AsyncGetCallTrace gives).
fn check_cpu_profile(r: &CpuRun) {
    check_cpu_split(r);
    assert!(leaf_share(&r.p, "busy-a", "CpuSplit.spinA") > 0.8);
    assert!(leaf_share(&r.p, "busy-b", "CpuSplit.spinB") > 0.5);
}

/// Asserts the CPU split between busy-a and busy-b matches the JVM's accounting within 3 points,
/// and that the sleeping and the blocked thread got at most 1 % of the samples.
fn check_cpu_split(r: &CpuRun) {
    let truth = jvm_cpu(&r.stdout);
    let by_thread = samples_by_thread(&r.p);
    let a = *by_thread.get("busy-a").unwrap_or(&0) as f64;
    let b = *by_thread.get("busy-b").unwrap_or(&0) as f64;
    assert!(a + b > 100.0, "too few samples: {by_thread:?}");
    let share = a / (a + b);
    let truth_share = truth["busy-a"] / (truth["busy-a"] + truth["busy-b"]);
    assert!(
        (share - truth_share).abs() <= 0.03,
        "busy-a share {share:.3} vs JVM accounting {truth_share:.3} ({by_thread:?}, {truth:?}); \
         the host stole {} ms of CPU during the run",
        r.steal_ms
    );
    let total: u64 = by_thread.values().sum();
    let idle = by_thread.get("sleeper").unwrap_or(&0) + by_thread.get("blocked").unwrap_or(&0);
    assert!(
        idle as f64 <= 0.01 * total as f64,
        "idle threads got {idle} of {total} samples"
    );
}

/// One profiled run of CpuSplit: the profile, the program's own accounting on stdout, and the
/// CPU time the host stole meanwhile (for the failure message).
struct CpuRun {
    p: Profile,
    stdout: Vec<u8>,
    steal_ms: u64,
}

fn cpu_run(java_home: Option<&Path>, name: &str, extra: &[&str]) -> CpuRun {
    let file = scratch(name).join("cpu.jvmprof");
    let mut args = vec!["--mode", "cpu", "--interval", "10ms", "-o"];
    let f = file.to_str().unwrap().to_string();
    args.push(&f);
    args.extend_from_slice(extra);
    let once = || {
        let steal = host_steal_ms();
        let out = record(java_home, &args, &["CpuSplit", "6"]);
        CpuRun {
            p: jvmprof_profile::read_any(&file).unwrap(),
            stdout: out.stdout,
            steal_ms: host_steal_ms() - steal,
        }
    };
    with_little_steal(&format!("CpuSplit ({name})"), once, |r| {
        let truth = jvm_cpu(&r.stdout);
        let busy = truth.get("busy-a").unwrap_or(&0.0) + truth.get("busy-b").unwrap_or(&0.0);
        (r.steal_ms, busy / 1e6)
    })
}

#[test]
fn cpu_shares_match_the_jvms_accounting() {
    let _g = serial();
    let r = cpu_run(None, "cpu", &[]);
    let p = &r.p;
    assert_eq!(p.meta.modes, vec!["cpu"]);
    assert_eq!(p.meta.engine, "asgct");
    assert_eq!(p.meta.interval_ns, 10_000_000);
    assert!(
        p.meta.jvm_version.starts_with("17"),
        "{}",
        p.meta.jvm_version
    );
    check_cpu_profile(&r);
    // Failed walks are counted by reason in the metadata, and each has its own sample.
    let failures: u64 = p.meta.walk_failures.values().sum();
    let unknown: u64 = p
        .samples
        .iter()
        .filter(|s| {
            p.stack_frames(s.stack)
                .any(|f| f.method.starts_with("[unknown: "))
        })
        .map(|s| s.values[0])
        .sum();
    assert_eq!(failures, unknown);
}

#[test]
fn a_second_run_gives_the_same_shares() {
    let _g = serial();
    check_cpu_profile(&cpu_run(None, "repeat1", &[]));
    check_cpu_profile(&cpu_run(None, "repeat2", &[]));
}

#[test]
fn safepoint_engine_also_matches_the_jvms_accounting() {
    let _g = serial();
    let r = cpu_run(None, "safepoint", &["--engine", "safepoint"]);
    let p = &r.p;
    assert_eq!(p.meta.engine, "safepoint");
    check_cpu_split(&r);
    // This engine credits the CPU a thread used since the last tick to the stack it has at the
    // tick. busy-a always spins, so its stacks end in spinA. busy-b spins 10 ms and then sleeps
    // 20 ms, so at a 10 ms tick it is often already asleep: its samples end in spinB or in
    // Thread.sleep, split by how the ticks fall (46 % to 70 % spinB in three runs).
    assert!(leaf_share(p, "busy-a", "CpuSplit.spinA") > 0.8);
    let spin = leaf_share(p, "busy-b", "CpuSplit.spinB");
    let sleep = leaf_share(p, "busy-b", "java.lang.Thread.sleep");
    assert!(
        spin > 0.2 && spin + sleep > 0.9,
        "busy-b: spinB {spin:.2}, sleep {sleep:.2}"
    );
}

#[test]
fn wall_mode_samples_every_thread_with_its_state() {
    let _g = serial();
    let file = scratch("wall").join("wall.jvmprof");
    record(
        None,
        &[
            "--mode",
            "wall",
            "--interval",
            "20ms",
            "-o",
            file.to_str().unwrap(),
        ],
        &["CpuSplit", "4"],
    );
    let p = jvmprof_profile::read_any(&file).unwrap();
    assert_eq!(p.meta.modes, vec!["wall"]);
    let by_thread = samples_by_thread(&p);
    let a = by_thread["busy-a"] as f64;
    for idle in ["sleeper", "blocked"] {
        let n = *by_thread.get(idle).unwrap_or(&0) as f64;
        assert!(
            n >= 0.8 * a && n <= 1.25 * a,
            "{idle} has {n} wall samples, busy-a {a}: {by_thread:?}"
        );
    }
    let state_share = |thread: &str, state: ThreadState| {
        let (mut hit, mut all) = (0u64, 0u64);
        for s in &p.samples {
            if p.threads[s.thread as usize].name == thread {
                all += s.values[0];
                if s.state == state {
                    hit += s.values[0];
                }
            }
        }
        hit as f64 / all.max(1) as f64
    };
    assert!(state_share("sleeper", ThreadState::Sleeping) > 0.9);
    assert!(state_share("blocked", ThreadState::Blocked) > 0.9);
    assert!(state_share("busy-a", ThreadState::Running) > 0.9);
}

#[test]
fn attach_by_pid_profiles_and_the_target_finishes_normally() {
    let _g = serial();
    let mut target = Command::new("java")
        .arg("-cp")
        .arg(classes())
        .args(["Service", "10"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(target.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    let file = scratch("attach").join("attach.collapsed");
    let out = run_ok(Command::new(jvmprof()).args([
        "record",
        "--pid",
        &target.id().to_string(),
        "--duration",
        "3s",
        "-o",
        file.to_str().unwrap(),
    ]));
    let collapsed = std::fs::read_to_string(&file).unwrap();
    let value = |l: &str| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap();
    let all: u64 = collapsed.lines().map(value).sum();
    let work: u64 = collapsed
        .lines()
        .filter(|l| l.contains("Service.main;Service.work "))
        .map(value)
        .sum();
    // CPU samples follow the CPU the thread got (less than 3 s when the machine is busy), so the
    // check is that the busy method dominates, not an absolute count.
    assert!(
        work >= 20 && work as f64 >= 0.9 * all as f64,
        "Service.work has {work} of {all} samples:\n{collapsed}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert_eq!(rest, vec!["done"]);
    assert!(target.wait().unwrap().success());
}

#[test]
fn record_exits_with_the_jvms_exit_code() {
    let _g = serial();
    let file = scratch("exit").join("exit.collapsed");
    let out = Command::new(jvmprof())
        .args(["record", "-o", file.to_str().unwrap(), "--", "java", "-cp"])
        .arg(classes())
        .args(["Exit", "7"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    assert!(
        file.is_file(),
        "the profile is written even on a non-zero exit"
    );
}

#[test]
fn a_bad_option_is_reported_and_the_application_still_runs() {
    let _g = serial();
    let out = Command::new("java")
        .arg(format!("-agentpath:{}=colour=red", agent().display()))
        .arg("-cp")
        .arg(classes())
        .args(["Service", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ready\ndone\n");
    assert_eq!(stderr.matches("jvmprof:").count(), 1, "{stderr}");
    assert!(stderr.contains("unknown option 'colour'"), "{stderr}");
}

#[test]
fn every_format_is_written_and_parses() {
    let _g = serial();
    let dir = scratch("formats");
    let native = dir.join("p.jvmprof");
    record(None, &["-o", native.to_str().unwrap()], &["CpuSplit", "2"]);
    let p = jvmprof_profile::read_any(&native).unwrap();
    let total: u64 = p.samples.iter().map(|s| s.values[0]).sum();
    let convert = |name: &str, extra: &[&str]| {
        let out = dir.join(name);
        run_ok(
            Command::new(jvmprof())
                .arg("convert")
                .arg(&native)
                .arg("-o")
                .arg(&out)
                .args(extra),
        );
        out
    };
    // collapsed: every line "frames value", values add up to the sample total.
    let collapsed = std::fs::read_to_string(convert("p.collapsed", &["--threads"])).unwrap();
    let mut sum = 0u64;
    for line in collapsed.lines() {
        let (stack, value) = line.rsplit_once(' ').unwrap();
        assert!(stack.starts_with('['), "thread frame first: {line}");
        sum += value.parse::<u64>().unwrap();
    }
    assert_eq!(sum, total);
    assert!(collapsed.contains("[busy-a];java.lang.Thread.run;"));
    // pprof: read back through our pprof reader, same totals.
    let pprof = jvmprof_profile::read_any(convert("p.pb.gz", &[])).unwrap();
    assert_eq!(
        pprof.samples.iter().map(|s| s.values[0]).sum::<u64>(),
        total
    );
    // speedscope: valid JSON with frames and weighted samples.
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(convert("p.speedscope.json", &[])).unwrap()).unwrap();
    let weights: u64 = json["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|pr| pr["weights"].as_array().unwrap().iter())
        .map(|w| w.as_u64().unwrap())
        .sum();
    assert_eq!(weights, total);
    assert!(!json["shared"]["frames"].as_array().unwrap().is_empty());
    // HTML: self-contained.
    let html = std::fs::read_to_string(convert("p.html", &[])).unwrap();
    assert!(html.contains("CpuSplit.spinA"));
    assert!(!html.contains("src=\"http") && !html.contains("href=\"http"));
    // report names the hot method.
    let report = run_ok(Command::new(jvmprof()).arg("report").arg(&native));
    assert!(String::from_utf8_lossy(&report.stdout).contains("CpuSplit.spinA"));
}

/// Short-lived threads keep their Java names: a thread that ended may still have samples in the
/// ring, and the agent forgets its name only once the writer has named them. (The kernel's name
/// of a Java thread holds 15 characters, so a sample named by it reads "short-lived-wor".)
#[test]
fn short_lived_threads_keep_their_java_names() {
    let _g = serial();
    for home in jdk_homes() {
        let file = scratch("short-names").join("cpu.jvmprof");
        record(
            home.as_deref(),
            &["--interval", "1ms", "-o", file.to_str().unwrap()],
            &["ShortNames", "300", "4"],
        );
        let p = jvmprof_profile::read_any(&file).unwrap();
        let (mut full, mut all) = (0u64, 0u64);
        for s in &p.samples {
            let name = &p.threads[s.thread as usize].name;
            if name.starts_with("short-lived-wor") {
                all += s.values[0];
                if name.starts_with("short-lived-worker-") {
                    full += s.values[0];
                }
            }
        }
        // 300 threads × 4 ms of CPU at 1 ms: about 1,200 samples.
        assert!(
            all >= 600,
            "only {all} samples of the short-lived threads ({home:?})"
        );
        assert!(
            full as f64 >= 0.97 * all as f64,
            "{full} of {all} samples of short-lived threads have their Java name ({home:?})"
        );
    }
}

/// JDK 25 is tested beside JDK 17 (a missing JDK 25 fails under CI).
#[test]
fn works_on_jdk_25() {
    let Some(home) = jdk25() else { return };
    let _g = serial();
    let r = cpu_run(Some(&home), "jdk25", &[]);
    assert!(
        r.p.meta.jvm_version.starts_with("25"),
        "{}",
        r.p.meta.jvm_version
    );
    check_cpu_profile(&r);
    let wall = scratch("jdk25").join("wall.collapsed");
    record(
        Some(&home),
        &["--mode", "wall", "-o", wall.to_str().unwrap()],
        &["Service", "2"],
    );
    assert!(
        std::fs::read_to_string(&wall)
            .unwrap()
            .contains("Service.work")
    );
}

/// A second attach while a session runs is refused with a clear error, and the target keeps
/// running: once callbacks are registered the agent never returns an error from Agent_OnAttach
/// (HotSpot would unload it with live callbacks and the JVM would crash).
#[test]
fn a_refused_attach_leaves_the_target_running() {
    let _g = serial();
    let mut target = Command::new("java")
        .arg("-cp")
        .arg(classes())
        .args(["Service", "8"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(target.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    let pid = target.id().to_string();
    let dir = scratch("refused");
    let first = Command::new(jvmprof())
        .args(["record", "--pid", &pid, "--duration", "4s", "-o"])
        .arg(dir.join("first.collapsed"))
        .spawn()
        .unwrap();
    // Wait until the first session runs (its status file appears), then try a second one.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let second = Command::new(jvmprof())
        .args(["record", "--pid", &pid, "--duration", "1s", "-o"])
        .arg(dir.join("second.collapsed"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success());
    assert!(stderr.contains("already running"), "{stderr}");
    assert!(first.wait_with_output().unwrap().status.success());
    assert!(dir.join("first.collapsed").is_file());
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert_eq!(rest, vec!["done"]);
    assert!(target.wait().unwrap().success());
}

#[test]
fn diff_of_two_runs() {
    let _g = serial();
    let dir = scratch("diff");
    let a = dir.join("a.jvmprof");
    let b = dir.join("b.jvmprof");
    record(None, &["-o", a.to_str().unwrap()], &["CpuSplit", "2"]);
    record(None, &["-o", b.to_str().unwrap()], &["CpuSplit", "2"]);
    let text = run_ok(Command::new(jvmprof()).arg("diff").arg(&a).arg(&b));
    // The text lists the methods whose share changed: CpuSplit's own, unless both runs gave
    // them exactly the same shares (it happened: 273 samples each, equal splits), when they are
    // rightly left out.
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.starts_with("base: "), "{text}");
    assert!(text.contains("Largest changes in total share"), "{text}");
    let shares = |p: &Path| -> Vec<(u64, u64)> {
        let profile = jvmprof_profile::read_any(p).unwrap();
        let all = profile.total(0).max(1);
        ["spinA", "spinB"]
            .iter()
            .map(|m| {
                let with: u64 = profile
                    .samples
                    .iter()
                    .filter(|s| {
                        profile.stacks.frames(s.stack).iter().any(|f| {
                            let f = &profile.frames[*f as usize];
                            f.class == "CpuSplit" && f.method == *m
                        })
                    })
                    .map(|s| s.values[0])
                    .sum();
                (with, all)
            })
            .collect()
    };
    let (sa, sb) = (shares(&a), shares(&b));
    let same = sa.iter().zip(&sb).all(|((x, n), (y, m))| x * m == y * n);
    assert!(same || text.contains("CpuSplit."), "{text}");
    let html = dir.join("d.html");
    run_ok(
        Command::new(jvmprof())
            .arg("diff")
            .arg(&a)
            .arg(&b)
            .arg("-o")
            .arg(&html),
    );
    assert!(
        std::fs::read_to_string(&html)
            .unwrap()
            .contains("CpuSplit.spinB")
    );
    let folded = dir.join("d.collapsed");
    run_ok(
        Command::new(jvmprof())
            .arg("diff")
            .arg(&a)
            .arg(&b)
            .arg("-o")
            .arg(&folded),
    );
    // difffolded: "stack BASE NEW"; the totals are the two runs' sample counts.
    let (mut base, mut new) = (0u64, 0u64);
    for line in std::fs::read_to_string(&folded).unwrap().lines() {
        let mut it = line.rsplitn(3, ' ');
        new += it.next().unwrap().parse::<u64>().unwrap();
        base += it.next().unwrap().parse::<u64>().unwrap();
    }
    let total = |p: &std::path::Path| {
        let p = jvmprof_profile::read_any(p).unwrap();
        p.total(0)
    };
    assert_eq!((base, new), (total(&a), total(&b)));
}

/// The native file is the record stream, appended about once a second: a JVM killed with
/// SIGKILL after 10 s leaves a file that `report` reads, with at least 90 % of the samples the
/// agent had taken 2 s before the kill (its status file says how many, once a second).
#[test]
fn a_jvm_killed_with_sigkill_leaves_a_readable_profile() {
    let _guard = serial();
    for home in jdk_homes() {
        let dir = scratch("sigkill");
        let out = dir.join("killed.jvmprof");
        let status = dir.join("status");
        let _ = std::fs::remove_file(&out);
        let _ = std::fs::remove_file(&status);
        let mut child = Command::new(jdk_tool(home.as_deref(), "java"))
            .arg(format!(
                "-agentpath:{}=mode=cpu,interval=10ms,file={},status={}",
                agent().display(),
                out.display(),
                status.display()
            ))
            .arg("-cp")
            .arg(classes())
            .arg("Service")
            .arg("60")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_secs(8));
        // "elapsed_ms samples", rewritten once a second.
        let taken: u64 = std::fs::read_to_string(&status)
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_secs(2));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        assert!(taken > 300, "only {taken} samples in 8 s");
        let p = jvmprof_profile::read_any(&out).unwrap();
        let read = p.total(0);
        assert!(
            read as f64 >= 0.9 * taken as f64,
            "read {read} samples, the agent had taken {taken} 2 s before the kill"
        );
        assert!(
            p.meta.extra["damage"].contains("no end record"),
            "{:?}",
            p.meta.extra
        );
        // `report` reads it too, and says the session did not end.
        let o = run_ok(Command::new(jvmprof()).arg("report").arg(&out));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("Service.work"), "{text}");
        assert!(text.contains("no end record"), "{text}");
    }
}
