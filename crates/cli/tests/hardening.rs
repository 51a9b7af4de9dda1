//! Production hardening, end to end (issue 33): private files where jvmprof keeps data, outputs
//! that follow the user's umask, the collector's shutdown and metrics, the JVM's exit code.
//! Nothing waits for a fixed time: every wait polls for a condition with a generous deadline.

mod common;

use common::{classes, jvmprof, scratch, serial};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(90);

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// A process killed when dropped, its stderr collected.
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

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `jvmprof serve --listen 127.0.0.1:0 --data DATA EXTRA`, and the address it listens on.
fn serve(data: &Path, extra: &[&str]) -> (Proc, String) {
    let proc = Proc::spawn(
        Command::new(jvmprof())
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(data)
            .args(extra),
    );
    let addr = wait_for("the collector to listen", || {
        let err = proc.stderr();
        let rest = err.split("listening on ").nth(1)?;
        Some(rest.split_whitespace().next()?.to_string())
    });
    (proc, addr)
}

/// One HTTP/1.0 request: (status, body).
fn http(addr: &str, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let split = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&resp[..split]).to_string();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, resp[split + 4..].to_vec())
}

fn vms(addr: &str) -> Vec<serde_json::Value> {
    let (status, body) = http(addr, "GET", "/api/vms", b"");
    assert_eq!(status, 200);
    serde_json::from_slice(&body).unwrap()
}

/// Every file and directory under `dir` (not following links), with its mode.
fn modes(dir: &Path, out: &mut Vec<(String, u32)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        out.push((p.display().to_string(), mode(&p)));
        if p.is_dir() {
            modes(&p, out);
        }
    }
}

/// An existing data directory open to others is tightened, with what it holds, and said; what
/// the collector then writes (store, a VM's call graph, an uploaded heap dump, its reports) is
/// 0600 in 0700 directories although the collector runs with umask 022.
#[test]
fn the_collectors_data_is_private() {
    let _g = serial();
    let dir = scratch("private-data");
    let data = dir.join("data");
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("notes.txt"), "kept by someone").unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        data.join("notes.txt"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let (collector, addr) = serve(&data, &[]);
    let said = collector.stderr();
    assert!(
        said.contains(&format!(
            "jvmprof serve: --data {} was mode 0755, open to others; tightened to 0700",
            data.display()
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "jvmprof serve: 1 files and directories under {} were open to others",
            data.display()
        )),
        "{said}"
    );
    let java = Proc::spawn(
        Command::new("java")
            .arg(format!(
                "-agentpath:{}=server={addr},refresh=200ms",
                common::agent().display()
            ))
            .arg("-cp")
            .arg(classes())
            .args(["Service", "2"]),
    );
    let id = wait_for("the VM to connect and disconnect", || {
        let vm = vms(&addr).into_iter().next()?;
        (vm["connected"] == false).then(|| vm["id"].as_u64().unwrap())
    });
    drop(java);
    let dot = data.join(format!("callgraphs/vm-{id}.dot"));
    wait_for("the call graph", || dot.is_file().then_some(()));
    let (status, body) = http(
        &addr,
        "POST",
        &format!("/api/vms/{id}/heap"),
        b"JAVA PROFILE 1.0.2\0 not really a heap dump",
    );
    assert_eq!(status, 202, "{}", String::from_utf8_lossy(&body));
    let hprof = data.join(format!("heaps/{id}.hprof"));
    wait_for("the dump to be analysed (and found bad)", || {
        let (status, _) = http(&addr, "GET", &format!("/api/vms/{id}/heap"), b"");
        (status == 422).then_some(())
    });
    assert!(hprof.is_file());
    let mut all = Vec::new();
    modes(&data, &mut all);
    assert!(all.len() >= 7, "{all:?}");
    for (path, m) in &all {
        let wanted = if Path::new(path).is_dir() {
            0o700
        } else {
            0o600
        };
        assert_eq!(*m, wanted, "{path} is {m:o}: {all:?}");
    }
    assert_eq!(mode(&data), 0o700);
}

/// A data directory of another user is refused with one line (as root: a directory given to
/// nobody; otherwise `/`, which is root's).
#[test]
fn a_data_directory_of_another_user_is_refused() {
    let dir = scratch("theirs");
    let theirs = if rustix::process::geteuid().is_root() {
        let d = dir.join("data");
        let _ = std::fs::create_dir(&d);
        std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
        d
    } else {
        std::path::PathBuf::from("/")
    };
    let out = Command::new(jvmprof())
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(&theirs)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "jvmprof: --data {} belongs to uid ",
            theirs.display()
        )) && err.lines().count() == 1,
        "{err}"
    );
}

/// `record -o` files are created by this user's umask, in the native format (a copy of the
/// agent's file) and in another (written here) alike.
#[test]
fn record_outputs_follow_the_umask() {
    let _g = serial();
    let dir = scratch("umask");
    for name in ["out.jvmprof", "out.collapsed"] {
        let out = dir.join(name);
        let _ = std::fs::remove_file(&out);
        let status = Command::new("sh")
            .arg("-c")
            .arg(r#"umask 027 && exec "$@""#)
            .arg("sh")
            .arg(jvmprof())
            .args(["record", "-o"])
            .arg(&out)
            .args(["--", "java", "-cp"])
            .arg(classes())
            .args(["Exit", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(mode(&out), 0o640, "{name}");
    }
}

/// `jvmprof ARGS` with at most 512 MiB of address space (a reader that trusted a bomb would
/// fail to allocate and abort): (exit code, stderr).
fn bounded(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -v 524288 && exec "$@""#)
        .arg("sh")
        .arg(jvmprof())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// 300 MiB of zeros, gzipped into under 1 MiB, after `header`.
fn gzip_bomb(header: &[u8]) -> Vec<u8> {
    let mut bytes = header.to_vec();
    let mut gz = flate2::write::GzEncoder::new(&mut bytes, flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..300 {
        gz.write_all(&zeros).unwrap();
    }
    gz.finish().unwrap();
    bytes
}

/// Decompression bombs (a version 4 native file, a .pb.gz) are refused by every reading
/// command with one line, within bounded memory.
#[test]
fn decompression_bombs_are_refused_in_one_line() {
    let dir = scratch("bombs");
    let native = dir.join("bomb.jvmprof");
    std::fs::write(&native, gzip_bomb(b"JVMPROF\0\x04\x00")).unwrap();
    let pprof = dir.join("bomb.pb.gz");
    std::fs::write(&pprof, gzip_bomb(b"")).unwrap();
    let out = dir.join("out.collapsed");
    for (file, kind) in [(&native, "jvmprof"), (&pprof, "pprof")] {
        let file = file.to_str().unwrap();
        for args in [
            vec!["report", file],
            vec!["convert", file, "-o", out.to_str().unwrap()],
            vec!["diff", file, file],
        ] {
            let (code, err) = bounded(&args);
            assert_eq!(code, Some(2), "{args:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
            assert!(
                err.starts_with(&format!("jvmprof: {file}: invalid {kind} data: "))
                    && err.contains("inflate past 67108864 bytes"),
                "{args:?}: {err}"
            );
        }
    }
}

/// A small profile whose one timeline entry claims 10^9 periods: converted to JFR without
/// expanding them when its sample has 3; refused with the number of events when the sample
/// has 10^9 too; other formats take it as it is.
#[test]
fn huge_timeline_weights_are_bounded() {
    use jvmprof_profile::*;
    let dir = scratch("huge-weight");
    let profile = |samples: u64, weight: u32| {
        let mut b = ProfileBuilder::new(Meta {
            modes: vec!["cpu".into()],
            metrics: vec![Metric::Samples, Metric::Ns],
            interval_ns: 10_000_000,
            ..Meta::default()
        });
        let f = b.frame(Frame::java("a.B", "c", "()V", 1));
        let t = b.thread(Thread {
            tid: 1,
            name: "main".into(),
        });
        let s = b.stack(&[f]);
        let i = b.add(t, s, ThreadState::Running, &[samples, samples * 10_000_000]);
        b.add_time(i, 5_000_000_000, weight);
        b.finish()
    };
    for (name, samples, weight) in [
        ("small", 3u64, 1_000_000_000u32),
        ("huge", 1_000_000_000, 1_000_000_000),
    ] {
        let file = dir.join(format!("{name}.jvmprof"));
        let mut bytes = Vec::new();
        native::write(&profile(samples, weight), &mut bytes).unwrap();
        assert!(bytes.len() < 25_000);
        std::fs::write(&file, bytes).unwrap();
        let jfr = dir.join(format!("{name}.jfr"));
        let (code, err) = bounded(&[
            "convert",
            file.to_str().unwrap(),
            "-o",
            jfr.to_str().unwrap(),
        ]);
        if samples == 3 {
            assert_eq!(code, Some(0), "{err}");
            let back = read_any(&jfr).unwrap();
            assert_eq!(back.total(0), 3);
        } else {
            assert_eq!(code, Some(2), "{err}");
            assert_eq!(
                err,
                "jvmprof: cannot export: JFR holds one event per sample, lock and wait: this \
                 profile would make 1000000000 events, more than 16777216; write .jvmprof or \
                 .pb.gz instead\n"
            );
        }
        for out in ["x.trace.json", "x.speedscope.json", "x.pb.gz", "x.html"] {
            let o = dir.join(out);
            let (code, err) =
                bounded(&["convert", file.to_str().unwrap(), "-o", o.to_str().unwrap()]);
            assert_eq!(code, Some(0), "{out}: {err}");
        }
        let (code, err) = bounded(&["report", file.to_str().unwrap()]);
        assert_eq!(code, Some(0), "{err}");
    }
}

/// One HTTP/1.0 GET with `Authorization: Bearer token`: (status, body).
fn get_with_token(addr: &str, path: &str, token: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    (
        head.split_whitespace().nth(1).unwrap().parse().unwrap(),
        body.to_string(),
    )
}

/// `/metrics` answers in Prometheus' text format behind the token; SIGTERM ends `serve` with
/// exit code 0 after saying it stored what was queued.
#[test]
fn metrics_behind_the_token_and_a_clean_sigterm() {
    let dir = scratch("metrics");
    let token = dir.join("token");
    std::fs::write(&token, "t0ken\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let data = dir.join("data");
    let _ = std::fs::remove_dir_all(&data);
    let (mut collector, addr) = serve(&data, &["--token-file", token.to_str().unwrap()]);
    let (status, _) = http(&addr, "GET", "/metrics", b"");
    assert_eq!(status, 401);
    let (status, body) = get_with_token(&addr, "/metrics", "t0ken");
    assert_eq!(status, 200, "{body}");
    for line in [
        "# TYPE jvmprof_bytes_total counter",
        "jvmprof_bytes_total 0",
        "jvmprof_samples_total 0",
        "# TYPE jvmprof_vms gauge",
        "jvmprof_vms 0",
        "jvmprof_vms_connected 0",
        "jvmprof_agent_dropped_samples 0",
        "jvmprof_store_backlog 0",
        "jvmprof_connection_bytes_held 0",
    ] {
        assert!(body.lines().any(|l| l == line), "no {line:?} in:\n{body}");
    }
    let status = Command::new("kill")
        .args(["-TERM", &collector.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = collector.child.wait().unwrap();
    assert_eq!(exit.code(), Some(0));
    let err = wait_for("the collector's last words", || {
        let e = collector.stderr();
        e.contains("stopped; everything received is stored")
            .then_some(e)
    });
    assert!(
        err.contains(
            "jvmprof serve: SIGTERM: no new connections; storing the 0 writes still queued\n"
        ),
        "{err}"
    );
    assert!(!err.contains("warning"), "{err}");
}

/// A collector reachable beyond loopback without a token says so at start.
#[test]
fn listening_beyond_loopback_without_a_token_warns() {
    let dir = scratch("open");
    let data = dir.join("data");
    let proc = Proc::spawn(
        Command::new(jvmprof())
            .args(["serve", "--listen", "0.0.0.0:0", "--data"])
            .arg(&data)
            .env_remove("JVMPROF_TOKEN"),
    );
    let err = wait_for("the warning", || {
        let e = proc.stderr();
        e.contains("warning").then_some(e)
    });
    assert!(
        err.contains(
            "jvmprof serve: warning: listening on 0.0.0.0 without a token: anyone who can reach \
             it may read every profile and command line, and send data; give a token \
             (--token-file FILE or JVMPROF_TOKEN)"
        ),
        "{err}"
    );
}

/// The JVM's exit code is `record`'s, also when the JVM never ran the program.
#[test]
fn the_jvms_exit_code_is_records() {
    let _g = serial();
    let dir = scratch("exit");
    let out = Command::new(jvmprof())
        .args(["record", "-o"])
        .arg(dir.join("x.collapsed"))
        .args(["--", "java", "-jar"])
        .arg(dir.join("missing.jar"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.ends_with("jvmprof: no profile: the JVM exited with code 1 before profiling began\n"),
        "{err}"
    );
}

/// The JVM a `record -- java` started, once its agent runs: (record, JVM pid).
fn launched(out: &Path, seconds: &str) -> (Proc, u32) {
    let record = Proc::spawn(
        Command::new(jvmprof())
            .args(["record", "--mode", "exact", "-o"])
            .arg(out)
            .args(["--", "java", "-cp"])
            .arg(classes())
            .args(["Service", seconds]),
    );
    let rpid = record.child.id();
    let jvm = wait_for("the JVM", || {
        let children =
            std::fs::read_to_string(format!("/proc/{rpid}/task/{rpid}/children")).ok()?;
        children.split_whitespace().next()?.parse::<u32>().ok()
    });
    (record, jvm)
}

/// `status` and `stop` of a session `record -- java` started name the -o file, in the mode's
/// words, and no interval where nothing is sampled; `record` then writes the file.
#[test]
fn status_and_stop_name_the_output_file() {
    let _g = serial();
    let dir = scratch("status-names");
    let out = dir.join("named.collapsed");
    let _ = std::fs::remove_file(&out);
    let (mut record, jvm) = launched(&out, "60");
    let status = wait_for("the session's status", || {
        let o = Command::new(jvmprof())
            .args(["status", &jvm.to_string()])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        text.contains("session running").then_some(text)
    });
    assert!(
        status.contains(&format!("\n  writes {}", out.display())),
        "{status}"
    );
    assert!(!status.contains("every"), "{status}");
    let stop = Command::new(jvmprof())
        .args(["stop", &jvm.to_string()])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&stop.stderr);
    assert!(stop.status.success(), "{said}");
    assert!(
        said.starts_with(&format!("jvmprof: stopped the session in process {jvm}: "))
            && said.ends_with(&format!(
                " calls; the recording jvmprof writes them to {} when the JVM exits\n",
                out.display()
            )),
        "{said}"
    );
    let _ = Command::new("kill").arg(jvm.to_string()).status();
    let exit = record.child.wait().unwrap();
    assert!(out.is_file(), "{exit}: {}", record.stderr());
}
