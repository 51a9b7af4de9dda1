//! Dynamic attach against real JVMs: a small Java program compiled with the JDK's own javac,
//! started, and driven through the attach listener.
//!
//! JDK 17 is found as `/usr/lib/jvm/java-17-openjdk-amd64` (or `javac` on PATH, which CI installs);
//! JDK 25 as `/usr/lib/jvm/temurin-25-jdk-amd64`. A JDK that is not installed is reported on stderr
//! and its tests return early.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::OnceLock;

use jvmprof_cli::attach::{self, VmConnection};

const SLEEPER: &str = r#"
public class Sleeper {
    public static void main(String[] args) throws Exception {
        Thread t = new Thread(Sleeper::sleepForever, "jvmprof-test-sleeper");
        t.setDaemon(true);
        t.start();
        System.out.println("ready");
        System.out.flush();
        // Exit when the test closes our stdin (or dies), so no JVM outlives the test.
        while (System.in.read() >= 0) { }
    }

    static void sleepForever() {
        while (true) {
            try {
                Thread.sleep(60_000);
            } catch (InterruptedException e) {
                return;
            }
        }
    }
}
"#;

const JDK17: &str = "/usr/lib/jvm/java-17-openjdk-amd64";
const JDK25: &str = "/usr/lib/jvm/temurin-25-jdk-amd64";

fn tmp_root() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("attach-{}", std::process::id()))
}

/// The JDK home for `version`, or None (with a note) when it is not installed.
fn jdk(version: u32) -> Option<PathBuf> {
    let home = match version {
        17 => {
            let p = PathBuf::from(JDK17);
            if p.join("bin/javac").exists() {
                Some(p)
            } else {
                // Fall back to the javac on PATH (resolving /usr/bin/javac's alternatives link).
                which("javac")
                    .and_then(|j| std::fs::canonicalize(j).ok())
                    .and_then(|j| j.parent()?.parent().map(Path::to_path_buf))
            }
        }
        25 => Some(PathBuf::from(JDK25)).filter(|p| p.join("bin/javac").exists()),
        _ => None,
    };
    if home.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "JDK {version} is not installed: under CI its attach tests must run, not skip"
        );
        // Written to the real stderr (eprintln! would be captured by the test harness), so that
        // a CI log shows which JDK was not exercised.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: JDK {version} is not installed here; its attach tests did not run"
        );
    }
    home
}

fn which(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(cmd))
        .find(|p| p.is_file())
}

/// Compile Sleeper.java with this JDK once per test process; returns the class directory.
fn sleeper_classes(home: &Path) -> PathBuf {
    static DIRS: OnceLock<std::sync::Mutex<Vec<(PathBuf, PathBuf)>>> = OnceLock::new();
    let dirs = DIRS.get_or_init(Default::default);
    let mut dirs = dirs.lock().unwrap();
    if let Some((_, d)) = dirs.iter().find(|(h, _)| h == home) {
        return d.clone();
    }
    let dir = tmp_root().join(format!("classes-{}", dirs.len()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("Sleeper.java"), SLEEPER).unwrap();
    let out = Command::new(home.join("bin/javac"))
        .arg("-d")
        .arg(&dir)
        .arg(dir.join("Sleeper.java"))
        .output()
        .expect("run javac");
    assert!(
        out.status.success(),
        "javac failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dirs.push((home.to_path_buf(), dir.clone()));
    dir
}

/// A running Sleeper JVM; killed and reaped on drop.
struct Jvm {
    child: Child,
    cwd: PathBuf,
}

impl Jvm {
    fn start(home: &Path, extra_flags: &[&str]) -> Jvm {
        let classes = sleeper_classes(home);
        // A working directory of its own, so the trigger file's place is known and checked.
        let cwd = tmp_root().join(format!("cwd-{}", unique()));
        std::fs::create_dir_all(&cwd).unwrap();
        let mut child = Command::new(home.join("bin/java"))
            .args(["-Xshare:auto", "-Djvmprof.test.marker=attach-marker-42"])
            .args(extra_flags)
            .arg("-cp")
            .arg(&classes)
            .arg("Sleeper")
            .current_dir(&cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start java");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the test JVM did not start");
        Jvm { child, cwd }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stop the JVM (close its stdin) and return everything it wrote on stderr.
    fn stop(mut self) -> String {
        drop(self.child.stdin.take());
        let mut err = String::new();
        let stderr: &mut ChildStderr = self.child.stderr.as_mut().unwrap();
        std::io::Read::read_to_string(stderr, &mut err).unwrap();
        self.child.wait().unwrap();
        err
    }
}

impl Drop for Jvm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

fn thread_print_and_properties(version: u32) {
    let Some(home) = jdk(version) else { return };
    let jvm = Jvm::start(&home, &[]);
    let pid = jvm.pid();

    let dump = attach::execute(pid, "jcmd", &["Thread.print"]).unwrap();
    assert!(dump.contains("Full thread dump"), "{dump}");
    assert!(dump.contains("\"jvmprof-test-sleeper\""), "{dump}");
    assert!(
        dump.contains("at Sleeper.sleepForever(Sleeper.java"),
        "{dump}"
    );
    assert!(dump.contains("\"main\""), "{dump}");

    // The trigger file in the JVM's working directory is gone after attaching.
    assert!(!jvm.cwd.join(format!(".attach_pid{pid}")).exists());

    // Second command: the socket exists already, no signal needed.
    let conn = VmConnection::attach(pid).unwrap();
    assert!(conn.socket_path().exists());
    let props = conn.execute("properties", &[]).unwrap();
    assert!(
        props.contains("jvmprof.test.marker=attach-marker-42"),
        "{props}"
    );
    let spec = props
        .lines()
        .find_map(|l| l.strip_prefix("java.specification.version="))
        .unwrap_or_else(|| panic!("no java.specification.version in {props}"));
    assert_eq!(spec.trim(), version.to_string());

    // A jcmd with arguments goes through as one command line.
    let flags = conn.jcmd("VM.flags -all").unwrap();
    assert!(flags.contains("MaxHeapSize"), "{flags}");

    // An unknown diagnostic command is an error carrying the JVM's message.
    let err = conn.jcmd("No.such_command").unwrap_err().to_string();
    assert!(err.contains("Unknown diagnostic command"), "{err}");

    let stderr = jvm.stop();
    // Our SIGQUIT started the listener instead of printing a thread dump on the JVM's output.
    assert!(!stderr.contains("Full thread dump"), "{stderr}");
}

#[test]
fn jdk17_thread_print_and_properties() {
    thread_print_and_properties(17);
}

#[test]
fn jdk25_thread_print_and_properties() {
    thread_print_and_properties(25);
}

#[test]
fn jdk17_disabled_attach_mechanism_times_out_with_a_clear_error() {
    let Some(home) = jdk(17) else { return };
    let jvm = Jvm::start(&home, &["-XX:+DisableAttachMechanism"]);
    let pid = jvm.pid();
    let err = VmConnection::attach_with_timeout(pid, std::time::Duration::from_secs(2))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("did not start its attach listener within 2.0 s"),
        "{err}"
    );
    assert!(err.contains("DisableAttachMechanism"), "{err}");
    // The trigger file is removed on failure too, and the JVM survived our SIGQUIT.
    assert!(!jvm.cwd.join(format!(".attach_pid{pid}")).exists());
    assert!(alive(pid));
    jvm.stop();
}

#[test]
fn refuses_to_signal_a_process_that_does_not_handle_sigquit() {
    let mut child = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = child.id();
    // Give `sleep` time to exec (before exec the child is a copy of this test process).
    wait_for_comm(pid, "sleep");
    let err = attach::execute(pid, "properties", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not handle SIGQUIT"), "{err}");
    assert!(alive(pid), "the non-JVM process was hurt");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A socket left at `/tmp/.java_pid<pid>` by a JVM that died with this pid: nobody listens on it,
/// so a connection is refused.
///
/// The socket is bound and closed without ever listening. A listening one (`UnixListener::bind`)
/// would accept connections while a child forked by a parallel test still holds the descriptor
/// before its exec closes it: our probe then connects, and the read fails when the exec resets
/// the connection. That flaked once in CI.
fn plant_stale_socket(pid: u32) -> PathBuf {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketType, bind, socket};
    let path = PathBuf::from(format!("/tmp/.java_pid{pid}"));
    let _ = std::fs::remove_file(&path);
    let fd = socket(AddressFamily::UNIX, SocketType::STREAM, None).unwrap();
    bind(&fd, &SocketAddrUnix::new(&path).unwrap()).unwrap();
    drop(fd);
    assert!(path.exists());
    let refused = std::os::unix::net::UnixStream::connect(&path).unwrap_err();
    assert_eq!(
        refused.kind(),
        std::io::ErrorKind::ConnectionRefused,
        "{refused}"
    );
    path
}

#[test]
fn a_stale_socket_does_not_make_a_process_a_jvm() {
    let mut child = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = child.id();
    wait_for_comm(pid, "sleep");
    let stale = plant_stale_socket(pid);
    let err = attach::execute(pid, "properties", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not handle SIGQUIT"), "{err}");
    assert!(alive(pid), "the non-JVM process was hurt");
    let _ = std::fs::remove_file(stale);
    child.kill().unwrap();
    child.wait().unwrap();
}

fn stale_socket_is_replaced(version: u32) {
    let Some(home) = jdk(version) else { return };
    let jvm = Jvm::start(&home, &[]);
    let pid = jvm.pid();
    let stale = plant_stale_socket(pid);
    let props = attach::execute(pid, "properties", &[]).unwrap();
    assert!(
        props.contains("jvmprof.test.marker=attach-marker-42"),
        "{props}"
    );
    let stderr = jvm.stop();
    assert!(!stderr.contains("Full thread dump"), "{stderr}");
    let _ = std::fs::remove_file(stale);
}

/// A live attach socket that others may use (0666) is refused as `jcmd` refuses it, without
/// signalling the JVM; at 0600 again it is used.
#[test]
fn an_attach_socket_open_to_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let Some(home) = jdk(17) else { return };
    let jvm = Jvm::start(&home, &[]);
    let pid = jvm.pid();
    let conn = VmConnection::attach(pid).unwrap();
    let socket = conn.socket_path().to_path_buf();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let err = attach::execute(pid, "properties", &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!(
            "the attach socket {} has mode 0666: other users may read or write it",
            socket.display()
        )),
        "{err}"
    );
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).unwrap();
    let props = attach::execute(pid, "properties", &[]).unwrap();
    assert!(props.contains("jvmprof.test.marker=attach-marker-42"));
    let stderr = jvm.stop();
    assert!(!stderr.contains("Full thread dump"), "{stderr}");
}

#[test]
fn jdk17_stale_socket_is_replaced_by_the_listener() {
    stale_socket_is_replaced(17);
}

#[test]
fn jdk25_stale_socket_is_replaced_by_the_listener() {
    stale_socket_is_replaced(25);
}

#[test]
fn refuses_to_signal_a_non_jvm_that_catches_sigquit() {
    // A Python process with a SIGQUIT handler catches the signal but is no JVM. (Not a bash
    // trap: bash cannot trap a signal ignored on entry, and a non-interactive parent shell running
    // jobs in the background starts its children with SIGQUIT ignored.)
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import signal, time\nsignal.signal(signal.SIGQUIT, lambda *a: None)\nwhile True: time.sleep(1)",
        ])
        .spawn()
        .unwrap();
    let pid = child.id();
    // Wait until the handler is installed (on a loaded machine that can take seconds).
    let trapped = || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        attach::parse_proc_status(pid, &status)
            .unwrap()
            .catches_sigquit
    };
    for _ in 0..3000 {
        if trapped() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(trapped(), "python never installed its SIGQUIT handler");
    let err = attach::execute(pid, "properties", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a HotSpot JVM"), "{err}");
    assert!(alive(pid));
    assert!(!Path::new(&format!("/proc/{pid}/cwd/.attach_pid{pid}")).exists());
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn refuses_a_process_of_another_user() {
    let euid = rustix::process::geteuid().as_raw();
    let (pid, mut child, other_uid) = if euid == 0 {
        use std::os::unix::process::CommandExt;
        let child = Command::new("sleep")
            .arg("60")
            .uid(65534)
            .gid(65534)
            .spawn()
            .unwrap();
        (child.id(), Some(child), 65534)
    } else {
        (1, None, 0) // init runs as root
    };
    if let Some(c) = &child {
        wait_for_comm(c.id(), "sleep");
    }
    let err = attach::execute(pid, "properties", &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("run as the target's user, uid {other_uid}")),
        "{err}"
    );
    if let Some(c) = child.as_mut() {
        assert!(alive(pid));
        c.kill().unwrap();
        c.wait().unwrap();
    }
}

#[test]
fn missing_process_is_a_clear_error() {
    let err = attach::execute(u32::MAX - 1, "properties", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("no process with pid"), "{err}");
}

fn wait_for_comm(pid: u32, comm: &str) {
    for _ in 0..500 {
        if std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("process {pid} never became {comm}");
}

/// A minimal JVMTI agent: `Agent_OnAttach` writes its options into the file named by the part
/// of the options before `|`, and returns the number after it.
const TEST_AGENT: &str = r#"
use std::ffi::{c_char, c_void, CStr};
#[unsafe(no_mangle)]
pub extern "C" fn Agent_OnAttach(_vm: *mut c_void, options: *const c_char, _r: *mut c_void) -> i32 {
    let options = unsafe { CStr::from_ptr(options) }.to_string_lossy().into_owned();
    let (file, code) = options.split_once('|').unwrap_or((&options, "0"));
    let _ = std::fs::write(file, &options);
    code.parse().unwrap_or(99)
}
"#;

fn test_agent() -> PathBuf {
    static AGENT: OnceLock<PathBuf> = OnceLock::new();
    AGENT
        .get_or_init(|| {
            let dir = tmp_root().join("agent");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("agent.rs"), TEST_AGENT).unwrap();
            let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
            let out = Command::new(rustc)
                .args(["--edition", "2024", "--crate-type", "cdylib", "-O", "-o"])
                .arg(dir.join("libtestagent.so"))
                .arg(dir.join("agent.rs"))
                .output()
                .expect("run rustc");
            assert!(
                out.status.success(),
                "rustc failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            dir.join("libtestagent.so")
        })
        .clone()
}

fn load_agent(version: u32) {
    let Some(home) = jdk(version) else { return };
    let agent = test_agent();
    let jvm = Jvm::start(&home, &[]);
    let pid = jvm.pid();
    let marker = jvm.cwd.join("agent-ran");

    // Agent_OnAttach returns 0: loaded, and it saw our options.
    let options = format!("{}|0", marker.display());
    attach::load_agent(pid, &agent, &options).unwrap();
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), options);

    // Agent_OnAttach returns 3: an error that says so.
    let options = format!("{}|3", marker.display());
    let err = format!(
        "{:#}",
        attach::load_agent(pid, &agent, &options).unwrap_err()
    );
    assert!(
        err.contains("failed to start") && err.contains("returned 3"),
        "{err}"
    );
    assert!(err.contains("EnableDynamicAgentLoading"), "{err}");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), options);

    // Not a shared library: the JVM refuses to load it and says why.
    let bogus = jvm.cwd.join("libbogus.so");
    std::fs::write(&bogus, "not an ELF file").unwrap();
    let err = format!("{:#}", attach::load_agent(pid, &bogus, "").unwrap_err());
    assert!(err.contains("could not load the agent"), "{err}");
    assert!(err.contains("libbogus.so"), "{err}");

    // The JVM is still fine.
    let props = attach::execute(pid, "properties", &[]).unwrap();
    assert!(props.contains("jvmprof.test.marker"));

    let stderr = jvm.stop();
    if version >= 21 {
        // JEP 451: the target warns about agents loaded at run time.
        assert!(stderr.contains("loaded dynamically"), "{stderr}");
    }
}

#[test]
fn jdk17_load_agent() {
    load_agent(17);
}

#[test]
fn jdk25_load_agent() {
    load_agent(25);
}

#[test]
fn jdk25_no_warning_with_enable_dynamic_agent_loading() {
    let Some(home) = jdk(25) else { return };
    let agent = test_agent();
    let jvm = Jvm::start(&home, &["-XX:+EnableDynamicAgentLoading"]);
    let marker = jvm.cwd.join("agent-ran");
    let options = format!("{}|0", marker.display());
    attach::load_agent(jvm.pid(), &agent, &options).unwrap();
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), options);
    let stderr = jvm.stop();
    assert!(!stderr.contains("loaded dynamically"), "{stderr}");
}
