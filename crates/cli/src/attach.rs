//! HotSpot dynamic attach (Linux): run attach-listener commands in a running JVM.
//!
//! The protocol is the one `jcmd` and `VirtualMachine.attach` use:
//!
//! 1. If the target's attach socket `/proc/<pid>/root/tmp/.java_pid<nspid>` does not exist yet
//!    (or nobody listens on it: a JVM that died with the same pid left it behind), create the trigger file `.attach_pid<nspid>` in the target's working directory (falling back
//!    to its `/tmp`) and send it SIGQUIT; the JVM's signal dispatcher sees the file and starts the
//!    attach listener, which creates the socket. We poll for it (10 s by default).
//! 2. Connect, write `1\0<cmd>\0<arg1>\0<arg2>\0<arg3>\0` (protocol version 1, always three
//!    arguments, missing ones empty), read `<status>\n<output>` until EOF. The listener serves one
//!    command per connection.
//!
//! `<nspid>` is the pid as the target sees it in its own pid namespace (containers), taken from the
//! last field of `NSpid:` in `/proc/<pid>/status`.
//!
//! Two jvmprof commands attaching at once (a `record --pid` and a `status`) would each signal a
//! JVM whose listener is still starting, and HotSpot answers a SIGQUIT that comes while the
//! listener is half up with a thread dump on the application's stdout. So the start of the
//! listener is serialized per target: each attacher holds an exclusive `flock` on the target's
//! `/proc/<pid>/cmdline` (one inode per process, nothing left behind) from the socket check
//! until the socket is there.
//!
//! SIGQUIT terminates a process that does not handle it, so before signalling we check that the
//! target catches SIGQUIT (`SigCgt` in `/proc/<pid>/status`) and maps `libjvm.so`, and that our
//! effective uid and gid equal the target's (HotSpot rejects other users' trigger files and
//! connections anyway, and we never want to signal another user's process).
//!
//! As `jcmd` does, the socket is used only when the JVM's user (or we) own it, its group is the
//! JVM's (unless we are root) and neither group nor others may read or write it: HotSpot makes
//! it 0600, so anything else may be someone else's standing in for the JVM.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

/// How long to wait for the attach listener to create its socket after SIGQUIT.
pub const DEFAULT_ATTACH_TIMEOUT: Duration = Duration::from_secs(10);

/// The attach protocol version we speak (HotSpot accepts 1 on every supported JDK).
const PROTOCOL_VERSION: &str = "1";
/// HotSpot's limits for protocol version 1 (`AttachOperation::name_length_max`, `arg_length_max`).
const NAME_LENGTH_MAX: usize = 16;
const ARG_LENGTH_MAX: usize = 1024;
const ARG_COUNT_MAX: usize = 3;

const SIGQUIT_NUMBER: u32 = 3;

/// Facts about a target process read from `/proc/<pid>/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStatus {
    /// The process name (`Name:`), for messages.
    pub name: String,
    /// The pid inside the target's own (innermost) pid namespace.
    pub nspid: u32,
    /// Effective uid (second field of `Uid:`).
    pub euid: u32,
    /// Effective gid (second field of `Gid:`).
    pub egid: u32,
    /// Whether the process has a handler installed for SIGQUIT (`SigCgt` bit for signal 3).
    pub catches_sigquit: bool,
}

/// Parse the content of `/proc/<pid>/status`. `pid` is used when `NSpid:` is absent (old kernels).
pub fn parse_proc_status(pid: u32, text: &str) -> Result<ProcStatus> {
    let mut name = None;
    let mut nspid = None;
    let mut euid = None;
    let mut egid = None;
    let mut sigcgt = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "Name" => name = Some(value.to_string()),
            "NSpid" => {
                let last = value
                    .split_whitespace()
                    .last()
                    .ok_or_else(|| anyhow!("empty NSpid line"))?;
                nspid = Some(
                    last.parse::<u32>()
                        .with_context(|| format!("bad NSpid value {value:?}"))?,
                );
            }
            "Uid" | "Gid" => {
                let effective = value
                    .split_whitespace()
                    .nth(1)
                    .ok_or_else(|| anyhow!("short {key} line {value:?}"))?
                    .parse::<u32>()
                    .with_context(|| format!("bad {key} line {value:?}"))?;
                if key == "Uid" {
                    euid = Some(effective);
                } else {
                    egid = Some(effective);
                }
            }
            "SigCgt" => {
                sigcgt = Some(
                    u64::from_str_radix(value, 16)
                        .with_context(|| format!("bad SigCgt mask {value:?}"))?,
                );
            }
            _ => {}
        }
    }
    let sigcgt = sigcgt.ok_or_else(|| anyhow!("no SigCgt line"))?;
    Ok(ProcStatus {
        name: name.unwrap_or_default(),
        nspid: nspid.unwrap_or(pid),
        euid: euid.ok_or_else(|| anyhow!("no Uid line"))?,
        egid: egid.ok_or_else(|| anyhow!("no Gid line"))?,
        // Bit n-1 of the mask stands for signal n.
        catches_sigquit: (sigcgt >> (SIGQUIT_NUMBER - 1)) & 1 == 1,
    })
}

/// The answer of the attach listener to one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The completion status (0 = success; HotSpot uses JNI error codes otherwise).
    pub status: i32,
    /// Everything after the status line.
    pub output: String,
}

/// Split a raw reply `<status>\n<output>` into its parts.
pub fn parse_response(raw: &[u8]) -> Result<Response> {
    let text = String::from_utf8_lossy(raw);
    if text.is_empty() {
        bail!("the target JVM closed the attach connection without answering");
    }
    let (first, rest) = match text.split_once('\n') {
        Some((first, rest)) => (first, rest),
        None => (text.as_ref(), ""),
    };
    let status = first.trim().parse::<i32>().with_context(|| {
        format!("the target JVM's attach reply does not start with a status: {first:?}")
    })?;
    Ok(Response {
        status,
        output: rest.to_string(),
    })
}

/// Encode one request in protocol version 1: `1\0<cmd>\0<arg1>\0<arg2>\0<arg3>\0`.
pub fn encode_request(cmd: &str, args: &[&str]) -> Result<Vec<u8>> {
    if cmd.is_empty() || cmd.len() > NAME_LENGTH_MAX {
        bail!("attach command name {cmd:?} must be 1 to {NAME_LENGTH_MAX} bytes long");
    }
    if args.len() > ARG_COUNT_MAX {
        bail!(
            "attach command {cmd:?} takes at most {ARG_COUNT_MAX} arguments, got {}",
            args.len()
        );
    }
    for s in std::iter::once(&cmd).chain(args) {
        if s.contains('\0') {
            bail!("attach command or argument {s:?} contains a NUL byte");
        }
    }
    for arg in args {
        if arg.len() > ARG_LENGTH_MAX {
            bail!(
                "attach argument is {} bytes long, the JVM accepts at most {ARG_LENGTH_MAX}: {}...",
                arg.len(),
                &arg[..arg.floor_char_boundary(60)]
            );
        }
    }
    let mut out = Vec::with_capacity(64);
    for part in [PROTOCOL_VERSION, cmd]
        .into_iter()
        .chain((0..ARG_COUNT_MAX).map(|i| args.get(i).copied().unwrap_or("")))
    {
        out.extend_from_slice(part.as_bytes());
        out.push(0);
    }
    Ok(out)
}

/// Text appended to every error about loading an agent, for JDK 21+ targets.
pub const DYNAMIC_AGENT_HINT: &str = "on JDK 21 and later the target prints a warning for agents \
    loaded at run time (JEP 451) and a future JDK will refuse them: start the JVM with \
    -XX:+EnableDynamicAgentLoading, or profile from start-up with `jvmprof record -- java ...` \
    (or -agentpath:)";

/// Interpret the reply to `load`: status 0, then the return code of `Agent_OnAttach` on the next
/// line (`return code: N` on current JDKs, a bare `N` on old ones). A library that cannot be
/// loaded gives a non-zero status on JDK 17 and status 0 with "<path> was not loaded." on JDK 25.
pub fn check_load_response(agent: &Path, response: &Response) -> Result<()> {
    let output = response.output.trim();
    if response.status != 0 {
        bail!(
            "the target JVM could not load the agent {} (status {}): {}\n{DYNAMIC_AGENT_HINT}",
            agent.display(),
            response.status,
            if output.is_empty() {
                "no message"
            } else {
                output
            }
        );
    }
    let first = output.lines().next().unwrap_or("").trim();
    let code = first.strip_prefix("return code:").unwrap_or(first).trim();
    match code.parse::<i32>() {
        Ok(0) => Ok(()),
        Ok(code) => bail!(
            "the agent {} failed to start: Agent_OnAttach returned {code} (see the target JVM's \
             stderr for the agent's message)\n{DYNAMIC_AGENT_HINT}",
            agent.display()
        ),
        // An empty line after status 0: very old JDKs did not print the return code.
        Err(_) if output.is_empty() => Ok(()),
        // JDK 25 answers status 0 and "<path> was not loaded.\n<dlerror>" when dlopen fails.
        Err(_) => bail!(
            "the target JVM could not load the agent {}: {output}\n{DYNAMIC_AGENT_HINT}",
            agent.display()
        ),
    }
}

/// A JVM whose attach listener is running: every command opens a new connection to its socket.
#[derive(Debug, Clone)]
pub struct VmConnection {
    pid: u32,
    nspid: u32,
    socket: PathBuf,
    read_timeout: Option<Duration>,
}

impl VmConnection {
    /// Start (if needed) and find the attach listener of JVM `pid`, waiting up to 10 s.
    pub fn attach(pid: u32) -> Result<Self> {
        Self::attach_with_timeout(pid, DEFAULT_ATTACH_TIMEOUT)
    }

    /// Like [`VmConnection::attach`] with an explicit wait for the listener's socket.
    pub fn attach_with_timeout(pid: u32, timeout: Duration) -> Result<Self> {
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        let status_text = fs::read_to_string(proc_dir.join("status"))
            .with_context(|| format!("no process with pid {pid}"))?;
        let status = parse_proc_status(pid, &status_text)
            .with_context(|| format!("cannot read /proc/{pid}/status"))?;
        check_same_user(pid, &status)?;

        let socket = proc_dir
            .join("root/tmp")
            .join(format!(".java_pid{}", status.nspid));
        let conn = VmConnection {
            pid,
            nspid: status.nspid,
            socket: socket.clone(),
            read_timeout: None,
        };
        // Released when this function returns (the file closes).
        let _one_at_a_time = fs::File::open(proc_dir.join("cmdline"))
            .ok()
            .filter(|f| rustix::fs::flock(f, rustix::fs::FlockOperation::LockExclusive).is_ok());
        if is_socket(&socket) {
            check_socket_owner(&socket, &status)?;
            if accepts_connections(&socket) {
                check_socket_mode(&socket)?;
                return Ok(conn);
            }
            // A socket nobody listens on was left by a JVM that died with this pid: the JVM we
            // signal replaces it (HotSpot renames its new socket over the path), and a process
            // that is no JVM is refused below.
        }

        // Signalling is only safe for a JVM that handles SIGQUIT: check before we touch anything.
        check_is_jvm(pid, &status)?;
        let trigger = TriggerFile::create(pid, status.nspid)?;
        send_sigquit(pid)?;

        let start = Instant::now();
        let mut delay = Duration::from_millis(20);
        loop {
            if is_socket(&socket) && accepts_connections(&socket) {
                drop(trigger);
                check_socket_owner(&socket, &status)?;
                check_socket_mode(&socket)?;
                return Ok(conn);
            }
            if fs::metadata(&proc_dir).is_err() {
                bail!("process {pid} exited while we waited for its attach listener");
            }
            if start.elapsed() >= timeout {
                bail!(
                    "JVM {pid} ({}) did not start its attach listener within {:.1} s: no socket \
                     {} appeared. The JVM may run with -XX:+DisableAttachMechanism or -Xrs, may \
                     be busy at a safepoint, or its /tmp may differ from ours",
                    status.name,
                    timeout.as_secs_f64(),
                    socket.display()
                );
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_millis(200));
        }
    }

    /// The target's pid as we see it.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The target's pid in its own pid namespace.
    pub fn nspid(&self) -> u32 {
        self.nspid
    }

    /// The path of the attach listener's UNIX socket.
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// Limit how long one read of a reply may block (default: no limit; heap dumps take minutes).
    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) {
        self.read_timeout = timeout;
    }

    /// Run one command and return the listener's raw status and output.
    pub fn execute_raw(&self, cmd: &str, args: &[&str]) -> Result<Response> {
        let request = encode_request(cmd, args)?;
        let mut stream = UnixStream::connect(&self.socket).with_context(|| {
            format!(
                "cannot connect to the attach socket {} of JVM {}",
                self.socket.display(),
                self.pid
            )
        })?;
        stream.set_read_timeout(self.read_timeout)?;
        stream
            .write_all(&request)
            .with_context(|| format!("cannot send {cmd:?} to JVM {}", self.pid))?;
        let mut raw = Vec::new();
        stream
            .read_to_end(&mut raw)
            .with_context(|| format!("cannot read the reply to {cmd:?} from JVM {}", self.pid))?;
        parse_response(&raw)
    }

    /// Run one command; its output on status 0, an error with the JVM's message otherwise.
    pub fn execute(&self, cmd: &str, args: &[&str]) -> Result<String> {
        let response = self.execute_raw(cmd, args)?;
        if response.status != 0 {
            let message = response.output.trim();
            bail!(
                "JVM {} answered {cmd:?} with status {}: {}",
                self.pid,
                response.status,
                if message.is_empty() {
                    "no message"
                } else {
                    message
                }
            );
        }
        Ok(response.output)
    }

    /// Run a diagnostic command line as `jcmd <pid> <line>` would (e.g. `Thread.print -l`).
    pub fn jcmd(&self, command_line: &str) -> Result<String> {
        self.execute("jcmd", &[command_line])
    }

    /// Load a native agent: `load <absolute path> true <options>`, which calls its
    /// `Agent_OnAttach`. Fails if the library cannot be loaded or `Agent_OnAttach` returns non-zero.
    pub fn load_agent(&self, agent_path: &Path, options: &str) -> Result<()> {
        let absolute = std::path::absolute(agent_path)
            .with_context(|| format!("bad agent path {}", agent_path.display()))?;
        if !absolute.is_file() {
            bail!("agent library {} does not exist", absolute.display());
        }
        let path_str = absolute
            .to_str()
            .ok_or_else(|| anyhow!("agent path {} is not UTF-8", absolute.display()))?;
        let response = self.execute_raw("load", &[path_str, "true", options])?;
        check_load_response(&absolute, &response)
    }
}

/// Run one attach command in JVM `pid` (starting its attach listener if needed); returns the output.
pub fn execute(pid: u32, cmd: &str, args: &[&str]) -> Result<String> {
    VmConnection::attach(pid)?.execute(cmd, args)
}

/// Run a diagnostic command in JVM `pid`, e.g. `jcmd(pid, "Thread.print")`.
pub fn jcmd(pid: u32, command_line: &str) -> Result<String> {
    VmConnection::attach(pid)?.jcmd(command_line)
}

/// Load the native agent at `agent_path` into JVM `pid` with `options` (see [`VmConnection::load_agent`]).
pub fn load_agent(pid: u32, agent_path: &Path, options: &str) -> Result<()> {
    VmConnection::attach(pid)?.load_agent(agent_path, options)
}

fn check_same_user(pid: u32, status: &ProcStatus) -> Result<()> {
    let (euid, egid) = (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    );
    if status.euid != euid {
        bail!(
            "process {pid} ({}) belongs to uid {}, we run as uid {euid}: run as the target's user, \
             uid {} (e.g. sudo -u '#{}' -g '#{}' jvmprof ...)",
            status.name,
            status.euid,
            status.euid,
            status.euid,
            status.egid
        );
    }
    if status.egid != egid {
        bail!(
            "process {pid} ({}) runs with gid {}, we run with gid {egid}: run as the target's user \
             and group, uid {} gid {}",
            status.name,
            status.egid,
            status.euid,
            status.egid
        );
    }
    Ok(())
}

fn check_is_jvm(pid: u32, status: &ProcStatus) -> Result<()> {
    if !status.catches_sigquit {
        bail!(
            "process {pid} ({}) does not handle SIGQUIT, so it is not a JVM we can attach to (or a \
             JVM still starting, or one run with -Xrs); not signalling it, since SIGQUIT would \
             terminate it",
            status.name
        );
    }
    // A process that catches SIGQUIT need not be a JVM: also require libjvm.so in its mappings.
    let maps = fs::read_to_string(format!("/proc/{pid}/maps"))
        .with_context(|| format!("cannot read /proc/{pid}/maps to check that it is a JVM"))?;
    if !maps.lines().any(|l| l.ends_with("/libjvm.so")) {
        bail!(
            "process {pid} ({}) has not loaded libjvm.so, so it is not a HotSpot JVM; not \
             signalling it",
            status.name
        );
    }
    Ok(())
}

/// Like the JDK's client: only talk to a socket the target's user (or we) created, so that
/// another user cannot stand in for the JVM by planting a socket in a shared /tmp. Its group must
/// be the JVM's too, unless we are root (as `jcmd` checks).
fn check_socket_owner(socket: &Path, status: &ProcStatus) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(socket)
        .with_context(|| format!("cannot stat the attach socket {}", socket.display()))?;
    let me = rustix::process::geteuid();
    let owner_ok = meta.uid() == status.euid || meta.uid() == me.as_raw();
    if !owner_ok || (meta.gid() != status.egid && !me.is_root()) {
        bail!(
            "the attach socket {} belongs to uid {} gid {}, not to the JVM's user (uid {} gid {}); \
             not using it",
            socket.display(),
            meta.uid(),
            meta.gid(),
            status.euid,
            status.egid
        );
    }
    Ok(())
}

/// Like `jcmd`: a socket that group or others may read or write is not the JVM's own (HotSpot
/// makes it 0600): someone else could talk to the JVM through it, or stand in for it.
pub fn check_socket_mode(socket: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(socket)
        .with_context(|| format!("cannot stat the attach socket {}", socket.display()))?;
    let mode = meta.mode() & 0o777;
    if mode & 0o066 != 0 {
        bail!(
            "the attach socket {} has mode {mode:04o}: other users may read or write it, so it \
             may not be the JVM's own (HotSpot makes it 0600; jcmd refuses it too); not using it. \
             If the JVM is yours, remove the socket and attach again",
            socket.display()
        );
    }
    Ok(())
}

/// Whether a listener is behind the socket: a stale one left by a dead process refuses the
/// connection. (The attach listener reads an empty request from this probe and drops it.)
fn accepts_connections(path: &Path) -> bool {
    UnixStream::connect(path).is_ok()
}

fn is_socket(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

fn send_sigquit(pid: u32) -> Result<()> {
    let target = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .context("pid out of range")?;
    // The target was checked to be a JVM that handles SIGQUIT (a thread dump, not an exit).
    rustix::process::kill_process(target, rustix::process::Signal::QUIT)
        .map_err(std::io::Error::from)
        .with_context(|| format!("cannot send SIGQUIT to process {pid}"))
}

/// The `.attach_pid<nspid>` file that asks the JVM to start its listener; removed on drop.
struct TriggerFile {
    path: PathBuf,
}

impl TriggerFile {
    fn create(pid: u32, nspid: u32) -> Result<Self> {
        let name = format!(".attach_pid{nspid}");
        let candidates = [
            PathBuf::from(format!("/proc/{pid}/cwd")).join(&name),
            PathBuf::from(format!("/proc/{pid}/root/tmp")).join(&name),
        ];
        let mut errors = Vec::new();
        for path in candidates {
            match fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
            {
                Ok(_) => return Ok(TriggerFile { path }),
                Err(e) => errors.push(format!("{}: {e}", path.display())),
            }
        }
        bail!(
            "cannot create the attach trigger file for process {pid}: {}",
            errors.join("; ")
        )
    }
}

impl Drop for TriggerFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tjava\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\n\
        Ngid:\t0\nPid:\t4242\nPPid:\t1\nTracerPid:\t0\nUid:\t1000\t1001\t1002\t1003\n\
        Gid:\t2000\t2001\t2002\t2003\nNSpid:\t4242\t7\nSigQ:\t0/63360\nSigPnd:\t0000000000000000\n\
        ShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n\
        SigCgt:\t2000000181005ccf\n";

    #[test]
    fn proc_status_of_a_jvm_in_a_container() {
        let s = parse_proc_status(4242, STATUS).unwrap();
        assert_eq!(
            s,
            ProcStatus {
                name: "java".into(),
                nspid: 7,
                euid: 1001,
                egid: 2001,
                catches_sigquit: true,
            }
        );
    }

    #[test]
    fn sigcgt_bit_for_signal_3_is_mask_bit_2() {
        // 0x4 is SIGQUIT only; 0x8 is SIGILL (4), 0x2 is SIGINT (2).
        for (mask, expected) in [
            ("0000000000000004", true),
            ("0000000000000008", false),
            ("0000000000000002", false),
            ("0000000000000400", false),
        ] {
            let text = STATUS.replace("2000000181005ccf", mask);
            assert_eq!(
                parse_proc_status(1, &text).unwrap().catches_sigquit,
                expected,
                "{mask}"
            );
        }
    }

    #[test]
    fn nspid_missing_falls_back_to_pid() {
        let text = STATUS.replace("NSpid:\t4242\t7\n", "");
        assert_eq!(parse_proc_status(4242, &text).unwrap().nspid, 4242);
    }

    #[test]
    fn a_socket_open_to_others_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("jvmprof-sockmode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join(".java_pid1");
        std::fs::write(&f, "").unwrap();
        for (mode, ok) in [(0o600, true), (0o700, true), (0o640, false), (0o602, false)] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            let r = check_socket_mode(&f);
            assert_eq!(r.is_ok(), ok, "{mode:o}");
        }
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(
            check_socket_mode(&f).unwrap_err().to_string(),
            format!(
                "the attach socket {} has mode 0666: other users may read or write it, so it may \
                 not be the JVM's own (HotSpot makes it 0600; jcmd refuses it too); not using it. \
                 If the JVM is yours, remove the socket and attach again",
                f.display()
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn proc_status_without_sigcgt_is_an_error() {
        let text = STATUS.replace("SigCgt:\t2000000181005ccf\n", "");
        assert!(parse_proc_status(1, &text).is_err());
    }

    #[test]
    fn request_has_version_command_and_three_args() {
        assert_eq!(
            encode_request("jcmd", &["Thread.print"]).unwrap(),
            b"1\0jcmd\0Thread.print\0\0\0"
        );
        assert_eq!(
            encode_request("load", &["/a/lib.so", "true", "mode=cpu"]).unwrap(),
            b"1\0load\0/a/lib.so\0true\0mode=cpu\0"
        );
        assert_eq!(
            encode_request("properties", &[]).unwrap(),
            b"1\0properties\0\0\0\0"
        );
    }

    #[test]
    fn request_limits_are_enforced() {
        assert!(encode_request("", &[]).is_err());
        assert!(encode_request("a_very_long_command", &[]).is_err());
        assert!(encode_request("load", &["a", "b", "c", "d"]).is_err());
        assert!(encode_request("jcmd", &["a\0b"]).is_err());
        assert!(encode_request("jcmd", &[&"x".repeat(1025)]).is_err());
        assert!(encode_request("jcmd", &[&"x".repeat(1024)]).is_ok());
    }

    #[test]
    fn response_status_and_output() {
        assert_eq!(
            parse_response(b"0\nline 1\nline 2\n").unwrap(),
            Response {
                status: 0,
                output: "line 1\nline 2\n".into()
            }
        );
        assert_eq!(
            parse_response(b"-1\n").unwrap(),
            Response {
                status: -1,
                output: String::new()
            }
        );
        assert_eq!(parse_response(b"0").unwrap().status, 0);
        assert!(parse_response(b"").is_err());
        assert!(parse_response(b"hello\n").is_err());
    }

    #[test]
    fn load_response_return_codes() {
        let agent = Path::new("/x/libagent.so");
        let ok = |s: &str| check_load_response(agent, &parse_response(s.as_bytes()).unwrap());
        assert!(ok("0\nreturn code: 0\n").is_ok());
        assert!(ok("0\n0\n").is_ok());
        let err = ok("0\nreturn code: -1\n").unwrap_err().to_string();
        assert!(
            err.contains("failed to start") && err.contains("-1"),
            "{err}"
        );
        assert!(err.contains("EnableDynamicAgentLoading"), "{err}");
        let err = ok("0\n7\n").unwrap_err().to_string();
        assert!(err.contains("returned 7"), "{err}");
        let err = ok("100\n/x/libagent.so was not loaded.\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("was not loaded") && err.contains("status 100"),
            "{err}"
        );
        let err = ok("0\n/x/libagent.so was not loaded.\n/x/libagent.so: file too short\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("could not load the agent") && err.contains("file too short"),
            "{err}"
        );
    }
}
