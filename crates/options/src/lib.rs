//! The profiling options, one type for the CLI and the agent: `key=value` pairs separated by
//! commas, as given after `-agentpath:...=` or built by `jvmprof record`.
//!
//! The CLI parses the very string it will hand the agent, and checks the output file against the
//! modes ([`Options::check_output`]), before it launches or attaches: a bad option is refused at
//! once, with no JVM started. The agent parses the same string again (options can be given by hand
//! with `-agentpath`); there a bad option is reported once, by name, and leaves the agent inert
//! while the application runs.

mod process;

pub use process::{
    expand_file_name, owner_gone, process_start_ticks, this_process_as_owner, unix_now,
};

use jvmprof_profile::{Format, Metric};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Cpu,
    Wall,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Cpu => "cpu",
            Mode::Wall => "wall",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// AsyncGetCallTrace when the VM has it, else safepoint.
    Auto,
    Asgct,
    Safepoint,
}

/// What drives CPU samples (`cpu_engine`): a per-thread perf event on the task clock
/// (hrtimer-driven: accurate at 1 ms and for short or bursty threads) or a POSIX CPU timer
/// (checked only at the kernel's tick; overrun-weighted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuClock {
    /// Perf events where `perf_event_open` is allowed, else timers.
    Auto,
    Perf,
    Timer,
}

impl CpuClock {
    pub fn as_str(self) -> &'static str {
        match self {
            CpuClock::Auto => "auto",
            CpuClock::Perf => "perf",
            CpuClock::Timer => "timer",
        }
    }
}

/// Allocation profiling (`alloc` mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocOptions {
    /// Mean bytes between sampled allocations.
    pub interval_bytes: u64,
    /// Also report which sampled objects are still alive at the end.
    pub live: bool,
}

/// Lock profiling (`lock` mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockOptions {
    /// Contended monitor entries shorter than this are not recorded.
    pub threshold: Duration,
}

/// Which basic-block analysis exact mode counts bytecodes with (JP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bba {
    /// Blocks end at control transfers only: a block is counted when it starts, so an exception
    /// thrown inside it still counts the rest of the block.
    Default,
    /// Blocks also end after every instruction that may throw: exact under exceptions.
    Precise,
}

/// Exact profiling (`exact` mode): classes are rewritten to count calls and bytecodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExactOptions {
    /// Class patterns (`java.util.*`, `com.acme.Foo`) to instrument besides application classes.
    pub include: Vec<String>,
    /// Class patterns never instrumented (wins over include).
    pub exclude: Vec<String>,
    pub bba: Bba,
    /// Most calling-context nodes kept (all threads together; the runtime lowers it to one per KiB
    /// of maximum heap); calls past it are counted under a `[past node budget]` child of the
    /// last kept context (at most one per kept context).
    pub max_nodes: u32,
    /// Root methods (`--root`): when set, only the call subgraph under them is instrumented,
    /// lazily, at launch or attach, and removed at stop (JFluid); calls are timed.
    pub roots: Vec<RootPattern>,
    /// What a root session's times measure.
    pub timer: Timer,
    /// Root sessions: keep only root invocations that took at least this long.
    pub min_latency: Option<Duration>,
    /// Count executed bytecodes: always in whole-program exact mode, with `bba` in root mode.
    pub bytecodes: bool,
}

/// The clock a root session times calls with (`timer=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timer {
    /// `System.nanoTime`: wall time (metric `ns`).
    Wall,
    /// The thread's CPU time (metric `cpu_ns`).
    Cpu,
}

/// A root method: `pkg.Class.method` (every overload), `pkg.Class.method(DESCRIPTOR)`, or a
/// glob over `pkg.Class.method` such as `pkg.Class.*` or `pkg.*`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootPattern {
    /// `pkg.Class.method` with `*` wildcards, dots in the package, `$` for nested classes.
    pub glob: String,
    /// The method descriptor, when given: `(I)V`.
    pub descriptor: Option<String>,
}

impl RootPattern {
    /// Parses and checks one `--root`; the message names the root and what is wrong.
    pub fn parse(text: &str) -> Result<RootPattern, String> {
        let t = text.trim();
        let bad = |why: &str| Err(format!("bad root '{text}': {why}"));
        let (name, descriptor) = match t.find('(') {
            Some(i) => (&t[..i], Some(&t[i..])),
            None => (t, None),
        };
        if name.is_empty() || name.contains('/') || name.chars().any(char::is_whitespace) {
            return bad(
                "write pkg.Class.method, pkg.Class.method(DESCRIPTOR), pkg.Class.* or pkg.*",
            );
        }
        let Some((class, method)) = name.rsplit_once('.') else {
            return bad("no class: write pkg.Class.method");
        };
        if class.is_empty() || method.is_empty() || class.split('.').any(str::is_empty) {
            return bad(
                "write pkg.Class.method, pkg.Class.method(DESCRIPTOR), pkg.Class.* or pkg.*",
            );
        }
        if let Some(d) = descriptor {
            if name.contains('*') {
                return bad("a descriptor needs an exact class and method name, not a pattern");
            }
            if let Err(why) = check_method_descriptor(d) {
                return bad(&format!("malformed descriptor '{d}': {why}"));
            }
        }
        Ok(RootPattern {
            glob: name.to_string(),
            descriptor: descriptor.map(str::to_string),
        })
    }

    /// Whether a method (class with dots, method name, descriptor) is this root. Wildcards never
    /// match constructors and static initializers; naming them does.
    pub fn matches(&self, class: &str, method: &str, descriptor: &str) -> bool {
        if let Some(d) = &self.descriptor
            && d != descriptor
        {
            return false;
        }
        if method.starts_with('<') {
            return self.glob.len() == class.len() + 1 + method.len()
                && self.glob.starts_with(class)
                && self.glob.ends_with(method)
                && self.glob.as_bytes()[class.len()] == b'.';
        }
        glob(&self.glob, &format!("{class}.{method}"))
    }

    /// Whether any method of this class (dots) may match: a cheap filter before the methods.
    pub fn may_match_class(&self, class: &str) -> bool {
        let (cp, mp) = self.glob.rsplit_once('.').unwrap_or(("", &self.glob));
        glob(cp, class) || (mp.contains('*') && glob(&self.glob, &format!("{class}.x")))
    }

    /// The class part when it has no wildcard (the class a missing root waits for).
    pub fn exact_class(&self) -> Option<&str> {
        let (cp, _) = self.glob.rsplit_once('.')?;
        (!cp.contains('*')).then_some(cp)
    }
}

impl std::fmt::Display for RootPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}{}",
            self.glob,
            self.descriptor.as_deref().unwrap_or("")
        )
    }
}

/// `*` matches any run of characters; everything else matches itself.
pub fn glob(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0, 0);
    let (mut star, mut mark) = (usize::MAX, 0);
    while ni < n.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = pi;
            mark = ni;
            pi += 1;
        } else if pi < p.len() && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if star != usize::MAX {
            pi = star + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

/// Checks a JVM method descriptor: `(` field types `)` a field type or `V`.
pub fn check_method_descriptor(d: &str) -> Result<(), String> {
    let b = d.as_bytes();
    if b.first() != Some(&b'(') {
        return Err("it must start with '('".into());
    }
    let mut i = 1;
    // One field type at i; returns the index after it.
    let field = |mut i: usize| -> Result<usize, String> {
        while b.get(i) == Some(&b'[') {
            i += 1;
        }
        match b.get(i) {
            Some(b'B' | b'C' | b'D' | b'F' | b'I' | b'J' | b'S' | b'Z') => Ok(i + 1),
            Some(b'L') => {
                let end = d[i..]
                    .find(';')
                    .ok_or("a class type 'L...' has no closing ';'")?;
                let name = &d[i + 1..i + end];
                if name.is_empty() || name.contains(['.', '(', ')', '[']) {
                    return Err(format!(
                        "'{name}' is not a class name (use slashes: java/lang/String)"
                    ));
                }
                Ok(i + end + 1)
            }
            Some(c) => Err(format!("unexpected '{}' at {i}", *c as char)),
            None => Err("it ends before ')'".into()),
        }
    };
    while b.get(i) != Some(&b')') {
        if i >= b.len() {
            return Err("no ')'".into());
        }
        i = field(i)?;
    }
    i += 1;
    let end = if b.get(i) == Some(&b'V') {
        i + 1
    } else {
        field(i)?
    };
    if end != b.len() {
        return Err(format!("trailing '{}'", &d[end..]));
    }
    Ok(())
}

/// Method tracing (`trace` mode, JaViz): every call of the traced classes' methods with its
/// entry and exit times, and the remote calls (RMI, HTTP) each side of which is recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceOptions {
    /// Class patterns to trace, application or JDK; empty: every application class.
    pub include: Vec<String>,
    /// Class patterns never traced (wins over include).
    pub exclude: Vec<String>,
    /// This JVM's name in joined trees (default `host:pid`).
    pub vm_name: Option<String>,
    /// Events each thread's buffer holds (entries and exits; a full buffer drops whole calls).
    pub buffer: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Stack sampling (cpu or wall), if asked for.
    pub sampling: Option<Mode>,
    pub alloc: Option<AllocOptions>,
    pub lock: Option<LockOptions>,
    pub exact: Option<ExactOptions>,
    pub trace: Option<TraceOptions>,
    pub interval: Duration,
    /// Output file; the format comes from `format` or the extension. `None` only when streaming
    /// to a collector without a file.
    pub file: Option<PathBuf>,
    pub format: Option<String>,
    /// Metric for single-metric formats (`samples`, `ns`, ...).
    pub value: Option<String>,
    pub threads: bool,
    /// Deepest stack recorded, in frames.
    pub depth: usize,
    pub engine: Engine,
    /// What drives CPU samples (cpu mode with AsyncGetCallTrace).
    pub cpu_clock: CpuClock,
    /// Retry walks AsyncGetCallTrace gives up on (from the frame anchor, or the caller of an
    /// incomplete frame); `recover_walks=false` keeps its failures as they are.
    pub recover_walks: bool,
    /// Stop and write the profile after this long (used with attach).
    pub duration: Option<Duration>,
    /// A file the agent rewrites about once a second with `elapsed_ms samples`, for progress.
    pub status: Option<PathBuf>,
    /// Collector to stream to (`HOST:PORT`).
    pub server: Option<String>,
    /// Token the collector expects.
    pub token: Option<String>,
    /// The VM's labels for the collector (`labels=service:checkout;env:prod`, else
    /// `JVMPROF_LABELS` from the environment).
    pub labels: Vec<(String, String)>,
    /// How often thread snapshots are streamed.
    pub refresh: Duration,
    /// Rewrite `file` this often with everything so far (exact trees merged first), so the
    /// profile of a long-running JVM can be read while it runs.
    pub flush: Option<Duration>,
    /// The process that controls this session (`jvmprof record --pid`): its pid and start time
    /// (clock ticks after boot, /proc/PID/stat field 22, so a reused pid is not mistaken for it).
    /// When it is gone the session stops by itself.
    pub owner: Option<(u32, u64)>,
    /// Where the owner wanted the profile (format from its extension, `value` and `threads`
    /// apply): written by the agent when the owner is gone.
    pub owner_file: Option<PathBuf>,
    /// A file the agent also appends its `jvmprof: ...` messages to (the owner prints them).
    pub log: Option<PathBuf>,
    /// Have the JVM write an HPROF heap dump here on its first OutOfMemoryError (HotSpot's own
    /// HeapDumpOnOutOfMemoryError, switched on through the diagnostic MXBean).
    pub hprof_on_oom: Option<PathBuf>,
    /// Write an HPROF dump of the live objects here when the JVM exits.
    pub hprof_on_exit: Option<PathBuf>,
}

/// What an option string asks the agent to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    Start(Box<Options>),
    /// Stop the running session and write its profile (sent by a second attach); the outcome
    /// goes to the `reply` file when one is given.
    Stop(Option<PathBuf>),
    /// Write what runs (modes, since when, samples, output) as JSON to this file (attach).
    Status(PathBuf),
    /// Write a thread dump (threads, stacks, locks, deadlocks) as JSON to this file (attach).
    Dump(PathBuf),
    /// Write a class histogram (instances and bytes per class) as JSON to this file (attach).
    Heap(PathBuf),
}

impl Options {
    /// The mode names, in a fixed order (`cpu`/`wall`, `alloc`, `lock`).
    pub fn modes(&self) -> Vec<&'static str> {
        let mut m = Vec::new();
        if let Some(s) = self.sampling {
            m.push(s.as_str());
        }
        if self.alloc.is_some() {
            m.push("alloc");
        }
        if self.lock.is_some() {
            m.push("lock");
        }
        if self.exact.is_some() {
            m.push("exact");
        }
        if self.trace.is_some() {
            m.push("trace");
        }
        m
    }

    /// The metrics the session's samples carry: stack sampling's, then alloc's, lock's, exact's.
    pub fn metrics(&self) -> Vec<Metric> {
        let mut m = Vec::new();
        if self.sampling.is_some() {
            m.extend([Metric::Samples, Metric::Ns]);
        }
        if let Some(a) = self.alloc {
            m.extend([Metric::Bytes, Metric::Objects]);
            if a.live {
                m.extend([Metric::LiveBytes, Metric::LiveObjects]);
            }
        }
        if self.lock.is_some() {
            m.extend([
                Metric::LockNs,
                Metric::LockCount,
                Metric::WaitNs,
                Metric::WaitCount,
            ]);
        }
        if let Some(x) = &self.exact {
            m.push(Metric::Calls);
            if !x.roots.is_empty() {
                m.push(match x.timer {
                    Timer::Wall => Metric::Ns,
                    Timer::Cpu => Metric::CpuNs,
                });
            }
            if x.bytecodes {
                m.push(Metric::Bytecodes);
            }
        }
        if self.trace.is_some() && !m.contains(&Metric::Calls) {
            // Exact call counts; each call's times are in the trace itself (a sampling mode's
            // ns beside it stays the sampled time).
            m.push(Metric::Calls);
        }
        m
    }

    /// Checks that `path` can be written in `format` (or the format its extension names) with
    /// `value` as the metric of a single-metric format, for these modes. Returns the format.
    pub fn check_output(
        &self,
        path: &Path,
        format: Option<&str>,
        value: Option<&str>,
    ) -> Result<Format, String> {
        let format = match format {
            Some(f) => Format::parse(f),
            None => Format::from_path(path),
        }
        .map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some(v) = value {
            let metric = Metric::parse(v).ok_or_else(|| {
                format!("unknown value '{v}' (samples, ns, bytes, objects, live_bytes, live_objects, lock_ns, lock_count, wait_ns, wait_count, calls, cpu_ns, bytecodes, count)")
            })?;
            let metrics = self.metrics();
            // `ns` and `count` also address a lock-only profile's contention metrics.
            let lock_alias =
                self.sampling.is_none() && self.lock.is_some() && matches!(v, "ns" | "count");
            if !metrics.contains(&metric) && !lock_alias {
                let names: Vec<&str> = metrics.iter().map(|m| m.as_str()).collect();
                return Err(format!(
                    "--value {v}: a {} profile has no such metric (it has {})",
                    self.modes().join("+"),
                    names.join(", ")
                ));
            }
        }
        if format == Format::Jfr
            && self.sampling.is_none()
            && self.alloc.is_none()
            && self.lock.is_none()
        {
            return Err(format!(
                "{}: a JFR recording carries cpu/wall, alloc and lock samples, not {} mode's \
                 calls and bytecodes (write .jvmprof, .collapsed or .html)",
                path.display(),
                self.modes().join("+")
            ));
        }
        if format == Format::Trace && self.sampling.is_none() {
            return Err(format!(
                "{}: a timeline shows when each sample was taken, which cpu and wall sampling \
                 record and {} mode does not (add --mode cpu or wall, or write another format)",
                path.display(),
                self.modes().join("+")
            ));
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if !dir.is_dir() {
            return Err(format!(
                "cannot write {}: directory {} does not exist",
                path.display(),
                dir.display()
            ));
        }
        if path.is_dir() {
            return Err(format!(
                "cannot write {}: it is a directory",
                path.display()
            ));
        }
        let writable = if path.exists() {
            std::fs::OpenOptions::new().append(true).open(path).is_ok()
        } else {
            let probe = dir.join(format!(".jvmprof-probe-{}", std::process::id()));
            let ok = std::fs::File::create(&probe).is_ok();
            let _ = std::fs::remove_file(&probe);
            ok
        };
        if !writable {
            return Err(format!(
                "cannot write {}: permission denied",
                path.display()
            ));
        }
        Ok(format)
    }
}

pub const KNOWN_KEYS: &str = "mode, interval, alloc_interval, live, lock_threshold, file, format, value, threads, depth, engine, cpu_engine, recover_walks, duration, status, flush, server, token, token_file, labels, refresh, owner, owner_file, log, hprof_on_oom, hprof_on_exit, stop, reply, query, dump, heap, include, exclude, bba, max_nodes, root, timer, min_latency, vm_name, trace_buffer";

/// An output file named in the options, with `%p` and `%t` expanded for this process (the
/// agent's JVM) and now.
fn here(name: &str) -> PathBuf {
    expand_file_name(Path::new(name), std::process::id(), unix_now())
}

pub fn parse(text: &str) -> Result<Command, String> {
    let items: Vec<(&str, Option<&str>)> = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| match item.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (item, None),
        })
        .collect();
    let value_of = |key: &str| items.iter().find(|(k, _)| *k == key).and_then(|(_, v)| *v);
    if items.iter().any(|(k, _)| *k == "stop") {
        return Ok(Command::Stop(value_of("reply").map(PathBuf::from)));
    }
    if items.iter().any(|(k, _)| *k == "query") {
        let path = value_of("query").ok_or("option 'query' needs a value (query=FILE)")?;
        return Ok(Command::Status(PathBuf::from(path)));
    }
    let mut modes: Option<&str> = None;
    let mut alloc_interval: u64 = 512 * 1024;
    let mut live = false;
    let mut lock_threshold = Duration::from_micros(10);
    let mut include: Vec<String> = Vec::new();
    let mut exclude: Vec<String> = Vec::new();
    let mut bba = Bba::Default;
    let mut max_nodes: u32 = 1 << 22;
    let mut exact_keys = false;
    let mut bba_given = false;
    let mut roots: Vec<RootPattern> = Vec::new();
    let mut timer = Timer::Wall;
    let mut min_latency = None;
    let mut root_keys = false;
    let mut vm_name: Option<String> = None;
    let mut trace_buffer: u32 = 1 << 16;
    let mut trace_keys = false;
    let mut o = Options {
        sampling: None,
        alloc: None,
        lock: None,
        exact: None,
        trace: None,
        interval: Duration::from_millis(10),
        file: None,
        format: None,
        value: None,
        threads: false,
        depth: 512,
        engine: Engine::Auto,
        cpu_clock: CpuClock::Auto,
        recover_walks: true,
        duration: None,
        status: None,
        server: None,
        token: None,
        labels: Vec::new(),
        refresh: Duration::from_secs(1),
        flush: None,
        owner: None,
        owner_file: None,
        log: None,
        hprof_on_oom: None,
        hprof_on_exit: None,
    };
    for &(key, value) in &items {
        let need = || value.ok_or_else(|| format!("option '{key}' needs a value ({key}=...)"));
        match key {
            "dump" => return Ok(Command::Dump(PathBuf::from(need()?))),
            "heap" => return Ok(Command::Heap(PathBuf::from(need()?))),
            "mode" => modes = Some(need()?),
            "alloc_interval" => alloc_interval = parse_bytes(need()?)?,
            "live" => live = parse_bool(key, value)?,
            "lock_threshold" => lock_threshold = parse_duration(need()?)?,
            // Patterns are separated by `:` or `;` (commas separate options).
            "include" | "exclude" => {
                exact_keys = true;
                let list = if key == "include" {
                    &mut include
                } else {
                    &mut exclude
                };
                for p in need()?
                    .split([':', ';'])
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                {
                    list.push(check_pattern(p)?);
                }
            }
            "root" => {
                exact_keys = true;
                roots.push(RootPattern::parse(need()?)?);
            }
            "timer" => {
                root_keys = true;
                timer = match need()? {
                    "wall" => Timer::Wall,
                    "cpu" => Timer::Cpu,
                    t => return Err(format!("unknown timer '{t}' (wall, cpu)")),
                }
            }
            "vm_name" => {
                trace_keys = true;
                let v = need()?;
                if v.is_empty() || v.len() > 128 || v.chars().any(|c| c.is_control()) {
                    return Err(format!("bad vm_name '{v}' (1 to 128 printable characters)"));
                }
                vm_name = Some(v.to_string());
            }
            "trace_buffer" => {
                trace_keys = true;
                trace_buffer = need()?
                    .parse()
                    .ok()
                    .filter(|n| (1024..=(1 << 26)).contains(n))
                    .ok_or_else(|| {
                        "trace_buffer must be a number of events from 1024 to 67108864".to_string()
                    })?
            }
            "min_latency" => {
                root_keys = true;
                min_latency = Some(parse_duration(need()?)?);
            }
            "bba" => {
                exact_keys = true;
                bba_given = true;
                bba = match need()? {
                    "default" => Bba::Default,
                    "precise" => Bba::Precise,
                    b => return Err(format!("unknown bba '{b}' (default, precise)")),
                }
            }
            "max_nodes" => {
                exact_keys = true;
                max_nodes = need()?
                    .parse()
                    .ok()
                    .filter(|n| (1..=i32::MAX as u32).contains(n))
                    .ok_or_else(|| "max_nodes must be a positive number".to_string())?
            }
            "interval" => {
                o.interval = parse_duration(need()?)?;
                if o.interval < Duration::from_micros(100) {
                    return Err(format!(
                        "interval {:?} is below the 100us minimum",
                        o.interval
                    ));
                }
            }
            "file" => o.file = Some(here(need()?)),
            "server" => o.server = Some(need()?.to_string()),
            "token" => o.token = Some(need()?.to_string()),
            "token_file" => o.token = Some(read_token(Path::new(need()?))?),
            "labels" => o.labels = parse_labels(need()?)?,
            "refresh" => {
                o.refresh = parse_duration(need()?)?;
                // At most a minute: a snapshot is also what keeps the connection alive (the
                // collector closes connections silent for five minutes).
                if o.refresh < Duration::from_millis(10) || o.refresh > Duration::from_secs(60) {
                    return Err("refresh must be between 10ms and 60s".into());
                }
            }
            "format" => o.format = Some(need()?.to_string()),
            "value" => o.value = Some(need()?.to_string()),
            "threads" => o.threads = parse_bool(key, value)?,
            "recover_walks" => o.recover_walks = parse_bool(key, value)?,
            "depth" => {
                o.depth = need()?
                    .parse()
                    .ok()
                    .filter(|d| (1..=4096).contains(d))
                    .ok_or_else(|| "depth must be a number from 1 to 4096".to_string())?
            }
            "engine" => {
                o.engine = match need()? {
                    "auto" => Engine::Auto,
                    "asgct" => Engine::Asgct,
                    "safepoint" => Engine::Safepoint,
                    e => return Err(format!("unknown engine '{e}' (auto, asgct, safepoint)")),
                }
            }
            "cpu_engine" => {
                o.cpu_clock = match need()? {
                    "auto" => CpuClock::Auto,
                    "perf" => CpuClock::Perf,
                    "timer" => CpuClock::Timer,
                    e => return Err(format!("unknown cpu_engine '{e}' (auto, perf, timer)")),
                }
            }
            "duration" => {
                let d = parse_duration(need()?)?;
                if d.is_zero() {
                    return Err("duration must be more than 0".into());
                }
                o.duration = Some(d);
            }
            "owner" => {
                let v = need()?;
                let (pid, start) = v.split_once(':').unwrap_or((v, "0"));
                match (pid.parse(), start.parse()) {
                    (Ok(pid), Ok(start)) => o.owner = Some((pid, start)),
                    _ => return Err(format!("owner '{v}' is not PID:START_TICKS")),
                }
            }
            "owner_file" => o.owner_file = Some(here(need()?)),
            "log" => o.log = Some(PathBuf::from(need()?)),
            "hprof_on_oom" => o.hprof_on_oom = Some(here(need()?)),
            "hprof_on_exit" => o.hprof_on_exit = Some(here(need()?)),
            "reply" => {}
            "status" => o.status = Some(PathBuf::from(need()?)),
            "flush" => {
                let every = parse_duration(need()?)?;
                if every < Duration::from_secs(1) {
                    return Err("flush must be at least 1s".into());
                }
                o.flush = Some(every);
            }
            _ => return Err(format!("unknown option '{key}' (known: {KNOWN_KEYS})")),
        }
    }
    // `mode=cpu+alloc+lock` (or `|`): several modes in one run; the CLI's `--mode cpu,alloc`
    // arrives this way because commas separate options.
    for m in modes.unwrap_or("cpu").split(['+', '|']) {
        match m {
            "cpu" | "wall" if o.sampling.is_some() => {
                return Err("cpu and wall cannot be combined in one run".into());
            }
            "cpu" => o.sampling = Some(Mode::Cpu),
            "wall" => o.sampling = Some(Mode::Wall),
            "alloc" => {
                o.alloc = Some(AllocOptions {
                    interval_bytes: alloc_interval,
                    live,
                })
            }
            "lock" => {
                o.lock = Some(LockOptions {
                    threshold: lock_threshold,
                })
            }
            "trace" => {
                o.trace = Some(TraceOptions {
                    include: include.clone(),
                    exclude: exclude.clone(),
                    vm_name: vm_name.clone(),
                    buffer: trace_buffer,
                })
            }
            "exact" => {
                o.exact = Some(ExactOptions {
                    include: include.clone(),
                    exclude: exclude.clone(),
                    bba,
                    max_nodes,
                    bytecodes: roots.is_empty() || bba_given,
                    roots: roots.clone(),
                    timer,
                    min_latency,
                })
            }
            m => {
                return Err(format!(
                    "unknown mode '{m}' (cpu, wall, alloc, lock, exact, trace)"
                ));
            }
        }
    }
    if o.exact.is_some() && o.trace.is_some() {
        return Err("exact and trace cannot be combined in one run".into());
    }
    if exact_keys && o.exact.is_none() && o.trace.is_none() {
        return Err(
            "`include`, `exclude`, `bba`, `max_nodes` and `root` need mode exact (include and exclude: or trace)"
                .into(),
        );
    }
    if o.trace.is_some() && (bba_given || !roots.is_empty()) {
        return Err("`bba` and `root` belong to mode exact, not trace".into());
    }
    if trace_keys && o.trace.is_none() {
        return Err("`vm_name` and `trace_buffer` need mode trace".into());
    }
    if root_keys && roots.is_empty() {
        return Err("`timer` and `min_latency` need a root (root=pkg.Class.method)".into());
    }
    if live && o.alloc.is_none() {
        return Err("`live` needs mode alloc".into());
    }
    // A token from the environment keeps it off the JVM's command line.
    if o.server.is_some() && o.token.is_none() {
        o.token = std::env::var("JVMPROF_TOKEN")
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
    }
    if o.server.is_some()
        && o.labels.is_empty()
        && let Ok(text) = std::env::var("JVMPROF_LABELS")
    {
        o.labels = parse_labels(&text).map_err(|e| format!("JVMPROF_LABELS: {e}"))?;
    }
    if o.file.is_none() && o.server.is_none() {
        o.file = Some(PathBuf::from(format!(
            "jvmprof-{}.jvmprof",
            std::process::id()
        )));
    }
    Ok(Command::Start(Box::new(o)))
}

/// A class pattern: a binary name with dots, `*` matching any run of characters
/// (`java.util.*`, `com.acme.*Service`, `Foo`).
/// `service:checkout;env:prod` (pairs separated by `;`, key and value by `:`): the labels a
/// VM is filed under at the collector. Keys are letters, digits, `_`, `.` and `-`, up to 64
/// bytes; values up to 256 bytes without `,` or `;`; at most 32 labels, each key once.
pub fn parse_labels(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut labels: Vec<(String, String)> = Vec::new();
    for item in text.split(';').map(str::trim).filter(|i| !i.is_empty()) {
        let (k, v) = item
            .split_once(':')
            .map(|(k, v)| (k.trim(), v.trim()))
            .filter(|(k, v)| !k.is_empty() && !v.is_empty())
            .ok_or_else(|| format!("label '{item}' is not KEY:VALUE"))?;
        if k.len() > 64
            || !k
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        {
            return Err(format!(
                "label key '{k}': letters, digits, '_', '.' and '-', at most 64"
            ));
        }
        if v.len() > 256 || v.contains(',') {
            return Err(format!(
                "label value '{v}': at most 256 bytes, no ',' or ';'"
            ));
        }
        if labels.iter().any(|(key, _)| key == k) {
            return Err(format!("label '{k}' is given twice"));
        }
        labels.push((k.to_string(), v.to_string()));
    }
    if labels.len() > 32 {
        return Err(format!("{} labels (at most 32)", labels.len()));
    }
    Ok(labels)
}

/// The collector token kept in `path` (its first line; surrounding blanks ignored).
fn read_token(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("token_file: cannot read {}: {e}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim();
    if token.is_empty() {
        return Err(format!("token_file: {} is empty", path.display()));
    }
    Ok(token.to_string())
}

fn check_pattern(p: &str) -> Result<String, String> {
    if p.contains('/') || p.chars().any(char::is_whitespace) {
        return Err(format!(
            "bad class pattern '{p}' (use dots and *, e.g. java.util.* or com.acme.Foo)"
        ));
    }
    Ok(p.to_string())
}

fn parse_bool(key: &str, value: Option<&str>) -> Result<bool, String> {
    match value {
        None | Some("true") | Some("yes") | Some("1") => Ok(true),
        Some("false") | Some("no") | Some("0") => Ok(false),
        Some(v) => Err(format!("option '{key}' takes true or false, not '{v}'")),
    }
}

/// `512k`, `1m`, `4096`: a byte count with an optional k/m/g (binary) suffix.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let lower = s.to_ascii_lowercase();
    let (num, mult) = match lower.trim_end_matches('b').chars().last() {
        Some('k') => (&lower[..lower.find('k').unwrap_or(0)], 1u64 << 10),
        Some('m') => (&lower[..lower.find('m').unwrap_or(0)], 1 << 20),
        Some('g') => (&lower[..lower.find('g').unwrap_or(0)], 1 << 30),
        _ => (lower.trim_end_matches('b'), 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a byte count (e.g. 512k, 1m, 4096)"))?;
    let bytes = n
        .checked_mul(mult)
        .filter(|b| *b <= i32::MAX as u64)
        .ok_or_else(|| format!("'{s}' is too large (at most 2g)"))?;
    Ok(bytes)
}

/// `10ms`, `250us`, `1s`, `2m`, `500ns`; a bare number is nanoseconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a duration (e.g. 10ms, 250us, 30s)"))?;
    let ns = match unit {
        // A bare number is a mistake waiting to happen (`--duration 10` was 10 ns): only 0
        // needs no unit.
        "" if n != 0 => {
            return Err(format!(
                "'{s}' needs a unit (ns, us, ms, s, m, h, d), e.g. {s}s or {s}ms"
            ));
        }
        "" | "ns" => Some(n),
        "us" => n.checked_mul(1_000),
        "ms" => n.checked_mul(1_000_000),
        "s" => n.checked_mul(1_000_000_000),
        "m" => n.checked_mul(60_000_000_000),
        "h" => n.checked_mul(3_600_000_000_000),
        "d" => n.checked_mul(86_400_000_000_000),
        _ => {
            return Err(format!(
                "'{s}': unknown unit '{unit}' (ns, us, ms, s, m, h, d)"
            ));
        }
    }
    .ok_or_else(|| format!("'{s}' is too long"))?;
    Ok(Duration::from_nanos(ns))
}

#[cfg(test)]
mod tests;
