//! `jvmprof record`: run a JVM under the agent (`-- java ...`), or attach to one (`--pid`), and
//! write the profile in the format the output file's extension names.
//!
//! The agent always writes the native `.jvmprof` file into a private temporary directory; this
//! process converts it, so no formatting work happens inside the target JVM.

use anyhow::{Context, Result, anyhow, bail};
use jvmprof_cli::attach;
use jvmprof_profile::ExportOptions;
use std::io::IsTerminal;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// What to profile, comma-separated: cpu (thread CPU time) or wall (every thread, whatever
    /// its state), alloc (allocation sites), lock (monitor contention and waits), exact (exact
    /// invocation and bytecode counts per calling context, by rewriting classes; launch only).
    #[arg(long, default_value = "cpu")]
    pub mode: String,
    /// alloc: mean bytes between sampled allocations (e.g. 512k, 1m).
    #[arg(long, default_value = "512k")]
    pub alloc_interval: String,
    /// alloc: also report which sampled objects are still alive at the end (after a full GC).
    #[arg(long)]
    pub live: bool,
    /// lock: ignore contended entries and waits shorter than this.
    #[arg(long, default_value = "10us")]
    pub lock_threshold: String,
    /// exact: also instrument these classes (e.g. 'java.util.*'; JDK classes are left out
    /// otherwise). trace: trace only these classes (application or JDK; without it, every
    /// application class). Repeat or separate with ':'.
    #[arg(long)]
    pub include: Vec<String>,
    /// exact, trace: never instrument these classes (e.g. 'com.acme.generated.*').
    #[arg(long)]
    pub exclude: Vec<String>,
    /// exact: basic-block analysis for bytecode counts: default (blocks end at jumps) or precise
    /// (blocks also end at instructions that may throw: exact when exceptions are thrown).
    #[arg(long)]
    pub bba: Option<String>,
    /// exact: instrument only the call subgraph of this root method, revealed as it runs, timed
    /// with the probes' cost calibrated out, and removed at the end; works with --pid. Forms:
    /// 'pkg.Class.method' (every overload), 'pkg.Class.method(DESCRIPTOR)', 'pkg.Class.*',
    /// 'pkg.*'. Repeat for more roots. Stacks start at the root.
    #[arg(long)]
    pub root: Vec<String>,
    /// exact with --root: time calls by wall clock (ns) or by the thread's CPU time (cpu_ns).
    #[arg(long, value_name = "wall|cpu")]
    pub timer: Option<String>,
    /// exact with --root: keep only root invocations that took at least this long (e.g. 5ms),
    /// with their whole subtrees.
    #[arg(long, value_name = "DURATION")]
    pub min_latency: Option<String>,
    /// trace: this JVM's name in joined trees (`jvmprof trace`); default host:pid.
    #[arg(long, value_name = "NAME")]
    pub vm_name: Option<String>,
    /// trace: events each thread's buffer holds before calls are dropped (and counted).
    #[arg(long, value_name = "EVENTS")]
    pub trace_buffer: Option<u32>,
    /// Sampling interval (e.g. 10ms, 1ms, 500us).
    #[arg(long, default_value = "10ms")]
    pub interval: String,
    /// Put a `[thread name]` frame at the root of every stack.
    #[arg(long)]
    pub threads: bool,
    /// Output file; its extension picks the format (.html, .collapsed, .pb.gz,
    /// .speedscope.json, .jfr, .trace.json, .jvmprof, ...). `%p` in the name becomes the JVM's
    /// pid, `%t` the start time (YYYYMMDD-hhmmss, UTC).
    #[arg(short = 'o', long = "output", default_value = "profile.html")]
    pub output: PathBuf,
    /// Output format, overriding the extension.
    #[arg(long)]
    pub format: Option<String>,
    /// The metric single-metric formats carry: samples or ns; calls or bytecodes (exact); ns or
    /// cpu_ns (exact with --root).
    #[arg(long)]
    pub value: Option<String>,
    /// Deepest stack recorded, in frames.
    #[arg(long, default_value_t = 512)]
    pub depth: usize,
    /// Stack walker: auto (AsyncGetCallTrace when available), asgct or safepoint.
    #[arg(long, default_value = "auto")]
    pub engine: String,
    /// What drives CPU samples: auto (perf events where allowed, else timers), perf (a per-thread
    /// task-clock perf event: on time at any interval) or timer (a POSIX CPU timer: checked at the
    /// kernel's tick, late expirations weighted).
    #[arg(long, default_value = "auto")]
    pub cpu_engine: String,
    /// Also stream samples and thread snapshots to a collector (`jvmprof serve`) at HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    pub server: Option<String>,
    /// The collector's token, for --server (default: the JVMPROF_TOKEN environment variable).
    /// The agent gets it from a private file, and the launched application's environment goes
    /// without JVMPROF_TOKEN. This option is visible to every local user in `ps` while the
    /// recording runs: prefer --token-file or JVMPROF_TOKEN.
    #[arg(long, requires = "server", conflicts_with = "token_file")]
    pub token: Option<String>,
    /// A file whose first line is the collector's token, for --server (keep it mode 0600).
    #[arg(long, value_name = "FILE", requires = "server")]
    pub token_file: Option<PathBuf>,
    /// A label the collector files this JVM under (KEY:VALUE, e.g. service:checkout; repeat
    /// for more): its API and UI filter by labels and merge the profiles of matching JVMs.
    #[arg(long = "label", value_name = "KEY:VALUE", requires = "server")]
    pub labels: Vec<String>,
    /// Attach to this running JVM instead of launching one.
    #[arg(long, conflicts_with = "command")]
    pub pid: Option<u32>,
    /// Stop profiling after this long and write the profile (default: until Ctrl-C or the JVM
    /// exits). A launched JVM runs on to its end.
    #[arg(long)]
    pub duration: Option<String>,
    /// Write an HPROF heap dump of the live objects to FILE when the launched JVM exits
    /// (analyse it with `jvmprof heap FILE`).
    #[arg(long, value_name = "FILE", conflicts_with = "pid")]
    pub hprof_on_exit: Option<PathBuf>,
    /// Have the JVM write an HPROF heap dump to FILE on its first OutOfMemoryError.
    #[arg(long, value_name = "FILE")]
    pub hprof_on_oom: Option<PathBuf>,
    /// The agent library (default: libjvmprof_agent.so next to this executable).
    #[arg(long, env = "JVMPROF_AGENT")]
    pub agent: Option<PathBuf>,
    /// The JVM command line, after `--`: java [options] MainClass|-jar app.jar [args]
    #[arg(last = true, value_name = "JAVA COMMAND")]
    pub command: Vec<String>,
}

pub fn run(args: Args) -> Result<i32> {
    let agent = find_agent(args.agent.as_deref())?;
    // `%p` and `%t` in -o: the JVM's pid (known now with --pid, after the launch otherwise) and
    // the time the session began.
    let started = jvmprof_options::unix_now();
    let output_for = |pid: u32| jvmprof_options::expand_file_name(&args.output, pid, started);
    let work = TempDir::new()?;
    let native = work.path.join("profile.jvmprof");
    let status = work.path.join("status");
    let log = work.path.join("log");
    let mut options = format!(
        "mode={},interval={},alloc_interval={},lock_threshold={},live={},depth={},engine={},cpu_engine={},threads={},file={},status={}",
        args.mode.replace(',', "+"),
        args.interval,
        args.alloc_interval,
        args.lock_threshold,
        args.live,
        args.depth,
        args.engine,
        args.cpu_engine,
        args.threads,
        native.display(),
        status.display()
    );
    let patterns = |list: &[String]| {
        list.iter()
            .flat_map(|p| p.split([',', ':']))
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join(":")
    };
    if !args.include.is_empty() {
        options.push_str(&format!(",include={}", patterns(&args.include)));
    }
    if !args.exclude.is_empty() {
        options.push_str(&format!(",exclude={}", patterns(&args.exclude)));
    }
    if let Some(bba) = &args.bba {
        options.push_str(&format!(",bba={bba}"));
    }
    for root in &args.root {
        if root.contains(',') {
            bail!("bad root '{root}': a root has no commas (one --root per method)");
        }
        options.push_str(&format!(",root={}", root.trim()));
    }
    if let Some(name) = &args.vm_name {
        if name.contains(',') {
            bail!("--vm-name '{name}': a name has no commas");
        }
        options.push_str(&format!(",vm_name={name}"));
    }
    if let Some(n) = args.trace_buffer {
        options.push_str(&format!(",trace_buffer={n}"));
    }
    if let Some(timer) = &args.timer {
        options.push_str(&format!(",timer={timer}"));
    }
    if let Some(d) = &args.min_latency {
        options.push_str(&format!(",min_latency={d}"));
    }
    if let Some(server) = &args.server {
        options.push_str(&format!(",server={server}"));
    }
    if !args.labels.is_empty() {
        let labels = args.labels.join(";");
        jvmprof_options::parse_labels(&labels).map_err(|e| anyhow!("--label: {e}"))?;
        options.push_str(&format!(",labels={labels}"));
    }
    let token = match &args.server {
        Some(_) => jvmprof_cli::secret::token(
            args.token.clone(),
            args.token_file.as_deref(),
            jvmprof_cli::secret::TOKEN_ENV,
        )?,
        None => None,
    };
    if let Some(token) = &token {
        let file = work.path.join("token");
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&file)
            .and_then(|mut f| std::io::Write::write_all(&mut f, token.as_bytes()))
            .context("cannot write the token file")?;
        options.push_str(&format!(",token_file={}", file.display()));
    }
    if let Some(d) = &args.duration {
        options.push_str(&format!(",duration={d}"));
    }
    if let Some(v) = &args.value {
        options.push_str(&format!(",value={v}"));
    }
    for (key, file) in [
        ("hprof_on_exit", &args.hprof_on_exit),
        ("hprof_on_oom", &args.hprof_on_oom),
    ] {
        if let Some(file) = file {
            let file = std::path::absolute(file)?;
            match file.parent() {
                Some(dir) if dir.is_dir() => {}
                _ => bail!(
                    "--{}: the directory of {} does not exist",
                    key.replace('_', "-"),
                    file.display()
                ),
            }
            if file.display().to_string().contains(',') {
                bail!(
                    "--{}: {} has a comma, which the agent's options cannot carry",
                    key.replace('_', "-"),
                    file.display()
                );
            }
            options.push_str(&format!(",{key}={}", file.display()));
        }
    }
    if args.pid.is_some() {
        // The agent stops by itself and writes what was asked for if this process disappears,
        // and tells this process what it says through the log file.
        let output = std::path::absolute(output_for(args.pid.unwrap_or(0)))?;
        if let Some((pid, start)) = jvmprof_options::this_process_as_owner() {
            options.push_str(&format!(",owner={pid}:{start}"));
        }
        options.push_str(&format!(
            ",owner_file={},log={}",
            output.display(),
            log.display()
        ));
    } else if let Ok(output) = std::path::absolute(&args.output)
        && !output.display().to_string().contains(',')
    {
        // For `jvmprof status` and `stop` to name the file the user asked for (the agent
        // expands %p and %t as this process will): the agent writes its private native file
        // all the same, and this process converts it when the JVM ends.
        options.push_str(&format!(",owner_file={}", output.display()));
    }
    // Every option is checked here, by the parser the agent uses, before any JVM is touched.
    let parsed = match jvmprof_options::parse(&options) {
        Ok(jvmprof_options::Command::Start(o)) => o,
        Ok(_) => bail!("these options do not start a profiling session"),
        Err(e) => bail!("{e}"),
    };
    if args.pid.is_some() && parsed.exact.as_ref().is_some_and(|x| x.roots.is_empty()) {
        bail!(
            "exact mode over the whole program instruments classes as they load: it needs the \
             agent at launch (`jvmprof record --mode exact -- java ...`); with --pid, name a \
             root method (`--root pkg.Class.method`) to instrument its call subgraph"
        );
    }
    let format = parsed
        .check_output(
            &output_for(args.pid.unwrap_or(0)),
            args.format.as_deref(),
            args.value.as_deref(),
        )
        .map_err(|e| anyhow!(e))?;
    let metric = jvmprof_cli::value_metric(args.value.as_deref())?;
    let (code, pid) = match args.pid {
        Some(pid) => {
            let waiting = Waiting {
                native: &native,
                status: &status,
                log: &log,
                duration: parsed.duration,
            };
            attach_and_record(pid, &agent, &options, &waiting)?;
            (0, pid)
        }
        None => launch(&args.command, &agent, &options, &status)?,
    };
    let output = output_for(pid);
    if !native.exists() {
        if code != 0 {
            // `java -jar missing.jar`: the JVM said why; its exit code is ours, as without
            // the profiler.
            eprintln!(
                "jvmprof: no profile: the JVM exited with code {code} before profiling began"
            );
            return Ok(code);
        }
        bail!("the agent wrote no profile (see its messages above)");
    }
    let profile = jvmprof_profile::read_any(&native)?;
    if format == jvmprof_profile::Format::Native {
        // As the agent wrote it: a trace section after the profile stays. Copied by content,
        // not with fs::copy, so the file's mode follows this user's umask, not the agent's file.
        std::fs::File::open(&native)
            .and_then(|mut from| {
                let mut to = std::fs::File::create(&output)?;
                std::io::copy(&mut from, &mut to)
            })
            .with_context(|| format!("cannot write {}", output.display()))?;
    } else {
        let out = std::fs::File::create(&output)
            .with_context(|| format!("cannot create {}", output.display()))?;
        let export = ExportOptions {
            metric,
            threads: args.threads,
        };
        jvmprof_profile::write(&profile, format, &export, std::io::BufWriter::new(out))?;
    }
    if let Some(side) = jvmprof_cli::write_method_stats_beside(&profile, format, &output)? {
        eprintln!(
            "jvmprof: per-method statistics written to {}",
            side.display()
        );
    }
    eprintln!(
        "jvmprof: {} written to {}",
        summary(&profile),
        output.display()
    );
    Ok(code)
}

/// What a profile holds, in its own words: `1234 samples (5 failed walks, 0 dropped)` where
/// stacks were sampled; `1234 calls`, `5678 bytes` (and `, 3 events dropped` if any) where
/// nothing was sampled.
pub(crate) fn summary(profile: &jvmprof_profile::Profile) -> String {
    let meta = &profile.meta;
    let first = meta.metrics.first().map_or("samples", |m| m.as_str());
    let total = profile.total(0);
    if meta.metrics.contains(&jvmprof_profile::Metric::Samples) {
        let failures: u64 = meta.walk_failures.values().sum();
        format!(
            "{total} {first} ({failures} failed walks, {} dropped)",
            meta.dropped_samples
        )
    } else if meta.dropped_samples > 0 {
        format!("{total} {first}, {} events dropped", meta.dropped_samples)
    } else {
        format!("{total} {first}")
    }
}

/// The agent library: `--agent`/`JVMPROF_AGENT`, else next to this executable.
pub fn find_agent(explicit: Option<&Path>) -> Result<PathBuf> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()?
            .parent()
            .ok_or_else(|| anyhow!("cannot locate the jvmprof executable's directory"))?
            .join("libjvmprof_agent.so"),
    };
    if !path.is_file() {
        bail!(
            "agent library {} not found (build it with `cargo build --release`, or pass --agent PATH / set JVMPROF_AGENT)",
            path.display()
        );
    }
    Ok(std::fs::canonicalize(&path)?)
}

/// Runs `java ...` with the agent; returns the JVM's exit code (128 + signal if it was killed).
/// Runs the JVM with the agent; returns its exit code and its pid.
fn launch(command: &[String], agent: &Path, options: &str, status: &Path) -> Result<(i32, u32)> {
    let Some((java, rest)) = command.split_first() else {
        bail!(
            "nothing to run: give the JVM command after `--`, e.g. jvmprof record -- java -jar app.jar"
        );
    };
    let interrupted = ignore_interrupts()?;
    // The token reaches the agent through a private file: the application, and whatever it
    // starts, does not inherit it.
    let mut child = std::process::Command::new(java)
        .arg(format!("-agentpath:{}={options}", agent.display()))
        .args(rest)
        .env_remove(jvmprof_cli::secret::TOKEN_ENV)
        .spawn()
        .with_context(|| format!("cannot run {java}"))?;
    let pid = child.id();
    let progress = Progress::new(status);
    let exit = loop {
        if let Some(exit) = child.try_wait()? {
            break exit;
        }
        progress.show();
        std::thread::sleep(Duration::from_millis(200));
    };
    progress.clear();
    if interrupted.load(Ordering::Relaxed) {
        eprintln!("jvmprof: interrupted; the JVM wrote its profile on the way out");
    }
    Ok((exit_code(exit), pid))
}

fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// The files an attach session's agent writes, and how long it runs.
struct Waiting<'a> {
    native: &'a Path,
    status: &'a Path,
    /// The agent's messages, printed here as they come.
    log: &'a Path,
    duration: Option<Duration>,
}

/// Attaches, waits for the duration, Ctrl-C or the JVM's exit, and waits for the profile.
fn attach_and_record(pid: u32, agent: &Path, options: &str, w: &Waiting<'_>) -> Result<()> {
    let (native, status, duration) = (w.native, w.status, w.duration);
    let interrupted = ignore_interrupts()?;
    let mut log = LogTail::new(w.log);
    let loaded = attach::load_agent(pid, agent, options);
    log.print();
    loaded.with_context(|| format!("cannot start the agent in process {pid}"))?;
    if let Some(e) = agent_error(status) {
        bail!("the agent in process {pid} could not start profiling: {e}");
    }
    eprintln!("jvmprof: profiling process {pid}; Ctrl-C to stop");
    let progress = Progress::new(status);
    let mut stop_sent = false;
    let mut deadline: Option<Instant> = None;
    // With --duration the agent writes when it ends: allow a minute more, then give up.
    let overall = duration.map(|d| Instant::now() + d + Duration::from_secs(60));
    // The agent appends records to the native file as it goes; its End record says the
    // session is over and the file whole.
    let mut tail = jvmprof_profile::records::Tail::new();
    while !(native.exists() && tail.read(native).map_or(true, |_| tail.ended())) {
        if let Some(e) = agent_error(status) {
            progress.clear();
            bail!("the agent in process {pid} could not start profiling: {e}");
        }
        let alive = is_running(pid);
        if !alive && native.exists() {
            break; // killed: its file reads up to its last whole chunk
        }
        if interrupted.load(Ordering::Relaxed) && !stop_sent && alive {
            progress.clear();
            eprintln!("jvmprof: stopping");
            attach::load_agent(pid, agent, "stop").context("cannot send stop to the agent")?;
            stop_sent = true;
        }
        if overall.is_some_and(|o| Instant::now() > o) {
            bail!("process {pid} wrote no profile by the end of --duration plus 60 s");
        }
        if !alive || stop_sent {
            // The agent writes at stop or at VM death; allow it a moment.
            let d = *deadline.get_or_insert_with(|| Instant::now() + Duration::from_secs(60));
            if Instant::now() > d {
                bail!("process {pid} did not write a profile within 60 s");
            }
        }
        progress.show();
        if log.has_news() {
            progress.clear();
            log.print();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    progress.clear();
    log.print();
    Ok(())
}

/// The error the agent wrote into the status file, if it could not start.
fn agent_error(status: &Path) -> Option<String> {
    std::fs::read_to_string(status)
        .ok()
        .and_then(|t| t.strip_prefix("error: ").map(|e| e.trim().to_string()))
}

/// Prints what the agent appends to its log file, once each line.
struct LogTail {
    path: PathBuf,
    printed: usize,
}

impl LogTail {
    fn new(path: &Path) -> LogTail {
        LogTail {
            path: path.to_path_buf(),
            printed: 0,
        }
    }

    fn read(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap_or_default()
    }

    fn has_news(&self) -> bool {
        self.read().len() > self.printed
    }

    fn print(&mut self) {
        let text = self.read();
        if let Some(new) = text.get(self.printed..) {
            eprint!("{new}");
        }
        self.printed = text.len();
    }
}

/// Whether `pid` is still a running process (a zombie — exited, not yet reaped by its parent —
/// still has a /proc entry but will never write anything).
fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // The state follows the command name in parentheses, which may contain spaces.
            let after = &s[s.rfind(')')? + 1..];
            after
                .split_whitespace()
                .next()
                .map(|state| state != "Z" && state != "X")
        })
        .unwrap_or(false)
}

/// Ctrl-C goes to the whole foreground process group: the JVM shuts down (and writes its profile)
/// while this process keeps running to convert it.
fn ignore_interrupts() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, flag.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, flag.clone())?;
    Ok(flag)
}

/// The `recording 12s, 1234 samples` line on a terminal.
/// The progress line: redrawn in place on a terminal; otherwise (a CI log, `2> file`) a plain
/// line every [`PROGRESS_EVERY`], so a long run still shows it is alive and sampling.
struct Progress {
    status: PathBuf,
    tty: bool,
    last: std::cell::Cell<Instant>,
}

const PROGRESS_EVERY: Duration = Duration::from_secs(5);

impl Progress {
    fn new(status: &Path) -> Progress {
        Progress {
            status: status.to_path_buf(),
            tty: std::io::stderr().is_terminal(),
            last: std::cell::Cell::new(Instant::now()),
        }
    }

    fn show(&self) {
        if !self.tty {
            if self.last.get().elapsed() < PROGRESS_EVERY {
                return;
            }
            self.last.set(Instant::now());
        }
        if let Ok(text) = std::fs::read_to_string(&self.status) {
            let mut it = text.split_whitespace();
            if let (Some(ms), Some(n)) = (it.next(), it.next()) {
                let secs = ms.parse::<u64>().unwrap_or(0) / 1000;
                if self.tty {
                    eprint!("\r\x1b[2Kjvmprof: recording {secs}s, {n} samples");
                } else {
                    eprintln!("jvmprof: recording {secs}s, {n} samples");
                }
            }
        }
    }

    fn clear(&self) {
        if self.tty {
            eprint!("\r\x1b[2K");
        }
    }
}

/// A private directory (mode 0700, a new name: never one someone else made) for the agent's
/// files, removed on drop.
pub(crate) struct TempDir {
    pub(crate) path: PathBuf,
}

impl TempDir {
    pub(crate) fn new() -> Result<TempDir> {
        let base = std::env::temp_dir();
        for n in 0..1000u32 {
            let path = base.join(format!("jvmprof-{}-{n}", std::process::id()));
            if std::fs::DirBuilder::new().mode(0o700).create(&path).is_ok() {
                return Ok(TempDir { path });
            }
        }
        bail!("cannot create a directory under {}", base.display())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
