//! Heap dumps and their analysis against ground truth: `HeapRetain` builds a static map, a list
//! held only by a thread's local variable, an array shared by two owners and a cycle, and prints
//! the bytes each retains by the JVM's own object sizes (Instrumentation.getObjectSize). The dump
//! is taken by `jvmprof dump --hprof` (all objects and `--live`) and by `jcmd GC.heap_dump`, on
//! JDK 17 and JDK 25; `jvmprof heap` must give those sizes exactly and name each root. Truncated
//! and corrupted dumps are rejected with the record and offset.

use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

mod common;
use common::*;

/// A jar holding only a manifest that names HeapRetain as its Premain-Class.
fn agent_jar() -> &'static Path {
    static JAR: OnceLock<PathBuf> = OnceLock::new();
    JAR.get_or_init(|| {
        let dir = scratch("heap-agent-jar");
        std::fs::write(dir.join("manifest.txt"), "Premain-Class: HeapRetain\n").unwrap();
        std::fs::create_dir_all(dir.join("empty")).unwrap();
        let jar = dir.join("agent.jar");
        run_ok(
            Command::new(jdk_tool(None, "jar"))
                .arg("--create")
                .arg("--file")
                .arg(&jar)
                .arg("--manifest")
                .arg(dir.join("manifest.txt"))
                .arg("-C")
                .arg(dir.join("empty"))
                .arg("."),
        );
        jar
    })
}

struct Retain {
    child: Child,
    expect: HashMap<String, u64>,
}

impl Retain {
    fn start(home: Option<&Path>) -> Retain {
        let mut child = Command::new(jdk_tool(home, "java"))
            .arg(format!("-javaagent:{}", agent_jar().display()))
            .args(["--add-opens", "java.base/java.util=ALL-UNNAMED"])
            .arg("-cp")
            .arg(classes())
            .arg("HeapRetain")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut expect = HashMap::new();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        for line in lines.by_ref() {
            let line = line.unwrap();
            if line == "ready" {
                break;
            }
            let mut it = line.split_whitespace();
            assert_eq!(it.next(), Some("expect"), "unexpected line {line:?}");
            expect.insert(
                it.next().unwrap().to_string(),
                it.next().unwrap().parse().unwrap(),
            );
        }
        assert_eq!(expect.len(), 6, "the fixture printed {expect:?}");
        Retain { child, expect }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// Lets the program finish: it must still run normally after the dumps.
    fn finish(mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "HeapRetain ended with {status}");
    }
}

impl Drop for Retain {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn heap_json(file: &Path) -> Value {
    let out = run_ok(
        Command::new(jvmprof())
            .arg("heap")
            .arg(file)
            .args(["--format", "json", "--top", "100000"]),
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn dominator<'a>(report: &'a Value, root: &str) -> &'a Value {
    report["dominators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["root"] == root && d["path"].as_array().unwrap().len() == 1)
        .unwrap_or_else(|| panic!("no top retainer held by {root:?}"))
}

fn check_report(report: &Value, expect: &HashMap<String, u64>, what: &str) {
    let cache = dominator(report, "static HeapRetain.CACHE");
    assert_eq!(cache["class"], "java.util.HashMap", "{what}");
    assert_eq!(cache["retained_bytes"], expect["cache"], "{what}: CACHE");

    let local = dominator(
        report,
        "thread \"worker-1\" local in HeapRetain$Holder.hold",
    );
    assert_eq!(local["class"], "HeapRetain$Node", "{what}");
    assert_eq!(
        local["retained_bytes"], expect["local"],
        "{what}: local list"
    );

    let ring = dominator(report, "static HeapRetain.RING");
    assert_eq!(ring["class"], "HeapRetain$Ring", "{what}");
    assert_eq!(ring["retained_bytes"], expect["ring"], "{what}: cycle");

    for owner in ["A", "B"] {
        let o = dominator(report, &format!("static HeapRetain.{owner}"));
        assert_eq!(o["class"], "HeapRetain$Owner", "{what}");
        assert_eq!(
            o["retained_bytes"], expect["owner"],
            "{what}: owner {owner}"
        );
    }
    // The shared array is a top retainer of its own: neither owner retains it.
    let shared: Vec<&Value> = report["dominators"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| {
            d["class"] == "byte[]"
                && d["path"].as_array().unwrap().len() == 2
                && d["path"][1] == "HeapRetain$Owner.shared"
        })
        .collect();
    assert_eq!(shared.len(), 1, "{what}: the shared array");
    assert_eq!(shared[0]["retained_bytes"], expect["shared"], "{what}");
    assert_eq!(shared[0]["shallow_bytes"], expect["shared"], "{what}");
    assert!(
        shared[0]["root"] == "static HeapRetain.A" || shared[0]["root"] == "static HeapRetain.B",
        "{what}: {}",
        shared[0]["root"]
    );

    let classes: HashMap<&str, &Value> = report["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c))
        .collect();
    let node = classes["HeapRetain$Node"];
    let n = node["instances"].as_u64().unwrap();
    assert!(n == 1000 || n == 1001, "{what}: {n} nodes");
    assert_eq!(
        node["shallow_bytes"].as_u64().unwrap(),
        n * expect["node_shallow"],
        "{what}: node shallow sizes"
    );
    assert_eq!(classes["HeapRetain$Ring"]["instances"], 50, "{what}");
    assert_eq!(
        classes["HeapRetain$Ring"]["retained_bytes"], expect["ring"],
        "{what}"
    );
    for name in ["byte[]", "java.util.HashMap$Node[]", "java.lang.String"] {
        assert!(classes.contains_key(name), "{what}: no {name} row");
    }
    assert!(report["objects"].as_u64().unwrap() > 1000);
    assert!(report["reachable_bytes"].as_u64().unwrap() <= report["bytes"].as_u64().unwrap());
}

#[test]
fn retained_sizes_and_roots_match_the_jvms_own_sizes() {
    let _guard = serial();
    for home in jdk_homes() {
        let jdk = home
            .as_deref()
            .map_or("17".into(), |h| h.display().to_string());
        let target = Retain::start(home.as_deref());
        let dir = scratch(&format!("heap-{}", jdk.replace('/', "_")));
        let all = dir.join("all.hprof");
        let live = dir.join("live.hprof");
        let jcmd = dir.join("jcmd.hprof");
        for f in [&all, &live, &jcmd] {
            let _ = std::fs::remove_file(f);
        }
        run_ok(
            Command::new(jvmprof())
                .args(["dump", &target.pid(), "--hprof"])
                .arg(&all),
        );
        run_ok(
            Command::new(jvmprof())
                .args(["dump", &target.pid(), "--live", "--hprof"])
                .arg(&live),
        );
        run_ok(
            Command::new(jdk_tool(home.as_deref(), "jcmd"))
                .arg(target.pid())
                .arg("GC.heap_dump")
                .arg(&jcmd),
        );
        // A second dump to an existing file is refused before the JVM is asked.
        let again = Command::new(jvmprof())
            .args(["dump", &target.pid(), "--hprof"])
            .arg(&all)
            .output()
            .unwrap();
        assert!(!again.status.success());
        assert!(String::from_utf8_lossy(&again.stderr).contains("exists"));

        let reports: Vec<Value> = [&all, &live, &jcmd].iter().map(|f| heap_json(f)).collect();
        for (report, what) in reports.iter().zip(["all", "live", "jcmd"]) {
            check_report(report, &target.expect, &format!("JDK {jdk}, {what}"));
        }
        // A live dump holds no more objects than the full one.
        assert!(reports[1]["objects"].as_u64() <= reports[0]["objects"].as_u64());

        let text = run_ok(Command::new(jvmprof()).arg("heap").arg(&all));
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains("static HeapRetain.CACHE"), "{text}");
        assert!(text.contains("Class histogram"), "{text}");

        let html = dir.join("heap.html");
        run_ok(
            Command::new(jvmprof())
                .arg("heap")
                .arg(&all)
                .arg("-o")
                .arg(&html),
        );
        let page = std::fs::read_to_string(&html).unwrap();
        assert!(page.contains("HeapRetain$Node") && page.contains("Dominator tree"));
        assert!(!page.contains("src=\"http") && !page.contains("href=\"http"));

        target.finish();
    }
}

#[test]
fn truncated_and_corrupt_dumps_name_the_record_and_offset() {
    let _guard = serial();
    let target = Retain::start(None);
    let dir = scratch("heap-bad");
    let good = dir.join("good.hprof");
    let _ = std::fs::remove_file(&good);
    run_ok(
        Command::new(jvmprof())
            .args(["dump", &target.pid(), "--hprof"])
            .arg(&good),
    );
    target.finish();
    let bytes = std::fs::read(&good).unwrap();

    let heap = |name: &str, data: &[u8]| {
        let f = dir.join(name);
        std::fs::write(&f, data).unwrap();
        let out = Command::new(jvmprof())
            .arg("heap")
            .arg(&f)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name} must be refused");
        assert!(out.stdout.is_empty());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    for cut in [40, bytes.len() / 3, bytes.len() / 2, bytes.len() - 7] {
        let e = heap("cut.hprof", &bytes[..cut]);
        assert!(
            e.contains("truncated heap dump") && e.contains("byte offset"),
            "cut at {cut}: {e}"
        );
    }
    let e = heap(
        "not.hprof",
        b"PK\x03\x04 this is a zip file, not a heap dump",
    );
    assert!(e.contains("not an HPROF heap dump"), "{e}");

    // Corrupt the tag of a sub-record: the first one of the last heap-dump segment (its
    // position is known from the top-level record lengths, so this never lands in array data).
    let mut bad = bytes.clone();
    let mut at = bad.iter().position(|&b| b == 0).unwrap() + 1 + 12;
    let mut last_segment = None;
    while at + 9 <= bad.len() {
        let len = u32::from_be_bytes(bad[at + 5..at + 9].try_into().unwrap()) as usize;
        if (bad[at] == 0x1c || bad[at] == 0x0c) && len > 0 {
            last_segment = Some(at);
        }
        at += 9 + len;
    }
    let body = last_segment.expect("the dump has a heap dump segment") + 9;
    bad[body] = 0xEE;
    let e = heap("corrupt.hprof", &bad);
    assert!(
        e.contains("corrupt heap dump") && e.contains("byte offset"),
        "{e}"
    );
    // A segment length that runs past the end of the file.
    let mut long = bytes.clone();
    let mut seg = long.iter().position(|&b| b == 0).unwrap() + 1 + 12;
    while long[seg] != 0x1c && long[seg] != 0x0c {
        let len = u32::from_be_bytes(long[seg + 5..seg + 9].try_into().unwrap()) as usize;
        seg += 9 + len;
    }
    long[seg + 5..seg + 9].copy_from_slice(&u32::MAX.to_be_bytes());
    let e = heap("long.hprof", &long);
    assert!(
        e.contains("HEAP DUMP SEGMENT") && e.contains("byte offset"),
        "{e}"
    );
    let _ = std::io::stderr().flush();
}

#[test]
fn dumps_on_out_of_memory_and_at_exit_hold_what_the_program_held() {
    let _guard = serial();
    for home in jdk_homes() {
        let jdk = home
            .as_deref()
            .map_or("17".into(), |h| h.display().to_string());
        let dir = scratch(&format!("heap-oom-{}", jdk.replace('/', "_")));
        let (oom, exit) = (dir.join("oom.hprof"), dir.join("exit.hprof"));
        for f in [&oom, &exit] {
            let _ = std::fs::remove_file(f);
        }
        let out = record(
            home.as_deref(),
            &[
                "--hprof-on-oom",
                oom.to_str().unwrap(),
                "--hprof-on-exit",
                exit.to_str().unwrap(),
                "--mode",
                "alloc",
                "--live",
                "-o",
                dir.join("p.jvmprof").to_str().unwrap(),
            ],
            &["-Xmx64m", "HeapOom"],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let count = |key: &str| -> u64 {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {key:?} in {stdout}"))
        };
        let (filled, kept) = (count("filled "), count("kept "));
        assert!(filled >= 20 && kept == filled / 2, "{stdout}");
        // A 1 MiB array: 16-byte header and 1048576 bytes.
        let array = 16 + (1u64 << 20);
        for (file, arrays, what) in [(&oom, filled, "oom"), (&exit, kept, "exit")] {
            let report = heap_json(file);
            let keep = dominator(&report, "static HeapOom.KEEP");
            assert_eq!(keep["class"], "java.util.ArrayList", "JDK {jdk} {what}");
            let retained = keep["retained_bytes"].as_u64().unwrap();
            // The list, its element array and the byte arrays: no more than a few kB besides.
            assert!(
                retained >= arrays * array && retained < arrays * array + 64 * 1024,
                "JDK {jdk} {what}: {retained} retained for {arrays} arrays"
            );
            let suspects = report["suspects"].as_array().unwrap();
            assert!(
                suspects.iter().any(|s| s["class"] == "java.util.ArrayList"),
                "JDK {jdk} {what}: {suspects:?}"
            );
            assert_eq!(
                keep["retained_classes"][0]["class"], "byte[]",
                "JDK {jdk} {what}"
            );
            assert_eq!(
                keep["retained_classes"][0]["instances"], arrays,
                "JDK {jdk} {what}"
            );
        }
        // Joined to the allocation profile of the same run: the arrays the list retains were
        // allocated in HeapOom.main, and those still alive at exit are the live bytes.
        let out = run_ok(
            Command::new(jvmprof())
                .arg("heap")
                .arg(&exit)
                .args(["--format", "json", "--alloc"])
                .arg(dir.join("p.jvmprof")),
        );
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let keep = dominator(&report, "static HeapOom.KEEP");
        let site = &keep["allocated_at"][0];
        assert_eq!(site["class"], "byte[]", "JDK {jdk}: {keep}");
        assert_eq!(site["metric"], "live_bytes", "JDK {jdk}: {keep}");
        assert!(
            site["stack"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f == "HeapOom.main"),
            "JDK {jdk}: {site}"
        );
        let text = run_ok(
            Command::new(jvmprof())
                .arg("heap")
                .arg(&exit)
                .arg("--alloc")
                .arg(dir.join("p.jvmprof")),
        );
        assert!(String::from_utf8_lossy(&text.stdout).contains("byte[] allocated at"));
    }
}

/// GET or POST over plain HTTP/1.0: (status, body).
fn http(addr: &str, request: &str) -> (u16, String) {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let text = String::from_utf8_lossy(&resp).to_string();
    let status = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    (
        status,
        text.split_once("\r\n\r\n").map_or("", |x| x.1).to_string(),
    )
}

#[test]
fn a_dump_uploaded_to_the_collector_is_analysed_and_linked_from_its_ui() {
    let _guard = serial();
    let dir = scratch("heap-collector");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Killed on a panic too: a collector left running would hold the test's output pipe open.
    let mut serve = Killed(
        Command::new(jvmprof())
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--token",
                "s3cret",
                "--data",
            ])
            .arg(dir.join("data"))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut err = BufReader::new(serve.0.stderr.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "the collector ended");
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    std::thread::spawn(move || for _ in err.lines() {});
    let java = Killed(
        Command::new(jdk_tool(None, "java"))
            .arg(format!(
                "-agentpath:{}=server={addr},token=s3cret,file={}",
                agent().display(),
                dir.join("p.jvmprof").display()
            ))
            .arg("-cp")
            .arg(classes())
            .args(["Service", "60"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let pid = java.0.id();
    let mut id = None;
    for _ in 0..200 {
        let (_, body) = http(
            &addr,
            &format!(
                "GET /api/vms HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer s3cret\r\n\r\n"
            ),
        );
        let vms: Value = serde_json::from_str(&body).unwrap();
        id = vms
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["pid"] == pid)
            .and_then(|v| v["id"].as_u64());
        if id.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let id = id.expect("the VM never appeared at the collector");

    let dump = dir.join("service.hprof");
    // Without the token the upload is refused; with it, accepted.
    let refused = Command::new(jvmprof())
        .args(["dump", &pid.to_string(), "--hprof"])
        .arg(dir.join("other.hprof"))
        .args(["--server", &addr, "--token", "wrong"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("401"),
        "{refused:?}"
    );
    run_ok(
        Command::new(jvmprof())
            .args(["dump", &pid.to_string(), "--hprof"])
            .arg(&dump)
            .args(["--server", &addr, "--token", "s3cret"]),
    );
    let mut report = None;
    for _ in 0..600 {
        let (status, body) = http(
            &addr,
            &format!(
                "GET /api/vms/{id}/heap?format=json HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer s3cret\r\n\r\n"
            ),
        );
        if status == 200 {
            report = Some(serde_json::from_str::<Value>(&body).unwrap());
            break;
        }
        assert_eq!(status, 202, "{body}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let report = report.expect("the heap report never became ready");
    // The collector's analysis is the CLI's, of the same file.
    let local = heap_json(&dump);
    assert_eq!(report["objects"], local["objects"]);
    assert_eq!(report["reachable_bytes"], local["reachable_bytes"]);
    let (_, body) = http(
        &addr,
        &format!("GET /api/vms HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer s3cret\r\n\r\n"),
    );
    let vms: Value = serde_json::from_str(&body).unwrap();
    let vm = vms
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == id)
        .unwrap();
    assert_eq!(vm["heap"], "ready");
    let (status, page) = http(
        &addr,
        &format!(
            "GET /api/vms/{id}/heap HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer s3cret\r\n\r\n"
        ),
    );
    assert_eq!(status, 200);
    assert!(page.contains("Dominator tree"));
    let (_, ui) = http(&addr, &format!("GET / HTTP/1.0\r\nHost: {addr}\r\n\r\n"));
    // The UI's heap button fetches the report with the tab's token.
    assert!(
        ui.contains("<button class=\"heap\"") && ui.contains("/heap`"),
        "the UI links the report"
    );
    drop(java);
    drop(serve);
}

/// A child process killed when the test ends, also by a panic.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_dump_of_another_users_process_is_refused_like_attach() {
    use std::os::unix::process::CommandExt;
    let dir = scratch("heap-other-user");
    let file = dir.join("other.hprof");
    let _ = std::fs::remove_file(&file);
    let euid = rustix::process::geteuid().as_raw();
    // As root the target runs as nobody; otherwise init (root) is another user's process.
    let (pid, child) = if euid == 0 {
        let child = Command::new("sleep")
            .arg("60")
            .uid(65534)
            .gid(65534)
            .spawn()
            .unwrap();
        (child.id(), Some(Killed(child)))
    } else {
        (1, None)
    };
    let out = Command::new(jvmprof())
        .args(["dump", &pid.to_string(), "--hprof"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("run as the target's user"), "{err}");
    assert!(!file.exists());
    drop(child);
}
