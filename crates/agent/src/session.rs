//! One profiling session's lifecycle: start (VMInit or attach), status, and stop (VM death, the
//! session's duration, or a `stop` command). The running session itself is [`crate::running`];
//! the work in between is the writer thread's ([`crate::writer`]); the application never waits
//! for it.

use crate::engine::{self, EngineCtx};
use crate::options::Options;
use crate::running::{Session, Shared, unix_ms};
use crate::say::set_log;
use crate::state::AgentState;
use crate::sync::lock;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, mpsc};

/// Starts the engines the options ask for. Errors are messages for the user; nothing is
/// left running on error.
fn launch(state: &'static AgentState, options: Options) -> Result<Session, String> {
    let ctx = EngineCtx {
        vm: state.vm,
        env: state.env,
        caps: state.caps,
        threads: &state.threads,
    };
    let own_tids = Arc::new(Mutex::new(HashSet::new()));
    let engines = engine::choose(ctx, &options, own_tids.clone())?;
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
        Ok(Ok(())) => Ok(Session::new(shared, writer, done)),
        Ok(Err(e)) => {
            let _ = writer.join();
            Err(e)
        }
        Err(_) => Err("the writer thread died while starting".into()),
    }
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
    set_log(options.log.clone());
    let s = launch(state, options)?;
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
