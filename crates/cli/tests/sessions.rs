//! Sessions end, and options are checked, as a user expects: an attach session whose CLI is
//! killed stops by itself and writes the file that was asked for; `stop` and `status` reach a
//! running session; `--duration` works on launch; a bad option is refused before any JVM starts;
//! repeated attach sessions do not grow the target. Each on JDK 17 and JDK 25.

use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::*;

/// A `Service SECONDS` JVM that has printed "ready".
struct Target {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Target {
    fn start(home: Option<&Path>, seconds: u32) -> Target {
        let mut child = Command::new(jdk_tool(home, "java"))
            .arg("-cp")
            .arg(classes())
            .args(["Service", &seconds.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "ready");
        Target { child, lines }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    fn rss_kb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// Waits for the program's end: it printed "done" and exited 0.
    fn finishes_normally(mut self) {
        let rest: Vec<String> = self.lines.by_ref().map(|l| l.unwrap()).collect();
        assert_eq!(rest, vec!["done"]);
        assert!(self.child.wait().unwrap().success());
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn jvmprof_cmd(args: &[&str]) -> Command {
    let mut c = Command::new(jvmprof());
    c.args(args);
    c
}

fn output(args: &[&str]) -> Output {
    jvmprof_cmd(args).output().unwrap()
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Samples in a collapsed file.
fn collapsed_total(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum()
}

#[test]
fn a_session_whose_cli_is_killed_stops_and_writes_what_was_asked() {
    let _g = serial();
    for home in jdk_homes() {
        let target = Target::start(home.as_deref(), 30);
        let pid = target.pid();
        let dir = scratch("orphan");
        let wanted = dir.join("orphan.collapsed");
        let _ = std::fs::remove_file(&wanted);
        let mut cli = jvmprof_cmd(&["record", "--pid", &pid, "-o", wanted.to_str().unwrap()])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for("the session runs", Duration::from_secs(20), || {
            let s = output(&["status", &pid]);
            String::from_utf8_lossy(&s.stdout).contains("cpu session running")
        });
        std::thread::sleep(Duration::from_secs(1));
        let cli_pid = cli.id();
        cli.kill().unwrap(); // SIGKILL: no chance to send `stop`
        cli.wait().unwrap();
        wait_for(
            "the orphaned session writes its profile",
            Duration::from_secs(15),
            || collapsed_total(&wanted) > 0,
        );
        // Its private directory (named after the dead CLI) goes too, right after: the agent
        // removes it once the wanted file is written.
        let private = format!("jvmprof-{cli_pid}-");
        wait_for(
            "the orphaned session removes its private directory",
            Duration::from_secs(5),
            || {
                !std::fs::read_dir(std::env::temp_dir())
                    .unwrap()
                    .filter_map(|e| e.ok())
                    .any(|e| e.file_name().to_string_lossy().starts_with(&private))
            },
        );
        // A later session works.
        let again = dir.join("again.collapsed");
        let out = output(&[
            "record",
            "--pid",
            &pid,
            "--duration",
            "1s",
            "-o",
            again.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(collapsed_total(&again) > 0);
        target.finishes_normally();
    }
}

#[test]
fn stop_and_status_reach_the_running_session() {
    let _g = serial();
    for home in jdk_homes() {
        let target = Target::start(home.as_deref(), 30);
        let pid = target.pid();
        let nothing = output(&["status", &pid]);
        assert_eq!(nothing.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&nothing.stdout).contains("no profiling session"));
        let file = scratch("stop").join("stopped.collapsed");
        let _ = std::fs::remove_file(&file);
        let cli = jvmprof_cmd(&[
            "record",
            "--pid",
            &pid,
            "--mode",
            "wall",
            "-o",
            file.to_str().unwrap(),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        let mut text = String::new();
        wait_for("status shows the session", Duration::from_secs(20), || {
            let s = output(&["status", &pid]);
            text = String::from_utf8_lossy(&s.stdout).into_owned();
            s.status.success()
        });
        assert!(text.contains("wall session running"), "{text}");
        assert!(text.contains(file.to_str().unwrap()), "{text}");
        let json = output(&["status", &pid, "--format", "json"]);
        let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        assert_eq!(v["modes"], serde_json::json!(["wall"]));
        // A second session with another mode is refused with what to do.
        let other = scratch("stop").join("other.html");
        let refused = output(&[
            "record",
            "--pid",
            &pid,
            "--mode",
            "alloc",
            "-o",
            other.to_str().unwrap(),
        ]);
        assert!(!refused.status.success());
        let why = String::from_utf8_lossy(&refused.stderr);
        assert!(why.contains(&format!("jvmprof stop {pid}")), "{why}");
        assert!(why.contains("--mode wall,alloc"), "{why}");
        let stop = output(&["stop", &pid]);
        assert!(
            stop.status.success(),
            "{}",
            String::from_utf8_lossy(&stop.stderr)
        );
        let recorded = cli.wait_with_output().unwrap();
        assert!(
            recorded.status.success(),
            "{}",
            String::from_utf8_lossy(&recorded.stderr)
        );
        assert!(collapsed_total(&file) > 0);
        let after = output(&["status", &pid]);
        assert_eq!(after.status.code(), Some(1));
        let again = output(&["stop", &pid]);
        assert!(!again.status.success());
        assert!(String::from_utf8_lossy(&again.stderr).contains("no profiling session"));
        target.finishes_normally();
    }
}

#[test]
fn duration_works_when_record_launches_the_jvm() {
    let _g = serial();
    for home in jdk_homes() {
        let file = scratch("launch-duration").join("d.jvmprof");
        let out = record(
            home.as_deref(),
            &["--duration", "2s", "-o", file.to_str().unwrap()],
            &["Service", "6"],
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ready\ndone");
        let p = jvmprof_profile::read_any(&file).unwrap();
        // Profiling stopped after 2 s of a 6 s run.
        assert!(
            (1500..4500).contains(&p.meta.duration_ms),
            "session lasted {} ms",
            p.meta.duration_ms
        );
        assert!(p.total(0) > 0);
    }
}

/// A JVM whose clock runs an hour ahead (libfaketime moves the monotonic clock too) still ends
/// its session after `--duration`: the agent's writer sleeps in slices instead of waiting until
/// an absolute time on that clock, which never came.
#[test]
fn duration_works_with_the_clock_an_hour_ahead() {
    let _g = serial();
    let file = scratch("faketime-duration").join("d.jvmprof");
    let out = Command::new("faketime")
        .args(["-f", "+1h"])
        .arg(jvmprof())
        .args(["record", "--duration", "2s", "-o"])
        .arg(&file)
        .arg("--")
        .arg("java")
        .arg("-cp")
        .arg(classes())
        .args(["Service", "6"])
        .output()
        .expect("faketime must be installed (apt-get install faketime; .ci/run does)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p = jvmprof_profile::read_any(&file).unwrap();
    assert!(
        (1500..4500).contains(&p.meta.duration_ms),
        "session lasted {} ms",
        p.meta.duration_ms
    );
}

/// A script standing in for `java`: it leaves a marker file if it is ever run.
fn fake_java(dir: &Path) -> (PathBuf, PathBuf) {
    let marker = dir.join("java-was-started");
    let script = dir.join("java");
    std::fs::write(&script, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (script, marker)
}

#[test]
fn bad_options_are_refused_before_any_jvm_starts() {
    let dir = scratch("bad-options");
    let (java, marker) = fake_java(&dir);
    let ok_out = dir.join("p.html");
    let o = ok_out.to_str().unwrap();
    let bogus = dir.join("p.bogus");
    let cases: &[(&[&str], &str)] = &[
        (&["--interval", "10xs", "-o", o], "unknown unit"),
        (&["--interval", "0", "-o", o], "minimum"),
        (&["--mode", "bogus", "-o", o], "unknown mode 'bogus'"),
        (
            &["--mode", "cpu", "--value", "bytes", "-o", o],
            "no such metric",
        ),
        (&["--mode", "cpu,wall", "-o", o], "cannot be combined"),
        (&["--cpu-engine", "warp", "-o", o], "unknown cpu_engine"),
        (&["--duration", "0s", "-o", o], "more than 0"),
        (&["-o", "/no/such/directory/p.html"], "does not exist"),
        (&["-o", bogus.to_str().unwrap()], "p.bogus"),
        (&["--live", "-o", o], "`live` needs mode alloc"),
    ];
    for (args, expected) in cases {
        let start = Instant::now();
        let mut full = vec!["record"];
        full.extend_from_slice(args);
        full.extend(["--", java.to_str().unwrap(), "Main"]);
        let out = output(&full);
        let took = start.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one message: {err}");
        assert!(!marker.exists(), "{args:?} started the JVM");
        eprintln!("{args:?} refused in {took:?}");
    }
}

#[test]
fn bad_options_are_refused_before_attaching() {
    let _g = serial();
    let target = Target::start(None, 8);
    let pid = target.pid();
    let o = scratch("bad-attach").join("p.html");
    for (args, expected) in [
        (vec!["--mode", "exact"], "needs the agent at launch"),
        (vec!["--interval", "0"], "minimum"),
        (
            vec!["--mode", "wall", "--value", "live_bytes"],
            "no such metric",
        ),
    ] {
        let mut full = vec!["record", "--pid", &pid, "-o", o.to_str().unwrap()];
        full.extend(args.iter());
        let out = output(&full);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(!maps.contains("libjvmprof_agent"), "the agent was loaded");
    target.finishes_normally();
}

/// The signal sampler's ring (8 MB at depth 512) is made once per process and reused: repeated
/// attach sessions leave the target's memory as it was. The first sessions touch memory the JVM
/// then keeps (thread stacks, heap regions for the agent's short-lived threads), so the growth is
/// measured between the 15th and the 30th session; before the fix each session added ~8.5 MB.
#[test]
fn repeated_attach_sessions_do_not_grow_the_target() {
    let _g = serial();
    for home in jdk_homes() {
        let target = Target::start(home.as_deref(), 120);
        let pid = target.pid();
        let file = scratch("rss").join("r.collapsed");
        let mut rss = Vec::new();
        for _ in 0..30 {
            let out = output(&[
                "record",
                "--pid",
                &pid,
                "--duration",
                "200ms",
                "-o",
                file.to_str().unwrap(),
            ]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            rss.push(target.rss_kb());
        }
        let growth = rss[29] as i64 - rss[14] as i64;
        assert!(
            growth < 6 * 1024,
            "RSS grew {growth} KiB over 15 attach sessions ({home:?}): {rss:?}"
        );
    }
}

/// A JVM that dies of an uncaught OutOfMemoryError still leaves its profile: on JDK 25 such a
/// JVM exits without VMDeath, and the agent writes what it has when the error is thrown.
#[test]
fn a_jvm_dying_of_out_of_memory_leaves_its_profile() {
    let _guard = serial();
    for home in jdk_homes() {
        let jdk = home
            .as_deref()
            .map_or("17".into(), |h| h.display().to_string());
        let out_file = scratch(&format!("oom-{}", jdk.replace('/', "_"))).join("oom.collapsed");
        let _ = std::fs::remove_file(&out_file);
        let out = Command::new(jvmprof())
            .args(["record", "--mode", "alloc", "--alloc-interval", "64k", "-o"])
            .arg(&out_file)
            .arg("--")
            .arg(jdk_tool(home.as_deref(), "java"))
            .args(["-Xmx64m", "-cp"])
            .arg(classes())
            .arg("OomDeath")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "JDK {jdk}: the JVM's own exit code: {err}"
        );
        let profile = std::fs::read_to_string(&out_file)
            .unwrap_or_else(|e| panic!("JDK {jdk}: no profile ({e}): {err}"));
        assert!(
            profile.lines().any(|l| l.contains("OomDeath.fill;long[]")),
            "JDK {jdk}: {profile}"
        );
    }
}
