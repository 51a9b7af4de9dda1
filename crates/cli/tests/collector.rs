//! End-to-end tests of streaming (`server=`, `record --server`) and `jvmprof serve` with real JVMs
//! running `tests/fixtures/Service.java`: several JVMs on one collector, an agent that exits or
//! is killed, a collector that is killed and restarted on the same data, an agent that starts
//! before the collector, garbage on the port, the token, and the web UI in headless Chromium.
//!
//! The API contract checked here is the one in crates/collector/src/http.rs. Nothing waits for a
//! fixed time: every wait polls for a condition with a generous deadline.

mod cdp;
mod clickhouse_server;

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const DEADLINE: Duration = Duration::from_secs(90);

fn jvmprof() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_jvmprof"));
    assert!(
        bin.with_file_name("libjvmprof_agent.so").is_file(),
        "the agent library is missing next to {}: run `cargo build --release` before the tests",
        bin.display()
    );
    bin
}

fn agent() -> PathBuf {
    jvmprof().with_file_name("libjvmprof_agent.so")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("jvmprof-collector-tests-{}", std::process::id()))
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn classes() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/Service.java");
        let out = scratch("classes");
        let status = Command::new("javac")
            .args(["--release", "11", "-d"])
            .arg(&out)
            .arg(&src)
            .status()
            .expect("javac must be installed (apt-get install openjdk-17-jdk-headless)");
        assert!(status.success(), "javac failed on Service.java");
        out
    })
}

/// Polls `f` until it returns `Some`, panicking with `what` after [`DEADLINE`].
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A child process killed when dropped, with its stderr collected.
struct Proc {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Proc {
    fn spawn(cmd: &mut Command) -> Proc {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        Proc { child, stderr }
    }

    fn pid(&self) -> u64 {
        self.child.id() as u64
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// SIGKILL: a crash, as far as the peer can tell.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn wait_success(&mut self) {
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}; stderr:\n{}", self.stderr());
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

struct Collector {
    proc: Proc,
    addr: String,
}

fn collector(data: &Path, listen: &str, token: Option<&str>) -> Collector {
    collector_with(data, listen, token, &[])
}

/// A collector with `extra` arguments.
fn collector_with(data: &Path, listen: &str, token: Option<&str>, extra: &[&str]) -> Collector {
    let mut cmd = Command::new(jvmprof());
    cmd.arg("serve")
        .arg("--listen")
        .arg(listen)
        .arg("--data")
        .arg(data)
        .args(extra);
    if let Some(t) = token {
        cmd.arg("--token").arg(t);
    }
    let proc = Proc::spawn(&mut cmd);
    let addr = wait_for("the collector to listen", || {
        let err = proc.stderr();
        let rest = err.split("listening on ").nth(1)?;
        Some(rest.split_whitespace().next()?.to_string())
    });
    Collector { proc, addr }
}

/// `java -agentpath:...=OPTIONS -cp classes Service SECONDS`.
fn jvm(options: &str, seconds: u32) -> Proc {
    Proc::spawn(
        Command::new("java")
            .arg(format!("-agentpath:{}={options}", agent().display()))
            .arg("-cp")
            .arg(classes())
            .arg("Service")
            .arg(seconds.to_string()),
    )
}

/// The token of the collectors that have one in these tests.
const TOKEN: &str = "s3cret";

/// GET over plain HTTP/1.0 with the test token (collectors without one ignore it): (status,
/// body).
fn get(addr: &str, path: &str) -> Option<(u16, Vec<u8>)> {
    get_as(addr, path, Some(TOKEN))
}

fn get_as(addr: &str, path: &str, token: Option<&str>) -> Option<(u16, Vec<u8>)> {
    request(addr, "GET", path, token)
}

fn request(addr: &str, method: &str, path: &str, token: Option<&str>) -> Option<(u16, Vec<u8>)> {
    request_with_body(addr, method, path, token, None)
}

/// A request with `body` (sent with its Content-Length) if there is one.
fn request_with_body(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> Option<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let length = body.map_or(String::new(), |b| {
        format!("Content-Length: {}\r\n", b.len())
    });
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}{length}\r\n"
    )
    .ok()?;
    s.write_all(body.unwrap_or_default()).ok()?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).ok()?;
    let split = resp.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&resp[..split]).to_string();
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, resp[split + 4..].to_vec()))
}

fn get_ok(addr: &str, path: &str) -> Vec<u8> {
    let (status, body) = get(addr, path).unwrap_or_else(|| panic!("GET {path} failed"));
    assert_eq!(
        status,
        200,
        "GET {path}: {}",
        String::from_utf8_lossy(&body)
    );
    body
}

fn json(addr: &str, path: &str) -> Value {
    serde_json::from_slice(&get_ok(addr, path)).unwrap()
}

fn vms(addr: &str) -> Vec<Value> {
    json(addr, "/api/vms").as_array().unwrap().clone()
}

fn vm_by_pid(addr: &str, pid: u64) -> Option<Value> {
    get(addr, "/api/vms")
        .and_then(|(_, b)| serde_json::from_slice::<Vec<Value>>(&b).ok())?
        .into_iter()
        .find(|v| v["pid"].as_u64() == Some(pid))
}

fn collapsed(addr: &str, id: u64) -> String {
    String::from_utf8(get_ok(
        addr,
        &format!("/api/vms/{id}/profile?format=collapsed"),
    ))
    .unwrap()
}

fn total(collapsed: &str) -> u64 {
    collapsed
        .lines()
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Waits until the VM of `pid` is listed as connected and its latest snapshot shows the main
/// thread inside `Service.work` (top of stack first); returns the VM id.
fn wait_connected_in_work(addr: &str, pid: u64) -> u64 {
    wait_for(
        &format!("VM of pid {pid} to show main in Service.work"),
        || {
            let vm = vm_by_pid(addr, pid)?;
            if vm["connected"] != Value::Bool(true) {
                return None;
            }
            let id = vm["id"].as_u64()?;
            let threads = json(addr, &format!("/api/vms/{id}/threads"));
            let main = threads
                .as_array()?
                .iter()
                .find(|t| t["name"] == "main")?
                .clone();
            (main["frames"][0] == "Service.work" && main["group"] == "main").then_some(id)
        },
    )
}

fn wait_disconnected(addr: &str, pid: u64) -> u64 {
    wait_for(&format!("VM of pid {pid} to be disconnected"), || {
        let vm = vm_by_pid(addr, pid)?;
        (vm["connected"] == Value::Bool(false)).then(|| vm["id"].as_u64().unwrap())
    })
}

#[test]
fn three_jvms_crash_exit_and_collector_restart() {
    let _g = serial();
    let dir = scratch("three");
    let data = dir.join("data");
    let c1 = collector(&data, "127.0.0.1:0", None);
    let addr = c1.addr.clone();
    let opts = format!("server={addr},refresh=200ms");

    // Garbage before and while agents stream: HTTP noise, and a "JVMP" stream with a bad frame.
    let mut noise = TcpStream::connect(&addr).unwrap();
    noise.write_all(b"\x00\x01\x02garbage\r\n\r\n").unwrap();
    let mut bad = TcpStream::connect(&addr).unwrap();
    bad.write_all(b"JVMP\x05\x00\x00\x00\xff\xff\xff\xff\xff")
        .unwrap();

    // One JVM through `record --server` (it also writes the file the collector must match), two
    // long-running ones with the agent directly.
    let short_out = dir.join("short.collapsed");
    let mut short = Proc::spawn(
        Command::new(jvmprof())
            .args(["record", "--server", &addr, "-o"])
            .arg(&short_out)
            .arg("--")
            .arg("java")
            .arg("-cp")
            .arg(classes())
            .args(["Service", "6"]),
    );
    let mut crashing = jvm(&opts, 120);
    let mut surviving = jvm(
        &format!("{opts},file={}", dir.join("s.collapsed").display()),
        120,
    );

    let crash_id = wait_connected_in_work(&addr, crashing.pid());
    let surv_id = wait_connected_in_work(&addr, surviving.pid());
    assert_ne!(crash_id, surv_id);
    // The record child's pid is jvmprof's; its JVM is the other VM in the list.
    let short_id = wait_for("the third VM", || {
        let list = vms(&addr);
        (list.len() == 3).then_some(())?;
        list.iter()
            .map(|v| v["id"].as_u64().unwrap())
            .find(|id| *id != crash_id && *id != surv_id)
    });
    for v in vms(&addr) {
        for key in ["pid", "connected_at", "last_seen"] {
            assert!(v[key].as_u64().unwrap() > 0, "{key} in {v}");
        }
        assert!(v["command"].as_str().unwrap().contains("Service"), "{v}");
        assert!(v["jvm"].as_str().unwrap().contains("VM"), "{v}");
        assert!(v["os"].as_str().unwrap().contains("Linux"), "{v}");
        assert!(!v["host"].as_str().unwrap().is_empty(), "{v}");
    }

    // The bad agent stream was closed with a reason; the HTTP noise got an HTTP error.
    let mut buf = Vec::new();
    let _ = bad.read_to_end(&mut buf);
    let log = c1.proc.stderr();
    assert!(
        log.contains("closed: message 1 (5 bytes): undecodable payload"),
        "collector log:\n{log}"
    );
    let mut reply = Vec::new();
    let _ = noise.read_to_end(&mut reply);
    assert!(
        reply.starts_with(b"HTTP/1.1 400"),
        "{:?}",
        String::from_utf8_lossy(&reply)
    );

    // The short JVM exits: disconnected, and the collector has exactly what the agent recorded.
    short.wait_success();
    assert_eq!(wait_disconnected(&addr, vm_pid(&addr, short_id)), short_id);
    let file = std::fs::read_to_string(&short_out).unwrap();
    assert!(file.contains("Service.main;Service.work "), "{file}");
    assert_eq!(
        collapsed(&addr, short_id),
        file,
        "collector vs the agent's own file"
    );
    check_formats(&addr, short_id);
    let dot = wait_for("the call graph file", || {
        std::fs::read_to_string(data.join(format!("callgraphs/vm-{short_id}.dot"))).ok()
    });
    assert!(dot.contains("Service.work"), "{dot}");

    // An agent crash (SIGKILL): disconnected, its data kept.
    crashing.kill();
    wait_disconnected(&addr, crashing.pid());
    let crashed = collapsed(&addr, crash_id);
    assert!(crashed.contains("Service.main;Service.work "), "{crashed}");
    let before_restart = total(&collapsed(&addr, surv_id));

    // The collector crashes and restarts on the same data and port.
    drop(c1);
    let c2 = collector(&data, &addr, None);
    assert_eq!(c2.addr, addr);
    assert_eq!(collapsed(&addr, short_id), file, "after restart");
    assert_eq!(collapsed(&addr, crash_id), crashed, "after restart");
    let list = vms(&addr);
    assert_eq!(list.len(), 3, "{list:?}");
    assert!(
        list.iter()
            .filter(|v| v["id"] != surv_id)
            .all(|v| v["connected"] == false)
    );
    // The surviving agent reconnects as the same VM and goes on streaming.
    assert_eq!(wait_connected_in_work(&addr, surviving.pid()), surv_id);
    wait_for("new samples after the reconnect", || {
        (total(&collapsed(&addr, surv_id)) > before_restart).then_some(())
    });
    assert!(
        surviving
            .stderr()
            .contains("lost the connection to the collector"),
        "{}",
        surviving.stderr()
    );
    // It ends normally (SIGTERM runs the JVM's shutdown, so the agent writes its file): the
    // collector has exactly what the agent recorded, across the collector's crash. Batches the
    // dead collector had not stored were re-sent; the ones it had were not counted twice.
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("kill -TERM {}", surviving.pid()))
        .status()
        .unwrap();
    assert!(status.success());
    let _ = surviving.child.wait();
    wait_disconnected(&addr, surviving.pid());
    let file = std::fs::read_to_string(dir.join("s.collapsed")).unwrap();
    assert!(file.contains("Service.main;Service.work "), "{file}");
    assert_eq!(
        collapsed(&addr, surv_id),
        file,
        "collector vs the surviving agent's file"
    );
    let v = vm_by_pid(&addr, surviving.pid()).unwrap();
    assert_eq!(v["dropped_samples"], 0, "{v}");
    assert_eq!(vms(&addr).len(), 3);
}

/// The pid of VM `id`.
fn vm_pid(addr: &str, id: u64) -> u64 {
    vms(addr).into_iter().find(|v| v["id"] == id).unwrap()["pid"]
        .as_u64()
        .unwrap()
}

fn check_formats(addr: &str, id: u64) {
    let p = |f: &str| get_ok(addr, &format!("/api/vms/{id}/profile?format={f}"));
    assert_eq!(&p("pprof")[..2], &[0x1f, 0x8b], "pprof is gzip");
    let html = String::from_utf8(p("html")).unwrap();
    assert!(html.contains("Service.work"), "html");
    let ss: Value = serde_json::from_slice(&p("speedscope")).unwrap();
    assert!(
        ss["shared"]["frames"].to_string().contains("Service.work"),
        "{ss}"
    );
    let dot = String::from_utf8(p("dot")).unwrap();
    assert!(dot.starts_with("digraph"), "{dot}");
    assert!(dot.contains("Service.work"), "{dot}");
    // A time range before anything was received is empty; a bad format names the problem.
    assert_eq!(
        String::from_utf8(get_ok(
            addr,
            &format!("/api/vms/{id}/profile?format=collapsed&from=0&to=1")
        ))
        .unwrap(),
        ""
    );
    let (status, body) = get(addr, &format!("/api/vms/{id}/profile?format=svg")).unwrap();
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).contains("unknown format"));
    assert_eq!(get(addr, "/api/vms/999/threads").unwrap().0, 404);
}

#[test]
fn agent_before_collector_token_and_web_ui() {
    let _g = serial();
    let dir = scratch("early");
    // A free port, nobody listening yet.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let mut early = jvm(&format!("server={addr},token=s3cret,refresh=200ms"), 120);
    wait_for("the agent to say the collector is unreachable", || {
        early
            .stderr()
            .contains(&format!("cannot reach the collector at {addr}"))
            .then_some(())
    });
    // The collector appears (with a token): the waiting agent connects.
    let c = collector(&dir.join("data"), &addr, Some("s3cret"));
    let id = wait_connected_in_work(&addr, early.pid());
    assert_eq!(
        early.stderr().matches("jvmprof:").count(),
        1,
        "one stderr line for the outage:\n{}",
        early.stderr()
    );

    // A wrong token is refused, said once on the JVM's stderr, and the VM is not listed.
    let mut wrong = jvm(&format!("server={addr},token=nope"), 1);
    wrong.wait_success();
    assert!(
        wrong.stderr().contains(&format!(
            "the collector at {addr} refused this agent: wrong token"
        )),
        "{}",
        wrong.stderr()
    );
    assert!(vm_by_pid(&addr, wrong.pid()).is_none());
    assert!(c.proc.stderr().contains("rejected: wrong token"));

    check_token_on_http(&addr, id);
    check_web_ui(&dir, &addr, id);
    early.kill();
}

/// With --token, the API answers 401 without it (the page itself, which holds no data, loads),
/// and no response shows the token, though the agent was given it on its command line.
fn check_token_on_http(addr: &str, id: u64) {
    let paths = [
        "/api/vms".to_string(),
        "/api/stats".to_string(),
        format!("/api/vms/{id}/threads"),
        format!("/api/vms/{id}/series"),
        format!("/api/vms/{id}/profile?format=collapsed"),
        format!("/api/vms/{id}/profile?format=html"),
        format!("/api/vms/{id}/profile?format=speedscope"),
        format!("/api/vms/{id}/profile?format=dot"),
        format!("/api/diff?vm={id}"),
    ];
    for path in &paths {
        for token in [None, Some("wrong"), Some("s3cre"), Some("s3cretX")] {
            let (status, body) = get_as(addr, path, token).unwrap();
            assert_eq!(status, 401, "{path} with {token:?}");
            assert!(!String::from_utf8_lossy(&body).contains(TOKEN));
        }
        let (status, body) = get_as(addr, path, Some(TOKEN)).unwrap();
        assert_eq!(status, 200, "{path}");
        assert!(
            !String::from_utf8_lossy(&body).contains(TOKEN),
            "{path} shows the token"
        );
    }
    let (status, page) = get_as(addr, "/", None).unwrap();
    assert_eq!(status, 200);
    assert!(!String::from_utf8_lossy(&page).contains(TOKEN));
}

/// Opens the web UI at `url` of a collector with the test token: the page asks for the token
/// once, and it is typed in.
fn open_ui(b: &mut cdp::Browser, url: &str) {
    b.navigate(url);
    b.wait(
        "the page to ask for the token",
        "!document.getElementById('login').hidden",
    );
    b.eval("document.getElementById('token').focus()");
    b.call("Input.insertText", serde_json::json!({ "text": TOKEN }));
    b.click("#login button");
}

/// The page in headless Chromium, driven with the real mouse over the DevTools protocol: the VM
/// (its pid and the user's command, not our -agentpath), the main thread with its stack and a
/// strip of its recent states; a range dragged on the CPU chart gives a flame graph of exactly
/// the samples of that range (the series and the profile API agree to the sample); a baseline
/// and a second range give a differential flame graph; Pause reads "paused" at once and stops
/// the refresh. Fails under CI when Chromium is missing (CI installs it), skips elsewhere.
fn check_web_ui(dir: &Path, addr: &str, id: u64) {
    let Some(chromium) = cdp::chromium() else {
        return;
    };
    let pid = vm_pid(addr, id);
    let mut b = cdp::Browser::start(chromium, &dir.join("chromium"));
    open_ui(&mut b, &format!("http://{addr}/?vm={id}&thread=main"));
    b.wait(
        "the page to load the VM, its main thread and stack",
        "document.body.dataset.loaded === '1' && document.getElementById('stack-title').textContent",
    );
    let dom = b.eval("document.documentElement.outerHTML");
    let dom = dom.as_str().unwrap();
    assert!(dom.contains(&format!("<td>{pid}</td>")), "{dom}");
    assert!(dom.contains("<td>main</td>"), "{dom}");
    assert!(dom.contains("Stack of \"main\""), "{dom}");
    assert!(dom.contains("<li>Service.work"), "{dom}");
    assert!(dom.contains("class=\"badge connected\""), "{dom}");
    let command = b.eval(&format!(
        "document.querySelector('tr[data-vm=\"{id}\"] td.cmd').textContent"
    ));
    let command = command.as_str().unwrap();
    assert!(
        command.contains("Service") && !command.contains("-agentpath"),
        "the VM list shows the user's command: {command}"
    );
    // The selected thread's state strip fills, a cell a snapshot.
    b.wait(
        "three snapshots in main's state strip",
        "document.querySelectorAll('#threads tr.sel .hist i').length >= 3",
    );
    assert!(
        b.eval("document.querySelectorAll('#threads tr.sel .hist i.h-R').length")
            .as_u64()
            .unwrap()
            >= 1,
        "main (busy in Service.work) was running in some snapshot"
    );

    // The chart, once it has a few seconds: drag over its middle.
    b.wait(
        "six points on the CPU chart",
        "Number(document.getElementById('chart').dataset.points) >= 6",
    );
    let range = |b: &mut cdp::Browser| -> (u64, u64) {
        let v = b.eval("[document.body.dataset.from, document.body.dataset.to]");
        let n = |i: usize| v[i].as_str().unwrap().parse::<u64>().unwrap();
        (n(0), n(1))
    };
    let drag = |b: &mut cdp::Browser, from: f64, to: f64| {
        let (l, t, w, h) = b.rect("#chart");
        b.drag((l + w * from, t + h / 2.0), (l + w * to, t + h / 2.0));
    };
    drag(&mut b, 0.2, 0.6);
    let (from, to) = range(&mut b);
    assert!(from < to, "{from} {to}");
    let src = b.eval("document.getElementById('flame').dataset.src");
    assert_eq!(
        src.as_str().unwrap(),
        format!("/api/vms/{id}/profile?format=html&from={from}&to={to}")
    );
    // The frame shows that flame graph (fetched with the token, shown from a blob: URL).
    b.wait(
        "the flame graph of the range in the frame",
        "document.getElementById('flame').src.startsWith('blob:') && \
         document.getElementById('flame').contentDocument.getElementById('title').textContent",
    );
    let label = b.eval("document.getElementById('selection').textContent");
    assert!(label.as_str().unwrap().starts_with("selected "), "{label}");
    // Ground truth for the range: the batches the store holds in it, per the series API.
    let series = json(
        addr,
        &format!("/api/vms/{id}/series?from={from}&to={to}&points=5000"),
    );
    let points = series["points"].as_array().unwrap();
    assert!(!points.is_empty(), "no batch in the dragged range");
    let want: u64 = points.iter().map(|p| p[1].as_u64().unwrap()).sum();
    let got = total(
        &String::from_utf8(get_ok(
            addr,
            &format!("/api/vms/{id}/profile?format=collapsed&from={from}&to={to}"),
        ))
        .unwrap(),
    );
    assert_eq!(got, want, "samples in the dragged range");
    let everything = total(&collapsed(addr, id));
    assert!(
        got < everything,
        "{got} of {everything}: the range is a part"
    );

    // Compare: the dragged range as baseline against a later one.
    b.click("#baseline");
    let baseline = b.eval("document.getElementById('baseline-label').textContent");
    assert!(
        baseline
            .as_str()
            .unwrap()
            .starts_with(&format!("baseline: VM {id}, ")),
        "{baseline}"
    );
    drag(&mut b, 0.65, 0.95);
    let (from2, to2) = range(&mut b);
    assert!(from2 >= to, "the second range is later: {from2} {to}");
    b.click("#compare");
    let src = b.eval("document.getElementById('flame').dataset.src");
    let src = src.as_str().unwrap().to_string();
    assert!(src.starts_with("/api/diff?"), "{src}");
    for part in [
        format!("vm={id}"),
        format!("base_vm={id}"),
        format!("from={from2}"),
        format!("to={to2}"),
        format!("base_from={from}"),
        format!("base_to={to}"),
    ] {
        assert!(src.contains(&part), "{part} in {src}");
    }
    let page = String::from_utf8(get_ok(addr, &src)).unwrap();
    assert!(page.contains("\"base\":["), "a differential flame graph");
    let title = b.eval("document.getElementById('flame-title').textContent");
    assert!(title.as_str().unwrap().starts_with("Compare: "), "{title}");

    // Pause reads "paused" at once, and the page stops refreshing.
    b.click("#pause");
    let status = b.eval("document.getElementById('status').textContent");
    let status = status.as_str().unwrap().to_string();
    assert!(status.contains("· paused ·"), "{status}");
    std::thread::sleep(Duration::from_millis(2500));
    let later = b.eval("document.getElementById('status').textContent");
    assert_eq!(later.as_str().unwrap(), status, "no refresh while paused");
    b.click("#pause");
    let status = b.eval("document.getElementById('status').textContent");
    assert!(status.as_str().unwrap().contains("· live ·"), "{status}");
}

/// A peer on the collector's port that welcomes the agent and then sends a reply frame claiming
/// 4 GB and streams bytes without end (each connection, up to `limit` bytes in all).
fn endless_collector(limit: u64) -> (String, Arc<std::sync::atomic::AtomicBool>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let done = stop.clone();
    std::thread::spawn(move || {
        listener.set_nonblocking(true).unwrap();
        let mut sent = 0u64;
        while !done.load(Ordering::Relaxed) {
            let Ok((mut s, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            let _ = s.set_nonblocking(false);
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut hello = [0u8; 4096];
            let _ = s.read(&mut hello);
            let mut out = Vec::new();
            jvmprof_proto::wire::put_frame(
                &jvmprof_proto::Reply::Welcome {
                    vm_id: 1,
                    last_seq: 0,
                },
                &mut out,
            );
            out.extend_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
            let chunk = vec![0u8; 1 << 20];
            let _ = s.write_all(&out);
            while !done.load(Ordering::Relaxed) && sent < limit {
                if s.write_all(&chunk).is_err() {
                    break;
                }
                sent += chunk.len() as u64;
            }
        }
    });
    (addr, stop)
}

/// A collector that answers with an endless reply: the agent drops the connection (saying so
/// once) instead of buffering it, its JVM (-Xmx256m) stays small and runs to its end.
#[test]
fn an_endless_reply_from_the_collector_leaves_the_agent_bounded() {
    let _g = serial();
    let (addr, stop) = endless_collector(8 << 30);
    let mut proc = Proc::spawn(
        Command::new("java")
            .arg("-Xmx256m")
            .arg(format!(
                "-agentpath:{}=server={addr},refresh=200ms",
                agent().display()
            ))
            .arg("-cp")
            .arg(classes())
            .arg("Service")
            .arg("8"),
    );
    let pid = proc.pid();
    let mut peak_kb = 0u64;
    while let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
        if let Some(kb) = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        {
            peak_kb = peak_kb.max(kb);
        }
        if proc.child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    proc.wait_success();
    assert!(peak_kb < 600 * 1024, "the JVM reached {peak_kb} KiB of RSS");
    let err = proc.stderr();
    let complaints = err
        .lines()
        .filter(|l| l.contains("jvmprof:") && l.contains("collector"))
        .count();
    assert!(
        complaints >= 1,
        "the agent did not say why it dropped the connection:\n{err}"
    );
    assert!(complaints <= 2, "said more than once:\n{err}");
}

/// Peak resident memory of a process, in bytes (VmHWM).
fn peak_rss(pid: u64) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    kb << 10
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// A Hello as an agent of pid `pid` sends it, with the magic before it.
fn hello(pid: u32, token: Option<&str>) -> Vec<u8> {
    let mut out = Vec::new();
    jvmprof_proto::legacy::Encoder::new().hello(
        &jvmprof_proto::Hello {
            version: jvmprof_proto::VERSION,
            token: token.map(str::to_string),
            pid,
            command: "hostile".into(),
            jvm: "none".into(),
            os: "Linux".into(),
            host: "hostile-host".into(),
            agent_version: "0".into(),
            start_unix_ms: 1,
        },
        &mut out,
    );
    out
}

/// What a hostile client got: bytes it managed to send, and the collector's replies (read by a
/// second thread while it sends, so a reply before the close is not lost to a reset).
struct Attempt {
    sent: u64,
    replies: Vec<jvmprof_proto::Reply>,
}

impl Attempt {
    fn rejection(&self) -> Option<&str> {
        self.replies.iter().find_map(|r| match r {
            jvmprof_proto::Reply::Reject { reason } => Some(reason.as_str()),
            _ => None,
        })
    }
}

/// Connects to `addr`, writes `first`, then whatever `more` produces (each call's bytes, until
/// it returns nothing, the collector closes the connection, or `cap` bytes went out).
fn attempt(addr: &str, first: &[u8], mut more: impl FnMut() -> Vec<u8>, cap: u64) -> Attempt {
    let mut sock = TcpStream::connect(addr).unwrap();
    let mut reader = sock.try_clone().unwrap();
    reader
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let replies = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while let Ok(n) = reader.read(&mut chunk) {
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let mut replies = Vec::new();
        let mut rest = &buf[..];
        while let Ok(Some((payload, used))) = jvmprof_proto::wire::take_frame(rest) {
            replies.push(jvmprof_proto::wire::decode_payload(payload).unwrap());
            rest = &rest[used..];
        }
        replies
    });
    let mut sent = 0u64;
    if sock.write_all(first).is_ok() {
        sent += first.len() as u64;
        while sent < cap {
            let bytes = more();
            if bytes.is_empty() || sock.write_all(&bytes).is_err() {
                break;
            }
            sent += bytes.len() as u64;
        }
    }
    let _ = sock.shutdown(std::net::Shutdown::Write);
    Attempt {
        sent,
        replies: replies.join().unwrap(),
    }
}

/// 1 MiB of new strings per call: a Strings frame continuing the table.
fn string_flood() -> impl FnMut() -> Vec<u8> {
    let mut first = 0u32;
    move || {
        let strings: Vec<String> = (0..1024)
            .map(|i| format!("{:01000}", first as u64 + i))
            .collect();
        let mut out = Vec::new();
        jvmprof_proto::wire::put_frame(
            &jvmprof_proto::Message::Strings { first, strings },
            &mut out,
        );
        first += 1024;
        out
    }
}

/// Hostile clients: a handshake that never ends, data before the handshake, string tables that
/// grow without end (one client and four at once), and a client inventing VMs in a loop. Each is
/// refused with a reason, the collector stays under 256 MB, and an agent streaming all along is
/// still served. The data directory is private.
#[test]
fn hostile_clients_are_refused_and_leave_the_collector_bounded() {
    let _g = serial();
    let dir = scratch("hostile");
    let c = collector(&dir.join("data"), "127.0.0.1:0", Some(TOKEN));
    let addr = c.addr.clone();
    assert_eq!(mode(&dir.join("data")), 0o700);
    let good = jvm(&format!("server={addr},token={TOKEN},refresh=200ms"), 300);
    let id = wait_connected_in_work(&addr, good.pid());
    let hundred_mib = 100 << 20;

    // A frame header claiming 8 MiB, then garbage, with no Hello.
    let mut head = jvmprof_proto::MAGIC.to_vec();
    head.extend_from_slice(&(8u32 << 20).to_le_bytes());
    let a = attempt(&addr, &head, || vec![7u8; 1 << 20], hundred_mib);
    assert!(a.sent < 32 << 20, "sent {} bytes", a.sent);
    let reason = a
        .rejection()
        .expect("no rejection for the oversized handshake");
    assert!(reason.contains("handshake is larger"), "{reason}");

    // String tables without a Hello.
    let mut magic = jvmprof_proto::MAGIC.to_vec();
    magic.extend(string_flood()());
    let a = attempt(&addr, &magic, string_flood(), hundred_mib);
    assert!(a.sent < 32 << 20, "sent {} bytes", a.sent);
    assert!(
        a.rejection().is_some(),
        "data before the handshake is refused"
    );

    // A wrong token, then a flood: refused at the Hello.
    let a = attempt(
        &addr,
        &hello(4_000_000, Some("nope")),
        string_flood(),
        hundred_mib,
    );
    assert_eq!(a.rejection(), Some("wrong token"));

    // With the token: one client's strings stop at its limit, four at once at everyone's.
    let a = attempt(
        &addr,
        &hello(4_000_001, Some(TOKEN)),
        string_flood(),
        400 << 20,
    );
    let reason = a.rejection().expect("no rejection for the string flood");
    assert!(reason.contains("tables take more than"), "{reason}");
    assert!(a.sent < 200 << 20, "sent {} bytes", a.sent);
    let floods: Vec<_> = (0..4)
        .map(|n| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                attempt(
                    &addr,
                    &hello(4_000_010 + n, Some(TOKEN)),
                    string_flood(),
                    400 << 20,
                )
            })
        })
        .collect();
    for f in floods {
        let a = f.join().unwrap();
        let reason = a.rejection().expect("no rejection in the parallel flood");
        assert!(reason.contains("MiB"), "{reason}");
    }

    // VM records in a loop: at most the per-minute allowance (two, if a minute turns) is kept.
    let before = vms(&addr).len();
    let mut refused = 0;
    for n in 0..700u32 {
        let a = attempt(&addr, &hello(5_000_000 + n, Some(TOKEN)), Vec::new, 0);
        if let Some(reason) = a.rejection() {
            assert!(reason.contains("new VMs this minute"), "{reason}");
            refused += 1;
        }
    }
    let added = vms(&addr).len() - before;
    assert!(refused >= 100, "{refused} of 700 refused");
    assert!(
        added <= 600 && added + refused == 700,
        "{added} added, {refused} refused"
    );

    let rss = peak_rss(c.proc.pid());
    eprintln!(
        "collector peak RSS {} MB; {added} VMs added, {refused} refused",
        rss >> 20
    );
    assert!(rss < 256 << 20, "collector peak RSS {} MB", rss >> 20);
    // The good agent is still served: its samples keep growing.
    let now = total(&collapsed(&addr, id));
    wait_for("the streaming agent's samples to grow", || {
        (total(&collapsed(&addr, id)) > now).then_some(())
    });
    assert_eq!(vm_by_pid(&addr, good.pid()).unwrap()["connected"], true);
    // No response, including the VM list the floods filled, shows the token.
    let (_, body) = get(&addr, "/api/vms").unwrap();
    assert!(!String::from_utf8_lossy(&body).contains(TOKEN));
}

/// The agent takes the token from JVMPROF_TOKEN and `record` (given it by JVMPROF_TOKEN) hands it
/// over in a private file: neither puts it on a command line, the application `record` starts
/// does not inherit JVMPROF_TOKEN, and the collector (given it by `--token-file`) accepts both.
/// Secret arguments of the application's command line are masked in what the collector serves.
#[test]
fn token_from_the_environment_and_from_record() {
    let _g = serial();
    let dir = scratch("token-env");
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let c = collector_with(
        &dir.join("data"),
        "127.0.0.1:0",
        None,
        &["--token-file", token_file.to_str().unwrap()],
    );
    let addr = c.addr.clone();
    assert!(!c.proc.stderr().contains("warning"), "{}", c.proc.stderr());
    let env = Proc::spawn(
        Command::new("java")
            .env("JVMPROF_TOKEN", TOKEN)
            .arg(format!(
                "-agentpath:{}=server={addr},refresh=200ms",
                agent().display()
            ))
            .arg("-cp")
            .arg(classes())
            .args(["Service", "60"]),
    );
    wait_connected_in_work(&addr, env.pid());

    let out = dir.join("recorded.collapsed");
    let record = Proc::spawn(
        Command::new(jvmprof())
            .env("JVMPROF_TOKEN", TOKEN)
            .args(["record", "--server", &addr, "-o"])
            .arg(&out)
            .args([
                "--",
                "java",
                "-Dapp.password=hunter2",
                "-Dapp.name=shop",
                "-cp",
            ])
            .arg(classes())
            .args(["Service", "6", "--api-key", "k3y"]),
    );
    // record's working directory (the agent's files, the token among them) is private.
    let work = std::env::temp_dir().join(format!("jvmprof-{}-0", record.pid()));
    let vm = wait_for("the recorded JVM at the collector", || {
        let vm = vms(&addr)
            .into_iter()
            .find(|v| v["pid"] != env.pid() && v["connected"] == true)?;
        Some(vm)
    });
    let environ = std::fs::read(format!("/proc/{}/environ", vm["pid"])).unwrap();
    assert!(
        !String::from_utf8_lossy(&environ).contains("JVMPROF_TOKEN"),
        "the launched JVM inherited JVMPROF_TOKEN"
    );
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", vm["pid"])).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains(TOKEN));
    assert_eq!(mode(&work), 0o700);
    assert_eq!(mode(&work.join("token")), 0o600);
    let command = vm["command"].as_str().unwrap();
    assert!(!command.contains(TOKEN), "{command}");
    assert!(
        command.starts_with("java -Dapp.password=*** -Dapp.name=shop -cp ")
            && command.ends_with(" Service 6 --api-key ***"),
        "{command}"
    );
    let id = vm["id"].as_u64().unwrap();
    let (status, native) = get(&addr, &format!("/api/vms/{id}/profile?format=jvmprof")).unwrap();
    assert_eq!(status, 200);
    let p = jvmprof_profile::read_bytes(&native).unwrap();
    assert_eq!(p.meta.command, command);
    let mut record = record;
    record.wait_success();
    assert!(total(&std::fs::read_to_string(&out).unwrap()) > 0);
    assert!(!work.exists(), "record removes its directory");
}

/// `--retention`: a VM gone for longer is deleted with its data by itself; `DELETE
/// /api/vms/{id}` deletes one that is not connected (never one that is), and ids are not
/// reused.
#[test]
fn retention_and_delete_remove_vms_with_their_data() {
    let _g = serial();
    let dir = scratch("retention");
    let data = dir.join("data");
    let c = collector_with(
        &data,
        "127.0.0.1:0",
        Some(TOKEN),
        &["--retention", "4s", "--rollup-after", "1s"],
    );
    let addr = c.addr.clone();
    let mut stays = jvm(&format!("server={addr},token={TOKEN},refresh=200ms"), 300);
    let stays_id = wait_connected_in_work(&addr, stays.pid());
    let mut brief = jvm(&format!("server={addr},token={TOKEN},refresh=200ms"), 2);
    let brief_id = wait_connected_in_work(&addr, brief.pid());
    brief.wait_success();
    wait_disconnected(&addr, brief.pid());
    assert!(total(&collapsed(&addr, brief_id)) > 0);
    wait_for("the call graph of the brief VM", || {
        data.join(format!("callgraphs/vm-{brief_id}.dot"))
            .exists()
            .then_some(())
    });

    // The brief VM expires four seconds after it was last seen, with its data.
    wait_for("the brief VM to expire", || {
        vm_by_pid(&addr, brief.pid()).is_none().then_some(())
    });
    assert!(c.proc.stderr().contains(&format!("VM {brief_id} expired")));
    for path in [
        format!("/api/vms/{brief_id}/profile?format=collapsed"),
        format!("/api/vms/{brief_id}/threads"),
    ] {
        assert_eq!(get(&addr, &path).unwrap().0, 404, "{path}");
    }
    assert!(!data.join(format!("callgraphs/vm-{brief_id}.dot")).exists());
    // The connected one stays, though its first samples are older than the retention.
    assert_eq!(vm_by_pid(&addr, stays.pid()).unwrap()["connected"], true);

    // DELETE: the token is needed, an unknown id is 404, a connected VM is refused.
    let path = format!("/api/vms/{stays_id}");
    assert_eq!(request(&addr, "DELETE", &path, None).unwrap().0, 401);
    assert_eq!(
        request(&addr, "DELETE", "/api/vms/9999", Some(TOKEN))
            .unwrap()
            .0,
        404
    );
    let (status, body) = request(&addr, "DELETE", &path, Some(TOKEN)).unwrap();
    assert_eq!(status, 409, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("is connected"));
    stays.kill();
    wait_disconnected(&addr, stays.pid());
    let (status, _) = request(&addr, "DELETE", &path, Some(TOKEN)).unwrap();
    assert_eq!(status, 204);
    assert!(vm_by_pid(&addr, stays.pid()).is_none());
    assert_eq!(
        get(&addr, &format!("{path}/profile?format=collapsed"))
            .unwrap()
            .0,
        404
    );
    assert_eq!(request(&addr, "DELETE", &path, Some(TOKEN)).unwrap().0, 404);

    // A new VM gets a new id, not a deleted one's.
    let next = jvm(&format!("server={addr},token={TOKEN},refresh=200ms"), 60);
    let next_id = wait_connected_in_work(&addr, next.pid());
    assert!(next_id > stays_id.max(brief_id), "{next_id}");
}

/// Collapsed stacks as a map (stack → count).
fn stacks(collapsed: &str) -> std::collections::BTreeMap<String, u64> {
    let mut map = std::collections::BTreeMap::new();
    for line in collapsed.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        *map.entry(stack.to_string()).or_insert(0) += n.parse::<u64>().unwrap();
    }
    map
}

/// Labels from the agent option, from JVMPROF_LABELS and from `record --label`: the API lists
/// and filters VMs by them, and merges the profiles of the VMs that match into one that is
/// exactly the sum of theirs; the web UI filters and shows the merged flame graph.
#[test]
fn labels_filter_vms_and_merge_their_profiles() {
    let _g = serial();
    let dir = scratch("labels");
    let c = collector(&dir.join("data"), "127.0.0.1:0", Some(TOKEN));
    let addr = c.addr.clone();
    let mut prod = jvm(
        &format!("server={addr},token={TOKEN},refresh=200ms,labels=service:checkout;env:prod"),
        3,
    );
    let mut test = Proc::spawn(
        Command::new("java")
            .env("JVMPROF_LABELS", "service:checkout;env:test")
            .arg(format!(
                "-agentpath:{}=server={addr},token={TOKEN},refresh=200ms",
                agent().display()
            ))
            .arg("-cp")
            .arg(classes())
            .args(["Service", "3"]),
    );
    let mut cart = Proc::spawn(
        Command::new(jvmprof())
            .args(["record", "--server", &addr, "--token", TOKEN])
            .args(["--label", "service:cart", "-o"])
            .arg(dir.join("cart.collapsed"))
            .args(["--", "java", "-cp"])
            .arg(classes())
            .args(["Service", "3"]),
    );
    prod.wait_success();
    test.wait_success();
    cart.wait_success();
    for p in [&prod, &test] {
        wait_disconnected(&addr, p.pid());
    }
    wait_for("the recorded VM to disconnect", || {
        (vms(&addr).len() == 3 && vms(&addr).iter().all(|v| v["connected"] == false)).then_some(())
    });

    let pids = |q: &str| -> Vec<u64> {
        let list: Value = json(&addr, &format!("/api/vms?labels={q}"));
        let mut p: Vec<u64> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["pid"].as_u64().unwrap())
            .collect();
        p.sort();
        p
    };
    let mut checkout = vec![prod.pid(), test.pid()];
    checkout.sort();
    assert_eq!(pids("service:checkout"), checkout);
    assert_eq!(pids("service:checkout;env:prod"), vec![prod.pid()]);
    assert_eq!(pids("env:prod;service:cart"), Vec::<u64>::new());
    assert_eq!(pids("service:cart").len(), 1);
    assert_eq!(pids("").len(), 3);
    assert_eq!(
        json(&addr, "/api/labels"),
        serde_json::json!({"env": ["prod", "test"], "service": ["cart", "checkout"]})
    );
    let vm = vm_by_pid(&addr, prod.pid()).unwrap();
    assert_eq!(
        vm["labels"],
        serde_json::json!([["service", "checkout"], ["env", "prod"]])
    );

    // The merged profile is the sum of the two VMs' profiles, stack by stack.
    let mut sum = std::collections::BTreeMap::new();
    for pid in [prod.pid(), test.pid()] {
        let id = vm_by_pid(&addr, pid).unwrap()["id"].as_u64().unwrap();
        for (stack, n) in stacks(&collapsed(&addr, id)) {
            *sum.entry(stack).or_insert(0) += n;
        }
    }
    assert!(sum.values().sum::<u64>() > 0);
    let merged = get_ok(
        &addr,
        "/api/profile?labels=service:checkout&format=collapsed",
    );
    assert_eq!(stacks(&String::from_utf8(merged).unwrap()), sum);
    assert_eq!(
        get(&addr, "/api/profile?labels=service:none").unwrap().0,
        404
    );
    assert_eq!(get(&addr, "/api/vms?labels=service").unwrap().0, 400);
    assert_eq!(
        get_as(&addr, "/api/profile?labels=service:checkout", None)
            .unwrap()
            .0,
        401
    );

    // The web UI: filter by a label, then the merged flame graph of what it shows.
    let Some(chromium) = cdp::chromium() else {
        return;
    };
    let mut b = cdp::Browser::start(chromium, &dir.join("chromium"));
    open_ui(&mut b, &format!("http://{addr}/"));
    b.wait(
        "three VMs listed",
        "document.querySelectorAll('#vms tr.row').length === 3",
    );
    b.eval("document.getElementById('labels').focus()");
    b.call(
        "Input.insertText",
        serde_json::json!({ "text": "service:checkout" }),
    );
    b.click("#filter button[type=submit]");
    b.wait(
        "the two checkout VMs listed",
        "document.querySelectorAll('#vms tr.row').length === 2",
    );
    let shown = b.eval("document.getElementById('vms').textContent");
    assert!(shown.as_str().unwrap().contains("env:test"), "{shown}");
    b.click("#merged");
    b.wait(
        "the merged flame graph in the frame",
        "document.getElementById('flame').dataset.src.startsWith('/api/profile') && \
         document.getElementById('flame').src.startsWith('blob:') && \
         document.getElementById('flame').contentDocument.getElementById('title').textContent",
    );
    assert_eq!(
        b.eval("document.getElementById('flame').dataset.src")
            .as_str()
            .unwrap(),
        "/api/profile?labels=service%3Acheckout&format=html"
    );
    let title = b.eval("document.getElementById('flame-title').textContent");
    assert_eq!(
        title.as_str().unwrap(),
        "2 VMs labelled service:checkout, everything"
    );
}

/// Two collectors on one private ClickHouse server: each serves every VM's profile, the same
/// to the sample, also one restarted with an empty disk; the merged profile of a label reads
/// across them; retention drops a day's partition that is older than it.
#[test]
fn two_collectors_share_one_clickhouse() {
    let _g = serial();
    if !clickhouse_server::installed() {
        return;
    }
    let dir = scratch("clickhouse");
    let ch = clickhouse_server::Server::start(&dir.join("clickhouse"));
    let store = format!("clickhouse://{}/jvmprof_test", ch.http);
    let start = |name: &str, extra: &[&str]| {
        let mut args = vec!["--store", store.as_str()];
        args.extend(extra);
        collector_with(&dir.join(name), "127.0.0.1:0", Some(TOKEN), &args)
    };
    let a = start("a", &[]);
    let b = start("b", &[]);
    let mut one = jvm(
        &format!(
            "server={},token={TOKEN},refresh=200ms,labels=service:checkout",
            a.addr
        ),
        3,
    );
    let mut two = jvm(
        &format!(
            "server={},token={TOKEN},refresh=200ms,labels=service:cart",
            b.addr
        ),
        3,
    );
    one.wait_success();
    two.wait_success();
    let one_id = wait_disconnected(&a.addr, one.pid());
    let two_id = wait_disconnected(&b.addr, two.pid());
    assert_ne!(one_id, two_id);

    // Each collector lists both VMs and serves both profiles, identically.
    let profiles = |addr: &str| {
        wait_for("both VMs at the collector", || {
            (vm_by_pid(addr, one.pid()).is_some() && vm_by_pid(addr, two.pid()).is_some())
                .then_some(())
        });
        (
            stacks(&collapsed(addr, one_id)),
            stacks(&collapsed(addr, two_id)),
        )
    };
    let (one_a, two_a) = profiles(&a.addr);
    assert!(one_a.values().sum::<u64>() > 0 && two_a.values().sum::<u64>() > 0);
    assert!(
        one_a.keys().any(|s| s.contains("Service.work")),
        "{one_a:?}"
    );
    assert_eq!(profiles(&b.addr), (one_a.clone(), two_a.clone()));
    let merged = get_ok(
        &b.addr,
        "/api/profile?labels=service:checkout&format=collapsed",
    );
    assert_eq!(stacks(&String::from_utf8(merged).unwrap()), one_a);
    let vm = vm_by_pid(&b.addr, one.pid()).unwrap();
    assert_eq!(vm["labels"], serde_json::json!([["service", "checkout"]]));

    // A restarted with an empty disk loses nothing.
    drop(a);
    std::fs::remove_dir_all(dir.join("a")).unwrap();
    let a = start("a", &[]);
    assert_eq!(profiles(&a.addr), (one_a.clone(), two_a.clone()));
    assert!(
        !dir.join("a/collector.redb").exists(),
        "nothing is kept locally"
    );

    // Retention drops whole days: a copy of VM one's samples ten days back goes, the rest
    // (newer than the retention) stays.
    let db = "jvmprof_test";
    ch.query(&format!(
        "INSERT INTO {db}.samples SELECT day - 10, time_ms - 864000000, vm, stack, tid, thread, \
         state, values FROM {db}.samples WHERE vm = {one_id}"
    ))
    .expect("the copy was inserted");
    let doubled: u64 = stacks(&collapsed(&a.addr, one_id)).values().sum();
    assert_eq!(doubled, 2 * one_a.values().sum::<u64>());
    drop(b);
    let b = start("b", &["--retention", "7d"]);
    wait_for("the old partition to be dropped", || {
        (stacks(&collapsed(&b.addr, one_id)) == one_a).then_some(())
    });
    assert_eq!(stacks(&collapsed(&b.addr, two_id)), two_a);
    drop(a);
}

fn stat(addr: &str, name: &str) -> u64 {
    json(addr, "/api/stats")[name].as_u64().unwrap()
}

/// `serve --push`: collector A pushes each VM's samples every second as pprof to collector B's
/// `/ingest` (Pyroscope's ingest API, with B's token), where they become a VM with the same
/// labels, pid and host, and exactly A's profile; /ingest needs the token and says what is
/// wrong with bad input; a collector whose push target is down says so once, keeps serving, and
/// says once that it works again when the target comes up.
#[test]
fn push_sends_every_vm_to_a_pyroscope_endpoint() {
    let _g = serial();
    let dir = scratch("push");
    let b = collector(&dir.join("b"), "127.0.0.1:0", Some(TOKEN));
    let target = format!("pyroscope://{}", b.addr);
    let a = collector_with(
        &dir.join("a"),
        "127.0.0.1:0",
        None,
        &[
            "--push",
            &target,
            "--push-every",
            "1s",
            "--push-token",
            TOKEN,
        ],
    );
    let mut vm = jvm(
        &format!("server={},refresh=200ms,labels=service:checkout", a.addr),
        3,
    );
    vm.wait_success();
    let a_id = wait_disconnected(&a.addr, vm.pid());
    let a_vm = vm_by_pid(&a.addr, vm.pid()).unwrap();
    let want = stacks(&collapsed(&a.addr, a_id));
    assert!(want.values().sum::<u64>() > 0);

    // B lists the VM under its pid and host, with its labels, never connected; once A has
    // pushed past the VM's last batch, B's profile of it is A's, stack by stack.
    let b_vm = wait_for("B to list the pushed VM", || vm_by_pid(&b.addr, vm.pid()));
    assert_eq!(b_vm["connected"], false);
    assert_eq!(b_vm["host"], a_vm["host"]);
    assert_eq!(b_vm["labels"], serde_json::json!([["service", "checkout"]]));
    assert_eq!(b_vm["agent_version"], format!("pushed: vm_id={a_id}"));
    let b_id = b_vm["id"].as_u64().unwrap();
    wait_for("B to have all of A's samples of the VM", || {
        (stacks(&collapsed(&b.addr, b_id)) == want).then_some(())
    });
    // Two more rounds push nothing more: nothing is pushed twice.
    let pushed = stat(&a.addr, "pushed");
    let rounds = stat(&a.addr, "push_rounds");
    wait_for("two more push rounds", || {
        (stat(&a.addr, "push_rounds") >= rounds + 2).then_some(())
    });
    assert_eq!(stacks(&collapsed(&b.addr, b_id)), want);
    assert_eq!(stat(&a.addr, "pushed"), pushed);
    assert_eq!(stat(&b.addr, "ingested"), pushed);
    assert_eq!(stat(&a.addr, "push_failures"), 0);
    assert_eq!(vms(&b.addr).len(), 1);
    assert!(
        !a.proc.stderr().contains("cannot push"),
        "{}",
        a.proc.stderr()
    );

    // /ingest needs B's token, and says what is wrong with bad input.
    let pprof = get_ok(&a.addr, &format!("/api/vms/{a_id}/profile?format=pprof"));
    // A second from now: after the start of pushing of a collector started before.
    let query = |name: &str| {
        let next = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 1;
        format!("/ingest?name={name}&from={next}&until={next}&format=pprof")
    };
    let ingest = |addr: &str, path: &str, token: Option<&str>, body: &[u8]| {
        let (status, body) = request_with_body(addr, "POST", path, token, Some(body)).unwrap();
        (status, String::from_utf8_lossy(&body).to_string())
    };
    let good = query("probe%7Bvm_id%3D1%7D");
    assert_eq!(ingest(&b.addr, &good, None, &pprof).0, 401);
    let error = |reason: &str| serde_json::json!({ "error": reason }).to_string();
    for (path, body, reason) in [
        (
            query("probe%7Bvm_id%3D1"),
            &pprof[..],
            "bad name 'probe{vm_id=1': its labels do not end with '}'",
        ),
        (
            "/ingest?name=probe&until=5&format=pprof".to_string(),
            &pprof[..],
            "from (Unix seconds) is missing",
        ),
        (
            "/ingest?name=probe&from=1&until=5&format=jfr".to_string(),
            &pprof[..],
            "format 'jfr' is not supported here; send format=pprof",
        ),
        (
            good.clone(),
            &b"not a profile"[..],
            "the body is not a pprof profile: wire type 6 is not used by pprof",
        ),
    ] {
        assert_eq!(
            ingest(&b.addr, &path, Some(TOKEN), body),
            (400, error(reason)),
            "{path}"
        );
    }
    assert_eq!(vms(&b.addr).len(), 1);

    // A collector whose target is down: one line, serving on; one line when it is up again.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = format!("127.0.0.1:{port}");
    let c = collector_with(
        &dir.join("c"),
        "127.0.0.1:0",
        None,
        &[
            "--push",
            &format!("pyroscope://{down}"),
            "--push-every",
            "1s",
        ],
    );
    let (status, answer) = ingest(&c.addr, &query("probe%7Bvm_id%3D1%7D"), None, &pprof);
    assert_eq!(status, 200, "{answer}");
    let c_id: u64 = serde_json::from_str::<Value>(&answer).unwrap()["vm"]
        .as_u64()
        .unwrap();
    wait_for("three failed pushes", || {
        (stat(&c.addr, "push_failures") >= 3).then_some(())
    });
    let said = |what: &str| c.proc.stderr().matches(what).count();
    assert_eq!(
        said("jvmprof serve: cannot push to"),
        1,
        "{}",
        c.proc.stderr()
    );
    assert!(
        c.proc
            .stderr()
            .contains(&format!("cannot push to pyroscope://{down}: "))
    );
    assert_eq!(vms(&c.addr).len(), 1);
    let up = collector(&dir.join("up"), &down, None);
    wait_for("the pushes to work again", || {
        (said("works again") == 1).then_some(())
    });
    assert_eq!(
        said("jvmprof serve: cannot push to"),
        1,
        "{}",
        c.proc.stderr()
    );
    let up_vm = wait_for("the VM on the collector that came up", || {
        vms(&up.addr).into_iter().next()
    });
    assert_eq!(up_vm["labels"], serde_json::json!([["service", "probe"]]));
    assert_eq!(
        stacks(&collapsed(&up.addr, up_vm["id"].as_u64().unwrap())),
        stacks(&collapsed(&c.addr, c_id))
    );
    assert_eq!(stacks(&collapsed(&c.addr, c_id)), want);
}

/// Trace mode at the collector: an HTTP server and its client, both traced and streaming, are
/// joined by `GET /api/trace` while the server still runs: every client call (three through
/// HttpURLConnection, two through HttpClient) has the server's handler, on the other VM, as
/// its one child, and the handler's own callee under it. The server runs with its clock an
/// hour ahead (faketime) and starts before the collector: its link must retry and get through
/// (a timed wait on the faked clock would wait an hour).
#[test]
fn traces_stream_and_join_at_the_collector() {
    let _g = serial();
    let dir = scratch("traces");
    let (classes, port) = trace_live(&dir);
    let listen = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listen.local_addr().unwrap().to_string();
    drop(listen);
    let traced = |name: &str, skewed: bool, args: &[&str]| {
        let options = format!(
            "mode=trace,vm_name={name},server={addr},token={TOKEN},file={}",
            dir.join(format!("{name}.jvmprof")).display()
        );
        let mut cmd = if skewed {
            let mut f = Command::new("faketime");
            f.args(["-f", "+1h", "java"]);
            f
        } else {
            Command::new("java")
        };
        cmd.arg(format!("-agentpath:{}={options}", agent().display()))
            .arg("-cp")
            .arg(&classes)
            .arg("TraceLive")
            .args(args);
        Proc::spawn(&mut cmd)
    };
    let _server = traced("srv", true, &["server", &port, "30000"]);
    wait_for("the traced HTTP server", || {
        TcpStream::connect(format!("127.0.0.1:{port}")).ok()
    });
    // The server's link has failed to connect by now, and waits to retry.
    std::thread::sleep(std::time::Duration::from_millis(700));
    let c = collector(&dir.join("data"), &addr, Some(TOKEN));
    let mut client = traced("cli", false, &["client", &port]);
    client.wait_success();
    // Live: the server has not ended; its chunks arrive within about a second.
    let tree = wait_for("both sides of five calls at the collector", || {
        let (code, body) = get(&c.addr, "/api/trace?format=json")?;
        let v: Value = serde_json::from_slice(&body).ok()?;
        let calls = client_nodes(&v);
        (code == 200
            && calls.len() == 5
            && calls
                .iter()
                .all(|n| n["children"].as_array().is_some_and(|c| c.len() == 1)))
        .then_some(v)
    });
    for call in client_nodes(&tree) {
        assert_eq!(call["vm"], "cli", "{call}");
        let label = call["method"].as_str().unwrap();
        assert!(label.starts_with("GET http://127.0.0.1:"), "{label}");
        let server = &call["children"][0];
        assert_eq!(server["kind"], "server", "{call}");
        assert_eq!(server["vm"], "srv", "{call}");
        assert_eq!(server["method"], "TraceLive$Hello.handle", "{call}");
        let work: Vec<&str> = server["children"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n["method"].as_str())
            .collect();
        assert_eq!(work, vec!["TraceLive.work"], "{call}");
    }
    let (code, html) = get(&c.addr, "/api/trace?format=html").unwrap();
    let html = String::from_utf8_lossy(&html);
    assert_eq!(code, 200);
    assert!(
        html.contains("TraceLive$Hello.handle"),
        "the page embeds the tree"
    );
    assert!(
        !html.contains("src=\"http"),
        "the page loads nothing from the network"
    );
    let (code, _) = get(&c.addr, "/api/trace?format=svg").unwrap();
    assert_eq!(code, 400);
    let (code, _) = get_as(&c.addr, "/api/trace", None).unwrap();
    assert_eq!(code, 401, "traces need the token");
}

/// A root session streams its calling-context tree like sampled profiles: the client of
/// TraceLive with the root `TraceLive.main` (every call of the class below it) reaches the
/// collector with the exact call counts the file has.
#[test]
fn a_root_session_streams_exact_calls() {
    let _g = serial();
    let dir = scratch("root-stream");
    let (classes, port) = trace_live(&dir);
    let c = collector(&dir.join("data"), "127.0.0.1:0", Some(TOKEN));
    let java = |options: Option<String>, args: &[&str]| {
        let mut cmd = Command::new("java");
        if let Some(o) = options {
            cmd.arg(format!("-agentpath:{}={o}", agent().display()));
        }
        Proc::spawn(cmd.arg("-cp").arg(&classes).arg("TraceLive").args(args))
    };
    let _server = java(None, &["server", &port, "30000"]);
    wait_for("the HTTP server", || {
        TcpStream::connect(format!("127.0.0.1:{port}")).ok()
    });
    let file = dir.join("client.collapsed");
    let mut client = java(
        Some(format!(
            "mode=exact,root=TraceLive.main,server={},token={TOKEN},file={},value=calls",
            c.addr,
            file.display()
        )),
        &["client", &port],
    );
    client.wait_success();
    let want = "TraceLive.main 1\nTraceLive.main;TraceLive.callClient 2\nTraceLive.main;TraceLive.callUrl 3\n";
    assert_eq!(std::fs::read_to_string(&file).unwrap(), want);
    let id = wait_disconnected(&c.addr, client.pid());
    let mut lines: Vec<String> = collapsed(&c.addr, id).lines().map(str::to_string).collect();
    lines.sort();
    assert_eq!(
        lines.join("\n") + "\n",
        want,
        "the collector has what the file has"
    );
}

/// TraceLive compiled into `dir/classes`, and a free port for its HTTP server.
fn trace_live(dir: &Path) -> (PathBuf, String) {
    let classes = dir.join("classes");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/TraceLive.java");
    let status = Command::new("javac")
        .args(["--release", "11", "-d"])
        .arg(&classes)
        .arg(&src)
        .status()
        .unwrap();
    assert!(status.success(), "javac failed on TraceLive.java");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    (classes, port)
}

/// The `"kind": "client"` nodes of a joined tree, depth first.
fn client_nodes(v: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    let mut todo: Vec<&Value> = v["roots"]
        .as_array()
        .map(|r| r.iter().collect())
        .unwrap_or_default();
    while let Some(n) = todo.pop() {
        if n["kind"] == "client" {
            out.push(n.clone());
        }
        if let Some(c) = n["children"].as_array() {
            todo.extend(c.iter());
        }
    }
    out
}
