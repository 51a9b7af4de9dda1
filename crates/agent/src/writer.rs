//! The session's writer thread: it starts the engines, polls them into the sink, keeps up with
//! the process once a second, and hands what the sink's profile gained to the outputs — the
//! native file as records appended once a second ([`RecordFile`]), the collector link (thread
//! snapshots every `refresh`, new samples about once a second), a file of another format
//! rewritten every `flush` and written at the end, and the status file. It is attached to the
//! VM as a daemon and never sampled itself.

use crate::engine::safepoint::map_state;
use crate::options::Options;
use crate::recordfile::RecordFile;
use crate::running::Shared;
use crate::say::say;
use crate::sink::Sink;
use crate::state::AgentState;
use crate::stream::{Stream, StreamOptions};
use crate::sync::lock;
use jvmprof_jvmti::{Env, Jni, os};
use jvmprof_profile::records::ThreadStack;
use jvmprof_profile::{ExportOptions, Format, Meta, Metric, Profile};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often engines are polled at the latest, and thread timers reconciled and the status file
/// written.
const HOUSEKEEPING_EVERY: Duration = Duration::from_secs(1);

/// The writer thread's body.
pub fn run(
    state: &'static AgentState,
    shared: Arc<Shared>,
    ready: mpsc::Sender<Result<(), String>>,
    done: mpsc::Sender<Result<String, String>>,
) {
    os::block_sampling_signal_in_current_thread();
    lock(&shared.own_tids).insert(os::gettid());
    let jni = match state.vm.attach_current_thread_as_daemon(c"jvmprof writer") {
        Ok(j) => j,
        Err(e) => {
            let _ = ready.send(Err(e.to_string()));
            return;
        }
    };
    for (i, engine) in shared.engines.iter().enumerate() {
        if let Err(e) = jni.with_local_frame(64, || engine.start(&jni)) {
            for started in shared.engines[..i].iter().rev() {
                jni.with_local_frame(64, || started.stop(&jni));
            }
            let _ = ready.send(Err(e));
            state.vm.detach_current_thread();
            return;
        }
    }
    let _ = ready.send(Ok(()));
    let mut w = Writer::new(state, &shared);
    let started = Instant::now();
    let mut last_housekeeping = Instant::now();
    let mut last_snapshot = Instant::now();
    let mut last_flush = Instant::now();
    let mut last_oom_flush: Option<Instant> = None;
    let mut flush_failed = false;
    let mut orphaned = false;
    let tick = shared
        .engines
        .iter()
        .map(|e| e.period())
        .min()
        .unwrap_or(HOUSEKEEPING_EVERY);
    let mut next = Instant::now() + tick;
    loop {
        // Waits for the next poll, woken early by `stop` and `flush_now` (see `Shared::wait`).
        loop {
            if shared.stop.load(Ordering::Acquire) {
                break;
            }
            let now = Instant::now();
            if now >= next || shared.flush_now.load(Ordering::Acquire) {
                break;
            }
            shared.wait(next - now);
        }
        if shared.stop.load(Ordering::Acquire) {
            break;
        }
        next += tick;
        if next < Instant::now() {
            next = Instant::now() + tick; // fell behind (e.g. a long safepoint): skip, don't burst
        }
        w.poll(&jni);
        if last_housekeeping.elapsed() >= HOUSEKEEPING_EVERY {
            last_housekeeping = Instant::now();
            if let Some(tid) = w.stream.as_ref().and_then(|s| s.io_tid()) {
                // The stream's I/O thread is ours: no CPU timer (its SIGPROF is blocked anyway).
                lock(&shared.own_tids).insert(tid);
            }
            if shared.options.owner.is_some_and(crate::options::owner_gone) {
                orphaned = true;
                break;
            }
            for e in &shared.engines {
                e.housekeeping();
            }
            w.write_status(started.elapsed());
            if w.stream.is_some() {
                // Exact mode's trees are merged periodically only when someone reads them live.
                w.flush_engines(&jni);
            }
            let gained = w.sink.take_unsent();
            w.append_records(&gained);
            if let Some(stream) = &mut w.stream {
                stream.samples(w.sink.profile(), gained);
                for e in &shared.engines {
                    for chunk in e.stream_chunks() {
                        stream.trace(chunk);
                    }
                }
            }
        }
        let out_of_memory = shared.flush_now.swap(false, Ordering::AcqRel);
        let periodic = shared
            .options
            .flush
            .is_some_and(|every| last_flush.elapsed() >= every);
        // After an OutOfMemoryError the JVM may die without VMDeath: what was sampled so far is
        // written where the session's profile goes.
        let oom_due =
            out_of_memory && last_oom_flush.is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
        if w.records.is_some() && (periodic || oom_due) {
            // The native file is appended once a second anyway; `flush=` also merges what the
            // engines hold back (exact trees), and after an OutOfMemoryError it goes at once.
            last_flush = Instant::now();
            if oom_due {
                last_oom_flush = Some(last_flush);
            }
            w.poll(&jni);
            w.flush_engines(&jni);
            let gained = w.sink.take_unsent();
            w.append_records(&gained);
            if let Some(stream) = &mut w.stream {
                stream.samples(w.sink.profile(), gained);
            }
        } else if let Some(file) = &shared.options.file
            && w.records.is_none()
            && (periodic || oom_due)
        {
            last_flush = Instant::now();
            if oom_due {
                last_oom_flush = Some(last_flush);
            }
            w.poll(&jni);
            w.flush_engines(&jni);
            let appendix = shared.engines.iter().find_map(|e| e.appendix());
            if let Err(e) =
                write_profile(w.sink.profile(), file, &shared.options, appendix.as_deref())
                && !std::mem::replace(&mut flush_failed, true)
            {
                say(&format!("{e} (flush); profiling continues"));
            }
        }
        if w.stream.is_some() && last_snapshot.elapsed() >= shared.options.refresh {
            last_snapshot = Instant::now();
            jni.with_local_frame(64, || w.stream_snapshot(&jni));
        }
        if shared
            .options
            .duration
            .is_some_and(|d| started.elapsed() >= d)
        {
            break;
        }
    }
    for e in &shared.engines {
        jni.with_local_frame(64, || e.stop(&jni));
    }
    w.poll(&jni);
    for e in &shared.engines {
        jni.with_local_frame(64, || e.finish(&jni, &mut w.sink));
    }
    let result = w.finish(started.elapsed(), orphaned);
    if let Err(e) = &result {
        say(e);
    }
    let _ = done.send(result);
    state.vm.detach_current_thread();
}

/// The writer thread's working state: the sink and the outputs.
struct Writer {
    state: &'static AgentState,
    env: Env,
    shared: Arc<Shared>,
    sink: Sink,
    /// The collector connection, with `server=`.
    stream: Option<Stream>,
    /// The native file, appended as records (when `file=` names one). After an error (said
    /// once) it is gone, and the file is written whole at the end instead.
    records: Option<RecordFile>,
    /// Java thread id → the order in which snapshots first saw the thread.
    thread_order: HashMap<i64, u64>,
}

impl Writer {
    fn new(state: &'static AgentState, shared: &Arc<Shared>) -> Writer {
        let o = &shared.options;
        let env = state.env;
        let mut meta = Meta {
            modes: o.modes().iter().map(|m| m.to_string()).collect(),
            metrics: o.metrics(),
            interval_ns: o.interval.as_nanos() as u64,
            engine: crate::engine::describe(&shared.engines),
            jvm_name: env.system_property("java.vm.name").unwrap_or_default(),
            jvm_version: env
                .system_property("java.runtime.version")
                .or_else(|| env.system_property("java.vm.version"))
                .unwrap_or_default(),
            pid: std::process::id(),
            command: std::fs::read("/proc/self/cmdline")
                .map(|b| user_command(&b))
                .unwrap_or_default(),
            start_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            ..Meta::default()
        };
        meta.extra
            .insert("agent_version".into(), env!("CARGO_PKG_VERSION").into());
        meta.extra
            .insert("attached".into(), state.attached.to_string());
        meta.extra.insert("max_depth".into(), o.depth.to_string());
        if let Some(a) = o.alloc {
            let extra = &mut meta.extra;
            extra.insert("alloc_interval_bytes".into(), a.interval_bytes.to_string());
            extra.insert("live".into(), a.live.to_string());
        }
        if let Some(l) = o.lock {
            let ns = l.threshold.as_nanos().to_string();
            meta.extra.insert("lock_threshold_ns".into(), ns);
        }
        let stream = o.server.as_ref().map(|server| {
            let hello = jvmprof_proto::Hello {
                pid: meta.pid,
                command: meta.command.clone(),
                jvm: format!("{} {}", meta.jvm_name, meta.jvm_version),
                os: format!(
                    "{} {}",
                    env.system_property("os.name").unwrap_or_default(),
                    env.system_property("os.version").unwrap_or_default()
                ),
                host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|h| h.trim().to_string())
                    .unwrap_or_default(),
                agent_version: env!("CARGO_PKG_VERSION").to_string(),
                start_unix_ms: meta.start_unix_ms,
                ..jvmprof_proto::Hello::default()
            };
            Stream::start(
                StreamOptions {
                    server: server.clone(),
                    token: o.token.clone(),
                    labels: o.labels.clone(),
                    refresh: o.refresh,
                },
                hello,
            )
        });
        let mut sink = Sink::new(meta, env, &state.names, o.depth);
        let records = native_file(o).and_then(|path| {
            RecordFile::create(path)
                .map_err(|e| say(&format!("{e}; profiling continues")))
                .ok()
        });
        if stream.is_some() || records.is_some() {
            sink.track_unsent();
        }
        Writer {
            state,
            env,
            shared: shared.clone(),
            sink,
            stream,
            records,
            thread_order: HashMap::new(),
        }
    }

    /// Polls every engine into the sink. Threads that ended before the poll have made all
    /// their samples, which the poll names: after it their names are forgotten.
    fn poll(&mut self, jni: &Jni) {
        let ended = lock(&self.state.names).take_ended();
        let before = self.sink.samples();
        for e in &self.shared.engines {
            jni.with_local_frame(64, || e.poll(jni, &mut self.sink));
        }
        let taken = self.sink.samples() - before;
        self.shared.samples.fetch_add(taken, Ordering::Relaxed);
        if !ended.is_empty() {
            for e in &ended {
                self.sink.forget_tid(e.tid);
            }
            lock(&self.state.names).forget(&ended);
        }
    }

    /// Appends what the profile gained to the native file; the first error is said once.
    fn append_records(&mut self, gained: &[(u32, Vec<u64>)]) {
        if let Some(r) = &mut self.records
            && let Err(e) = r.append(self.sink.profile(), gained, &[], false)
        {
            say(&format!("{e}; profiling continues"));
            self.records = None;
        }
    }

    /// Makes what the engines hold back (exact trees) visible in the sink.
    fn flush_engines(&mut self, jni: &Jni) {
        for e in &self.shared.engines {
            e.flush(jni, &mut self.sink);
        }
    }

    /// Sends every thread's name, group, state, start order and stack to the collector.
    fn stream_snapshot(&mut self, jni: &Jni) {
        let Ok(stacks) = self.env.all_stack_traces(self.shared.options.depth as i32) else {
            return;
        };
        let mut snapshot = Vec::with_capacity(stacks.len());
        for ts in &stacks {
            let Some(details) = self.env.thread_details(jni, ts.thread) else {
                continue;
            };
            if details.name == "jvmprof writer" {
                continue;
            }
            let id = jni.java_thread_id(ts.thread).unwrap_or(-1);
            let next = self.thread_order.len() as u64;
            let order = *self.thread_order.entry(id).or_insert(next);
            // Top first from JVMTI; the stream's stacks are root first.
            let frames: Vec<u32> = ts
                .frames
                .iter()
                .rev()
                .map(|&(method, bci)| self.sink.java_frame(jni, method, bci))
                .collect();
            let stack = self.sink.stack(&frames);
            snapshot.push(ThreadStack {
                id,
                name: details.name,
                group: details.group,
                daemon: details.daemon,
                state: map_state(ts.state),
                order,
                stack,
            });
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        if let Some(stream) = &mut self.stream {
            stream.threads(self.sink.profile(), now, snapshot);
        }
    }

    fn write_status(&self, elapsed: Duration) {
        if let Some(path) = &self.shared.options.status {
            let text = format!(
                "{} {}\n",
                elapsed.as_millis(),
                self.shared.samples.load(Ordering::Relaxed)
            );
            let _ = write_atomically(path, text.as_bytes());
        }
    }

    /// Builds the profile and writes it in the format the options ask for; `orphaned`: the
    /// process that controls the session is gone, so the agent also writes the file it wanted
    /// (and removes the private files it would have converted).
    fn finish(mut self, elapsed: Duration, orphaned: bool) -> Result<String, String> {
        let dropped: u64 = self.shared.engines.iter().map(|e| e.dropped()).sum();
        let meta = self.sink.meta_mut();
        meta.duration_ms = elapsed.as_millis() as u64;
        meta.dropped_samples = dropped;
        self.write_status(elapsed);
        let mut stream = self.stream.take();
        if let Some(stream) = stream.as_mut() {
            for e in &self.shared.engines {
                for chunk in e.stream_chunks() {
                    stream.trace(chunk);
                }
            }
        }
        self.sink.finish_meta();
        let gained = self.sink.take_unsent();
        // Trace mode's traces, which end the native file's records.
        let appendix = self.shared.engines.iter().find_map(|e| e.appendix());
        let _remove = RemoveOnDrop(appendix.clone());
        let mut records = self.records.take();
        let records_failed = records.as_mut().and_then(|r| {
            r.finish_with_traces(self.sink.profile(), &gained, appendix.as_deref())
                .err()
        });
        let profile = self.sink.finish();
        if let Some(stream) = stream {
            stream.finish(&profile, gained);
        }
        let o = &self.shared.options;
        if orphaned && let Some(wanted) = &o.owner_file {
            let owner = o.owner.map_or(0, |(pid, _)| pid);
            let outcome = write_profile(
                &profile,
                wanted,
                &Options {
                    format: None,
                    ..o.clone()
                },
                appendix.as_deref(),
            );
            if let Some(native) = &o.file {
                remove_private_files(native, &[o.status.as_deref(), o.log.as_deref()]);
            }
            return match outcome {
                Ok(()) => {
                    let text = format!(
                        "the jvmprof that started this session (pid {owner}) is gone; \
                         {} samples written to {}",
                        profile.total(0),
                        wanted.display()
                    );
                    say(&text);
                    Ok(text)
                }
                Err(e) => Err(format!(
                    "the jvmprof that started this session is gone; {e}"
                )),
            };
        }
        if let Some(e) = records_failed {
            return Err(e);
        }
        match &o.file {
            Some(file) if records.is_some() => Ok(format!(
                "{} samples written to {}",
                profile.total(0),
                file.display()
            )),
            Some(file) => {
                write_profile(&profile, file, o, appendix.as_deref())?;
                Ok(format!(
                    "{} samples written to {}",
                    profile.total(0),
                    file.display()
                ))
            }
            None => Ok(format!("{} samples streamed", profile.total(0))),
        }
    }
}

/// The native file the options ask for, if `file=` names one (by `format=` or its extension).
fn native_file(o: &Options) -> Option<&Path> {
    let file = o.file.as_deref()?;
    let format = match &o.format {
        Some(f) => Format::parse(f),
        None => Format::from_path(file),
    };
    (format.ok()? == Format::Native).then_some(file)
}

/// Removes the native, status and log files the owner would have read, and their directory when
/// it is a jvmprof temporary directory left empty.
/// The command line as the user typed it, from `/proc/self/cmdline` (NUL-separated): without
/// the `-agentpath:…libjvmprof…=options` that `jvmprof record` adds, which is long and says
/// nothing about the application.
fn user_command(cmdline: &[u8]) -> String {
    cmdline
        .split(|c| *c == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s))
        .filter(|a| !(a.starts_with("-agentpath:") && a.contains("jvmprof")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn remove_private_files(native: &Path, others: &[Option<&Path>]) {
    let _ = std::fs::remove_file(native);
    for f in others.iter().flatten() {
        let _ = std::fs::remove_file(f);
    }
    if let Some(dir) = native.parent()
        && dir
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("jvmprof-"))
    {
        let _ = std::fs::remove_dir(dir);
    }
}

/// Removes a file when dropped (trace mode's part file, once the native file has it).
struct RemoveOnDrop(Option<std::path::PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Writes the profile; a native file also gets `appendix`'s bytes after it (trace mode's
/// traces).
fn write_profile(
    profile: &Profile,
    file: &Path,
    o: &Options,
    appendix: Option<&Path>,
) -> Result<(), String> {
    let format = match &o.format {
        Some(f) => Format::parse(f),
        None => Format::from_path(file),
    }
    .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    let metric = match &o.value {
        Some(v) => Some(
            Metric::parse(v).ok_or_else(|| format!("unknown value '{v}' for the output format"))?,
        ),
        None => None,
    };
    let options = ExportOptions {
        metric,
        threads: o.threads,
    };
    if format == Format::Native {
        // Records, with trace mode's traces, into a temporary file renamed when whole.
        let mut tmp = file.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = std::path::PathBuf::from(tmp);
        let gained = jvmprof_profile::records::write::everything(profile);
        RecordFile::create(&tmp)?.finish_with_traces(profile, &gained, appendix)?;
        return std::fs::rename(&tmp, file)
            .map_err(|e| format!("cannot write {}: {e}", file.display()));
    }
    let mut bytes = Vec::new();
    jvmprof_profile::write(profile, format, &options, &mut bytes)
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    write_atomically(file, &bytes).map_err(|e| format!("cannot write {}: {e}", file.display()))
}

/// Writes to `path.tmp` and renames, so a reader never sees half a file.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_leaves_out_our_agent() {
        let cmdline = b"java\0-Xmx1g\0-agentpath:/opt/jvmprof/libjvmprof_agent.so=mode=cpu,file=/tmp/x\0-agentpath:/opt/other.so\0-jar\0app.jar\0--port\08080\0";
        assert_eq!(
            user_command(cmdline),
            "java -Xmx1g -agentpath:/opt/other.so -jar app.jar --port 8080"
        );
    }
}
