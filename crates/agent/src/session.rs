//! One profiling session's lifecycle: start (VMInit or attach), the thread hooks, and stop (VM
//! death, the session's duration, or a `stop` command). The work in between is the writer
//! thread's ([`crate::writer`]); the application never waits for it.

use crate::engine::{self, EngineCtx};
use crate::options::Options;
use crate::state::{AgentState, lock};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// What the session shares between its writer thread and the JVMTI thread callbacks.
pub struct Shared {
    pub options: Options,
    pub engines: Vec<Box<dyn engine::Engine>>,
    /// The agent's own threads (writer, collector link): never sampled.
    pub own_tids: Arc<Mutex<HashSet<u32>>>,
    /// End the session (set by `stop`; the writer looks at it before and after each wait).
    pub stop: AtomicBool,
    /// Wakes the writer for `stop` and `flush_now` (None if no eventfd could be made: the
    /// writer then looks at the flags every few milliseconds).
    pub waker: Option<jvmprof_jvmti::os::Waker>,
    /// Write the profile so far now (set on an OutOfMemoryError).
    pub flush_now: AtomicBool,
    /// Samples taken so far, for the status file.
    pub samples: AtomicU64,
    /// When the session started (Unix ms).
    pub started_unix_ms: u64,
}

impl Shared {
    fn wake(&self) {
        if let Some(w) = &self.waker {
            w.wake();
        }
    }

    /// The writer's wait for its next poll: until `timeout` passes or `stop` or `flush_now`
    /// wakes it.
    pub fn wait(&self, timeout: Duration) {
        match &self.waker {
            Some(w) => w.wait(timeout),
            None => std::thread::sleep(timeout.min(Duration::from_millis(5))),
        }
    }
}

pub struct Session {
    shared: Arc<Shared>,
    writer: Option<std::thread::JoinHandle<()>>,
    done: mpsc::Receiver<Result<String, String>>,
}

impl Session {
    /// Starts the engines the options ask for. Errors are messages for the user; nothing is
    /// left running on error.
    pub fn start(state: &'static AgentState, options: Options) -> Result<Session, String> {
        let ctx = EngineCtx {
            vm: state.vm,
            env: state.env,
            caps: state.caps,
            threads: &state.threads,
        };
        let own_tids = Arc::new(Mutex::new(HashSet::new()));
        let engines = engine::choose(ctx, &options, own_tids.clone(), &state.recorder)?;
        let shared = Arc::new(Shared {
            options,
            engines,
            own_tids,
            stop: AtomicBool::new(false),
            waker: jvmprof_jvmti::os::Waker::new().ok(),
            flush_now: AtomicBool::new(false),
            samples: AtomicU64::new(0),
            started_unix_ms: unix_ms(),
        });
        let (done_tx, done) = mpsc::channel();
        let (ready_tx, ready) = mpsc::channel();
        let thread_shared = shared.clone();
        let writer = std::thread::Builder::new()
            .name("jvmprof writer".into())
            .spawn(move || crate::writer::run(state, thread_shared, ready_tx, done_tx))
            .map_err(|e| format!("cannot start the writer thread: {e}"))?;
        match ready.recv() {
            Ok(Ok(())) => Ok(Session {
                shared,
                writer: Some(writer),
                done,
            }),
            Ok(Err(e)) => {
                let _ = writer.join();
                Err(e)
            }
            Err(_) => Err("the writer thread died while starting".into()),
        }
    }

    /// A Java thread started (called on that thread).
    pub fn thread_started(&self, tid: u32) {
        for e in &self.shared.engines {
            e.thread_started(tid);
        }
    }

    /// A Java thread ended (called on that thread).
    pub fn thread_ended(&self, tid: u32) {
        for e in &self.shared.engines {
            e.thread_ended(tid);
        }
    }

    /// Whether the writer finished on its own (the session's duration elapsed).
    /// Has the writer write the profile so far at once (the session goes on).
    pub fn flush_now(&self) {
        self.shared.flush_now.store(true, Ordering::Release);
        self.shared.wake();
    }

    pub fn finished(&self) -> bool {
        self.writer.as_ref().is_none_or(|w| w.is_finished())
    }

    /// Stops sampling, waits (bounded) for the profile to be written and returns what happened.
    pub fn stop(mut self) -> Result<String, String> {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake();
        let result = self
            .done
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| Err("the profile writer did not finish within 60 s".into()));
        if let Some(w) = self.writer.take()
            && w.is_finished()
        {
            let _ = w.join();
        }
        result
    }
}

impl Session {
    /// What the session is, for `jvmprof status` and for a refused second session.
    fn describe(&self) -> serde_json::Value {
        let o = &self.shared.options;
        let now = unix_ms();
        let mut v = serde_json::json!({
            "running": !self.finished(),
            "modes": o.modes(),
            "interval_ns": o.interval.as_nanos() as u64,
            "engines": self.shared.engines.iter().map(|e| e.name()).collect::<Vec<_>>(),
            "started_unix_ms": self.shared.started_unix_ms,
            "elapsed_ms": now.saturating_sub(self.shared.started_unix_ms),
            "duration_ms": o.duration.map(|d| d.as_millis() as u64),
            "samples": self.shared.samples.load(Ordering::Relaxed),
            "file": o.owner_file.as_ref().or(o.file.as_ref()).map(|f| f.display().to_string()),
            "server": o.server,
            "owner_pid": o.owner.map(|(pid, _)| pid),
        });
        for e in &self.shared.engines {
            for (k, x) in e.status() {
                v[k] = x;
            }
        }
        v
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// What runs in this JVM, as JSON (`{"running": false}` when nothing does).
pub fn status(state: Option<&AgentState>) -> serde_json::Value {
    state
        .and_then(|s| lock(&s.session).as_ref().map(Session::describe))
        .unwrap_or_else(|| serde_json::json!({ "running": false }))
}

/// Starts a session unless one runs; a finished one (its duration elapsed) is collected first.
pub fn start(state: &'static AgentState, options: Options) -> Result<(), String> {
    // The lock is not held while the session starts: attaching the writer thread to the VM fires
    // ThreadStart on it, and that callback takes the lock.
    let previous = {
        let mut slot = lock(&state.session);
        if let Some(running) = slot.as_ref().filter(|s| !s.finished()) {
            return Err(already_running(&running.describe(), &options));
        }
        slot.take()
    };
    if let Some(old) = previous {
        let _ = old.stop();
    }
    *lock(&state.log) = options.log.clone();
    let s = Session::start(state, options)?;
    let mut slot = lock(&state.session);
    if slot.is_some() {
        drop(slot);
        let _ = s.stop();
        return Err("another session started at the same time".into());
    }
    *slot = Some(s);
    Ok(())
}

/// Why a second session cannot start, and exactly what to do instead.
fn already_running(running: &serde_json::Value, wanted: &Options) -> String {
    let modes = |v: &serde_json::Value| {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|m| m.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default()
    };
    let pid = std::process::id();
    let have = modes(&running["modes"]);
    let mut text = format!(
        "a {have} profiling session is already running in this JVM (for {} s",
        running["elapsed_ms"].as_u64().unwrap_or(0) / 1000
    );
    if let Some(owner) = running["owner_pid"].as_u64() {
        text.push_str(&format!(", started by jvmprof pid {owner}"));
    }
    if let Some(file) = running["file"].as_str() {
        text.push_str(&format!(", writing {file}"));
    }
    text.push_str(&format!(
        "): run `jvmprof stop {pid}` first, then record again with every mode you want in one \
         session (--mode {have},{})",
        wanted.modes().join(",")
    ));
    text
}

/// Stops the running session, if any, and writes its profile: None when no session was there,
/// else what the writer reports.
pub fn stop(state: &AgentState) -> Option<Result<String, String>> {
    let session = lock(&state.session).take();
    session.map(Session::stop)
}
