//! Trace mode across JVMs (issue 16, JaViz): real JVMs under `jvmprof record --mode trace` call
//! each other over RMI and HTTP, `jvmprof trace` joins their files, and the joined tree is
//! checked against what the programs themselves printed (tests/fixtures/TraceRmi.java,
//! TraceHttp.java), on JDK 17 and JDK 25.
//!
//! Every call carries its argument in the shape of its tree: the caller's `call(arg)` and the
//! server's method first call `tag(arg)`, which calls `dD` for each decimal digit D of arg. So a
//! remote call matched to the wrong served call shows as a different argument under the client
//! and under its server child; and the served calls sleep a time that differs from call to
//! call, so a wrong match also shows as a server call shorter than its own sleep or longer
//! than its client call (give or take [`SLACK_NS`]). One server of each protocol runs under
//! `faketime -f +1h`: its clock is not the others', and only durations are compared across VMs.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::*;

// ---------------------------------------------------------------------------------------------
// Processes

/// What a child printed so far, line by line, and whether the stream has ended.
#[derive(Clone, Default)]
struct Lines(Arc<(Mutex<Printed>, Condvar)>);

/// The lines so far, and whether the stream has ended.
#[derive(Default)]
struct Printed(Vec<String>, bool);

impl Lines {
    fn collect(from: impl Read + Send + 'static) -> Lines {
        let lines = Lines::default();
        let to = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(from).lines() {
                let Ok(line) = line else { break };
                to.0.0.lock().unwrap().0.push(line);
                to.0.1.notify_all();
            }
            to.0.0.lock().unwrap().1 = true;
            to.0.1.notify_all();
        });
        lines
    }

    fn all(&self) -> Vec<String> {
        self.0.0.lock().unwrap().0.clone()
    }

    fn text(&self) -> String {
        self.all().join("\n")
    }

    /// The first line starting with `prefix`, waiting up to `limit` for it; None if the stream
    /// ended (or the time ran out) without one.
    fn wait_for(&self, prefix: &str, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        let mut g = self.0.0.lock().unwrap();
        loop {
            if let Some(l) = g.0.iter().find(|l| l.starts_with(prefix)) {
                return Some(l.clone());
            }
            let now = Instant::now();
            if g.1 || now >= deadline {
                return None;
            }
            g = self.0.1.wait_timeout(g, deadline - now).unwrap().0;
        }
    }

    /// Waits for the end of the stream (the process closed it).
    fn wait_end(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut g = self.0.0.lock().unwrap();
        while !g.1 {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            g = self.0.1.wait_timeout(g, deadline - now).unwrap().0;
        }
        true
    }
}

/// How a fixture JVM runs: under `jvmprof record --mode trace` or plain, under faketime or not.
struct Spec<'a> {
    home: Option<&'a Path>,
    /// `--vm-name` and the output file; None: no agent at all.
    traced: Option<(&'a str, PathBuf)>,
    /// More `record` options.
    record_args: Vec<String>,
    /// Under `faketime -f +1h` (the whole command: the JVM's clocks are an hour ahead).
    skewed: bool,
}

impl<'a> Spec<'a> {
    fn traced(home: Option<&'a Path>, vm: &'a str, dir: &Path) -> Spec<'a> {
        Spec {
            home,
            traced: Some((vm, dir.join(format!("{vm}.jvmprof")))),
            record_args: Vec::new(),
            skewed: false,
        }
    }

    fn plain(home: Option<&'a Path>) -> Spec<'a> {
        Spec {
            home,
            traced: None,
            record_args: Vec::new(),
            skewed: false,
        }
    }

    fn skewed(mut self) -> Self {
        self.skewed = true;
        self
    }

    fn file(&self) -> PathBuf {
        self.traced.as_ref().unwrap().1.clone()
    }

    fn command(&self, main: &[&str]) -> Command {
        let mut argv: Vec<OsString> = Vec::new();
        if self.skewed {
            argv.extend(["faketime", "-f", "+1h"].map(OsString::from));
        }
        if let Some((vm, file)) = &self.traced {
            let _ = std::fs::remove_file(file);
            argv.push(jvmprof().into());
            argv.extend(["record", "--mode", "trace", "--vm-name", vm].map(OsString::from));
            argv.extend(self.record_args.iter().map(OsString::from));
            argv.push("-o".into());
            argv.push(file.into());
            argv.push("--".into());
        }
        argv.push(jdk_tool(self.home, "java").into());
        argv.push("-cp".into());
        argv.push(classes().into());
        argv.extend(main.iter().map(OsString::from));
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        cmd
    }
}

/// A fixture JVM (maybe under `jvmprof record`, maybe under faketime) with its output collected.
struct Jvm {
    what: String,
    child: Child,
    stdin: Option<ChildStdin>,
    out: Lines,
    err: Lines,
}

impl Jvm {
    fn start(what: &str, spec: &Spec, main: &[&str]) -> Jvm {
        let mut child = spec
            .command(main)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: cannot start ({e}); is faketime installed?"));
        let out = Lines::collect(child.stdout.take().unwrap());
        let err = Lines::collect(child.stderr.take().unwrap());
        Jvm {
            what: what.to_string(),
            stdin: child.stdin.take(),
            child,
            out,
            err,
        }
    }

    /// Starts it and waits for its "ready" line; returns what follows "ready".
    fn ready(what: &str, spec: &Spec, main: &[&str]) -> (Jvm, String) {
        let jvm = Jvm::start(what, spec, main);
        let Some(line) = jvm.out.wait_for("ready", Duration::from_secs(90)) else {
            let mut jvm = jvm;
            let _ = jvm.child.kill();
            jvm.err.wait_end(Duration::from_secs(5));
            panic!(
                "{what}: no 'ready' line\nstdout:\n{}\nstderr:\n{}",
                jvm.out.text(),
                jvm.err.text()
            );
        };
        let rest = line["ready".len()..].trim().to_string();
        (jvm, rest)
    }

    /// Waits for the process's end (a client ends by itself); it must exit 0. Returns its
    /// stdout lines and its stderr.
    fn finish(mut self) -> (Vec<String>, String) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(180);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "{}: still running after 180 s\nstdout:\n{}\nstderr:\n{}",
                    self.what,
                    self.out.text(),
                    self.err.text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        self.out.wait_end(Duration::from_secs(10));
        self.err.wait_end(Duration::from_secs(10));
        let (out, err) = (self.out.all(), self.err.text());
        assert!(
            status.success(),
            "{}: {status}\nstdout:\n{}\nstderr:\n{err}",
            self.what,
            out.join("\n")
        );
        (out, err)
    }

    /// Tells a server to end (a line on its stdin), then [`Jvm::finish`].
    fn stop(mut self) -> (Vec<String>, String) {
        if let Some(mut s) = self.stdin.take() {
            let _ = s.write_all(b"stop\n");
        }
        self.finish()
    }
}

impl Drop for Jvm {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `n` distinct free TCP ports on 127.0.0.1 (bound together, then released).
fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

fn jdk_label(home: Option<&Path>) -> String {
    jdk_version(home)
}

fn run(args: &[&OsString]) -> Output {
    Command::new(jvmprof()).args(args).output().unwrap()
}

fn os(s: impl Into<OsString>) -> OsString {
    s.into()
}

// ---------------------------------------------------------------------------------------------
// The joined tree (`jvmprof trace ... -o X.json`)

#[derive(Debug)]
struct Node {
    vm: String,
    thread: String,
    method: String,
    start_ns: i64,
    duration_ns: i64,
    kind: Option<String>,
    unmatched: bool,
    incomplete: bool,
    children: Vec<Node>,
}

impl Node {
    fn parse(v: &Value) -> Node {
        let s = |k: &str| {
            v[k].as_str()
                .unwrap_or_else(|| panic!("node without {k}: {v}"))
                .to_string()
        };
        Node {
            vm: s("vm"),
            thread: s("thread"),
            method: s("method"),
            start_ns: v["start_ns"].as_i64().expect("start_ns"),
            duration_ns: v["duration_ns"].as_i64().expect("duration_ns"),
            kind: v["kind"].as_str().map(str::to_string),
            unmatched: v["unmatched"].as_bool().unwrap_or(false),
            incomplete: v["incomplete"].as_bool().unwrap_or(false),
            children: v["children"]
                .as_array()
                .expect("children")
                .iter()
                .map(Node::parse)
                .collect(),
        }
    }

    fn is(&self, kind: &str) -> bool {
        self.kind.as_deref() == Some(kind)
    }

    /// The argument its `tag` child spells (`Class.tag` with children `Class.dD`), if it has one.
    fn tag(&self) -> Option<u32> {
        let t = self.children.iter().find(|c| c.method.ends_with(".tag"))?;
        let mut n = 0u32;
        for d in &t.children {
            let digit = d.method.rsplit_once(".d")?.1.parse::<u32>().ok()?;
            n = n * 10 + digit;
        }
        (!t.children.is_empty()).then_some(n)
    }

    fn short(&self) -> String {
        format!(
            "{} [{}/{}] {} ns{}{}",
            self.method,
            self.vm,
            self.thread,
            self.duration_ns,
            self.kind
                .as_deref()
                .map(|k| format!(" {k}"))
                .unwrap_or_default(),
            if self.unmatched { " unmatched" } else { "" }
        )
    }
}

/// Only what was still running when its JVM exited is incomplete: `main` (the fixtures end
/// with System.exit) and the deadline thread's sleep.
fn assert_complete(what: &str, node: &Node) {
    assert!(
        !node.incomplete || node.thread == "main" || node.thread == "deadline",
        "{what}: incomplete {}",
        node.short()
    );
}

/// Every node with its ancestors (nearest last).
fn visit<'a>(roots: &'a [Node], f: &mut dyn FnMut(&'a Node, &[&'a Node])) {
    fn go<'a>(n: &'a Node, path: &mut Vec<&'a Node>, f: &mut dyn FnMut(&'a Node, &[&'a Node])) {
        f(n, path);
        path.push(n);
        for c in &n.children {
            go(c, path, f);
        }
        path.pop();
    }
    let mut path = Vec::new();
    for r in roots {
        go(r, &mut path, f);
    }
}

/// The argument of the nearest ancestor that has a `tag` child.
fn arg_above(path: &[&Node]) -> Option<u32> {
    path.iter().rev().find_map(|a| a.tag())
}

#[derive(Debug)]
struct Joined {
    roots: Vec<Node>,
    notes: Vec<String>,
    /// vm -> method -> count.
    counts: HashMap<String, HashMap<String, u64>>,
    stderr: String,
    text: String,
}

impl Joined {
    fn count(&self, vm: &str, method: &str) -> u64 {
        self.counts
            .get(vm)
            .and_then(|m| m.get(method))
            .copied()
            .unwrap_or(0)
    }

    fn nodes(&self) -> Vec<(&Node, Vec<&Node>)> {
        let mut all = Vec::new();
        visit(&self.roots, &mut |n, path| all.push((n, path.to_vec())));
        all
    }

    fn note(&self, part: &str) -> bool {
        self.notes.iter().any(|n| n.contains(part))
    }
}

/// `jvmprof trace FILES -o OUT`: its output, which must succeed.
fn join_to(files: &[PathBuf], out: &Path) -> Output {
    let _ = std::fs::remove_file(out);
    let mut args: Vec<OsString> = vec![os("trace")];
    args.extend(files.iter().map(os));
    args.extend([os("-o"), os(out)]);
    let o = run(&args.iter().collect::<Vec<_>>());
    assert!(
        o.status.success(),
        "jvmprof trace {files:?} -o {}: {}\n{}",
        out.display(),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        std::fs::metadata(out).is_ok_and(|m| m.len() > 0),
        "jvmprof trace wrote no {}",
        out.display()
    );
    o
}

/// Joins `files` into `OUT.json` and reads it back.
fn join(files: &[PathBuf], out: &Path) -> Joined {
    let o = join_to(files, out);
    let text = std::fs::read_to_string(out).unwrap();
    let v: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", out.display()));
    let roots = v["roots"]
        .as_array()
        .expect("roots")
        .iter()
        .map(Node::parse)
        .collect();
    let notes = v["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    let mut counts: HashMap<String, HashMap<String, u64>> = HashMap::new();
    for (vm, rows) in v["stats"].as_object().expect("stats") {
        for r in rows.as_array().unwrap() {
            for k in [
                "count",
                "total_ns",
                "min_ns",
                "max_ns",
                "mean_ns",
                "stddev_ns",
            ] {
                assert!(r[k].is_number(), "stats row without {k}: {r}");
            }
            *counts
                .entry(vm.clone())
                .or_default()
                .entry(r["method"].as_str().unwrap().to_string())
                .or_default() += r["count"].as_u64().unwrap();
        }
    }
    Joined {
        roots,
        notes,
        counts,
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        text,
    }
}

/// The calls a native file's profile holds for contexts ending in `method`.
fn profile_calls(file: &Path, method: &str) -> u64 {
    let p = jvmprof_profile::read_any(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let calls = p
        .metric_index(jvmprof_profile::Metric::Calls)
        .unwrap_or_else(|| panic!("{}: no calls metric", file.display()));
    p.samples
        .iter()
        .filter(|s| p.stack_frames(s.stack).last().map(|f| f.name()).as_deref() == Some(method))
        .map(|s| s.values[calls])
        .sum()
}

fn meta(file: &Path) -> std::collections::BTreeMap<String, String> {
    jvmprof_profile::read_any(file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .meta
        .extra
}

/// The trace metadata of a recording: the VM name, no dropped calls, some events.
fn assert_trace_meta(file: &Path, vm: &str) {
    let m = meta(file);
    assert_eq!(m.get("trace_vm").map(String::as_str), Some(vm), "{m:?}");
    assert_eq!(
        m.get("trace_dropped_calls").map(String::as_str),
        Some("0"),
        "{m:?}"
    );
    let events: u64 = m
        .get("trace_events")
        .and_then(|e| e.parse().ok())
        .unwrap_or(0);
    assert!(events > 0, "{}: {m:?}", file.display());
}

/// `key=value` fields of a printed line.
fn fields(line: &str) -> HashMap<&str, &str> {
    let mut f = HashMap::new();
    // A thread name may hold spaces (RMI's "RMI TCP Connection(2)-127.0.0.1"): a value runs
    // to the next " key=".
    let mut rest = line;
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].rsplit(' ').next().unwrap();
        let after = &rest[eq + 1..];
        let end = after
            .match_indices(' ')
            .find(|(i, _)| {
                let tail = &after[i + 1..];
                tail.find('=')
                    .is_some_and(|e| !tail[..e].contains(' ') && e > 0)
            })
            .map(|(i, _)| i)
            .unwrap_or(after.len());
        f.insert(key, &after[..end]);
        rest = &after[end..];
    }
    f
}

/// A call a client printed: "call thread=T arg=N ... result=R".
#[derive(Debug, Clone)]
struct Call {
    thread: String,
    result: String,
    via: Option<String>,
}

fn client_calls(out: &[String]) -> BTreeMap<u32, Call> {
    let mut calls = BTreeMap::new();
    for l in out.iter().filter(|l| l.starts_with("call ")) {
        let f = fields(l);
        let arg: u32 = f["arg"].parse().unwrap();
        let c = Call {
            thread: f["thread"].to_string(),
            result: f["result"].to_string(),
            via: f.get("via").map(|v| v.to_string()),
        };
        assert!(calls.insert(arg, c).is_none(), "arg {arg} twice: {out:?}");
    }
    calls
}

/// A call a server printed: "served ... arg=N thread=T sleep_ms=S [header=yes|no]".
#[derive(Debug, Clone)]
struct Served {
    thread: String,
    sleep_ms: i64,
    header: Option<String>,
}

fn served(out: &[String]) -> BTreeMap<u32, Served> {
    let mut s = BTreeMap::new();
    for l in out.iter().filter(|l| l.starts_with("served ")) {
        let f = fields(l);
        let arg: u32 = f["arg"].parse().unwrap();
        let v = Served {
            thread: f["thread"].to_string(),
            sleep_ms: f["sleep_ms"].parse().unwrap(),
            header: f.get("header").map(|v| v.to_string()),
        };
        assert!(
            s.insert(arg, v).is_none(),
            "arg {arg} served twice: {out:?}"
        );
    }
    s
}

/// How often each digit method `CLASS.dD` runs for the tags of `args`.
fn digit_counts(args: impl IntoIterator<Item = u32>) -> [u64; 10] {
    let mut c = [0u64; 10];
    for a in args {
        for d in a.to_string().bytes() {
            c[(d - b'0') as usize] += 1;
        }
    }
    c
}

/// The per-method counts of the joined statistics for one VM's local work: `call`/served
/// method, `tag` and every digit method.
fn assert_tag_counts(j: &Joined, vm: &str, class: &str, args: &BTreeSet<u32>, what: &str) {
    assert_eq!(
        j.count(vm, &format!("{class}.tag")),
        args.len() as u64,
        "{what}: {vm} {class}.tag"
    );
    for (d, n) in digit_counts(args.iter().copied()).iter().enumerate() {
        assert_eq!(
            j.count(vm, &format!("{class}.d{d}")),
            *n,
            "{what}: {vm} {class}.d{d}"
        );
    }
}

/// The other outputs of `jvmprof trace` exist and parse.
fn assert_other_outputs(files: &[PathBuf], dir: &Path, must_name: &str) {
    let txt = dir.join("joined.txt");
    join_to(files, &txt);
    let t = std::fs::read_to_string(&txt).unwrap();
    assert!(t.contains(must_name), "{}:\n{t}", txt.display());
    let html = dir.join("joined.html");
    join_to(files, &html);
    let h = std::fs::read_to_string(&html).unwrap();
    assert!(
        h.contains("<html") && h.contains(must_name),
        "{}",
        html.display()
    );
    let chrome = dir.join("joined.trace.json");
    join_to(files, &chrome);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&chrome).unwrap())
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", chrome.display()));
    let events = v["traceEvents"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: no traceEvents", chrome.display()));
    assert!(
        events.iter().any(|e| e["name"].as_str() == Some(must_name)),
        "{}: no event named {must_name}",
        chrome.display()
    );
}

/// How much longer than its client call a served call may look. A served call ends a little
/// after its client has the answer: the server's span ends when its thread returns from
/// writing the answer (RMI's dispatch, the HTTP handler, which also writes the body after the
/// headers that end HttpURLConnection.getInputStream's span), and a thread preempted there
/// ends late. Measured margins were -0.6 to +0.5 ms at the tightest on a quiet machine, but a
/// full suite on a loaded two-core machine once saw a server thread preempted for 4.7 ms after
/// its answer left. The match itself is checked exactly by the arguments each side tagged; this
/// check keeps catching a match to a call whose sleep is 12 ms or more longer.
const SLACK_NS: i64 = 12_000_000;

// ---------------------------------------------------------------------------------------------
// RMI: client -> s1 -> s2 (faketime) -> s3

const RMI_THREADS: u32 = 4;
const RMI_CALLS: u32 = 5;

/// TraceRmi's sleep of server level `level` for `arg`, in ms (the program prints it too).
fn rmi_sleep_ms(level: u32, arg: u32) -> i64 {
    2 + ((arg * 7 + level * 3) % 11) as i64 * 4
}

struct RmiRun {
    dir: PathBuf,
    files: Vec<PathBuf>,
    client: BTreeMap<u32, Call>,
    /// Per server (s1, s2, s3): what it printed it served.
    served: Vec<BTreeMap<u32, Served>>,
}

fn rmi_chain(home: Option<&Path>) -> RmiRun {
    let jdk = jdk_label(home);
    let dir = scratch(&format!("trace-rmi-{jdk}"));
    let ports = free_ports(3);
    let port = |i: usize| ports[i].to_string();
    let specs = [
        Spec::traced(home, "s1", &dir),
        Spec::traced(home, "s2", &dir).skewed(),
        Spec::traced(home, "s3", &dir),
    ];
    let mut servers = Vec::new();
    for level in (1..=3usize).rev() {
        let name = format!("s{level}");
        let mut main = vec![
            "TraceRmi".to_string(),
            "server".into(),
            name.clone(),
            level.to_string(),
            port(level - 1),
        ];
        if level < 3 {
            main.push(port(level));
        }
        let main: Vec<&str> = main.iter().map(String::as_str).collect();
        let (jvm, _) = Jvm::ready(&format!("JDK {jdk} {name}"), &specs[level - 1], &main);
        servers.push(jvm);
    }
    servers.reverse();
    let cli_spec = Spec::traced(home, "cli", &dir);
    let calls = RMI_CALLS.to_string();
    let threads = RMI_THREADS.to_string();
    let client = Jvm::start(
        &format!("JDK {jdk} RMI client"),
        &cli_spec,
        &["TraceRmi", "client", &port(0), &threads, &calls],
    );
    let (out, _) = client.finish();
    let client = client_calls(&out);
    let mut served_by = Vec::new();
    for (i, s) in servers.into_iter().enumerate() {
        let (out, err) = s.stop();
        let sv = served(&out);
        assert!(
            out.iter()
                .any(|l| l == &format!("exit s{} served={}", i + 1, sv.len())),
            "s{}: {out:?}\n{err}",
            i + 1
        );
        served_by.push(sv);
    }
    let files = vec![
        cli_spec.file(),
        specs[0].file(),
        specs[1].file(),
        specs[2].file(),
    ];
    RmiRun {
        dir,
        files,
        client,
        served: served_by,
    }
}

/// (a) RMI: every remote call of the client, s1 and s2 has exactly one served child on the
/// next VM, with the same argument, on an RMI connection thread (RMI renames those threads per
/// connection, so their names are not compared), with a duration between the server's own
/// sleep and the client call's duration; the client's calls are on the threads that printed
/// them; counts per VM and method are the programs' own, in the joined statistics and in each
/// file's profile.
#[test]
fn rmi_chain_joins_into_one_tree_as_the_programs_saw_it() {
    let _g = serial();
    for home in jdk_homes() {
        let jdk = jdk_label(home.as_deref());
        let r = rmi_chain(home.as_deref());
        let what = format!("JDK {jdk} RMI chain");
        let n = (RMI_THREADS * RMI_CALLS) as usize;
        // The programs' own view: every call went the whole way.
        assert_eq!(r.client.len(), n, "{what}: client calls {:?}", r.client);
        for (arg, c) in &r.client {
            assert_eq!(c.result, format!("s1:{arg}/s2:{arg}/s3:{arg}"), "{what}");
        }
        for (i, s) in r.served.iter().enumerate() {
            assert_eq!(
                s.keys().copied().collect::<Vec<_>>(),
                r.client.keys().copied().collect::<Vec<_>>(),
                "{what}: s{} served",
                i + 1
            );
        }
        for (f, vm) in r.files.iter().zip(["cli", "s1", "s2", "s3"]) {
            assert_trace_meta(f, vm);
        }
        // The profiles themselves count the calls too.
        for (i, f) in r.files[1..].iter().enumerate() {
            assert_eq!(
                profile_calls(f, "TraceRmi$Impl.work"),
                n as u64,
                "{what}: calls of TraceRmi$Impl.work in the profile of s{}",
                i + 1
            );
        }
        assert_eq!(
            profile_calls(&r.files[0], "TraceRmi.call"),
            n as u64,
            "{what}: calls of TraceRmi.call in the client's profile"
        );

        let j = join(&r.files, &r.dir.join("joined.json"));
        check_rmi_tree(&what, &j, &r);
        assert_other_outputs(&r.files, &r.dir, "TraceRmi$Impl.work");
    }
}

fn check_rmi_tree(what: &str, j: &Joined, r: &RmiRun) {
    let n = r.client.len();
    let args: BTreeSet<u32> = r.client.keys().copied().collect();
    let nodes = j.nodes();
    let next = |vm: &str| match vm {
        "cli" => "s1",
        "s1" => "s2",
        "s2" => "s3",
        _ => "none",
    };
    let mut clients_per_vm: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    let mut servers_per_vm: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for (node, path) in &nodes {
        assert!(!node.unmatched, "{what}: unmatched {}", node.short());
        assert_complete(what, node);
        if node.is("server") {
            let parent = path
                .last()
                .unwrap_or_else(|| panic!("{what}: a served call is a root: {}", node.short()));
            assert!(
                parent.is("client"),
                "{what}: {} is under {}",
                node.short(),
                parent.short()
            );
        }
        if !node.is("client") {
            continue;
        }
        let arg = arg_above(path)
            .unwrap_or_else(|| panic!("{what}: no tagged caller above {}", node.short()));
        assert_eq!(node.method, "TraceRmi$Svc.work", "{what}: {}", node.short());
        assert!(
            clients_per_vm
                .entry(node.vm.clone())
                .or_default()
                .insert(arg),
            "{what}: two remote calls of {} with arg {arg}",
            node.vm
        );
        if node.vm == "cli" {
            assert_eq!(
                node.thread, r.client[&arg].thread,
                "{what}: the client thread of arg {arg}"
            );
        } else {
            assert!(
                node.thread.starts_with("RMI TCP Connection"),
                "{what}: {}",
                node.short()
            );
        }
        assert_eq!(
            node.children.len(),
            1,
            "{what}: {} (arg {arg}) has children {:?}",
            node.short(),
            node.children.iter().map(Node::short).collect::<Vec<_>>()
        );
        let s = &node.children[0];
        assert!(
            s.is("server"),
            "{what}: {} under {}",
            s.short(),
            node.short()
        );
        assert_eq!(s.vm, next(&node.vm), "{what}: arg {arg}: {}", s.short());
        assert_eq!(s.method, "TraceRmi$Impl.work", "{what}: {}", s.short());
        assert_eq!(
            s.tag(),
            Some(arg),
            "{what}: the call of {} with arg {arg} is matched to {} serving another arg",
            node.vm,
            s.short()
        );
        let level: u32 = s.vm[1..].parse().unwrap();
        let printed = &r.served[level as usize - 1][&arg];
        assert_eq!(printed.sleep_ms, rmi_sleep_ms(level, arg), "{what}");
        // RMI names its threads after the connection they serve and renames them when it
        // takes another: each served call is on the thread by the name it had then.
        assert_eq!(
            s.thread,
            printed.thread,
            "{what}: {} served arg {arg} on {} by its own account",
            s.short(),
            printed.thread
        );
        assert!(
            s.duration_ns >= printed.sleep_ms * 1_000_000,
            "{what}: {} for arg {arg} is shorter than its sleep of {} ms",
            s.short(),
            printed.sleep_ms
        );
        assert!(
            s.duration_ns <= node.duration_ns + SLACK_NS,
            "{what}: {} serving arg {arg} is longer than its call {}",
            s.short(),
            node.short()
        );
        servers_per_vm.entry(s.vm.clone()).or_default().insert(arg);
    }
    for vm in ["cli", "s1", "s2"] {
        assert_eq!(
            clients_per_vm.get(vm),
            Some(&args),
            "{what}: remote calls made by {vm}"
        );
    }
    assert!(!clients_per_vm.contains_key("s3"), "{what}: s3 made calls");
    for vm in ["s1", "s2", "s3"] {
        assert_eq!(
            servers_per_vm.get(vm),
            Some(&args),
            "{what}: calls served by {vm}"
        );
    }
    let served_nodes = nodes.iter().filter(|(x, _)| x.is("server")).count();
    assert_eq!(served_nodes, 3 * n, "{what}: served nodes");
    // Statistics per VM: the programs' own counts.
    assert_eq!(j.count("cli", "TraceRmi.call"), n as u64, "{what}");
    assert_tag_counts(j, "cli", "TraceRmi", &args, what);
    for vm in ["s1", "s2", "s3"] {
        assert_eq!(j.count(vm, "TraceRmi$Impl.work"), n as u64, "{what}: {vm}");
        assert_eq!(j.count(vm, "TraceRmi.call"), 0, "{what}: {vm}");
        assert_tag_counts(j, vm, "TraceRmi", &args, what);
        assert_eq!(j.count(vm, "TraceRmi.main"), 1, "{what}: {vm}");
    }
    assert_eq!(j.count("cli", "TraceRmi$Impl.work"), 0, "{what}");
    // The remote calls are in the statistics too, by the method called.
    for vm in ["cli", "s1", "s2"] {
        assert_eq!(j.count(vm, "TraceRmi$Svc.work"), n as u64, "{what}: {vm}");
    }
    assert_eq!(j.count("s3", "TraceRmi$Svc.work"), 0, "{what}");
    assert!(
        !j.note("unmatched") && !j.note("no served call") && !j.note("no caller"),
        "{what}: notes {:?}",
        j.notes
    );
    // s2 ran an hour ahead: its times are on another clock (and still joined).
    let start_of = |vm: &str| {
        nodes
            .iter()
            .find(|(x, _)| x.vm == vm && x.is("server"))
            .map(|(x, _)| x.start_ns)
            .unwrap()
    };
    let skew = (start_of("s2") - start_of("s1")).abs();
    assert!(
        skew > 1_800_000_000_000,
        "{what}: s2 (under faketime +1h) is only {skew} ns from s1: faketime did not apply"
    );
}

// ---------------------------------------------------------------------------------------------
// HTTP: a client with HttpURLConnection and HttpClient -> a com.sun.net.httpserver server

const HTTP_THREADS: u32 = 4;
const HTTP_CALLS: u32 = 6;

fn http_sleep_ms(arg: u32) -> i64 {
    3 + ((arg * 5) % 10) as i64 * 4
}

/// (b) HTTP: each remote call (HttpURLConnection and HttpClient alike) has one served child,
/// the handler, on the server's worker that printed that argument, under faketime +1h.
#[test]
fn http_calls_join_their_handlers_on_a_skewed_server() {
    let _g = serial();
    for home in jdk_homes() {
        let home = home.as_deref();
        let jdk = jdk_label(home);
        let what = format!("JDK {jdk} HTTP");
        let dir = scratch(&format!("trace-http-{jdk}"));
        let web_spec = Spec::traced(home, "web", &dir).skewed();
        let (web, port) = Jvm::ready(
            &format!("{what} server"),
            &web_spec,
            &["TraceHttp", "server", "4"],
        );
        let cli_spec = Spec::traced(home, "cli", &dir);
        let (out, _) = Jvm::start(
            &format!("{what} client"),
            &cli_spec,
            &[
                "TraceHttp",
                "client",
                &port,
                &HTTP_THREADS.to_string(),
                &HTTP_CALLS.to_string(),
            ],
        )
        .finish();
        let calls = client_calls(&out);
        let (out, err) = web.stop();
        let served = served(&out);
        let n = (HTTP_THREADS * HTTP_CALLS) as usize;
        assert_eq!(calls.len(), n, "{what}: {calls:?}");
        for (arg, c) in &calls {
            assert_eq!(c.result, format!("h:{arg}"), "{what}");
            let s = &served[arg];
            assert_eq!(s.header.as_deref(), Some("yes"), "{what}: arg {arg}: {err}");
            assert_eq!(s.sleep_ms, http_sleep_ms(*arg), "{what}");
        }
        assert_eq!(served.len(), n, "{what}");
        let files = vec![cli_spec.file(), web_spec.file()];
        assert_trace_meta(&files[0], "cli");
        assert_trace_meta(&files[1], "web");
        assert_eq!(
            profile_calls(&files[1], "TraceHttp$Handler.handle"),
            n as u64,
            "{what}: calls of the handler in the server's profile"
        );

        let j = join(&files, &dir.join("joined.json"));
        let args: BTreeSet<u32> = calls.keys().copied().collect();
        let nodes = j.nodes();
        let mut seen = BTreeSet::new();
        for (node, path) in &nodes {
            assert!(!node.unmatched, "{what}: unmatched {}", node.short());
            assert_complete(&what, node);
            if node.is("server") {
                assert!(
                    path.last().is_some_and(|p| p.is("client")),
                    "{what}: {} is not under a client call",
                    node.short()
                );
            }
            if !node.is("client") {
                continue;
            }
            let arg = arg_above(path)
                .unwrap_or_else(|| panic!("{what}: no tagged caller above {}", node.short()));
            let c = &calls[&arg];
            assert_eq!(node.vm, "cli", "{what}");
            assert_eq!(node.thread, c.thread, "{what}: thread of arg {arg}");
            assert_eq!(
                node.method,
                format!("GET http://127.0.0.1:{port}/work?arg={arg}"),
                "{what}"
            );
            let via = match c.via.as_deref() {
                Some("url") => "TraceHttp.viaUrl",
                _ => "TraceHttp.viaClient",
            };
            assert_eq!(
                path.last().unwrap().method,
                via,
                "{what}: the remote call of arg {arg} is under"
            );
            assert!(seen.insert(arg), "{what}: arg {arg} called twice");
            assert_eq!(
                node.children.len(),
                1,
                "{what}: {} has children {:?}",
                node.short(),
                node.children.iter().map(Node::short).collect::<Vec<_>>()
            );
            let s = &node.children[0];
            assert!(s.is("server"), "{what}: {}", s.short());
            assert_eq!(s.vm, "web", "{what}");
            assert_eq!(s.method, "TraceHttp$Handler.handle", "{what}");
            assert_eq!(
                s.tag(),
                Some(arg),
                "{what}: the call with arg {arg} is matched to {}",
                s.short()
            );
            assert_eq!(s.thread, served[&arg].thread, "{what}: worker of arg {arg}");
            assert!(
                s.children.iter().any(|c| c.method == "TraceHttp.render"),
                "{what}: {} lacks render",
                s.short()
            );
            assert!(
                s.duration_ns >= served[&arg].sleep_ms * 1_000_000,
                "{what}: {} shorter than its sleep",
                s.short()
            );
            assert!(
                s.duration_ns <= node.duration_ns + SLACK_NS,
                "{what}: {} longer than its call {}",
                s.short(),
                node.short()
            );
        }
        assert_eq!(seen, args, "{what}: remote calls in the tree");
        let n = n as u64;
        assert_eq!(j.count("cli", "TraceHttp.call"), n, "{what}");
        let odd = args.iter().filter(|a| *a % 2 == 1).count() as u64;
        assert_eq!(j.count("cli", "TraceHttp.viaUrl"), odd, "{what}");
        assert_eq!(j.count("cli", "TraceHttp.viaClient"), n - odd, "{what}");
        assert_tag_counts(&j, "cli", "TraceHttp", &args, &what);
        assert_eq!(j.count("web", "TraceHttp$Handler.handle"), n, "{what}");
        assert_eq!(j.count("web", "TraceHttp.render"), n, "{what}");
        assert_tag_counts(&j, "web", "TraceHttp", &args, &what);
        assert!(
            !j.note("no served call") && !j.note("no caller"),
            "{what}: {:?}",
            j.notes
        );
        let start = |vm: &str| {
            nodes
                .iter()
                .find(|(x, _)| x.vm == vm)
                .map(|(x, _)| x.start_ns)
                .unwrap()
        };
        assert!(
            (start("web") - start("cli")).abs() > 1_800_000_000_000,
            "{what}: the server under faketime +1h has the client's clock"
        );
        assert_other_outputs(&files, &dir, "TraceHttp$Handler.handle");
    }
}

/// `--include` narrows a trace to the classes it names, a JDK class among them: the server
/// traces only its handler and `java.net.URI`, yet each served call still joins its client call.
#[test]
fn include_traces_only_the_classes_it_names() {
    let _g = serial();
    let home = None;
    let what = "HTTP, server with --include";
    let dir = scratch("trace-include");
    let mut web_spec = Spec::traced(home, "web", &dir);
    web_spec.record_args = vec!["--include".into(), "TraceHttp$Handler:java.net.URI".into()];
    let (web, port) = Jvm::ready(what, &web_spec, &["TraceHttp", "server", "2"]);
    let cli_spec = Spec::traced(home, "cli", &dir);
    let (out, _) = Jvm::start(what, &cli_spec, &["TraceHttp", "client", &port, "2", "3"]).finish();
    let calls = client_calls(&out);
    let (out, err) = web.stop();
    assert_eq!(served(&out).len(), 6, "{what}: {err}");
    assert_eq!(calls.len(), 6, "{what}");
    assert!(
        !err.contains("matched no class"),
        "{what}: an include that matches was said to match nothing:\n{err}"
    );

    let j = join(
        &[cli_spec.file(), web_spec.file()],
        &dir.join("joined.json"),
    );
    assert_eq!(j.count("web", "TraceHttp$Handler.handle"), 6, "{what}");
    assert_eq!(
        j.count("web", "TraceHttp.render"),
        0,
        "{what}: render is not included"
    );
    assert_eq!(
        j.count("cli", "TraceHttp.call"),
        6,
        "{what}: the client traces all"
    );
    let mut served_calls = 0;
    for (node, path) in j.nodes() {
        if node.vm != "web" {
            continue;
        }
        assert!(
            node.method.starts_with("TraceHttp$Handler.")
                || node.method.starts_with("java.net.URI."),
            "{what}: {} is traced but not included",
            node.short()
        );
        if node.method == "TraceHttp$Handler.handle" {
            served_calls += 1;
            assert!(
                node.is("server") && !node.unmatched,
                "{what}: {}",
                node.short()
            );
            assert!(
                path.last().is_some_and(|p| p.is("client") && p.vm == "cli"),
                "{what}: {} is not under its client call",
                node.short()
            );
            assert!(
                node.children
                    .iter()
                    .any(|c| c.method == "java.net.URI.getQuery"),
                "{what}: {} lacks the included JDK call URI.getQuery",
                node.short()
            );
        }
    }
    assert_eq!(served_calls, 6, "{what}");
}

// ---------------------------------------------------------------------------------------------
// (c) Peers without the agent

/// A traced client calling a server without the agent: its remote calls are marked unmatched
/// (and have no children), everything else it did is intact. A traced server called by a
/// client without the agent: its served calls are roots marked unmatched. RMI and HTTP.
#[test]
fn calls_to_and_from_untraced_jvms_are_marked_unmatched() {
    let _g = serial();
    for home in jdk_homes() {
        let home = home.as_deref();
        let jdk = jdk_label(home);
        let dir = scratch(&format!("trace-untraced-{jdk}"));
        let (threads, calls) = ("2", "3");
        let n = 6usize;

        // RMI: traced client -> plain server.
        let what = format!("JDK {jdk} RMI traced client, plain server");
        let port = free_ports(1)[0].to_string();
        let (server, _) = Jvm::ready(
            &what,
            &Spec::plain(home),
            &["TraceRmi", "server", "s1", "1", &port],
        );
        let cli = Spec::traced(home, "rcli", &dir);
        let (out, _) =
            Jvm::start(&what, &cli, &["TraceRmi", "client", &port, threads, calls]).finish();
        let printed = client_calls(&out);
        assert_eq!(served(&server.stop().0).len(), n, "{what}");
        let j = join(&[cli.file()], &dir.join("rmi-client.json"));
        check_unmatched_clients(&what, &j, &printed, |_| "TraceRmi$Svc.work".to_string());
        assert!(
            j.note("rcli: 6 remote calls it made have no served call"),
            "{what}: {:?}",
            j.notes
        );

        // RMI: plain client -> traced server.
        let what = format!("JDK {jdk} RMI plain client, traced server");
        let port = free_ports(1)[0].to_string();
        let srv = Spec::traced(home, "rsrv", &dir);
        let (server, _) = Jvm::ready(&what, &srv, &["TraceRmi", "server", "s1", "1", &port]);
        Jvm::start(
            &what,
            &Spec::plain(home),
            &["TraceRmi", "client", &port, threads, calls],
        )
        .finish();
        let sv = served(&server.stop().0);
        let j = join(&[srv.file()], &dir.join("rmi-server.json"));
        check_unmatched_servers(&what, &j, &sv, "TraceRmi$Impl.work");
        assert!(
            j.note("rsrv: 6 calls it served have no caller"),
            "{what}: {:?}",
            j.notes
        );

        // HTTP: traced client -> plain server.
        let what = format!("JDK {jdk} HTTP traced client, plain server");
        let (server, port) = Jvm::ready(&what, &Spec::plain(home), &["TraceHttp", "server", "2"]);
        let cli = Spec::traced(home, "hcli", &dir);
        let (out, _) =
            Jvm::start(&what, &cli, &["TraceHttp", "client", &port, threads, calls]).finish();
        let printed = client_calls(&out);
        let sv = served(&server.stop().0);
        assert!(
            sv.values().all(|s| s.header.as_deref() == Some("yes")),
            "{what}: {sv:?}"
        );
        let j = join(&[cli.file()], &dir.join("http-client.json"));
        check_unmatched_clients(&what, &j, &printed, |arg| {
            format!("GET http://127.0.0.1:{port}/work?arg={arg}")
        });
        assert!(
            j.note("hcli: 6 remote calls it made have no served call"),
            "{what}: {:?}",
            j.notes
        );

        // HTTP: plain client -> traced server.
        let what = format!("JDK {jdk} HTTP plain client, traced server");
        let srv = Spec::traced(home, "hsrv", &dir);
        let (server, port) = Jvm::ready(&what, &srv, &["TraceHttp", "server", "2"]);
        Jvm::start(
            &what,
            &Spec::plain(home),
            &["TraceHttp", "client", &port, threads, calls],
        )
        .finish();
        let sv = served(&server.stop().0);
        assert!(
            sv.values().all(|s| s.header.as_deref() == Some("no")),
            "{what}: {sv:?}"
        );
        let j = join(&[srv.file()], &dir.join("http-server.json"));
        check_unmatched_servers(&what, &j, &sv, "TraceHttp$Handler.handle");
        assert!(
            j.note("hsrv: 6 calls it served have no caller"),
            "{what}: {:?}",
            j.notes
        );
    }
}

/// Every remote call of the (only) VM is unmatched, childless, under its tagged caller on the
/// thread that printed it; the callers and their tags are all there.
fn check_unmatched_clients(
    what: &str,
    j: &Joined,
    printed: &BTreeMap<u32, Call>,
    method: impl Fn(u32) -> String,
) {
    let mut seen = BTreeSet::new();
    let mut callers = 0;
    for (node, path) in j.nodes() {
        assert_complete(what, node);
        assert!(!node.is("server"), "{what}: {}", node.short());
        if node.method.ends_with(".call") {
            callers += 1;
            let arg = node
                .tag()
                .unwrap_or_else(|| panic!("{what}: untagged {}", node.short()));
            assert_eq!(node.thread, printed[&arg].thread, "{what}: arg {arg}");
        }
        if !node.is("client") {
            assert!(!node.unmatched, "{what}: {}", node.short());
            continue;
        }
        let arg = arg_above(&path).unwrap();
        assert!(
            node.unmatched,
            "{what}: {} is not marked unmatched",
            node.short()
        );
        assert!(node.children.is_empty(), "{what}: {}", node.short());
        assert_eq!(node.method, method(arg), "{what}");
        assert_eq!(node.thread, printed[&arg].thread, "{what}");
        assert!(seen.insert(arg), "{what}: arg {arg} twice");
    }
    let args: BTreeSet<u32> = printed.keys().copied().collect();
    assert_eq!(seen, args, "{what}: remote calls");
    assert_eq!(callers, args.len(), "{what}: callers");
}

/// Every served call is a root marked unmatched, the server's method with the argument the
/// program printed, on the thread that printed it.
fn check_unmatched_servers(what: &str, j: &Joined, sv: &BTreeMap<u32, Served>, method: &str) {
    let mut seen = BTreeSet::new();
    for (node, path) in j.nodes() {
        assert_complete(what, node);
        assert!(!node.is("client"), "{what}: {}", node.short());
        if !node.is("server") {
            assert!(!node.unmatched, "{what}: {}", node.short());
            continue;
        }
        assert!(path.is_empty(), "{what}: {} is not a root", node.short());
        assert!(
            node.unmatched,
            "{what}: {} is not marked unmatched",
            node.short()
        );
        assert_eq!(node.method, method, "{what}");
        let arg = node
            .tag()
            .unwrap_or_else(|| panic!("{what}: untagged {}", node.short()));
        assert_eq!(node.thread, sv[&arg].thread, "{what}: arg {arg}");
        assert!(
            node.duration_ns >= sv[&arg].sleep_ms * 1_000_000,
            "{what}: {}",
            node.short()
        );
        assert!(seen.insert(arg), "{what}: arg {arg} twice");
    }
    assert_eq!(seen, sv.keys().copied().collect(), "{what}: served calls");
    assert_eq!(j.count(&j.roots[0].vm, method), sv.len() as u64, "{what}");
}

// ---------------------------------------------------------------------------------------------
// Trace at attach

/// `record --pid PID --mode trace` on an HTTP server started with no flags, requests sent
/// while it runs, then `jvmprof stop PID`: the file has every request's handler (its classes
/// were loaded and run before the attach), as unmatched server roots (the requests came
/// without the agent's header), and its profile counts them.
#[test]
fn trace_at_attach_records_the_calls_made_while_attached() {
    let _g = serial();
    for home in jdk_homes() {
        let home = home.as_deref();
        let jdk = jdk_label(home);
        let what = format!("JDK {jdk} trace at attach");
        let dir = scratch(&format!("trace-attach-{jdk}"));
        let (server, port) = Jvm::ready(&what, &Spec::plain(home), &["TraceHttp", "server", "2"]);
        let get = |arg: u32| {
            use std::io::Read as _;
            let mut s = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
            write!(
                s,
                "GET /work?arg={arg} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            let mut body = String::new();
            s.read_to_string(&mut body).unwrap();
            assert!(body.ends_with(&format!("h:{arg}")), "{what}: {body}");
        };
        // Before the session: loads and runs everything once (not recorded).
        get(99);
        let pid = server.child.id().to_string();
        let file = dir.join("attach.jvmprof");
        let _ = std::fs::remove_file(&file);
        let mut cli = Command::new(jvmprof())
            .args([
                "record",
                "--pid",
                &pid,
                "--mode",
                "trace",
                "--vm-name",
                "att",
                "-o",
            ])
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let cli_err = Lines::collect(cli.stderr.take().unwrap());
        let start = Instant::now();
        loop {
            if let Some(s) = cli.try_wait().unwrap() {
                cli_err.wait_end(Duration::from_secs(5));
                panic!(
                    "{what}: record ended ({s}) before its session ran:\n{}",
                    cli_err.text()
                );
            }
            let st = Command::new(jvmprof())
                .args(["status", &pid])
                .output()
                .unwrap();
            if st.status.success() {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{what}: no session"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let args: Vec<u32> = (1..=8).collect();
        for &a in &args {
            get(a);
        }
        let stop = Command::new(jvmprof())
            .args(["stop", &pid])
            .output()
            .unwrap();
        assert!(
            stop.status.success(),
            "{what}: stop: {}",
            String::from_utf8_lossy(&stop.stderr)
        );
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(s) = cli.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: record did not end after stop"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        cli_err.wait_end(Duration::from_secs(5));
        assert!(
            status.success(),
            "{what}: record: {status}\n{}",
            cli_err.text()
        );
        // After the session: not recorded.
        get(77);
        let sv = served(&server.stop().0);
        assert_eq!(sv.len(), args.len() + 2, "{what}");
        assert_trace_meta(&file, "att");
        assert_eq!(
            profile_calls(&file, "TraceHttp$Handler.handle"),
            args.len() as u64,
            "{what}: handler calls in the profile"
        );
        let j = join(std::slice::from_ref(&file), &dir.join("attach.json"));
        let recorded: BTreeMap<u32, Served> =
            sv.into_iter().filter(|(a, _)| args.contains(a)).collect();
        check_unmatched_servers(&what, &j, &recorded, "TraceHttp$Handler.handle");
        assert_eq!(
            j.count("att", "TraceHttp.render"),
            args.len() as u64,
            "{what}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Bad input

/// Files of two unrelated runs join into separate trees with a note naming both groups; a
/// server file cut in the middle of its trace section still joins, with a message naming it
/// on stderr; a file that is not a recording is refused by name; an include pattern that
/// matches nothing is said.
#[test]
fn unrelated_runs_truncated_files_and_empty_includes_are_reported() {
    let _g = serial();
    let home = None;
    let dir = scratch("trace-bad");
    // Run a: RMI, client -> s1, the client with an include that matches nothing.
    let port = free_ports(1)[0].to_string();
    let a_s1 = Spec::traced(home, "a-s1", &dir);
    let (server, _) = Jvm::ready("a-s1", &a_s1, &["TraceRmi", "server", "s1", "1", &port]);
    let mut a_cli = Spec::traced(home, "a-cli", &dir);
    a_cli.record_args = vec!["--include".into(), "no.such.pkg.*".into()];
    let (_, err) = Jvm::start("a-cli", &a_cli, &["TraceRmi", "client", &port, "2", "3"]).finish();
    assert!(
        err.contains("--include no.such.pkg.* matched no class"),
        "record's stderr does not say the include matched nothing:\n{err}"
    );
    server.stop();
    // Run b: HTTP, client -> server.
    let b_web = Spec::traced(home, "b-web", &dir);
    let (web, port) = Jvm::ready("b-web", &b_web, &["TraceHttp", "server", "2"]);
    let b_cli = Spec::traced(home, "b-cli", &dir);
    Jvm::start("b-cli", &b_cli, &["TraceHttp", "client", &port, "2", "2"]).finish();
    web.stop();

    let all = vec![a_cli.file(), a_s1.file(), b_cli.file(), b_web.file()];
    let j = join(&all, &dir.join("both.json"));
    assert!(
        j.note("no remote call connects these groups")
            && j.note("[a-cli, a-s1]")
            && j.note("[b-cli, b-web]"),
        "notes: {:?}",
        j.notes
    );
    let mut clients = 0;
    for (node, _) in j.nodes() {
        assert!(!node.unmatched, "{}", node.short());
        if node.is("client") {
            clients += 1;
            let s = &node.children[0];
            let want = if node.vm == "a-cli" { "a-s1" } else { "b-web" };
            assert_eq!(s.vm, want, "{}", node.short());
        }
    }
    assert_eq!(clients, 6 + 4);

    // A copy of a-s1 cut short in its last record chunk (the end record, after its traces),
    // as a JVM killed at that moment leaves it.
    let bytes = std::fs::read(a_s1.file()).unwrap();
    assert_eq!(&bytes[8..10], &[5, 0], "a-s1 is a record stream");
    let cut = dir.join("a-s1-truncated.jvmprof");
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
    let j = join(&[a_cli.file(), cut.clone()], &dir.join("truncated.json"));
    let name = cut.display().to_string();
    assert!(
        j.stderr.contains(&name),
        "jvmprof trace says nothing naming {name} on stderr:\n{}",
        j.stderr
    );
    assert!(
        j.notes.iter().any(|n| n.contains(&name)),
        "notes: {:?}",
        j.notes
    );
    assert!(
        j.nodes().iter().filter(|(n, _)| n.is("client")).count() == 6,
        "the client's calls are all there: {}",
        j.text
    );

    // Not a recording at all: refused, by name.
    let txt = dir.join("not-a-recording.txt");
    std::fs::write(&txt, "hello\n").unwrap();
    let o = run(&[
        &os("trace"),
        &os(a_cli.file()),
        &os(&txt),
        &os("-o"),
        &os(dir.join("x.json")),
    ]);
    assert!(!o.status.success(), "jvmprof trace took a text file");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&txt.display().to_string()), "{err}");
}
