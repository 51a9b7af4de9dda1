//! One profiling session's lifecycle: start (VMInit or attach), the thread hooks, and stop (VM
//! death, the session's duration, or a `stop` command). The work in between is the writer
//! thread's ([`crate::writer`]); the application never waits for it.

use crate::engine::{self, EngineCtx};
use crate::options::Options;
use crate::state::{AgentState, lock};
use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::Duration;

/// What the session shares between its writer thread and the JVMTI thread callbacks.
pub struct Shared {
    pub options: Options,
    pub engines: Vec<Box<dyn engine::Engine>>,
    /// The agent's own threads (writer, collector link): never sampled.
    pub own_tids: Arc<Mutex<HashSet<u32>>>,
    pub stop: Mutex<bool>,
    pub wake: Condvar,
    /// Samples taken so far, for the status file.
    pub samples: AtomicU64,
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
            stop: Mutex::new(false),
            wake: Condvar::new(),
            samples: AtomicU64::new(0),
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
    pub fn finished(&self) -> bool {
        self.writer.as_ref().is_none_or(|w| w.is_finished())
    }

    /// Stops sampling, waits (bounded) for the profile to be written and returns what happened.
    pub fn stop(mut self) -> Result<String, String> {
        *lock(&self.shared.stop) = true;
        self.shared.wake.notify_all();
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

/// Starts a session unless one runs; a finished one (its duration elapsed) is collected first.
pub fn start(state: &'static AgentState, options: Options) -> Result<(), String> {
    // The lock is not held while the session starts: attaching the writer thread to the VM fires
    // ThreadStart on it, and that callback takes the lock.
    let previous = {
        let mut slot = lock(&state.session);
        if slot.as_ref().is_some_and(|s| !s.finished()) {
            return Err("a profiling session is already running; send `stop` first".into());
        }
        slot.take()
    };
    if let Some(old) = previous {
        let _ = old.stop();
    }
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

/// Stops the running session, if any, and writes its profile.
pub fn stop(state: &AgentState) {
    let session = lock(&state.session).take();
    if let Some(s) = session
        && let Err(e) = s.stop()
    {
        crate::state::say(&e);
    }
}
