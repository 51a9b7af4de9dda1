//! Root-method profiling (`record --mode exact --root ...`, JFluid) end to end on JDK 17 and 25,
//! against the ground truth `tests/fixtures/RootFixture.java` prints about itself: a JVM started
//! with no profiler flags is attached to, only the call subgraph of the root is instrumented and
//! timed, and every probe is gone when the session stops.
//!
//! The fixture counts each call context itself (`truth KEY VALUE` after each command) and times
//! its sleeps and CPU loop with System.nanoTime and ThreadMXBean; the tests compare the profile
//! with those numbers, exactly for counts. The comparison is made on the fixture's own frames
//! (RootFixture, RootLater, RootPlugin, not the JVM's lambda classes): whether JDK methods on the
//! way (IntStream.forEach, Method.invoke, Thread.sleep) are instrumented too is the
//! implementation's choice, so a JDK frame is left out of a stack and a stack that ends in a JDK
//! frame counts towards its fixture caller's time but not its calls. For the same reason the
//! times of `sleeper` and `spin` are their inclusive times (a JDK callee's time is theirs).

use jvmprof_profile::{Metric, Profile};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::*;

/// What one fixture command printed: `truth KEY VALUE`.
type Truth = BTreeMap<String, u64>;

fn t(truth: &Truth, key: &str) -> u64 {
    *truth
        .get(key)
        .unwrap_or_else(|| panic!("the fixture printed no `truth {key}`: {truth:?}"))
}

/// A text some other thread appends to (a child's stderr).
#[derive(Clone, Default)]
struct Log(Arc<Mutex<String>>);

impl Log {
    fn collect(mut from: impl Read + Send + 'static) -> Log {
        let log = Log::default();
        let to = log.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 {
                    break;
                }
                to.0.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        log
    }

    fn text(&self) -> String {
        self.0.lock().unwrap().clone()
    }
}

/// A `RootFixture` JVM started with no profiler flags that has printed "ready".
struct Fixture {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Log,
    jdk: String,
}

impl Fixture {
    fn start(home: Option<&Path>) -> Fixture {
        let mut child = Command::new(jdk_tool(home, "java"))
            .arg("-cp")
            .arg(classes())
            .arg("RootFixture")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let lines = line_channel(child.stdout.take().unwrap());
        let stderr = Log::collect(child.stderr.take().unwrap());
        let mut f = Fixture {
            child,
            stdin,
            lines,
            stderr,
            jdk: jdk_name(home),
        };
        let first = f.next_line("ready", Duration::from_secs(60));
        assert_eq!(first, "ready", "JDK {}: {}", f.jdk, f.stderr.text());
        f
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    fn next_line(&mut self, waiting_for: &str, limit: Duration) -> String {
        match self.lines.recv_timeout(limit) {
            Ok(l) => l,
            Err(RecvTimeoutError::Timeout) => panic!(
                "JDK {}: no `{waiting_for}` from the fixture within {limit:?}; its stderr:\n{}",
                self.jdk,
                self.stderr.text()
            ),
            Err(RecvTimeoutError::Disconnected) => panic!(
                "JDK {}: the fixture ended while we waited for `{waiting_for}` (exit {:?}); its stderr:\n{}",
                self.jdk,
                self.child.try_wait(),
                self.stderr.text()
            ),
        }
    }

    /// Sends one command and returns the truth it printed before `done CMD`.
    fn command(&mut self, cmd: &str) -> Truth {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{cmd}").unwrap();
        stdin.flush().unwrap();
        let done = format!("done {cmd}");
        let mut truth = Truth::new();
        loop {
            let line = self.next_line(&done, Duration::from_secs(180));
            if line == done {
                return truth;
            }
            match parse_truth(&line) {
                Some((k, v)) => {
                    truth.insert(k, v);
                }
                None => panic!("JDK {}: unexpected fixture output `{line}`", self.jdk),
            }
        }
    }

    /// EOF on stdin: the program ends normally, with no exception or verifier error.
    fn finish(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "JDK {}: the fixture did not end on EOF",
                self.jdk
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        std::thread::sleep(Duration::from_millis(200)); // the stderr reader's last bytes
        let err = self.stderr.text();
        assert!(status.success(), "JDK {}: exit {status}: {err}", self.jdk);
        for bad in [
            "Exception in thread",
            "VerifyError",
            "LinkageError",
            "NoClassDefFoundError",
            "AbstractMethodError",
            "fatal error",
        ] {
            assert!(
                !err.contains(bad),
                "JDK {}: the fixture's stderr has {bad}:\n{err}",
                self.jdk
            );
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn line_channel(from: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn parse_truth(line: &str) -> Option<(String, u64)> {
    let mut it = line.split_whitespace();
    (it.next()? == "truth").then_some(())?;
    let k = it.next()?.to_string();
    let v = it.next()?.parse().ok()?;
    Some((k, v))
}

fn jdk_name(home: Option<&Path>) -> String {
    home.map_or("17".into(), |h| h.display().to_string())
}

fn jvmprof_out(args: &[&str]) -> Output {
    Command::new(jvmprof()).args(args).output().unwrap()
}

/// `jvmprof record --pid PID --mode exact ARGS -o FILE` running in the background.
struct Session {
    cli: Child,
    stderr: Log,
    file: PathBuf,
    pid: String,
}

impl Session {
    /// Starts the session and waits until `jvmprof status` sees it.
    fn attach(pid: &str, args: &[&str], file: &Path) -> Session {
        let _ = std::fs::remove_file(file);
        let mut cli = Command::new(jvmprof())
            .args(["record", "--pid", pid, "--mode", "exact"])
            .args(args)
            .arg("-o")
            .arg(file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Log::collect(cli.stderr.take().unwrap());
        let start = Instant::now();
        loop {
            if let Some(status) = cli.try_wait().unwrap() {
                std::thread::sleep(Duration::from_millis(200));
                panic!(
                    "record --pid {pid} {args:?} ended ({status}) before its session ran:\n{}",
                    stderr.text()
                );
            }
            if jvmprof_out(&["status", pid]).status.success() {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "record --pid {pid} {args:?}: no session after 60 s:\n{}",
                stderr.text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Session {
            cli,
            stderr,
            file: file.to_path_buf(),
            pid: pid.to_string(),
        }
    }

    /// `jvmprof stop PID`, then the CLI's end (its exit status and stderr).
    fn stop_raw(mut self) -> (std::process::ExitStatus, String, PathBuf) {
        let stop = jvmprof_out(&["stop", &self.pid]);
        assert!(
            stop.status.success(),
            "jvmprof stop {}: {}\nrecord's stderr:\n{}",
            self.pid,
            String::from_utf8_lossy(&stop.stderr),
            self.stderr.text()
        );
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(s) = self.cli.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.cli.kill();
                panic!(
                    "record --pid {} did not end within 120 s of `stop`:\n{}",
                    self.pid,
                    self.stderr.text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        std::thread::sleep(Duration::from_millis(200));
        (status, self.stderr.text(), self.file.clone())
    }

    /// Stops the session; the CLI must succeed; the profile it wrote.
    fn stop(self) -> (Profile, String) {
        let pid = self.pid.clone();
        let (status, err, file) = self.stop_raw();
        assert!(status.success(), "record --pid {pid}: {status}:\n{err}");
        let p = jvmprof_profile::read_any(&file)
            .unwrap_or_else(|e| panic!("{}: {e}; record's stderr:\n{err}", file.display()));
        (p, err)
    }
}

// ---- reading the profile ----------------------------------------------------------------------

/// A frame of the fixture itself (not the JVM's `RootFixture$$Lambda` classes). Lambda bodies
/// are named without javac's number: `RootFixture.lambda$task`.
fn fixture_frame(name: &str) -> Option<String> {
    let ours = ["RootFixture", "RootLater", "RootPlugin"]
        .iter()
        .any(|c| name.starts_with(&format!("{c}.")) || name.starts_with(&format!("{c}$")));
    if !ours || name.contains("$$") {
        return None;
    }
    if let Some(i) = name.find(".lambda$") {
        let rest = &name[i + ".lambda$".len()..];
        let base = rest.rsplit_once('$').map_or(rest, |(b, _)| b);
        return Some(format!("{}.lambda${base}", &name[..i]));
    }
    Some(name.to_string())
}

fn frames(p: &Profile, stack: u32) -> Vec<String> {
    p.stack_frames(stack).map(|f| f.name()).collect()
}

fn metric(p: &Profile, m: Metric) -> usize {
    p.metric_index(m).unwrap_or_else(|| {
        panic!(
            "the profile has no {} metric: {:?}",
            m.as_str(),
            p.meta.metrics
        )
    })
}

/// Calls per stack of fixture frames (JDK frames left out); stacks ending in a JDK frame
/// are not counted (their calls are the JDK method's).
fn fixture_calls(p: &Profile) -> BTreeMap<String, u64> {
    let calls = metric(p, Metric::Calls);
    let mut m = BTreeMap::new();
    for s in &p.samples {
        let names = frames(p, s.stack);
        let Some(leaf) = names.last() else { continue };
        if fixture_frame(leaf).is_none() {
            continue;
        }
        let projected: Vec<String> = names.iter().filter_map(|n| fixture_frame(n)).collect();
        *m.entry(projected.join(";")).or_insert(0) += s.values[calls];
    }
    m.retain(|_, v| *v > 0);
    m
}

/// Every stack, all metrics, for failure messages.
fn raw(p: &Profile) -> String {
    let mut m: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for s in &p.samples {
        let e = m
            .entry(frames(p, s.stack).join(";"))
            .or_insert_with(|| vec![0; s.values.len()]);
        for (a, v) in e.iter_mut().zip(&s.values) {
            *a += v;
        }
    }
    let metrics: Vec<&str> = p.meta.metrics.iter().map(|m| m.as_str()).collect();
    let mut out = format!("{} stacks ({}):\n", m.len(), metrics.join(", "));
    for (k, v) in m.iter().take(120) {
        out.push_str(&format!("  {k} {v:?}\n"));
    }
    out.push_str(&format!("metadata: {:#?}\n", p.meta.extra));
    out
}

/// The metric summed over stacks that contain `frame` (the frame's inclusive value; none of
/// the fixture's timed methods recurse).
fn inclusive(p: &Profile, m: usize, frame: &str) -> u64 {
    p.samples
        .iter()
        .filter(|s| p.stack_frames(s.stack).any(|f| f.name() == frame))
        .map(|s| s.values[m])
        .sum()
}

/// The metric of stacks whose leaf is `frame` (its own value).
fn own(p: &Profile, m: usize, frame: &str) -> u64 {
    p.samples
        .iter()
        .filter(|s| {
            p.stack_frames(s.stack)
                .last()
                .is_some_and(|f| f.name() == frame)
        })
        .map(|s| s.values[m])
        .sum()
}

fn assert_contexts(
    what: &str,
    got: &BTreeMap<String, u64>,
    want: &BTreeMap<String, u64>,
    p: &Profile,
) {
    if got == want {
        return;
    }
    let mut diff = String::new();
    for (k, w) in want {
        match got.get(k) {
            None => diff.push_str(&format!("  missing    {k}: expected {w}\n")),
            Some(g) if g != w => {
                diff.push_str(&format!("  wrong      {k}: expected {w}, got {g}\n"))
            }
            _ => {}
        }
    }
    for (k, g) in got {
        if !want.contains_key(k) {
            diff.push_str(&format!("  unexpected {k}: {g}\n"));
        }
    }
    panic!(
        "{what}: calls per context differ from the fixture's truth:\n{diff}profile:\n{}",
        raw(p)
    );
}

fn every_stack_starts_with(p: &Profile, roots: &[&str], what: &str) {
    for s in &p.samples {
        let names = frames(p, s.stack);
        assert!(
            names.first().is_some_and(|f| roots.contains(&f.as_str())),
            "{what}: a stack does not start at a root {roots:?}: {}\n{}",
            names.join(";"),
            raw(p)
        );
    }
}

fn within(what: &str, got: f64, want: f64, tolerance: f64, p: &Profile) {
    eprintln!(
        "{what}: profile {:.1} ms, program {:.1} ms ({:+.2} %)",
        got / 1e6,
        want / 1e6,
        (got - want) / want * 100.0
    );
    assert!(
        (got - want).abs() <= tolerance * want,
        "{what}: profile {:.1} ms, fixture's own measurement {:.1} ms (off by {:.1} %, allowed {:.0} %)\n{}",
        got / 1e6,
        want / 1e6,
        (got - want) / want * 100.0,
        tolerance * 100.0,
        raw(p)
    );
}

fn meta<'a>(p: &'a Profile, key: &str) -> &'a str {
    p.meta
        .extra
        .get(key)
        .map(String::as_str)
        .unwrap_or_else(|| panic!("no `{key}` in the profile's metadata: {:#?}", p.meta.extra))
}

fn meta_u64(p: &Profile, key: &str) -> u64 {
    meta(p, key)
        .parse()
        .unwrap_or_else(|e| panic!("metadata {key} = {:?}: {e}", meta(p, key)))
}

/// `root_stats` lines: method → (count, total, min, max, mean, stddev) in ns.
fn root_stats(p: &Profile) -> BTreeMap<String, [f64; 6]> {
    meta(p, "root_stats")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            assert_eq!(cols.len(), 7, "root_stats line `{l}`: 7 columns expected");
            let mut v = [0f64; 6];
            for (i, c) in cols[1..].iter().enumerate() {
                v[i] = c
                    .trim()
                    .parse()
                    .unwrap_or_else(|e| panic!("root_stats line `{l}`: column {}: {e}", i + 2));
            }
            (cols[0].to_string(), v)
        })
        .collect()
}

/// The statistics row of `method` (`RootFixture.tiny`, possibly with a descriptor after it).
fn stat<'a>(stats: &'a BTreeMap<String, [f64; 6]>, method: &str) -> &'a [f64; 6] {
    let rows: Vec<_> = stats
        .iter()
        .filter(|(k, _)| {
            k.as_str() == method || (k.starts_with(method) && k[method.len()..].starts_with('('))
        })
        .collect();
    assert_eq!(
        rows.len(),
        1,
        "root_stats: one row for {method} expected: {stats:#?}"
    );
    rows[0].1
}

/// Probes are gone after the stop, and the counters of the lazily revealed subgraph agree.
fn assert_session_metadata(p: &Profile, roots: &str) {
    assert!(
        meta(p, "root_patterns").contains(roots),
        "root_patterns {:?} should name {roots}",
        meta(p, "root_patterns")
    );
    assert_eq!(
        meta(p, "root_methods_still_instrumented"),
        "0",
        "probes left behind: {:#?}",
        p.meta.extra
    );
    let instrumented = meta_u64(p, "root_methods_instrumented");
    let run = meta_u64(p, "root_methods_run");
    assert!(
        run >= 1 && run <= instrumented,
        "root_methods_run {run}, root_methods_instrumented {instrumented}"
    );
    assert!(
        meta_u64(p, "root_classes_restored") >= 1,
        "{:#?}",
        p.meta.extra
    );
    // Every method the session selected was instrumented (the agent lists the ones it could
    // not rewrite, with why, in root_skipped; abstract and native ones have no code).
    let skipped: Vec<&str> = p
        .meta
        .extra
        .get("root_skipped")
        .map_or("", |s| s.as_str())
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains(": no code"))
        .collect();
    assert!(
        skipped.is_empty(),
        "methods of the subgraph left uninstrumented: {skipped:#?}"
    );
    // No --include in these sessions: the JDK's methods stay out of the subgraph, also those
    // of classes that loaded only after the call site that reaches them was read
    // (IntStream.range under task).
    let jdk: Vec<String> = p
        .frames
        .iter()
        .filter(|f| {
            ["java.", "javax.", "jdk.", "sun."]
                .iter()
                .any(|pkg| f.class.starts_with(pkg))
        })
        .map(|f| format!("{}.{}", f.class, f.method))
        .collect();
    assert!(
        jdk.is_empty(),
        "JDK methods instrumented without --include: {jdk:?}"
    );
    for k in ["root_inner_ns", "root_outer_ns"] {
        let v: f64 = meta(p, k)
            .parse()
            .unwrap_or_else(|e| panic!("{k} = {:?}: {e}", meta(p, k)));
        assert!(v.is_finite() && v >= 0.0, "{k} = {v}");
    }
}

// ---- the truth of `go` ----------------------------------------------------------------------

const TASK: &str = "RootFixture.task";

/// The methods of task's subgraph (none may appear in a session on another root).
const TASK_SUBGRAPH: &[&str] = &[
    "RootFixture.task",
    "RootFixture$Square.area",
    "RootFixture$Circle.area",
    "RootFixture.shared",
    "RootFixture.helper",
    "RootFixture.rec",
    "RootFixture.throw1",
    "RootFixture.throw2",
    "RootFixture.throw3",
    "RootFixture.afterCatch",
    "RootFixture.lambda$task",
    "RootFixture.lambdaWork",
    "RootFixture.reflected",
    "RootFixture.sleeper",
    "RootFixture.spin",
    "RootFixture.tiny",
];

/// The calls of every fixture context under task, from what `go` printed. The numbers are
/// the fixture's design (20 task calls; per call Square.area 10, Circle.area 5, shared 3 +
/// 5 helper;shared, rec(3): 1, 2, 4, 8 per depth, throw1;throw2;throw3 then afterCatch 1 each,
/// lambda 3, reflected 2, sleeper 1, spin 1, tiny 50,000), checked against its own counters.
fn go_contexts(truth: &Truth) -> BTreeMap<String, u64> {
    let design = [
        ("task", 20),
        ("square_area", 200),
        ("circle_area", 100),
        ("shared_outside", 20),
        ("shared_in_task", 60),
        ("helper", 100),
        ("shared_in_helper", 100),
        ("shared_total", 180),
        ("rec_depth_1", 20),
        ("rec_depth_2", 40),
        ("rec_depth_3", 80),
        ("rec_depth_4", 160),
        ("throw1", 20),
        ("throw2", 20),
        ("throw3", 20),
        ("caught", 20),
        ("after_catch", 20),
        ("lambda", 60),
        ("lambda_work", 60),
        ("reflected", 40),
        ("sleeper", 20),
        ("spin", 20),
        ("tiny", 1_000_000),
    ];
    for (k, v) in design {
        assert_eq!(t(truth, k), v, "the fixture's own count of {k}");
    }
    let c = |s: &str| format!("{TASK};RootFixture.{s}");
    let mut m = BTreeMap::new();
    m.insert(TASK.to_string(), t(truth, "task"));
    m.insert(
        format!("{TASK};RootFixture$Square.area"),
        t(truth, "square_area"),
    );
    m.insert(
        format!("{TASK};RootFixture$Circle.area"),
        t(truth, "circle_area"),
    );
    m.insert(c("shared"), t(truth, "shared_in_task"));
    m.insert(c("helper"), t(truth, "helper"));
    m.insert(c("helper;RootFixture.shared"), t(truth, "shared_in_helper"));
    let mut rec = TASK.to_string();
    for d in 1..=4 {
        rec.push_str(";RootFixture.rec");
        m.insert(rec.clone(), t(truth, &format!("rec_depth_{d}")));
    }
    m.insert(c("throw1"), t(truth, "throw1"));
    m.insert(c("throw1;RootFixture.throw2"), t(truth, "throw2"));
    m.insert(
        c("throw1;RootFixture.throw2;RootFixture.throw3"),
        t(truth, "throw3"),
    );
    m.insert(c("afterCatch"), t(truth, "after_catch"));
    m.insert(c("lambda$task"), t(truth, "lambda"));
    m.insert(
        c("lambda$task;RootFixture.lambdaWork"),
        t(truth, "lambda_work"),
    );
    m.insert(c("reflected"), t(truth, "reflected"));
    m.insert(c("sleeper"), t(truth, "sleeper"));
    m.insert(c("spin"), t(truth, "spin"));
    m.insert(c("tiny"), t(truth, "tiny"));
    m
}

/// Calls of `go` under root task, and the structure every such profile must have.
fn assert_go_calls(what: &str, p: &Profile, truth: &Truth) {
    assert_contexts(what, &fixture_calls(p), &go_contexts(truth), p);
    every_stack_starts_with(p, &[TASK], what);
    // shared() ran 180 times during `go`; the profile has only the 160 under task.
    let shared: u64 = fixture_calls(p)
        .iter()
        .filter(|(k, _)| k.ends_with(";RootFixture.shared"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(
        shared,
        t(truth, "shared_in_task") + t(truth, "shared_in_helper"),
        "{what}: shared() outside task ({} calls) must not count",
        t(truth, "shared_outside")
    );
}

/// Times of `go` with the wall timer: sleeper and spin as the program measured them, tiny's
/// probes calibrated out, task's total between its known parts and the program's own total.
fn assert_go_times(what: &str, p: &Profile, truth: &Truth) {
    let ns = metric(p, Metric::Ns);
    assert!(
        p.metric_index(Metric::CpuNs).is_none(),
        "{what}: cpu_ns without --timer cpu: {:?}",
        p.meta.metrics
    );
    let sleeper = inclusive(p, ns, "RootFixture.sleeper") as f64;
    within(
        &format!("{what}: sleeper's time (20 x Thread.sleep(30))"),
        sleeper,
        t(truth, "sleep_ns") as f64,
        0.10,
        p,
    );
    let spin = inclusive(p, ns, "RootFixture.spin") as f64;
    within(
        &format!("{what}: spin's time"),
        spin,
        t(truth, "spin_ns") as f64,
        0.10,
        p,
    );
    let total: u64 = p.samples.iter().map(|s| s.values[ns]).sum();
    let tiny = own(p, ns, "RootFixture.tiny");
    eprintln!(
        "{what}: tiny's own {:.2} ms, task's total {:.1} ms, program's task {:.1} ms",
        tiny as f64 / 1e6,
        total as f64 / 1e6,
        t(truth, "task_ns") as f64 / 1e6
    );
    assert!(
        (tiny as f64) < 0.03 * total as f64,
        "{what}: tiny's own time {:.1} ms of task's {:.1} ms (1,000,000 near-empty calls): the \
         probes' cost is not calibrated out\n{}",
        tiny as f64 / 1e6,
        total as f64 / 1e6,
        raw(p)
    );
    let parts = (t(truth, "sleep_ns") + t(truth, "spin_ns")) as f64;
    let task_ns = t(truth, "task_ns") as f64;
    assert!(
        total as f64 >= 0.9 * parts && total as f64 <= 1.1 * task_ns,
        "{what}: task's total {:.1} ms should lie between its sleep + spin {:.1} ms and the \
         program's own measurement of task {:.1} ms\n{}",
        total as f64 / 1e6,
        parts / 1e6,
        task_ns / 1e6,
        raw(p)
    );
}

fn assert_go_stats(what: &str, p: &Profile, truth: &Truth) {
    let stats = root_stats(p);
    let tiny = stat(&stats, "RootFixture.tiny");
    assert_eq!(
        tiny[0],
        t(truth, "tiny") as f64,
        "{what}: root_stats tiny: {tiny:?}"
    );
    let task = stat(&stats, TASK);
    assert_eq!(
        task[0],
        t(truth, "task") as f64,
        "{what}: root_stats task: {task:?}"
    );
    let sleeper = stat(&stats, "RootFixture.sleeper");
    assert_eq!(
        sleeper[0],
        t(truth, "sleeper") as f64,
        "{what}: {sleeper:?}"
    );
    // Thread.sleep(30) never returns early; the calibration takes at most a fraction of a ms.
    assert!(
        sleeper[2] >= 29.5e6 && sleeper[3] >= sleeper[2] && sleeper[3] < 1e9,
        "{what}: sleeper's min/max {:.2}/{:.2} ms",
        sleeper[2] / 1e6,
        sleeper[3] / 1e6
    );
    let mean_total = sleeper[4] * sleeper[0];
    assert!(
        (mean_total - sleeper[1]).abs() <= 0.01 * sleeper[1] + sleeper[0],
        "{what}: sleeper's mean x count {mean_total} != total {}",
        sleeper[1]
    );
    within(
        &format!("{what}: root_stats sleeper total"),
        sleeper[1],
        t(truth, "sleep_ns") as f64,
        0.10,
        p,
    );
}

fn scratch_file(test: &str, home: Option<&Path>, name: &str) -> PathBuf {
    let tag = jdk_version(home);
    scratch(&format!("root-{test}-{tag}")).join(name)
}

// ---- the tests ------------------------------------------------------------------------------

/// (a) Attach to a JVM started with no flags, root task: exact counts of every shape, times
/// as the program measured them, probes gone at stop; a second session on another root sees
/// only that root's subgraph although task runs too.
#[test]
fn attach_root_counts_times_and_removes_its_probes() {
    let _g = serial();
    for home in jdk_homes() {
        let mut fx = Fixture::start(home.as_deref());
        let pid = fx.pid();
        let what = format!("JDK {} attach --root {TASK}", fx.jdk);
        let file = scratch_file("attach", home.as_deref(), "task.jvmprof");
        let session = Session::attach(&pid, &["--root", TASK], &file);
        let truth = fx.command("go");
        let (p, err) = session.stop();
        eprintln!("{what}: record's stderr:\n{err}");
        assert_eq!(p.meta.modes, vec!["exact".to_string()], "{what}");
        assert!(
            p.metric_index(Metric::Bytecodes).is_none(),
            "{what}: bytecodes without --bba: {:?}",
            p.meta.metrics
        );
        assert_go_calls(&what, &p, &truth);
        assert_go_times(&what, &p, &truth);
        assert_session_metadata(&p, TASK);
        assert_go_stats(&what, &p, &truth);
        let run = meta_u64(&p, "root_methods_run");
        assert!(
            run >= TASK_SUBGRAPH.len() as u64,
            "{what}: root_methods_run {run}: at least the {} fixture methods ran",
            TASK_SUBGRAPH.len()
        );
        // The collapsed output of the same profile: stacks from the root, calls per line.
        let collapsed = file.with_extension("collapsed");
        run_ok(Command::new(jvmprof()).args([
            "convert",
            file.to_str().unwrap(),
            "-o",
            collapsed.to_str().unwrap(),
            "--value",
            "calls",
        ]));
        let text = std::fs::read_to_string(&collapsed).unwrap();
        assert!(
            text.lines()
                .any(|l| l == format!("{TASK};RootFixture.tiny {}", t(&truth, "tiny"))),
            "{what}: collapsed:\n{text}"
        );
        assert!(
            text.lines().all(|l| l.starts_with(TASK)),
            "{what}: collapsed:\n{text}"
        );
        let none = jvmprof_out(&["status", &pid]);
        assert_eq!(none.status.code(), Some(1), "{what}: a session is left");

        // Again, on the other root: task runs twice during `go2`, outside the root.
        let what = format!("JDK {} second attach --root RootFixture.other", fx.jdk);
        let file2 = scratch_file("attach", home.as_deref(), "other.jvmprof");
        let session = Session::attach(&pid, &["--root", "RootFixture.other"], &file2);
        let truth2 = fx.command("go2");
        let (p2, _) = session.stop();
        assert_eq!(t(&truth2, "task"), 2, "go2 runs task twice");
        let o = "RootFixture.other";
        let want: BTreeMap<String, u64> = [
            (o.to_string(), t(&truth2, "other")),
            (format!("{o};RootFixture.otherMid"), t(&truth2, "other_mid")),
            (
                format!("{o};RootFixture.otherMid;RootFixture.otherLeaf"),
                t(&truth2, "other_mid_leaf"),
            ),
            (
                format!("{o};RootFixture.otherLeaf"),
                t(&truth2, "other_leaf"),
            ),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            [10, 10, 20, 30],
            [
                t(&truth2, "other"),
                t(&truth2, "other_mid"),
                t(&truth2, "other_mid_leaf"),
                t(&truth2, "other_leaf")
            ]
        );
        assert_contexts(&what, &fixture_calls(&p2), &want, &p2);
        every_stack_starts_with(&p2, &[o], &what);
        for s in &p2.samples {
            for f in frames(&p2, s.stack) {
                let name = fixture_frame(&f).unwrap_or(f.clone());
                assert!(
                    !TASK_SUBGRAPH.contains(&name.as_str()),
                    "{what}: {f} of the first session's subgraph is in the second\n{}",
                    raw(&p2)
                );
            }
        }
        assert_session_metadata(&p2, o);
        fx.finish();
    }
}

/// (b) `--timer cpu`: spin's CPU time as ThreadMXBean measured it, a sleeping method almost
/// none; cpu_ns replaces ns.
#[test]
fn cpu_timer_measures_thread_cpu_time() {
    let _g = serial();
    for home in jdk_homes() {
        let mut fx = Fixture::start(home.as_deref());
        let pid = fx.pid();
        let what = format!("JDK {} attach --root {TASK} --timer cpu", fx.jdk);
        let file = scratch_file("cpu", home.as_deref(), "cpu.jvmprof");
        let session = Session::attach(&pid, &["--root", TASK, "--timer", "cpu"], &file);
        let truth = fx.command("go");
        let (p, _) = session.stop();
        assert_go_calls(&what, &p, &truth);
        let cpu = metric(&p, Metric::CpuNs);
        assert!(
            p.metric_index(Metric::Ns).is_none(),
            "{what}: ns beside cpu_ns: {:?}",
            p.meta.metrics
        );
        let spin = inclusive(&p, cpu, "RootFixture.spin") as f64;
        within(
            &format!("{what}: spin's CPU time"),
            spin,
            t(&truth, "spin_cpu_ns") as f64,
            0.10,
            &p,
        );
        let sleeper = inclusive(&p, cpu, "RootFixture.sleeper") as f64;
        let slept = t(&truth, "sleep_ns") as f64;
        assert!(
            sleeper < 20e6 && sleeper < 0.05 * slept,
            "{what}: sleeper's CPU time {:.2} ms over {:.0} ms of sleep\n{}",
            sleeper / 1e6,
            slept / 1e6,
            raw(&p)
        );
        assert_session_metadata(&p, TASK);
        fx.finish();
    }
}

/// (c) `--min-latency 10ms`: only the root invocations that took 10 ms or more are kept, as
/// many as the program's own clock counted (odd requests sleep 25 ms, even ones 1 ms).
#[test]
fn min_latency_keeps_only_the_slow_root_invocations() {
    let _g = serial();
    for home in jdk_homes() {
        let mut fx = Fixture::start(home.as_deref());
        let pid = fx.pid();
        let root = "RootFixture.request";
        let what = format!("JDK {} attach --root {root} --min-latency 10ms", fx.jdk);
        let file = scratch_file("latency", home.as_deref(), "lat.jvmprof");
        let session = Session::attach(&pid, &["--root", root, "--min-latency", "10ms"], &file);
        let truth = fx.command("lat");
        let (p, _) = session.stop();
        let requests = t(&truth, "requests");
        assert_eq!(requests, 20);
        let slow = t(&truth, "slow");
        let (slow_sure, fast_sure) = (t(&truth, "slow_sure"), t(&truth, "fast_sure"));
        let calls = fixture_calls(&p);
        let got = calls.get(root).copied().unwrap_or(0);
        // Exactly the program's count when its clock put every request far from 10 ms; else
        // every request at 15 ms or more kept and none under 5 ms.
        if slow_sure + fast_sure == requests {
            assert_eq!(
                got,
                slow,
                "{what}: root calls kept vs the program's count of requests >= 10 ms\n{}",
                raw(&p)
            );
        } else {
            eprintln!(
                "{what}: {} requests took 5-15 ms by the program's clock; checking bounds",
                requests - slow_sure - fast_sure
            );
            assert!(
                slow_sure <= got && got <= requests - fast_sure,
                "{what}: kept {got}, the program saw {slow_sure} requests >= 15 ms and \
                 {fast_sure} < 5 ms of {requests}\n{}",
                raw(&p)
            );
        }
        // Each kept request made one pause call: the tree keeps whole invocations.
        let pause = calls
            .get(&format!("{root};RootFixture.pause"))
            .copied()
            .unwrap_or(0);
        assert_eq!(
            pause,
            got,
            "{what}: pause under the kept requests\n{}",
            raw(&p)
        );
        every_stack_starts_with(&p, &[root], &what);
        let ns = metric(&p, Metric::Ns);
        let total: u64 = p.samples.iter().map(|s| s.values[ns]).sum();
        assert!(
            total as f64 >= slow as f64 * 10e6,
            "{what}: {slow} kept requests of >= 10 ms each took {:.1} ms in all\n{}",
            total as f64 / 1e6,
            raw(&p)
        );
        assert_session_metadata(&p, root);
        fx.finish();
    }
}

/// `record --mode exact ARGS -o FILE -- java -cp CLASSES RootFixture` fed `go` then EOF.
fn launch(home: Option<&Path>, args: &[&str], file: &Path) -> (Profile, Truth, String) {
    let _ = std::fs::remove_file(file);
    let mut child = Command::new(jvmprof())
        .args(["record", "--mode", "exact"])
        .args(args)
        .arg("-o")
        .arg(file)
        .arg("--")
        .arg(jdk_tool(home, "java"))
        .arg("-cp")
        .arg(classes())
        .arg("RootFixture")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "record {args:?} -- java RootFixture: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(
        stdout.lines().next() == Some("ready") && stdout.lines().any(|l| l == "done go"),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        !stderr.contains("Exception") && !stderr.contains("VerifyError"),
        "{stderr}"
    );
    let truth = stdout.lines().filter_map(parse_truth).collect();
    let p = jvmprof_profile::read_any(file)
        .unwrap_or_else(|e| panic!("{}: {e}\nstderr:\n{stderr}", file.display()));
    (p, truth, stderr)
}

/// (d) The same root at launch: the same counts; the descriptor form with `--bba default`
/// counts tiny's bytecodes (javap -c: getstatic, iconst_1, iadd, putstatic, return = 5 a
/// call); a glob finds the same root.
#[test]
fn launch_root_counts_the_same() {
    let _g = serial();
    for home in jdk_homes() {
        let jdk = jdk_name(home.as_deref());
        let file = scratch_file("launch", home.as_deref(), "launch.jvmprof");
        let what = format!("JDK {jdk} launch --root {TASK}");
        let (p, truth, _) = launch(home.as_deref(), &["--root", TASK], &file);
        assert_go_calls(&what, &p, &truth);
        assert_go_times(&what, &p, &truth);
        assert_go_stats(&what, &p, &truth);
        eprintln!(
            "{what}: root_methods_still_instrumented at exit: {:?}",
            p.meta.extra.get("root_methods_still_instrumented")
        );

        let desc = "RootFixture.task(I)V";
        let what = format!("JDK {jdk} launch --root '{desc}' --bba default");
        let (p, truth, _) = launch(
            home.as_deref(),
            &["--root", desc, "--bba", "default"],
            &file,
        );
        assert_go_calls(&what, &p, &truth);
        let bytecodes = metric(&p, Metric::Bytecodes);
        assert_eq!(
            own(&p, bytecodes, "RootFixture.tiny"),
            5 * t(&truth, "tiny"),
            "{what}: tiny's bytecodes\n{}",
            raw(&p)
        );

        let glob = "RootFixture.ta*";
        let what = format!("JDK {jdk} launch --root '{glob}'");
        let (p, truth, _) = launch(home.as_deref(), &["--root", glob], &file);
        assert_go_calls(&what, &p, &truth);
    }
}

/// (e) Bad and unusual roots: a malformed descriptor is refused before attaching (the JVM is
/// untouched); a root in a class not loaded yet waits for it (and an implementation of an
/// interface loaded after the session started is instrumented when it loads); a root that
/// matches nothing says so.
#[test]
fn malformed_late_and_unmatched_roots() {
    let _g = serial();
    for home in jdk_homes() {
        let mut fx = Fixture::start(home.as_deref());
        let pid = fx.pid();
        let jdk = fx.jdk.clone();
        let file = scratch_file("bad", home.as_deref(), "bad.jvmprof");

        let bad = "RootFixture.task(Lfoo";
        let out = jvmprof_out(&[
            "record",
            "--pid",
            &pid,
            "--mode",
            "exact",
            "--root",
            bad,
            "-o",
            file.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "JDK {jdk}: {bad} was accepted: {err}"
        );
        assert!(
            err.contains(bad),
            "JDK {jdk}: the message names the root: {err}"
        );
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        assert!(
            !maps.contains("libjvmprof_agent"),
            "JDK {jdk}: the agent was loaded for a refused root"
        );
        fx.command("ping");

        // A root in a class that is not loaded yet, and one whose interface calls reach a
        // class loaded later.
        let what = format!("JDK {jdk} --root RootLater.work --root RootFixture.dispatch");
        let session = Session::attach(
            &pid,
            &["--root", "RootLater.work", "--root", "RootFixture.dispatch"],
            &file,
        );
        let waiting = "root RootLater.work: class RootLater is not loaded yet; it is instrumented when it loads";
        let cli_log = session.stderr.clone();
        let start = Instant::now();
        while !(fx.stderr.text().contains(waiting) || cli_log.text().contains(waiting)) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{what}: nobody said `{waiting}`; JVM's stderr:\n{}\nrecord's stderr:\n{}",
                fx.stderr.text(),
                cli_log.text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let later = fx.command("later");
        let plugin = fx.command("plugin");
        let (p, _) = session.stop();
        let (w, d) = ("RootLater.work", "RootFixture.dispatch");
        let want: BTreeMap<String, u64> = [
            (w.to_string(), t(&later, "later_work")),
            (format!("{w};RootLater.step"), t(&later, "later_step")),
            (d.to_string(), t(&plugin, "dispatch")),
            (
                format!("{d};RootFixture$Square.area"),
                t(&plugin, "dispatch_square"),
            ),
            (
                format!("{d};RootPlugin.area"),
                t(&plugin, "dispatch_plugin"),
            ),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            [4, 12, 10, 10, 10],
            [
                t(&later, "later_work"),
                t(&later, "later_step"),
                t(&plugin, "dispatch"),
                t(&plugin, "dispatch_square"),
                t(&plugin, "dispatch_plugin")
            ]
        );
        assert_contexts(&what, &fixture_calls(&p), &want, &p);
        every_stack_starts_with(&p, &[w, d], &what);
        assert_session_metadata(&p, "RootLater.work");
        assert_session_metadata(&p, "RootFixture.dispatch");

        // A root that matches no method.
        let nothing = "RootFixture.noSuchMethod";
        let session = Session::attach(&pid, &["--root", nothing], &file);
        fx.command("go");
        let (status, cli_err, _) = session.stop_raw();
        let said = format!("root {nothing} matched no method");
        let start = Instant::now();
        while !(fx.stderr.text().contains(&said) || cli_err.contains(&said)) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "JDK {jdk}: nobody said `{said}`; record ended {status}; JVM's stderr:\n{}\nrecord's stderr:\n{cli_err}",
                fx.stderr.text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        if let Ok(p) = jvmprof_profile::read_any(&file) {
            assert!(
                fixture_calls(&p).is_empty(),
                "JDK {jdk}: --root {nothing} recorded calls\n{}",
                raw(&p)
            );
        }
        fx.command("ping");
        fx.finish();
    }
}

/// (f) `jvmprof status PID --format json` during a root session counts the calls so far.
#[test]
fn status_shows_root_calls_during_the_session() {
    let _g = serial();
    for home in jdk_homes() {
        let mut fx = Fixture::start(home.as_deref());
        let pid = fx.pid();
        let jdk = fx.jdk.clone();
        let file = scratch_file("status", home.as_deref(), "status.jvmprof");
        let session = Session::attach(&pid, &["--root", TASK], &file);
        fx.command("go");
        let out = jvmprof_out(&["status", &pid, "--format", "json"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "JDK {jdk}: status: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("JDK {jdk}: status JSON: {e}: {text}"));
        let calls = match &v["root_calls"] {
            serde_json::Value::Number(n) => n.as_u64(),
            serde_json::Value::String(s) => s.parse().ok(),
            _ => None,
        };
        assert!(
            calls.is_some_and(|c| c > 0),
            "JDK {jdk}: root_calls after `go`: {text}"
        );
        assert_eq!(v["modes"], serde_json::json!(["exact"]), "{text}");
        let (p, _) = session.stop();
        // At least the calls status saw were written.
        let written = p.total(metric(&p, Metric::Calls));
        assert!(
            written >= calls.unwrap(),
            "JDK {jdk}: status said {calls:?} calls, the profile has {written}"
        );
        fx.finish();
    }
}

/// (g) A root whose body is a for-each loop inside try/finally, as javac compiles it: the
/// catch-all handler covers its own first instruction (javap -c RootFixture, guarded:
/// `12 52 59 any` and `59 61 59 any`). The shape is everywhere in real code (javac's own
/// Attr.attribClass and ClassReader$AnnotationCompleter.run have it). guarded x5, each
/// calling guardLeaf once per element of SHAPES (3).
#[test]
fn try_finally_around_a_for_each_loop_is_instrumented() {
    let _g = serial();
    for home in jdk_homes() {
        let mut fx = Fixture::start(home.as_deref());
        let pid = fx.pid();
        let root = "RootFixture.guarded";
        let what = format!("JDK {} attach --root {root}", fx.jdk);
        let file = scratch_file("guard", home.as_deref(), "guard.jvmprof");
        let session = Session::attach(&pid, &["--root", root], &file);
        let truth = fx.command("guard");
        let (p, _) = session.stop();
        assert_eq!([t(&truth, "guarded"), t(&truth, "guard_leaf")], [5, 15]);
        let want: BTreeMap<String, u64> = [
            (root.to_string(), t(&truth, "guarded")),
            (
                format!("{root};RootFixture.guardLeaf"),
                t(&truth, "guard_leaf"),
            ),
        ]
        .into_iter()
        .collect();
        assert_contexts(&what, &fixture_calls(&p), &want, &p);
        assert_session_metadata(&p, root);
        fx.finish();
    }
}
